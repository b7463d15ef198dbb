#!/usr/bin/env bash
# `mn-exec-all --nproc-per-node` on a real GPU machine with real torch
# (issue 41), in one call from the repository root (the `nvidia-h100-x1` /
# `nvidia-h200` device kinds: one GPU, 16 CPUs, one NUMA node):
#
#   bench/gpu/procs.sh [RUNS]   # MN_GPU_BIN: folder with multinode, mn-exec-all (default .gpu-bin)
#
# Loopback "nodes": exec_all on 127.0.0.2 (node 0), agents on 127.0.0.3-.6.
# 1. the machine: CPUs, NUMA nodes, the GPU's bus id and sysfs NUMA node;
# 2. torch's init_process_group() with env:// and no torchrun: 4 nodes x 4
#    processes, gloo all-reduces of CUDA tensors, --bind none: 16 x sum=16;
# 3. --nproc-per-node gpu (one process a node: the node's visible GPU) with
#    --report-bindings: auto leaves a process unbound on one NUMA node, and
#    --bind numa binds it to its GPU's local_cpulist (or says why not);
# 4. (a) from exec_all's start to every process past init_process_group,
#    --nproc-per-node 4 against torchrun --nproc-per-node 4 inside
#    mn-exec-all (4 nodes, 16 processes, gloo on the CPU), RUNS runs each;
# 5. (b) SIGKILL of one process (global rank 6) mid-training, and of one
#    node's agent (node 2, with a spare), to every process training again
#    (its first step in the next attempt), both ways, RUNS runs each.
# (c), the same CPU-bound step with --bind numa and --bind none, needs a
# machine with more than one NUMA node: this one has one (section 1 says).
# In $OUT (or a temp dir): procs.log (this), procs.jsonl (one line a timed
# run), each run's worker log and output. Exits 1 if a check failed.
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
bin=${MN_GPU_BIN:-$repo/.gpu-bin}
export PATH="$bin:$PATH"
runs=${1:-3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
exec > >(tee -a "$out/procs.log") 2>&1
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK WORLD_SIZE MASTER_ADDR MASTER_PORT; do unset "$v"; done
MULTINODE_SECRET=procs-bench-$$-$(date +%s%N)
export MULTINODE_SECRET PYTHONUNBUFFERED=1
WORKER=$repo/bench/gpu/procs_worker.py
port=30400
results=()
# agents (their PIDs), stop_agents (on EXIT), record, now, secs
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
section() { printf '\n=== %s\n' "$*"; }

# start_agents HOSTS N: agents for nodes 1..N-1 of HOSTS at 127.0.0.3...
start_agents() {
    local hosts=$1 n=$2 r
    port=$((port + 10))
    for ((r = 1; r < n; r++)); do
        MULTINODE_HOSTLIST=$hosts MULTINODE_NODE_RANK=$r MULTINODE_AGENT_PORT=$port \
            multinode agent --listen "127.0.0.$((r + 2)):$port" &
        agents+=($!)
    done
    for ((r = 1; r < n; r++)); do
        for _ in $(seq 100); do
            (exec 3<>"/dev/tcp/127.0.0.$((r + 2))/$port") 2>/dev/null && break
            sleep 0.1
        done
    done
}

# exec_all HOSTS ARGS...: mn-exec-all on node 0 of HOSTS, the agents' port.
exec_all() {
    local hosts=$1
    shift
    env MULTINODE_HOSTLIST="$hosts" MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$port \
        timeout 240 mn-exec-all "$@"
}

H4=127.0.0.2:1,127.0.0.3:1,127.0.0.4:1,127.0.0.5:1
H5=$H4,127.0.0.6:1

# BENCH_SECTIONS: which of 2-5 to run (all by default; 1 always runs).
sections=${BENCH_SECTIONS:-2,3,4,5}
want() { [[ ,$sections, == *,$1,* ]]; }

section "1. the machine"
date -u
nproc
numa_nodes=$(find /sys/devices/system/node -maxdepth 1 -name 'node[0-9]*' | wc -l)
echo "NUMA nodes: $numa_nodes"
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPUs", torch.cuda.device_count())'
nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
dev=/sys/bus/pci/devices/$(echo "${bus#0000}" | tr 'A-F' 'a-f')
gpu_node=$(cat "$dev/numa_node")
gpu_cpus=$(cat "$dev/local_cpulist")
own=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
echo "GPU numa_node: $gpu_node; local_cpulist: $gpu_cpus; this shell's CPUs: $own"
multinode --version

if want 2; then
    section "2. init_process_group with no torchrun: 4 nodes x 4 processes, gloo on CUDA tensors, --bind none"
    start_agents "$H4" 4
    log=$out/contract.log
    : >"$log"
    echo "exec python3 \"\$1\" \"\$2\" steps cuda" | exec_all "$H4" --nproc-per-node 4 --bind none --label \
        --report "$out/contract-report.json" - "$WORKER" "$log" >"$out/contract.txt" 2>&1
    rc=$?
    grep -E "sum=" "$out/contract.txt" | sort -n | head -16
    n=$(grep -c "sum=16 device=cuda:0" "$out/contract.txt")
    records=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(len(r['nodes']), sorted({(n['process']['node'], n['process']['local_rank']) for n in r['nodes']}) == [(a, b) for a in range(4) for b in range(4)])" "$out/contract-report.json")
    echo "exit $rc; $n processes summed 16; report: $records"
    if [ "$rc" = 0 ] && [ "$n" = 16 ] && [ "$records" = "16 True" ]; then
        record "16 processes, init_process_group with no torchrun" PASS "16 x sum=16 on cuda:0, 16 records"
    else
        record "16 processes, init_process_group with no torchrun" FAIL "rc=$rc, $n summed, report $records"
    fi
fi

if want 3; then
    section "3. --nproc-per-node gpu with --report-bindings (auto, then numa)"
    [ ${#agents[@]} -gt 0 ] || start_agents "$H4" 4
    log=$out/contract.log
    : >"$log"
    echo "exec python3 \"\$1\" \"\$2\" steps cuda" | exec_all "$H4" --nproc-per-node gpu --report-bindings \
        - "$WORKER" "$log" >"$out/gpu.txt" 2>&1
    rc=$?
    cat "$out/gpu.txt"
    n=$(grep -c "sum=4 device=cuda:0" "$out/gpu.txt")
    b=$(grep -c "^multinode bind: rank [0-3] (local 0) on .*unbound" "$out/gpu.txt")
    if [ "$rc" = 0 ] && [ "$n" = 4 ] && [ "$b" = 4 ]; then
        record "gpu: one process a node, auto unbound on one NUMA node" PASS "4 x sum=4, 4 binding lines"
    else
        record "gpu: one process a node, auto unbound on one NUMA node" FAIL "rc=$rc, $n summed, $b binding lines"
    fi
    # shellcheck disable=SC2016 # expanded by each process's shell
    exec_all "$H4" --nproc-per-node gpu --bind numa --report-bindings -c \
        'echo "rank $RANK $(grep Cpus_allowed_list /proc/self/status)"' >"$out/numa.txt" 2>&1
    rc=$?
    cat "$out/numa.txt"
    got=$(awk '/Cpus_allowed_list/ {print $NF}' "$out/numa.txt" | sort -u)
    if [ "$gpu_node" = "-1" ]; then
        if [ "$rc" = 0 ] && [ "$got" = "$own" ] && grep -q "unbound" "$out/numa.txt"; then
            record "numa, the GPU has no NUMA node (-1)" PASS "unbound and said; CPUs $got"
        else record "numa, the GPU has no NUMA node (-1)" FAIL "rc=$rc, CPUs $got"; fi
    else
        if [ "$rc" = 0 ] && [ "$got" = "$gpu_cpus" ]; then
            record "numa: every process on its GPU's local_cpulist" PASS "$got"
        else record "numa: every process on its GPU's local_cpulist" FAIL "rc=$rc, got $got, GPU $gpu_cpus"; fi
    fi
fi
stop_agents

# timed_start TOOL RUN: exec_all start -> every process past init_process_group.
timed_start() {
    local tool=$1 run=$2 dir rc t0
    dir=$out/start-$run-$tool
    mkdir -p "$dir"
    : >"$dir/worker.log"
    start_agents "$H4" 4
    t0=$(now)
    case $tool in
    multinode)
        echo "exec python3 \"\$1\" \"\$2\" steps" | exec_all "$H4" --nproc-per-node 4 --bind none \
            - "$WORKER" "$dir/worker.log" >"$dir/run.txt" 2>&1 ;;
    torchrun-inside)
        # shellcheck disable=SC2016 # expanded by each node's shell
        echo 'exec torchrun --nnodes="$MULTINODE_NNODES" --node-rank="$RANK" --nproc-per-node=4 --master-addr="$MULTINODE_NODE_IP" --master-port='$((port + 1))' "$1" "$2" steps' |
            exec_all "$H4" - "$WORKER" "$dir/worker.log" >"$dir/run.txt" 2>&1 ;;
    esac
    rc=$?
    stop_agents
    python3 - "$tool" "$run" "$t0" "$rc" "$dir/worker.log" >>"$out/procs.jsonl" <<'PY'
import json, sys
tool, run, t0, rc, log = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
lines = [l.split() for l in open(log)]
ready = {l[1]: float(l[3]) for l in lines if l[2] == "ready"}
started = [float(l[3]) for l in lines if l[2] == "start"]
ok = rc == 0 and len(ready) == 16
rec = {"bench": "start", "tool": tool, "run": run, "exit": rc, "processes": len(ready),
       "all_started_s": round(max(started) - t0, 3) if ok else None,
       "all_ready_s": round(max(ready.values()) - t0, 3) if ok else None}
print(json.dumps(rec))
PY
    tail -n 1 "$out/procs.jsonl"
}

# timed_restart TOOL RUN WHAT: once rank 0 did 10 steps, SIGKILL rank 6's
# process (WHAT=process) or node 2's agent (WHAT=node); from the kill to
# every process of the next attempt at its first step.
timed_restart() {
    local tool=$1 run=$2 what=$3 dir rc t_kill job victim
    dir=$out/restart-$what-$run-$tool
    mkdir -p "$dir"
    : >"$dir/worker.log"
    start_agents "$H5" 5
    case $tool in
    multinode)
        echo "exec python3 \"\$1\" \"\$2\" train" | exec_all "$H5" --spares 1 --max-restarts 2 \
            --nproc-per-node 4 --bind none --master-port $((port + 1)) --report "$dir/report.json" \
            - "$WORKER" "$dir/worker.log" >"$dir/run.txt" 2>&1 &
        job=$! ;;
    torchrun-inside)
        # shellcheck disable=SC2016 # expanded by each node's shell
        echo 'exec torchrun --nnodes="$MULTINODE_NNODES" --node-rank="$RANK" --nproc-per-node=4 --master-addr="$MULTINODE_NODE_IP" --master-port=$(('$((port + 1))' + MULTINODE_RESTART_COUNT)) "$1" "$2" train' |
            exec_all "$H5" --spares 1 --max-restarts 2 --report "$dir/report.json" \
            - "$WORKER" "$dir/worker.log" >"$dir/run.txt" 2>&1 &
        job=$! ;;
    esac
    for _ in $(seq 1200); do
        grep -q '^0 0 step10 ' "$dir/worker.log" 2>/dev/null && break
        sleep 0.05
    done
    case $what in
    process) victim=$(awk '$1 == 0 && $2 == 6 && $3 == "start" { print $5; exit }' "$dir/worker.log") ;;
    node) victim=${agents[1]} ;;
    esac
    t_kill=$(now)
    kill -KILL "$victim"
    rc=0
    wait "$job" || rc=$?
    stop_agents
    python3 - "$tool" "$run" "$what" "$t_kill" "$rc" "$dir" >>"$out/procs.jsonl" <<'PY'
import json, os, sys
tool, run, what, t_kill, rc, d = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
lines = [l.split() for l in open(os.path.join(d, "worker.log"))]
after = [l for l in lines if float(l[3]) > t_kill and l[0] != "0"]
first_step, started = {}, {}
for l in after:
    if l[2].startswith("step"):
        first_step.setdefault(l[1], float(l[3]))
    if l[2] == "start":
        started[l[4]] = float(l[3])
# The processes that trained: their pids' start lines (a rank's "start"
# line is written before it knows its rank under torchrun).
pids = {l[4] for l in after if l[2].startswith("step")}
ok = rc == 0 and len(first_step) == 16
rec = {"bench": f"restart-{what}", "tool": tool, "run": run, "exit": rc, "processes": len(first_step),
       "all_started_s": round(max(started[p] for p in pids) - t_kill, 3) if ok else None,
       "all_training_s": round(max(first_step.values()) - t_kill, 3) if ok else None}
rep = os.path.join(d, "report.json")
if os.path.exists(rep):
    att = json.load(open(rep)).get("attempts", [])
    rec["attempts"] = len(att)
    rec["excluded"] = [x["host"] for a in att for x in a.get("excluded", [])]
print(json.dumps(rec))
PY
    tail -n 1 "$out/procs.jsonl"
}

want 4 && section "4. (a) start to every process past init_process_group, 4 nodes x 4 processes"
want 4 && for ((run = 1; run <= runs; run++)); do
    for tool in multinode torchrun-inside; do timed_start "$tool" "$run"; done
done
want 5 && section "5. (b) SIGKILL of one process, then of one node, to every process training again"
want 5 && for what in process node; do
    for ((run = 1; run <= runs; run++)); do
        for tool in multinode torchrun-inside; do timed_restart "$tool" "$run" "$what"; done
    done
done

section "results (seconds; median [min-max] of $runs runs)"
python3 - "$out/procs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for bench, key in [("start", "all_started_s"), ("start", "all_ready_s"),
                   ("restart-process", "all_started_s"), ("restart-process", "all_training_s"),
                   ("restart-node", "all_started_s"), ("restart-node", "all_training_s")]:
    meds = {}
    for tool in ("multinode", "torchrun-inside"):
        rs = [r for r in rows if r["bench"] == bench and r["tool"] == tool]
        v = [r[key] for r in rs if r.get(key) is not None]
        cell = f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]" if v else "-"
        meds[tool] = statistics.median(v) if v else None
        print(f"{bench:16} {tool:16} {key:15} {cell:>20}  exit codes {','.join(str(r['exit']) for r in rs)}")
    if meds["multinode"] and meds["torchrun-inside"]:
        print(f"{bench:16} {key:15} torchrun-inside / multinode: {meds['torchrun-inside'] / meds['multinode']:.1f}x")
PY
section "summary"
printf '%s\n' "${results[@]}" | tr '|' '\t'
for r in "${results[@]}"; do [[ $r == *"|FAIL|"* ]] && exit 1; done
exit 0
