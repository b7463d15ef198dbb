#!/usr/bin/env bash
# `multinode ps` on the hang of issue 30 (points 3 and 4), on a machine with
# one GPU (the `nvidia-h200` device kind), from the repository root:
#
#   bench/gpu/ps-hang.sh      # MN_GPU_BIN: folder with multinode, mn-ssh, mn-exec-all
#                             # MN_PY_SPY: py-spy's folder (else py-spy on PATH)
#                             # MN_GPU_PORT: the agents' port (default 29922)
#
# Two "nodes": plain agents (no JOB) on 127.0.0.2 and 127.0.0.3, both seeing
# GPU 0, and `mn-exec-all` started by this script, outside any agent, as a
# job script run by a batch system is: it runs rank 0 itself (LOCAL) and
# rank 1 through the agent of 127.0.0.3. bench/gpu/ps_hang.py, with gloo:
# rank 1 loops on its GPU (matmuls, then torch.cuda.synchronize), rank 0
# waits for it in all_reduce. Once both are there, `multinode ps` from the
# head must
#   - list rank 1 first, odd, in `synchronize <- spin_forever <- main`, its
#     GPU busy (point 3: before, rank order put rank 0 first);
#   - show rank 0's Python process in `all_reduce` (point 4: before, rank 0
#     said "no process of the job running": its agent did not run it).
# Then --timeout 40 ends the run (exit 124, the snapshot in the report) and
# no process of the job may stay on the GPU. Writes `multinode ps` (table and
# JSON), the run's output and report under $OUT (or a temp dir), and ends
# with a table; exits 1 if a check failed.
#
# py-spy travels as its PyPI wheel, which holds a static binary:
#   python3 -m pip download py-spy --no-deps -d /tmp/w && unzip -o -j /tmp/w/py_spy-*.whl '*/scripts/py-spy' -d .py-spy
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
bin=${MN_GPU_BIN:-$repo/.gpu-bin}
export PATH="$bin:$PATH"
[ -n "${MN_PY_SPY:-}" ] && export PATH="$MN_PY_SPY:$PATH"
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
log=$out/ps-hang.log
exec > >(tee -a "$log") 2>&1

# NVLink multicast stays off on shared machines (see the device notes).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK; do unset "$v"; done
MULTINODE_SECRET=gpu-ps-hang-secret-$$-$(date +%s%N)
export MULTINODE_SECRET PYTHONUNBUFFERED=1
HOSTS=127.0.0.2:1,127.0.0.3:1
PORT=${MN_GPU_PORT:-29922}
results=()
# agents, stop_agents (on EXIT), record, now, secs, gpu_pids
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The job's view of node RANK, as a job script there has it.
node_env() {
    local rank=$1
    shift
    env MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK="$rank" MULTINODE_AGENT_PORT="$PORT" CUDA_VISIBLE_DEVICES=0 "$@"
}
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
# json FILE EXPR: a Python expression over the JSON document `d` of FILE.
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

echo "=== machine"
date -u
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'
multinode --version
command -v py-spy && py-spy --version

echo "=== agents on both nodes (no JOB); mn-exec-all outside them, rank 0 local"
for rank in 0 1; do
    # Not through node_env: $! must be the agent's own PID, for stop_agents.
    MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=$rank MULTINODE_AGENT_PORT=$PORT CUDA_VISIBLE_DEVICES=0 \
        multinode agent --listen "127.0.0.$((rank + 2)):$PORT" &
    agents+=($!)
done
node_env 0 timeout 120 mn-exec-all --timeout 40 --snapshot-on-timeout --report "$out/ps-hang-report.json" \
    -c "exec python3 $repo/bench/gpu/ps_hang.py" >"$out/ps-hang.txt" 2>&1 &
run=$!
ps_took=never
if wait_for "$out/ps-hang.txt" SPINNING 90 "$run" && wait_for "$out/ps-hang.txt" WAITING 30 "$run"; then
    sleep 3
    t0=$(now)
    node_env 0 multinode ps >"$out/ps-hang-ps.txt" 2>&1
    t1=$(now)
    node_env 0 multinode ps --format json >"$out/ps-hang-ps.json" 2>"$out/ps-hang-ps.err"
    ps_took=$(secs "$t0" "$t1")
    echo "--- multinode ps ($ps_took s):"
    cat "$out/ps-hang-ps.txt"
else
    echo "the programs did not get there:"
    tail -n 30 "$out/ps-hang.txt"
fi
wait "$run"
rc=$?
t_end=$(now)
stop_agents
t_gone=never
for _ in $(seq 50); do
    if [ "$(gpu_pids)" = 0 ]; then
        t_gone=$(secs "$t_end" "$(now)")
        break
    fi
    sleep 0.1
done
tail -n 40 "$out/ps-hang.txt"

ps_json=$out/ps-hang-ps.json
first=$(json "$ps_json" "d['groups'][0]['ranks'] + (' odd' if d['groups'][0]['odd'] else '')")
first_summary=$(json "$ps_json" "d['groups'][0]['summary']")
rank0=$(json "$ps_json" "[g['summary'] for g in d['groups'] if 0 in g['rank_list']][0]")
stack0=$(json "$ps_json" "' <- '.join(f['function'] for p in d['snapshots'][0]['processes'] for f in (p.get('stack') or [])[:3] if 'ps_hang.py' in p['cmdline'])")
util1=$(json "$ps_json" "max([p['gpu']['utilization_pct'] or 0 for p in d['snapshots'][1]['processes'] if p.get('gpu')] or [-1])")
if [ "$first" = "1 odd" ] && [[ $first_summary == *"synchronize <- spin_forever <- main"* ]]; then
    record "3: the spinning rank first" PASS "ps ${ps_took}s: rank 1 $first_summary, GPU ${util1}%"
else
    record "3: the spinning rank first" FAIL "first group '$first': '$first_summary'; GPU '${util1}'"
fi
seen0=$(json "$ps_json" "sum('ps_hang.py' in p['cmdline'] and p['comm'].startswith('python') for p in d['snapshots'][0]['processes'])")
if [ "$seen0" = 1 ] && [[ $stack0 == "all_reduce <- "* ]]; then
    record "4: rank 0 run by mn-exec-all" PASS "rank 0: $rank0"
else
    record "4: rank 0 run by mn-exec-all" FAIL "rank 0: '$rank0', its Python processes: '$seen0', stack '$stack0'"
fi
cancelled=$(json "$out/ps-hang-report.json" "d['cancelled']")
snap_first=$(json "$out/ps-hang-report.json" "d['snapshot']['groups'][0]['ranks']")
if ((rc == 124)) && [ "$cancelled" = timeout ] && [ "$snap_first" = 1 ] && [ "$t_gone" != never ]; then
    record "--timeout ends it" PASS "exit 124, report snapshot first rank $snap_first, GPU empty ${t_gone}s after the end"
else
    record "--timeout ends it" FAIL "rc=$rc cancelled='$cancelled' report first='$snap_first' GPU empty after '$t_gone'"
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
