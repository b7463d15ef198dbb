#!/bin/bash
# Two builds side by side, launches alternated: the CPU a node of one
# launch on the node (the agents and the commands they run) and on the
# head (the head agent that shares its connections, and exec_all), each
# counted exactly by a cpuacct cgroup of its own, and the wall time.
# Loopback only: build A's N agents on 127.0.4.1..N, build B's on
# 127.0.5.1..N, each build with its own head agent (--mux-socket) on
# 127.0.0.58 / 127.0.0.59, all on this machine. Needs root (cgroups).
#
#   cargo build --release
#   bench/ab_split.sh DIR_A DIR_B [N] [RUNS] [COMMAND]   # defaults: 100 20 true
#
# DIR_A and DIR_B hold `multinode` and `mn-exec-all` (for example
# target/release and an older build's). Prints, for each build, the median
# and range over RUNS launches of: wall ms, node CPU a node (ms), head CPU a
# node (ms), and the ratio B/A of the medians.
set -euo pipefail
A=$1
B=$2
N=${3:-100}
RUNS=${4:-20}
CMD=${5:-true}
PORT=${AB_SPLIT_PORT:-29860}
CG=/sys/fs/cgroup/cpuacct
NAME=mn_ab_split_$$
DIR=$(mktemp -d)
export MULTINODE_SECRET=ab-split-bench-secret-0123456789ab
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  for g in nodeA headA nodeB headB; do
    for _ in $(seq 20); do rmdir "$CG/${NAME}_$g" 2>/dev/null && break; sleep 0.25; done
  done
  rm -rf "$DIR"
}
trap cleanup EXIT
for g in nodeA headA nodeB headB; do mkdir "$CG/${NAME}_$g"; done
# start GROUP ARGV...: a process started in a cgroup (its children stay in it)
start() {
  local g=$1
  shift
  bash -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$CG/${NAME}_$g" "$@" >/dev/null 2>&1 &
  pids+=($!)
}
for s in A B; do
  if [ $s = A ]; then bin=$A net=4 head=58; else bin=$B net=5 head=59; fi
  for i in $(seq "$N"); do start "node$s" "$bin/multinode" agent --listen "127.0.$net.$i:$PORT"; done
  start "head$s" "$bin/multinode" agent --listen "127.0.0.$head:$((PORT + 1))" --mux-socket "$DIR/mux$s.sock"
done
for s in A B; do for _ in $(seq 100); do [ -S "$DIR/mux$s.sock" ] && break; sleep 0.05; done; done
for net in 4 5; do
  for i in $(seq "$N"); do
    up=
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.$net.$i/$PORT") 2>/dev/null && up=1 && break; sleep 0.05; done
    [ -n "$up" ] || { echo "ab_split: the agent on 127.0.$net.$i:$PORT did not start" >&2; exit 1; }
  done
done
hl() {
  local s="127.0.0.$2:1" i
  for i in $(seq "$N"); do s="$s,127.0.$1.$i:1"; done
  echo "$s"
}
HL_A=$(hl 4 58)
HL_B=$(hl 5 59)
usage() { cat "$CG/${NAME}_$1/cpuacct.usage"; }
# launch A|B: one exec_all through the build's head agent, run in its head group
launch() {
  local s=$1 bin hl
  if [ "$s" = A ]; then bin=$A hl=$HL_A; else bin=$B hl=$HL_B; fi
  MULTINODE_MUX_SOCKET=$DIR/mux$s.sock MULTINODE_AGENT_PORT=$PORT MULTINODE_HOSTLIST=$hl \
    MULTINODE_NODE_RANK=0 MULTINODE_TRANSPORT=agent \
    bash -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' "$CG/${NAME}_head$s" \
    "$bin/mn-exec-all" --exclude 0 -c "$CMD" >/dev/null
}
# One warm-up launch each: the shared connections are made on first use.
launch A
launch B
sleep 0.5
: >"$DIR/A"
: >"$DIR/B"
for _ in $(seq "$RUNS"); do
  for s in A B; do
    n0=$(usage "node$s") h0=$(usage "head$s") t0=$(date +%s%N)
    launch $s
    t1=$(date +%s%N)
    sleep 0.2 # the agents' teardown of the channels
    n1=$(usage "node$s") h1=$(usage "head$s")
    echo "$(((t1 - t0) / 1000)) $((n1 - n0)) $((h1 - h0))" >>"$DIR/$s"
  done
done
python3 - "$DIR/A" "$DIR/B" "$N" "$RUNS" "$CMD" <<'EOF'
import statistics, sys
a, b, n, runs, cmd = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
def load(p):
    rows = [list(map(int, l.split())) for l in open(p)]
    return ([r[0] / 1e3 for r in rows], [r[1] / 1e6 / n for r in rows], [r[2] / 1e6 / n for r in rows])
cols = ("wall ms", "node CPU a node ms", "head CPU a node ms")
A, B = load(a), load(b)
print("%d nodes, %s launches of %r each, alternated" % (n, runs, cmd))
for name, x in (("A", A), ("B", B)):
    print("%s: " % name + ", ".join("%s %.3f [%.3f-%.3f]" % (c, statistics.median(v), min(v), max(v))
                                   for c, v in zip(cols, x)))
print("B/A: " + ", ".join("%s %.2f" % (c, statistics.median(y) / statistics.median(x))
                          for c, x, y in zip(cols, A, B)))
EOF
