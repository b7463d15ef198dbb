#!/bin/bash
# Where a node's CPU goes for one command: the agent itself, or the command
# it runs (its children, reaped), and the agent's context switches, through
# the head agent's shared connection and through connections of exec_all's
# own. Loopback only: N agents on 127.0.3.1..N, one head agent with
# --mux-socket on 127.0.0.57, all on this machine.
#
#   cargo build --release
#   bench/node_split.sh [N] [RUNS] [COMMAND]     # defaults: 60 20 true
#   NODE_SPLIT_BIN=/dir/of/other/binaries bench/node_split.sh   # another build
#
# Prints one line a mode: ms of CPU a command in the agents, in their
# children, and context switches a command in the agents' threads.
set -euo pipefail
N=${1:-60}
RUNS=${2:-20}
CMD=${3:-true}
BIN=${NODE_SPLIT_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release}
PORT=${NODE_SPLIT_PORT:-29880}
DIR=$(mktemp -d)
export MULTINODE_SECRET=node-split-bench-secret-0123456789
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
for i in $(seq "$N"); do
  "$BIN/multinode" agent --listen "127.0.3.$i:$PORT" >/dev/null 2>&1 &
  pids+=($!)
done
"$BIN/multinode" agent --listen "127.0.0.57:$((PORT + 1))" --mux-socket "$DIR/mux.sock" >/dev/null 2>&1 &
master=$!
pids+=($master)
hl="127.0.0.57:1"
for i in $(seq "$N"); do hl="$hl,127.0.3.$i:1"; done
for _ in $(seq 100); do [ -S "$DIR/mux.sock" ] && break; sleep 0.05; done
# Every agent listening before the first run (else its warm-up is refused).
for i in $(seq "$N"); do
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.3.$i/$PORT") 2>/dev/null && break; sleep 0.05; done
done
run() {
  MULTINODE_MUX_SOCKET=$SOCKET MULTINODE_AGENT_PORT=$PORT MULTINODE_HOSTLIST=$hl MULTINODE_NODE_RANK=0 \
    MULTINODE_TRANSPORT=agent "$BIN/mn-exec-all" --exclude 0 -c "$CMD" >/dev/null
}
# utime+stime of the agents, cutime+cstime (their reaped commands), in ticks;
# voluntary+involuntary context switches of the agents' threads.
sample() {
  local self=0 kids=0 cs=0 p t
  for p in "${pids[@]::$N}"; do
    read -r -a f < <(cut -d')' -f2- "/proc/$p/stat")
    self=$((self + f[11] + f[12]))
    kids=$((kids + f[13] + f[14]))
    for t in /proc/"$p"/task/*; do
      cs=$((cs + $(awk '/ctxt_switches/ {s += $2} END {print s}' "$t/status")))
    done
  done
  echo "$self $kids $cs"
}
hz=$(getconf CLK_TCK)
measure() {
  local label=$1 a b
  # One warm-up run: the shared connections are made on first use.
  run
  read -r -a a < <(sample)
  for _ in $(seq "$RUNS"); do run; done
  read -r -a b < <(sample)
  local n=$((N * RUNS))
  awk -v l="$label" -v s=$((b[0] - a[0])) -v k=$((b[1] - a[1])) -v c=$((b[2] - a[2])) \
    -v n=$n -v hz="$hz" 'BEGIN {
      printf "%-8s %d commands: agent %.2f ms, its commands %.2f ms, %.1f context switches a command\n",
        l, n, s * 1000 / hz / n, k * 1000 / hz / n, c / n }'
}
SOCKET=$DIR/mux.sock
measure shared
SOCKET=
measure direct
