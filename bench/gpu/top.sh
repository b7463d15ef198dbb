#!/usr/bin/env bash
# `multinode top` on a real GPU machine with real torch (issue 42), in one
# call from the repository root (the `nvidia-h100-x1`/`nvidia-h200` kinds):
#
#   bench/gpu/top.sh    # MN_GPU_BIN: folder with multinode, mn-exec-all (default .gpu-bin)
#                       # MN_PY_SPY: folder with py-spy, for Python stacks (optional)
#
# Four loopback "nodes", one rank each: exec_all on 127.0.0.2 (node 0),
# an agent on every node (.2 to .5: node 0's shows exec_all's own rank).
# bench/gpu/top_worker.py: each step CPU matmuls, CUDA matmuls on the one
# GPU, a gloo all-reduce of a CUDA tensor. 1. rank 2 does twice the CPU
# matmuls (the one GPU is shared: see the worker): `multinode top --once
# --progress 'step (\d+)'` must name it, with its GPU columns filled (JSON
# and table); 2. an even job: three refreshes, none names a rank.
# In $OUT (or a temp dir): top.log (this), each top's JSON and table.
# Exits 1 if a check failed.
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
bin=${MN_GPU_BIN:-$repo/.gpu-bin}
export PATH="$bin${MN_PY_SPY:+:$MN_PY_SPY}:$PATH"
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
exec > >(tee -a "$out/top.log") 2>&1
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK WORLD_SIZE MASTER_ADDR MASTER_PORT; do unset "$v"; done
MULTINODE_SECRET=top-bench-$$-$(date +%s%N)
HOSTS=127.0.0.2:1,127.0.0.3:1,127.0.0.4:1,127.0.0.5:1
PORT=30600
export MULTINODE_SECRET MULTINODE_HOSTLIST=$HOSTS MULTINODE_AGENT_PORT=$PORT PYTHONUNBUFFERED=1
WORKER=$repo/bench/gpu/top_worker.py
results=()
# agents (their PIDs), start_loopback_agents, stop_agents (on EXIT), record
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
section() { printf '\n=== %s\n' "$*"; }

section "the machine"
date -u
nproc
python3 -c 'import torch; print("torch", torch.__version__, "GPUs", torch.cuda.device_count())'
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
multinode --version
command -v py-spy && py-spy --version

start_loopback_agents 4 "$PORT"

# job SLOW SECONDS NAME: the job in the background, its output in $out/NAME.txt.
job() {
    MULTINODE_NODE_RANK=0 mn-exec-all --nproc-per-node 1 --bind none --label -c "exec python3 $WORKER $1 $2" >"$out/$3.txt" 2>&1 &
    job_pid=$!
    for _ in $(seq 300); do
        [ "$(grep -c 'step 20$' "$out/$3.txt" 2>/dev/null)" -ge 4 ] && return 0
        sleep 0.2
    done
    echo "the job did not reach step 20 on every rank:"
    tail -20 "$out/$3.txt"
    return 1
}

top_once() { MULTINODE_NODE_RANK=0 multinode top --once --progress 'step (\d+)' "$@"; }

section "1. rank 2 does twice the work"
if job 2 45 slow; then
    top_once --format json >"$out/slow.json"
    top_once >"$out/slow-table.txt"
    cat "$out/slow-table.txt"
    python3 - "$out/slow.json" <<'PY' | tee "$out/slow-check.txt"
import json, sys
doc = json.loads(open(sys.argv[1]).read().splitlines()[-1])
named = [s["rank"] for s in doc["straggler"]["stragglers"]]
print("straggler line:", doc["straggler"]["line"])
# Within 30 s of the last rank's first line: the start line, with
# exec_all's phases of the last rank's start where it told its agent.
print("start line:", doc.get("start", {}).get("line"))
print("start phases:", doc.get("start", {}).get("last_phases"))
row = next(r for r in doc["rows"] if r["rank"] == 2)
gpu = row["gpus"][0] if row["gpus"] else {}
filled = all(gpu.get(k) is not None for k in ("utilization_pct", "memory_used_mib", "power_w", "sm_clock_mhz", "sm_clock_max_mhz"))
print("rank 2 GPU:", json.dumps(gpu))
print("wait shares:", {r["rank"]: r["wait_share"] for r in doc["rows"]}, "from", {r["rank"]: r["wait_from"] for r in doc["rows"]})
print("step rates:", {r["rank"]: r["step_rate"] for r in doc["rows"]})
print("VERDICT", "PASS" if named == [2] and filled else "FAIL", named, filled)
PY
    if grep -q "VERDICT PASS" "$out/slow-check.txt"; then record "the rank with 2x the work named, GPU columns filled" PASS "$(grep 'straggler line' "$out/slow-check.txt")"
    else record "the rank with 2x the work named, GPU columns filled" FAIL "see above"; fi
    wait "$job_pid"
    echo "job exit $?"
else
    record "the rank with 2x the work named" FAIL "the job did not run"
    kill "$job_pid" 2>/dev/null
fi

section "2. an even job: three refreshes, no straggler"
if job -1 45 even; then
    named=0
    for i in 1 2 3; do
        top_once --format json >"$out/even-$i.json"
        python3 - "$out/even-$i.json" <<'PY' | tee -a "$out/even-check.txt"
import json, sys
doc = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print("refresh:", doc["straggler"]["line"], {r["rank"]: (r["wait_share"], r["step_rate"]) for r in doc["rows"]})
PY
    done
    named=$(grep -c "straggler: rank" "$out/even-check.txt")
    if [ "$named" = 0 ]; then record "an even job: no straggler in 3 refreshes" PASS "$(grep -c 'no straggler' "$out/even-check.txt") x no straggler"
    else record "an even job: no straggler in 3 refreshes" FAIL "$named refreshes named a rank"; fi
    wait "$job_pid"
    echo "job exit $?"
else
    record "an even job" FAIL "the job did not run"
    kill "$job_pid" 2>/dev/null
fi

section "summary"
printf '%s\n' "${results[@]}" | tr '|' '\t'
for r in "${results[@]}"; do [[ $r == *"|FAIL|"* ]] && exit 1; done
exit 0
