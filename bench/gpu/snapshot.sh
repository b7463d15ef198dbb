#!/usr/bin/env bash
# The GPU runs of `multinode ps` and `--snapshot-on-timeout`, in one call on
# a machine with 2 GPUs (the `nvidia-h200-x2` device kind), from the
# repository root:
#
#   bench/gpu/snapshot.sh     # MN_GPU_BIN: folder with multinode, mn-ssh, mn-exec-all
#                             # MN_PY_SPY: py-spy's folder (else py-spy on PATH, else none)
#
# Two "nodes" on loopback agents, 127.0.0.2 owning GPU 0 and 127.0.0.3 GPU 1.
# A. a rank stuck in a CUDA kernel that never ends (bench/gpu/spin.py) while
#    the other waits for it in a collective: `multinode ps` from the head
#    must show the stuck rank's Python stack and its GPU at 100 %. Runs on
#    one GPU too (`nvidia-h200`, MN_GPU_STEPS=A): rank 1 then uses no GPU.
# B. the reference script (bench/gpu/reference-hang.sh) with
#    /workspace/train.py = bench/gpu/hang.py: rank 1 stops calling the
#    all-reduce and sleeps, rank 0 waits inside NCCL. `multinode ps` must name
#    rank 1 the odd one in under 5 s; --timeout ends the job, the report
#    holds the snapshot, nvidia-smi shows no process of the job within 5 s.
# C. B again with NCCL_DEBUG=INFO: the verdict quotes each node's last NCCL line.
# Prints a table at the end; the outputs go to $OUT (or a temp dir).
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
bin=${MN_GPU_BIN:-$repo/.gpu-bin}
export PATH="$bin:$PATH"
[ -n "${MN_PY_SPY:-}" ] && export PATH="$MN_PY_SPY:$PATH"
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
log=$out/snapshot.log
exec > >(tee -a "$log") 2>&1

# NVLink multicast stays off on shared machines (see the device notes).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK NCCL_DEBUG; do unset "$v"; done
MULTINODE_SECRET=gpu-snapshot-secret-$$-$(date +%s%N)
export MULTINODE_SECRET PYTHONUNBUFFERED=1
HOSTS=127.0.0.2:1,127.0.0.3:1
PORT=29922
steps=" ${MN_GPU_STEPS:-A B C} "
want() { [[ $steps == *" $1 "* ]]; }
results=()
# agents, stop_agents (on EXIT), record, now, secs, gpu_pids
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# agent RANK GPU [-- JOB...]: an agent for node RANK of $HOSTS, owning GPU.
agent() {
    local rank=$1 gpu=$2
    shift 2
    MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=$rank MULTINODE_AGENT_PORT=$PORT \
        CUDA_VISIBLE_DEVICES=$gpu multinode agent --listen "127.0.0.$((rank + 2)):$PORT" "$@" &
    agents+=($!)
}
# The head's view, as a job script on the head has it.
head_env() { env MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$PORT "$@"; }
# wait_for FILE PATTERN SECONDS PID: until FILE holds PATTERN (not once PID ended).
wait_for() {
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$4" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
# ps_timed NAME: `multinode ps` (table, then JSON) from the head, timed.
ps_timed() {
    local t0 t1
    t0=$(now)
    head_env multinode ps >"$out/$1-ps.txt" 2>&1
    t1=$(now)
    head_env multinode ps --format json >"$out/$1-ps.json" 2>"$out/$1-ps.err"
    ps_took=$(secs "$t0" "$t1")
    echo "--- multinode ps ($ps_took s):"
    cat "$out/$1-ps.txt"
}
# json FILE EXPR: a Python expression over the JSON document `d` of FILE.
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

echo "=== machine"
date -u
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'
multinode --version
command -v py-spy && py-spy --version
mkdir -p /workspace
cp bench/gpu/hang.py /workspace/train.py

if want A; then
    echo "=== A. rank 0 stuck in a CUDA spin kernel, rank 1 waiting for it in all_reduce"
    # With one GPU, both "nodes" see GPU 0 and rank 1 leaves it alone.
    if [ "$(nvidia-smi -L | grep -c '^GPU')" -ge 2 ]; then gpu1=1 waiter_gpu=1; else gpu1=0 waiter_gpu=0; fi
    agent 1 "$gpu1" -- true
    head_env CUDA_VISIBLE_DEVICES=0 MN_SPIN_WAITER_GPU=$waiter_gpu timeout 120 multinode agent --listen "127.0.0.2:$PORT" -- \
        mn-exec-all --timeout 40 --snapshot-on-timeout --report "$out/spin-report.json" \
        -c "exec python3 $repo/bench/gpu/spin.py" >"$out/spin.txt" 2>&1 &
    head=$!
    if wait_for "$out/spin.txt" SPINNING 90 "$head" && wait_for "$out/spin.txt" WAITING 30 "$head"; then
        sleep 2
        ps_timed spin
    else
        echo "the programs did not get there:"
        tail -n 30 "$out/spin.txt"
    fi
    wait "$head"
    rc=$?
    wait "${agents[0]}"
    agents=()
    tail -n 40 "$out/spin.txt"
    stack=$(json "$out/spin-ps.json" "' <- '.join(f['function'] for p in d['snapshots'][0]['processes'] for f in (p.get('stack') or [])[:3] if 'spin.py' in p['cmdline'])")
    util=$(json "$out/spin-ps.json" "max([p['gpu']['utilization_pct'] or 0 for p in d['snapshots'][0]['processes'] if p.get('gpu')] or [-1])")
    other=$(json "$out/spin-ps.json" "[g['summary'] for g in d['groups'] if 1 in g['rank_list']][0]")
    if [[ $stack == *spin_forever* ]] && [ "${util:-0}" = 100 ]; then
        record "A: CUDA spin kernel" PASS "ps ${ps_took}s: rank 0 stack $stack, GPU ${util}%; rank 1: $other; exec_all rc=$rc"
    else
        record "A: CUDA spin kernel" FAIL "rank 0 stack '$stack' GPU '${util}'; rank 1 '$other'; rc=$rc"
    fi
fi

# hang NAME TIMEOUT [VAR=VALUE...]: part B's run, with the environment given.
hang() {
    local name=$1 limit=$2
    shift 2
    agent 1 1 -- true
    ( while :; do echo "$(now) $(gpu_pids)"; sleep 0.25; done ) >"$out/$name-gpu.txt" 2>/dev/null &
    local sampler=$!
    head_env CUDA_VISIBLE_DEVICES=0 MN_TIMEOUT="$limit" MN_REPORT="$out/$name-report.json" "$@" \
        timeout 200 multinode agent --listen "127.0.0.2:$PORT" -- sh bench/gpu/reference-hang.sh >"$out/$name.txt" 2>&1 &
    local head=$!
    ps_took=never
    if wait_for "$out/$name.txt" STRAGGLING 120 "$head"; then
        sleep 3
        ps_timed "$name"
    else
        echo "rank 1 never got there:"
        tail -n 30 "$out/$name.txt"
    fi
    wait "$head"
    hang_rc=$?
    t_end=$(now)
    sleep 6
    kill "$sampler" 2>/dev/null
    wait "${agents[0]}"
    agents=()
    # The first sample after the end with no process on either GPU.
    t_gone=$(awk -v t="$t_end" '$1 >= t && $2 == 0 { printf "%.2f", $1 - t; exit }' "$out/$name-gpu.txt")
    seen=$(awk '{ if ($2 > m) m = $2 } END { print m + 0 }' "$out/$name-gpu.txt")
    grep -vE 'NCCL INFO' "$out/$name.txt" | tail -n 60
}

if want B; then
    echo "=== B. NCCL hang: rank 1 sleeps in Python, rank 0 waits in the all-reduce"
    hang hang 45
    odd=$(json "$out/hang-ps.json" "d['groups'][0]['ranks'] if d['groups'][0]['odd'] else 'none'")
    summary=$(json "$out/hang-ps.json" "d['groups'][0]['summary']")
    util0=$(json "$out/hang-ps.json" "[p['gpu']['utilization_pct'] for p in d['snapshots'][0]['processes'] if p.get('gpu')]")
    util1=$(json "$out/hang-ps.json" "[p['gpu']['utilization_pct'] for p in d['snapshots'][1]['processes'] if p.get('gpu')]")
    cancelled=$(json "$out/hang-report.json" "d['cancelled']")
    snap_odd=$(json "$out/hang-report.json" "d['snapshot']['groups'][0]['ranks']")
    fast=$(python3 -c "print(1 if '$ps_took' != 'never' and float('$ps_took') < 5 else 0)")
    if [ "$odd" = 1 ] && ((fast)) && [ "$cancelled" = timeout ] && [ "$snap_odd" = 1 ] && ((hang_rc == 124)) && [ -n "$t_gone" ] && python3 -c "import sys; sys.exit(0 if float('$t_gone') < 5 else 1)"; then
        record "B: NCCL hang, ps + --timeout" PASS "ps ${ps_took}s names rank 1 odd: $summary; GPU util rank0 $util0 rank1 $util1; exit 124, report snapshot odd rank $snap_odd; GPUs empty ${t_gone}s after the end (up to $seen job processes seen)"
    else
        record "B: NCCL hang, ps + --timeout" FAIL "odd='$odd' ps=${ps_took}s cancelled='$cancelled' report odd='$snap_odd' rc=$hang_rc gone='$t_gone' seen=$seen; $summary"
    fi
fi

if want C; then
    echo "=== C. the same with NCCL_DEBUG=INFO: each node's last NCCL line"
    hang nccl 40 NCCL_DEBUG=INFO
    grep -nE 'NCCL' "$out/nccl.txt" | grep -vE 'NCCL INFO' | tail -n 20
    verdict=$(grep -cE 'last NCCL' "$out/nccl.txt")
    lines=$(json "$out/nccl-report.json" "' | '.join(str(n.get('nccl_line')) for n in d['nodes'])")
    if ((hang_rc == 124)) && [ -n "$lines" ] && [[ $lines != *None* ]]; then
        record "C: NCCL_DEBUG=INFO" PASS "report nccl_line: $lines; verdict lines: $verdict; GPUs empty ${t_gone:-never}s after the end"
    else
        record "C: NCCL_DEBUG=INFO" FAIL "rc=$hang_rc report nccl_line: '${lines}' verdict lines: $verdict"
    fi
fi

echo
echo "=== results"
printf '%-30s %-6s %s\n' CHECK RESULT DETAIL
for r in "${results[@]}"; do
    IFS='|' read -r name status detail <<<"$r"
    printf '%-30s %-6s %s\n' "$name" "$status" "$detail"
done
for r in "${results[@]}"; do [[ $r == *"|FAIL|"* ]] && exit 1; done
exit 0
