#!/bin/bash
# The head's own CPU a connection at N=256 and N=4,096, flat, with the head
# on CPU 0 and 4,096 agents on CPU 1 (as on a cluster, where the head has
# cores of its own), each size under `perf record -g` (docs/benchmarks.md,
# "One tree shape at 256 and 4,096 nodes"). Loopback only: agents on
# 127.1.0.1 ... 127.1.16.96. Needs root (kernel.pid_max), perf, and:
#
#   cargo build --profile profiling
#   bench/head_profile.sh [OUT_DIR]     # default /tmp/head-profile
#
# Writes OUT_DIR/head-256.data (8 launches) and OUT_DIR/head-4096.data
# (one launch), and prints each launch's wall and CPU seconds. Compare, for
# example: perf report -i OUT_DIR/head-4096.data --no-children --sort sym
set -euo pipefail
OUT=${1:-/tmp/head-profile}
BIN=${HEAD_PROFILE_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/profiling}
PORT=${HEAD_PROFILE_PORT:-29870}
N=4096
mkdir -p "$OUT"
export MULTINODE_SECRET=head-profile-secret-0123456789abcdef
old_pid_max=$(cat /proc/sys/kernel/pid_max)
echo 131072 > /proc/sys/kernel/pid_max
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  echo "$old_pid_max" > /proc/sys/kernel/pid_max
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"
addr() { echo "127.1.$(( ($1 - 1) / 250 )).$(( ($1 - 1) % 250 + 1 ))"; }
for i in $(seq "$N"); do
  taskset -c 1 "$BIN/multinode" agent --listen "$(addr "$i"):$PORT" --login-timeout 300 >/dev/null 2>&1 &
  pids+=($!)
done
# Every agent listening before the first launch.
for i in $(seq "$N"); do
  for _ in $(seq 600); do (exec 3<>"/dev/tcp/$(addr "$i")/$PORT") 2>/dev/null && break; sleep 0.05; done
done
hosts() { local s="127.0.0.1:1" i; for i in $(seq "$1"); do s="$s,$(addr "$i"):1"; done; echo "$s"; }
export MULTINODE_LOST_AFTER=60 MULTINODE_AGENT_PORT=$PORT MULTINODE_NODE_RANK=0 MULTINODE_TRANSPORT=agent
launch() {
  MULTINODE_HOSTLIST=$1 /usr/bin/time -f "N=$2: %e s wall, %U s user, %S s sys" \
    taskset -c 0 "$BIN/mn-exec-all" --exclude 0 --fanout 1000000 -c true >/dev/null
}
small=$(hosts 256)
large=$(hosts "$N")
launch "$small" 256   # warm-up
export -f launch
export BIN
# shellcheck disable=SC2016 # the inner shell expands $0
perf record -q -g -o "$OUT/head-256.data" -- bash -c \
  'set -e; for _ in 1 2 3 4 5 6 7 8; do launch "$0" 256; done' "$small"
# shellcheck disable=SC2016
perf record -q -g -o "$OUT/head-4096.data" -- bash -c 'launch "$0" 4096' "$large"
