#!/usr/bin/env bash
# The first-failure verdict on real PyTorch failures, in one call on a
# machine with a GPU (the `nvidia-h200` device kind; no sshd needed), from
# the repository root:
#
#   bench/gpu/failures.sh     # MN_GPU_BIN: folder with multinode, mn-ssh, mn-exec-all
#
# Two "nodes": rank 0 is this machine (127.0.0.2, run by mn-exec-all
# itself), rank 1 a loopback agent at 127.0.0.3 started here; both use GPU
# 0. Each run is `torchrun --nnodes=2 --nproc-per-node=1
# /tmp/mn-failures.py MODE` (bench/gpu/failures.py) on both nodes through
# mn-exec-all:
# A. oom: rank 1 asks for 400 GiB (torch.empty) while rank 0 sleeps. The
#    verdict must name the program's error, `torch.OutOfMemoryError: CUDA
#    out of memory`, not only torchrun's ChildFailedError block.
# B. duplicate-gpu with NCCL_DEBUG=WARN: both ranks all-reduce on one GPU.
#    The verdict must keep NCCL's cause (`NCCL WARN Duplicate GPU
#    detected`) besides PyTorch's DistBackendError.
# C. B without NCCL_DEBUG: the cause is what PyTorch quotes after `Last
#    error:`.
# For each run NAME, in $OUT (or a temp dir): NAME.txt (everything
# mn-exec-all printed: the nodes' lines, the failure table, the verdict),
# NAME-report.json (--report), NAME-logs/RANK.out|err (--output: each
# rank's bytes as printed, the material of tests/fixtures/torchrun).
# Prints a table at the end; exits 1 if a check failed.
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
bin=${MN_GPU_BIN:-$repo/.gpu-bin}
export PATH="$bin:$PATH"
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
log=$out/failures.log
exec > >(tee -a "$log") 2>&1

# NVLink multicast stays off on shared machines (see the device notes).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK NCCL_DEBUG; do unset "$v"; done
MULTINODE_SECRET=gpu-failures-secret-$$-$(date +%s%N)
export MULTINODE_SECRET PYTHONUNBUFFERED=1
HOSTS=127.0.0.2:1,127.0.0.3:1
PORT=29922
steps=" ${MN_GPU_STEPS:-A B C} "
want() { [[ $steps == *" $1 "* ]]; }
results=()
# show CMD...: prints the command, then runs it.
show() { printf '+ %s\n' "$*"; "$@"; }
# agents, stop_agents (on EXIT), record, now, secs, gpu_pids
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# The agent of rank 1, on GPU 0; returns once it listens (10 s at most).
start_agent() {
    printf '+ %s\n' "MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=1 CUDA_VISIBLE_DEVICES=0 multinode agent --listen 127.0.0.3:$PORT &"
    MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=1 MULTINODE_AGENT_PORT=$PORT CUDA_VISIBLE_DEVICES=0 \
        multinode agent --listen "127.0.0.3:$PORT" &
    agents+=($!)
    local i
    for ((i = 0; i < 100; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.3/$PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "the agent at 127.0.0.3:$PORT did not listen within 10 s"
    return 1
}
# json FILE EXPR: a Python expression over the JSON document `d` of FILE.
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

# The job script: each node's torchrun ($1: the head's address, $2: the
# node count, $3: the mode, $4: the rendezvous port, one a run).
# shellcheck disable=SC2016 # expanded by each node's shell
SCRIPT='torchrun --nnodes="$2" --node-rank="$RANK" --nproc-per-node=1 --master-addr="$1" --master-port="$4" /tmp/mn-failures.py "$3"'
master_port=29540

# failure NAME MODE [VAR=VALUE...]: one run of SCRIPT through mn-exec-all
# from the head, with the environment given; its exit code in $rc.
failure() {
    local name=$1 mode=$2
    shift 2
    master_port=$((master_port + 1))
    echo "+ job script: $SCRIPT"
    printf '+ %s\n' "env MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$PORT CUDA_VISIBLE_DEVICES=0 $* timeout 300 mn-exec-all --report $out/$name-report.json --output $out/$name-logs - 127.0.0.2 2 $mode $master_port <<< \"\$SCRIPT\""
    echo "$SCRIPT" | env MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$PORT \
        CUDA_VISIBLE_DEVICES=0 "$@" timeout 300 mn-exec-all --report "$out/$name-report.json" \
        --output "$out/$name-logs" - 127.0.0.2 2 "$mode" "$master_port" >"$out/$name.txt" 2>&1
    rc=$?
    echo "--- exit code $rc; what mn-exec-all printed, the nodes' lines first:"
    cat "$out/$name.txt"
    # No process of the job may be left on the GPU.
    left=""
    local i
    for ((i = 0; i < 50; i++)); do
        left=$(gpu_pids)
        [ "$left" = 0 ] && break
        sleep 0.2
    done
}

echo "=== machine"
date -u
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
multinode --version
show cp bench/gpu/failures.py /tmp/mn-failures.py
start_agent || exit 1

if want A; then
    echo "=== A. CUDA OOM: rank 1 asks for 400 GiB, rank 0 sleeps"
    failure oom oom
    error=$(json "$out/oom-report.json" "d['verdict']['program_error']")
    first=$(json "$out/oom-report.json" "d['verdict']['rank']")
    if ((rc == 1)) && [ "$first" = 1 ] && [[ $error == *"torch.OutOfMemoryError: CUDA out of memory"* ]] \
        && grep -qF '  program error: ' "$out/oom.txt" && [ "$left" = 0 ]; then
        record "A: CUDA OOM under torchrun" PASS "exit $rc; first failure rank $first; program error: ${error:0:110}...; GPU empty after"
    else
        record "A: CUDA OOM under torchrun" FAIL "rc=$rc first='$first' program_error='$error' left on the GPU: '$left'"
    fi
fi

# duplicate NAME VAR=VALUE...: part B's checks.
duplicate() {
    local name=$1 label=$2
    shift 2
    failure "$name" duplicate-gpu "$@"
    error=$(json "$out/$name-report.json" "d['verdict']['program_error']")
    cause=$(json "$out/$name-report.json" "d['verdict']['nccl_cause']")
    last=$(json "$out/$name-report.json" "d['verdict']['nccl_line']")
    if ((rc != 0)) && [[ $error == *DistBackendError* ]] && [[ $cause == *"Duplicate GPU detected"* ]] \
        && [[ $last == *"NCCL error"* ]] && [ "$left" = 0 ]; then
        record "$label" PASS "exit $rc; program error: $error; NCCL cause: $cause"
    else
        record "$label" FAIL "rc=$rc program_error='$error' nccl_cause='$cause' nccl_line='$last' left on the GPU: '$left'"
    fi
}

if want B; then
    echo "=== B. two NCCL ranks on one GPU, NCCL_DEBUG=WARN"
    duplicate duplicate-warn "B: Duplicate GPU, NCCL_DEBUG=WARN" NCCL_DEBUG=WARN
    [[ ${cause:-} == *"NCCL WARN"* ]] || echo "note: the cause is not an NCCL WARN line: '${cause:-}'"
fi

if want C; then
    echo "=== C. the same without NCCL_DEBUG"
    duplicate duplicate-quiet "C: Duplicate GPU, no NCCL_DEBUG"
fi

stop_agents
echo
echo "=== results"
printf '%-34s %-6s %s\n' CHECK RESULT DETAIL
for r in "${results[@]}"; do
    IFS='|' read -r name status detail <<<"$r"
    printf '%-34s %-6s %s\n' "$name" "$status" "$detail"
done
for r in "${results[@]}"; do [[ $r == *"|FAIL|"* ]] && exit 1; done
exit 0
