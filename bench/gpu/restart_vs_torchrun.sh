#!/usr/bin/env bash
# A restart after the same failure, multinode against torchrun
# --max-restarts, side by side on one machine (issue 28: "from a detected
# failure to every node of the next attempt running its script: the grace
# the old ranks took to end, plus under 1 s"). From the repository root, on
# a machine with torch (the `nvidia-h200` device kind; the GPU is not used):
#
#   bench/gpu/restart_vs_torchrun.sh [RUNS]   # MN_GPU_BIN: folder with multinode, mn-exec-all
#   BENCH_TOOLS=torchrun,multinode bench/gpu/restart_vs_torchrun.sh 1   # some launchers only
#
# Four "nodes" on loopback (127.0.0.2 to .5), one rank each,
# bench/gpu/restart_worker.py (gloo on the CPU, an all-reduce every 0.1 s).
# Once rank 0 has done 10 steps, the worker of rank 2 is killed (SIGKILL):
# the same failure for every launcher. Launchers, taking turns run by run:
# - torchrun: four `torchrun --nnodes=4 --max-restarts=2 --rdzv-backend=c10d`
#   (torchrun's elastic agent, the way its docs restart a job);
# - multinode: `mn-exec-all --max-restarts 2` over agents at .3 to .5, the
#   worker started directly with torch's env:// variables;
# - multinode+torchrun: the same, each node running `torchrun --nnodes=4
#   --node-rank=$RANK --master-addr=$1` (how docs/torchrun.md runs it);
# - multinode --fanout 2: as multinode, node .3 relaying to .4, so the
#   failure and the restart go through a relay.
# - torchrun --max-restarts 10: the same with more restarts.
# Measured from the kill, over the four processes of the round that
# trained (the last four to be ready): all started (each process's first
# line, before `import torch`), all ready (the process group up), and rank
# 0's first step; "rounds" counts the processes started after the kill, by 4.
# In $OUT (or a temp dir): restart-vs-torchrun.log (this),
# restart-vs-torchrun.jsonl (one line a run), each run's log and output.
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
bin=${MN_GPU_BIN:-$repo/.gpu-bin}
export PATH="$bin:$PATH"
runs=${1:-3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
exec > >(tee -a "$out/restart-vs-torchrun.log") 2>&1
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK WORLD_SIZE MASTER_ADDR MASTER_PORT; do unset "$v"; done
MULTINODE_SECRET=restart-bench-$$-$(date +%s%N)
export MULTINODE_SECRET PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=""
HOSTS=127.0.0.2:1,127.0.0.3:1,127.0.0.4:1,127.0.0.5:1
WORKER=$repo/bench/gpu/restart_worker.py
port=30100
# agents (their PIDs), stop_agents (on EXIT), record, now, secs, gpu_pids
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start_agents() {
    local r
    for r in 1 2 3; do
        MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=$r MULTINODE_AGENT_PORT=$port \
            multinode agent --listen "127.0.0.$((r + 2)):$port" &
        agents+=($!)
    done
    for r in 1 2 3; do
        for _ in $(seq 100); do
            (exec 3<>"/dev/tcp/127.0.0.$((r + 2))/$port") 2>/dev/null && break
            sleep 0.1
        done
    done
}

# kill_rank2 LOG: once rank 0 of attempt 0 did 10 steps, SIGKILL rank 2's
# worker of attempt 0; prints the time of the kill.
kill_rank2() {
    local log=$1 victim
    for _ in $(seq 1200); do
        grep -q '^0 0 step10 ' "$log" 2>/dev/null && break
        sleep 0.05
    done
    victim=$(awk '$1 == 0 && $2 == 2 && $3 == "start" { print $5; exit }' "$log")
    date +%s.%N
    kill -KILL "$victim"
}

run_one() {
    local tool=$1 run=$2 dir rc t_kill
    dir=$out/$run-$(tr -c 'a-z0-9\n' _ <<<"$tool")
    mkdir -p "$dir"
    : >"$dir/worker.log"
    port=$((port + 10))
    case $tool in
    torchrun*)
        local n max=2
        [[ $tool == *10 ]] && max=10
        for n in 0 1 2 3; do
            timeout 180 torchrun --nnodes=4 --nproc-per-node=1 --max-restarts=$max \
                --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$port --rdzv-id="bench$run" \
                "$WORKER" "$dir/worker.log" >"$dir/torchrun$n.txt" 2>&1 &
            agents+=($!)
        done
        t_kill=$(kill_rank2 "$dir/worker.log")
        rc=0
        for n in 0 1 2 3; do
            wait "${agents[-1 - (3 - n)]}" || rc=$?
        done
        agents=()
        ;;
    multinode*)
        start_agents
        local script fanout=()
        # shellcheck disable=SC2016 # expanded by each node's shell
        case $tool in
        multinode+torchrun)
            script='exec torchrun --nnodes="$MULTINODE_NNODES" --node-rank="$RANK" --nproc-per-node=1 --master-addr="$1" --master-port=$(('$port' + 1 + MULTINODE_RESTART_COUNT)) "$2" "$3"' ;;
        *)
            script='MASTER_ADDR=$1 MASTER_PORT=$(('$port' + 1 + MULTINODE_RESTART_COUNT)) WORLD_SIZE=$MULTINODE_NNODES LOCAL_RANK=0 exec python3 "$2" "$3"' ;;
        esac
        [[ $tool == *fanout* ]] && fanout=(--fanout 2)
        echo "$script" | env MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$port \
            timeout 180 mn-exec-all --max-restarts 2 "${fanout[@]}" --report "$dir/report.json" \
            - 127.0.0.2 "$WORKER" "$dir/worker.log" >"$dir/run.txt" 2>&1 &
        local job=$!
        t_kill=$(kill_rank2 "$dir/worker.log")
        rc=0
        wait "$job" || rc=$?
        stop_agents
        ;;
    esac
    python3 - "$tool" "$run" "$t_kill" "$rc" "$dir" >>"$out/restart-vs-torchrun.jsonl" <<'PY'
import json, os, sys
tool, run, t_kill, rc, d = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
lines = [l.split() for l in open(os.path.join(d, "worker.log"))]
start = {int(l[4]): float(l[3]) for l in lines if l[2] == "start"}
after = [l for l in lines if float(l[3]) > t_kill]
rec = {"tool": tool, "run": run, "exit": rc,
       "rounds": len([l for l in after if l[2] == "start"]) / 4}
# The round that trained: the last four processes to be ready after the kill.
ready = [l for l in after if l[2] == "ready"][-4:]
if rc == 0 and len(ready) == 4:
    pids = [int(l[4]) for l in ready]
    rec["all_start_s"] = round(max(start[p] for p in pids) - t_kill, 3)
    rec["all_ready_s"] = round(max(float(l[3]) for l in ready) - t_kill, 3)
    steps = [float(l[3]) for l in after if l[2].startswith("step") and int(l[4]) in pids]
    rec["first_step_s"] = round(min(steps) - t_kill, 3) if steps else None
else:
    rec["all_start_s"] = rec["all_ready_s"] = rec["first_step_s"] = None
rep = os.path.join(d, "report.json")
if os.path.exists(rep):
    att = json.load(open(rep)).get("attempts", [])
    rec["attempts"] = len(att)
    if len(att) > 1:
        rec["report_restart_s"] = att[1].get("restart_s")
print(json.dumps(rec))
PY
    tail -n 1 "$out/restart-vs-torchrun.jsonl"
}

echo "=== machine"
date -u
nproc
python3 -c 'import torch; print("torch", torch.__version__)'
multinode --version
tools=${BENCH_TOOLS:-torchrun,torchrun --max-restarts 10,multinode,multinode+torchrun,multinode --fanout 2}
IFS=, read -ra tools <<<"$tools"
for ((run = 1; run <= runs; run++)); do
    for tool in "${tools[@]}"; do
        run_one "$tool" "$run"
    done
done
echo
echo "=== results (seconds from the kill of rank 2's worker; median [min-max] of $runs runs)"
python3 - "$out/restart-vs-torchrun.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'launcher':24} {'all 4 started':>20} {'all 4 ready':>20} {'first step':>20} {'exit codes':>10} {'rounds':>8}")
for tool in dict.fromkeys(r["tool"] for r in rows):
    rs = [r for r in rows if r["tool"] == tool]
    def cell(key):
        v = [r[key] for r in rs if r[key] is not None]
        if not v:
            return "-"
        return f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"
    print(f"{tool:24} {cell('all_start_s'):>20} {cell('all_ready_s'):>20} {cell('first_step_s'):>20} "
          f"{','.join(str(r['exit']) for r in rs):>10} {','.join(str(r['rounds']) for r in rs):>8}")
PY
