#!/bin/bash
# multinode side by side with pdsh, ClusterShell, pssh and OpenSSH on
# loopback "nodes" 127.0.0.2 ... (nothing outside 127.0.0.0/8 is contacted).
#
#   bench/run.sh                 # everything: build, setup, all suites, tables, teardown
#   bench/run.sh --quick         # N up to 256, 3 runs, a smoke test of the harness
#   bench/run.sh -- --suites relay --relay-runs 3     # bench.py options after --
#
# Steps: `nice cargo build --release`; lib/setup.sh (private sshd on port
# 2222 for the peers, user mnbench, nft fence); bench.py (starts one
# `multinode agent` per node address, runs the suites with the tools
# alternated, stops the agents); summarize.py (bench/results/tables.md and
# the tables of docs/benchmarks.md); lib/teardown.sh on every exit.
# Needs root (user, nft, sshd), OpenSSH, pdsh, clush, parallel-ssh, hyperfine.
# Environment: BENCH_STATE (default /tmp/mn-bench), BENCH_SSHD_PORT (2222),
# BENCH_AGENT_PORT (29990), QUIET_MAX_WAIT (10 s of waiting for an idle
# machine before each run).
set -euo pipefail
# Paths given relative to where this was started (BENCH_RESULTS=bench/results/x
# from the repository) keep meaning that once it runs in bench/.
for var in BENCH_RESULTS BENCH_MULTINODE BENCH_BASE BENCH_STATE; do
  value=${!var:-}
  if [ -n "$value" ] && [ "${value#/}" = "$value" ]; then
    export "$var=$PWD/$value"
  fi
done
cd "$(dirname "$0")"
. lib/common.sh

build=1
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) args+=(--ns 1,8,32,128,256 --runs 3 --relay-runs 2 --latency-rounds 2); shift ;;
    --no-build) build=0; shift ;;
    --) shift; args+=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

for tool in sshd ssh pdsh clush parallel-ssh hyperfine nft; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] ||
    { echo "missing $tool" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "run as root (creates a user, an nft table, an sshd)" >&2; exit 1; }

if [ "$build" = 1 ]; then
  (cd "$REPO" && nice -n 10 cargo build --release --bin multinode --quiet)
fi

trap 'lib/teardown.sh' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ulimit -n 65536 2>/dev/null || true
lib/setup.sh
./bench.py "${args[@]}"
./summarize.py
