#!/usr/bin/env bash
# Every test of multinode, on a fresh machine of this kind (Debian, Rust with
# cargo-nextest, a Docker engine): installs the Debian packages the tests
# use, runs the unit and loopback integration tests, then the Docker cluster
# tests. Exit code 0 only when everything passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tests/install-deps.sh
rc=0
cargo nextest run --no-fail-fast || rc=$?
tests/cluster/run.sh || rc=$?
exit "$rc"
