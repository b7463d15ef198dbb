#!/usr/bin/env bash
# The GPU end-to-end checks of multinode, all in one call on a machine with
# 2 GPUs (the `nvidia-h200-x2` device kind), from the repository root:
#
#   bench/gpu/run.sh            # MN_GPU_BIN: folder with multinode, mn-ssh, mn-exec-all
#
# 1. single node: the reference document's first example, no hostlist (the
#    one-machine default); exec_all runs torchrun --standalone --nproc-per-node=2.
# 2. two nodes: agents on 127.0.0.2 and 127.0.0.3, one GPU each, running
#    `multinode agent -- JOB` where JOB is the reference multi-node script
#    (bench/gpu/reference.sh) with --nproc-per-node=1.
# 3. MPI bootstrap: mpirun with plm_rsh_agent=$MULTINODE_SSH_WRAPPER starts a
#    program that takes its rank from MPI and all-reduces a CUDA tensor via NCCL.
# 4. failure: in the two-node run rank 1 raises after NCCL is up; exec_all fails
#    fast; nvidia-smi must show no process of the job on either GPU.
# 5. overhead: exec_all start to first all-reduce, against the same torchrun
#    commands started by hand, alternating, 3 runs each.
# 6. preflight: `multinode check` on one node and across the two agents.
# Prints a table at the end; everything is logged to $OUT/gpu.log (or a temp dir).
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
bin=${MN_GPU_BIN:-$repo/.gpu-bin}
export PATH="$bin:$PATH"
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
log=$out/gpu.log
exec > >(tee -a "$log") 2>&1

# NVLink multicast stays off on shared machines (see the device notes).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK; do unset "$v"; done
MULTINODE_SECRET=gpu-run-secret-$$-$(date +%s%N)
export MULTINODE_SECRET
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
HOSTS=127.0.0.2:1,127.0.0.3:1
PORT=29922
results=()
steps=" ${MN_GPU_STEPS:-1 2 3 4 5 6} "
want() { [[ $steps == *" $1 "* ]]; }
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

echo "=== machine"
date -u
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
nvidia-smi | sed -n '3p'
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count())'
multinode --version
mpirun --version 2>&1 | head -n 2
python3 -c 'import mpi4py; print("mpi4py", mpi4py.__version__)' 2>&1
mkdir -p /workspace
cp bench/gpu/allreduce.py /workspace/train.py
cp bench/gpu/allreduce.py /tmp/allreduce.py

if want 1; then
    echo "=== 1. single node: no hostlist, torchrun --standalone --nproc-per-node=2"
    multinode hosts
    NCCL_DEBUG=INFO timeout 300 mn-exec-all -c 'torchrun --standalone --nproc-per-node=2 /tmp/allreduce.py' >"$out/single.txt" 2>&1
    rc=$?
    grep -E 'sum=|NCCL INFO (Channel|Connected|.*via)' "$out/single.txt" | grep -v 'NVLS' | head -n 12
    # Both workers share torchrun's stdout, and an unbuffered print writes its
    # text and its newline apart: two ranks' lines can land on one line (the
    # bytes as the processes wrote them). Count the ranks, not the lines.
    n=$(grep -oE 'rank [01]/2 sum=3\.0' "$out/single.txt" | sort -u | wc -l)
    transport1=$(grep -oE 'via (P2P/[A-Za-z/]+|SHM[A-Za-z/]*|NET/[A-Za-z]+)' "$out/single.txt" | sort | uniq -c | sort -rn | head -n 1 | sed 's/^ *[0-9]* //')
    if ((rc == 0 && n == 2)); then record "single node, 2 GPUs" PASS "2 ranks print sum=3.0; NCCL ${transport1:-?}"; else record "single node, 2 GPUs" FAIL "rc=$rc, $n ranks with sum=3.0"; fi
fi

if want 2; then
    echo "=== 2. two nodes: agents on 127.0.0.2 (GPU 0) and 127.0.0.3 (GPU 1), the reference script as the head's JOB"
    agent 1 1 -- true
    ( while :; do gpu_pids; sleep 0.5; done ) >"$out/gpu-samples.txt" 2>/dev/null &
    sampler=$!
    NCCL_DEBUG=INFO MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$PORT CUDA_VISIBLE_DEVICES=0 \
        timeout 300 multinode agent --listen "127.0.0.2:$PORT" -- sh bench/gpu/reference.sh >"$out/two.txt" 2>&1
    rc=$?
    kill "$sampler" 2>/dev/null
    wait "${agents[0]}"
    worker_rc=$?
    agents=()
    grep -E 'sum=|via|NET/' "$out/two.txt" | grep -v NVLS | head -n 12
    n=$(grep -cE 'rank [01]/2 sum=3.0' "$out/two.txt")
    seen=$(sort -n "$out/gpu-samples.txt" | tail -n 1)
    transport2=$(grep -oE 'via (P2P/[A-Za-z/]+|SHM[A-Za-z/]*|NET/[A-Za-z]+)' "$out/two.txt" | sort | uniq -c | sort -rn | head -n 1 | sed 's/^ *[0-9]* //')
    if ((rc == 0 && worker_rc == 0 && n == 2)); then
        record "two nodes, reference script" PASS "both ranks sum=3.0; NCCL ${transport2:-?}; up to ${seen:-0} job processes seen by nvidia-smi"
    else
        record "two nodes, reference script" FAIL "head rc=$rc worker rc=$worker_rc, $n ranks with sum=3.0"
    fi
fi

if want 3; then
    echo "=== 3. MPI bootstrap: mpirun --mca plm_rsh_agent \$MULTINODE_SSH_WRAPPER"
    agent 0 0
    agent 1 1
    sleep 1
    (
        export MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$PORT
        # This machine's image sets OMPI_MCA_plm=isolated (single-node only),
        # which keeps mpirun from using any launcher agent: lift it. Its orted
        # also crashes in hwloc_shmem_topology_write (rtc/hwloc) on this VM, with
        # ssh as with mn-ssh: --mca rtc ^hwloc below.
        unset OMPI_MCA_plm
        # shellcheck source=helpers/generic-helper
        . helpers/generic-helper || exit 99
        echo "MULTINODE_SSH_WRAPPER=${MULTINODE_SSH_WRAPPER/#$repo/\$REPO} MULTINODE_TOTAL_SLOTS=$MULTINODE_TOTAL_SLOTS"
        timeout 300 mpirun -H "$MULTINODE_HOSTLIST" --mca plm_rsh_agent "$MULTINODE_SSH_WRAPPER" -np "$MULTINODE_TOTAL_SLOTS" \
            --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo --mca rtc ^hwloc \
            python3 "$repo/bench/gpu/mpi_nccl.py"
    ) >"$out/mpi.txt" 2>&1
    rc=$?
    stop_agents
    tail -n 20 "$out/mpi.txt"
    n=$(grep -cE 'mpi rank [01]/2 sum=3.0' "$out/mpi.txt")
    gpus=$(grep -oE 'CUDA_VISIBLE_DEVICES=[0-9]' "$out/mpi.txt" | sort -u | tr '\n' ' ')
    if ((rc == 0 && n == 2)); then record "MPI-bootstrapped NCCL" PASS "2 MPI ranks sum=3.0 on ${gpus}"; else record "MPI-bootstrapped NCCL" FAIL "rc=$rc, $n ranks with sum=3.0"; fi
fi

if want 4; then
    echo "=== 4. failure: rank 1 raises after NCCL is up"
    agent 1 1 -- true
    t0=$(now)
    MN_GPU_FAIL_RANK=1 MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$PORT CUDA_VISIBLE_DEVICES=0 \
        timeout 300 multinode agent --listen "127.0.0.2:$PORT" -- sh bench/gpu/reference.sh >"$out/fail.txt" 2>&1
    rc=$?
    t_exit=$(now)
    gone=""
    for _ in $(seq 120); do
        if [ "$(gpu_pids)" = 0 ]; then gone=$(now); break; fi
        sleep 0.25
    done
    wait "${agents[0]}"
    agents=()
    grep -E 'sum=|fails on purpose|waiting|mn-exec-all:|RANK|killed|exit ' "$out/fail.txt" | head -n 12
    raised=$(grep -c 'fails on purpose' "$out/fail.txt")
    waited=$(grep -c 'waiting in a second all-reduce' "$out/fail.txt")
    t_fail=$(python3 -c "print(f'{$t_exit - $t0:.1f}')")
    if [ -n "$gone" ]; then t_gone=$(python3 -c "print(f'{$gone - $t_exit:.2f}')"); else t_gone=never; fi
    if ((rc != 0 && raised >= 1 && waited >= 1)) && [ -n "$gone" ]; then
        record "failure: fail-fast, GPUs freed" PASS "exit $rc; run ended ${t_fail}s after start; GPUs empty ${t_gone}s after exec_all ended"
    else
        record "failure: fail-fast, GPUs freed" FAIL "rc=$rc raised=$raised waited=$waited GPUs empty after: $t_gone"
    fi
fi

if want 5; then
    echo "=== 5. overhead: exec_all start to the first all-reduce, against torchrun started by hand"
    agent 1 1
    sleep 1
    # shellcheck disable=SC2016 # expanded by each node's shell
    script='torchrun --nnodes="$2" --node-rank="$RANK" --nproc-per-node=1 --master-addr="$1" --master-port=29500 /tmp/allreduce.py'
    first_done() { grep -oE 'FIRST_ALLREDUCE_DONE rank=[0-9]+ t=[0-9.]+' "$1" | sed 's/.*t=//' | sort -n | tail -n 1; }
    via=()
    hand=()
    for i in 1 2 3; do
        t0=$(now)
        echo "$script" | MN_GPU_STAMP=1 MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$PORT \
            CUDA_VISIBLE_DEVICES=0 timeout 300 mn-exec-all - 127.0.0.2 2 >"$out/over-exec-$i.txt" 2>&1
        t1=$(first_done "$out/over-exec-$i.txt")
        [ -n "$t1" ] && via+=("$(python3 -c "print($t1 - $t0)")")
        t0=$(now)
        pids=()
        for r in 0 1; do
            MN_GPU_STAMP=1 CUDA_VISIBLE_DEVICES=$r timeout 300 torchrun --nnodes=2 --node-rank=$r --nproc-per-node=1 \
                --master-addr=127.0.0.2 --master-port=29500 /tmp/allreduce.py >"$out/over-hand-$i-$r.txt" 2>&1 &
            pids+=($!)
        done
        wait "${pids[@]}"
        t1=$(cat "$out"/over-hand-"$i"-*.txt | grep -oE 'FIRST_ALLREDUCE_DONE rank=[0-9]+ t=[0-9.]+' | sed 's/.*t=//' | sort -n | tail -n 1)
        [ -n "$t1" ] && hand+=("$(python3 -c "print($t1 - $t0)")")
    done
    stop_agents
    summary=$(python3 - "${via[*]:-}" "${hand[*]:-}" <<'PY'
import statistics, sys
via = [float(x) for x in sys.argv[1].split()]
hand = [float(x) for x in sys.argv[2].split()]
if len(via) < 3 or len(hand) < 3:
    print(f"FAIL|incomplete: exec_all {via}, by hand {hand}")
else:
    mv, mh = statistics.median(via), statistics.median(hand)
    print(f"PASS|median {mv:.2f}s via exec_all vs {mh:.2f}s by hand: {mv - mh:+.2f}s "
          f"(runs {' '.join(f'{v:.2f}' for v in via)} / {' '.join(f'{h:.2f}' for h in hand)})")
PY
    )
    record "overhead to first all-reduce" "${summary%%|*}" "${summary#*|}"
fi

if want 6; then
    echo "=== 6. preflight: multinode check on the GPU nodes"
    MN_CHECK_PORT=29600
    timeout 60 multinode check --nproc-per-node 2 --port $MN_CHECK_PORT >"$out/check-single.txt" 2>&1
    rc1=$?
    cat "$out/check-single.txt"
    agent 1 1
    sleep 1
    MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$PORT CUDA_VISIBLE_DEVICES=0 \
        timeout 60 multinode check --nproc-per-node 1 --port $MN_CHECK_PORT >"$out/check-two.txt" 2>&1
    rc2=$?
    MULTINODE_HOSTLIST=$HOSTS MULTINODE_NODE_RANK=0 MULTINODE_AGENT_PORT=$PORT CUDA_VISIBLE_DEVICES=0 \
        timeout 60 multinode check --nproc-per-node 2 --port $MN_CHECK_PORT >"$out/check-two-bad.txt" 2>&1
    rc3=$?
    stop_agents
    cat "$out/check-two.txt"
    grep -E '^gpu-count' "$out/check-two-bad.txt"
    gpus_ok=$(grep -cE '^(gpu-count|gpu-driver|cuda-arch) +ok' "$out/check-two.txt")
    if ((rc1 <= 1 && rc2 <= 1 && gpus_ok == 3)) && grep -qE '^gpu-count +fail' "$out/check-two-bad.txt"; then
        record "preflight (multinode check)" PASS "GPU checks ok on both nodes; --nproc-per-node 2 on 1-GPU nodes fails gpu-count (exit $rc3)"
    else
        record "preflight (multinode check)" FAIL "rc=$rc1/$rc2/$rc3, $gpus_ok GPU checks ok"
    fi
fi

echo
echo "=== results"
printf '%-32s %-6s %s\n' CHECK RESULT DETAIL
for r in "${results[@]}"; do
    IFS='|' read -r name status detail <<<"$r"
    printf '%-32s %-6s %s\n' "$name" "$status" "$detail"
done
for r in "${results[@]}"; do [[ $r == *"|FAIL|"* ]] && exit 1; done
exit 0
