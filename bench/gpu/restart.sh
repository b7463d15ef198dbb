#!/usr/bin/env bash
# Restarts with a spare on real PyTorch, in one call on a machine with a
# GPU (the `nvidia-h200` device kind; no sshd needed), from the repository
# root:
#
#   bench/gpu/restart.sh     # MN_GPU_BIN: folder with multinode, mn-ssh, mn-exec-all
#
# Four "nodes" on loopback: rank 0 is this machine (127.0.0.2, run by
# mn-exec-all itself), agents at 127.0.0.3, .4 and .5, the last a spare
# (--spares 1). Every node runs `torchrun --nnodes=3 --nproc-per-node=1
# bench/gpu/restart_train.py CKPT_DIR` (gloo; all on GPU 0), which resumes
# from rank 0's checkpoint. Once attempt 0 has written its checkpoint at
# step 20, the agent at 127.0.0.4 (rank 2) is killed (SIGKILL): exec_all
# must see it lost, run attempt 1 on 127.0.0.2, .3 and .5, which resumes
# at step 20 or later and finishes the 60 steps; exit code 0, nothing left
# on the GPU. In $OUT (or a temp dir): restart.log (this), run.txt (what
# mn-exec-all printed), report.json (--report). Exits 1 if a check failed.
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
bin=${MN_GPU_BIN:-$repo/.gpu-bin}
export PATH="$bin:$PATH"
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
exec > >(tee -a "$out/restart.log") 2>&1

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK; do unset "$v"; done
MULTINODE_SECRET=gpu-restart-secret-$$-$(date +%s%N)
export MULTINODE_SECRET PYTHONUNBUFFERED=1
HOSTS=127.0.0.2:1,127.0.0.3:1,127.0.0.4:1,127.0.0.5:1
PORT=29922
ckpt=$(mktemp -d)
# agents, stop_agents (on EXIT), record, now, secs, gpu_pids
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# start_agent RANK ADDRESS: an agent, on GPU 0; returns once it listens.
start_agent() {
    printf '+ %s\n' "MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=$1 CUDA_VISIBLE_DEVICES=0 multinode agent --listen $2:$PORT &"
    MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=$1 MULTINODE_AGENT_PORT=$PORT CUDA_VISIBLE_DEVICES=0 \
        multinode agent --listen "$2:$PORT" &
    agents+=($!)
    local i
    for ((i = 0; i < 100; i++)); do
        (exec 3<>"/dev/tcp/$2/$PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "the agent at $2:$PORT did not listen within 10 s"
    return 1
}
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

echo "=== machine"
date -u
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
multinode --version
start_agent 1 127.0.0.3 || exit 1
start_agent 2 127.0.0.4 || exit 1
victim=${agents[1]}
start_agent 3 127.0.0.5 || exit 1

# The job script: each attempt's rendezvous on a port of its own.
# shellcheck disable=SC2016 # expanded by each node's shell
SCRIPT='torchrun --nnodes="$MULTINODE_NNODES" --node-rank="$RANK" --nproc-per-node=1 --master-addr="$1" --master-port=$((29600 + MULTINODE_RESTART_COUNT)) '"$repo"'/bench/gpu/restart_train.py "$2"'
echo "+ job script: $SCRIPT"
printf '+ %s\n' "env MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 CUDA_VISIBLE_DEVICES=0 mn-exec-all --spares 1 --max-restarts 2 --report $out/report.json - 127.0.0.2 $ckpt <<< \"\$SCRIPT\" &"
t0=$(date +%s.%N)
echo "$SCRIPT" | env MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$PORT \
    CUDA_VISIBLE_DEVICES=0 timeout 400 mn-exec-all --spares 1 --max-restarts 2 --report "$out/report.json" \
    - 127.0.0.2 "$ckpt" >"$out/run.txt" 2>&1 &
run=$!
for ((i = 0; i < 1200; i++)); do
    [ "$(cat "$ckpt/progress" 2>/dev/null)" = "0 20" ] && break
    sleep 0.1
done
echo "+ kill -KILL $victim   # the agent at 127.0.0.4 (rank 2), at $(cat "$ckpt/progress" 2>/dev/null)"
t_kill=$(date +%s.%N)
kill -KILL "$victim"
wait "$run"
rc=$?
t_end=$(date +%s.%N)
echo "--- exit code $rc after $(python3 -c "print(round($t_end - $t0, 1))") s (the kill at $(python3 -c "print(round($t_kill - $t0, 1))") s); what mn-exec-all printed:"
cat "$out/run.txt"
left=""
for ((i = 0; i < 50; i++)); do
    left=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c '[0-9]')
    [ "$left" = 0 ] && break
    sleep 0.2
done
attempts=$(json "$out/report.json" "len(d['attempts'])")
hosts1=$(json "$out/report.json" "','.join(d['attempts'][1]['hosts'])")
excluded=$(json "$out/report.json" "d['attempts'][0]['excluded'][0]['host'] + ' ' + d['attempts'][0]['excluded'][0]['why']")
restart_s=$(json "$out/report.json" "d['attempts'][1]['restart_s']")
resumed=$(grep -o 'attempt 1 rank 0/3 node [0-9.]* resumes at step [0-9]*' "$out/run.txt" | head -1)
echo
echo "=== results"
echo "attempts: $attempts; attempt 1 on $hosts1; excluded: $excluded; from the loss to attempt 1 running: $restart_s s"
echo "$resumed"
if [ "$rc" = 0 ] && [ "$attempts" = 2 ] && [ "$hosts1" = 127.0.0.2,127.0.0.3,127.0.0.5 ] \
    && [ "$excluded" = "127.0.0.4 lost" ] && [[ $resumed == *"resumes at step "[2-5]0 ]] \
    && grep -q '^attempt 1 finished 60 steps' "$out/run.txt" && [ "$left" = 0 ]; then
    echo "PASS: the job resumed from its checkpoint on the spare and finished"
    exit 0
fi
echo "FAIL: rc=$rc attempts=$attempts hosts1=$hosts1 excluded='$excluded' resumed='$resumed' left on the GPU: '$left'"
exit 1
