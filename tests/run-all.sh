#!/usr/bin/env bash
# Every test of multinode, on a fresh machine of this kind (Debian, Rust by
# rustup, a running Docker engine; root, or sudo; the network for Debian's
# mirror, crates.io and PyPI): installs what the tests use (Debian packages,
# py-spy, cargo-nextest: tests/install-deps.sh), runs the unit and loopback
# integration tests, then the Docker cluster tests, then the wheel
# (tests/wheel.sh: built, pip-installed into a fresh venv and run from it).
# Exit code 0 only when everything passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tests/install-deps.sh
rc=0
cargo nextest run --no-fail-fast || rc=$?
tests/cluster/run.sh || rc=$?
# After the cluster tests: the wheel's static release build reuses theirs.
tests/wheel.sh || rc=$?
exit "$rc"
