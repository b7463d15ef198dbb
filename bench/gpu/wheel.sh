#!/usr/bin/env bash
# The wheel on the GPU machine (issue 56): `pip install --no-deps FILE` into
# the image's own Python, then the reference multi-node script
# (bench/gpu/reference.sh, the docs' script) with real torch on two loopback
# agents, one GPU each (on a one-GPU machine both share it, through gloo
# with CUDA tensors), from what pip installed only. From the repository root:
#
#   bench/gpu/wheel.sh [WHEEL]   # default: the newest target/wheels/multinode-*.whl
#
# The wheel is built first (packaging/build-wheel.sh, on a machine with Rust)
# and carried to the GPU machine with the working tree (target/wheels is an
# ignored folder: carry it); the GPU machine needs no network and no Rust:
# pip installs the file with --no-index. A stand-in `torchrun` on PATH runs
# everything but the GPUs. The install goes into the image's Python
# (site-packages, its bin directory on PATH); where that is refused (read-only
# or externally managed), into a --target folder of the script's own, with
# PYTHONPATH and its bin on PATH. The worker agent is started as
# `python3 -m multinode agent` (the process must become the binary), the head
# agent by `multinode agent -- sh bench/gpu/reference.sh`. Both ranks must
# print sum=3.0 and both agents exit 0. pip uninstalls the wheel at the end
# (or the --target folder is removed). Prints PASS or FAIL lines and exits 1
# when one failed. Everything is logged to $OUT/wheel.log (or a temp dir).
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
exec > >(tee -a "$out/wheel.log") 2>&1
# agents, stop_agents (on EXIT), record, now, secs
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

wheel=${1:-$(find target/wheels -maxdepth 1 -name 'multinode-*.whl' -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -n 1 | cut -d' ' -f2-)}
if [[ -z $wheel || ! -f $wheel ]]; then
    echo "wheel.sh: error: no wheel file '${wheel:-target/wheels/multinode-*.whl}'; build one with packaging/build-wheel.sh" >&2
    exit 2
fi
PYTHON=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK; do unset "$v"; done
results=()

echo "=== install: $PYTHON -m pip install --no-deps --no-index $wheel"
"$PYTHON" --version
target=
# shellcheck disable=SC2317 # run from the EXIT trap
uninstall() {
    if [[ -n $target ]]; then
        rm -rf "$target"
    else
        "$PYTHON" -m pip uninstall -y multinode >/dev/null 2>&1
    fi
}
if "$PYTHON" -m pip install --no-deps --no-index --force-reinstall "$wheel"; then
    record "pip install into the image's Python" PASS "$("$PYTHON" -c 'import sys; print(sys.prefix)')"
else
    target=$(mktemp -d "${TMPDIR:-/tmp}/multinode-wheel.XXXXXX")
    echo "the image's Python refused the install; into --target $target"
    if "$PYTHON" -m pip install --no-deps --no-index --target "$target" "$wheel"; then
        record "pip install --target" PASS "$target"
    else
        record "pip install --target" FAIL "$target"
    fi
    export PYTHONPATH=$target${PYTHONPATH:+:$PYTHONPATH}
fi
trap 'stop_agents; uninstall' EXIT
# Where pip put the binary, as `python -m multinode` finds it.
bin=$("$PYTHON" -c 'from multinode.__main__ import find_binary; print(find_binary() or "")')
if [[ -z $bin ]]; then
    record "the installed binary" FAIL "python -m multinode finds none"
    exit 1
fi
PATH=$(dirname "$bin"):$PATH
export PATH
for name in multinode mn-ssh mn-exec-all; do
    found=$(command -v "$name")
    if [[ $found == "$(dirname "$bin")/$name" ]]; then
        record "$name on PATH" PASS "$found"
    else
        record "$name on PATH" FAIL "found '$found', want the wheel's beside $bin"
    fi
done
multinode --version
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'

echo "=== the reference script: two loopback nodes, one GPU each, from the wheel's install"
mkdir -p /workspace
cp bench/gpu/allreduce.py /workspace/train.py
MULTINODE_SECRET=gpu-wheel-secret-$$-$(date +%s%N)
export MULTINODE_SECRET MULTINODE_HOSTLIST=127.0.0.2:1,127.0.0.3:1 MULTINODE_AGENT_PORT=29922
# One GPU each where there are two; with one, both ranks share GPU 0 and
# all-reduce their CUDA tensors through gloo (NCCL refuses a shared GPU).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
dev1=1
if ((gpus < 2)); then
    dev1=0
    export MN_GPU_BACKEND=gloo
    echo "one GPU: both ranks on GPU 0, gloo with CUDA tensors"
fi
MULTINODE_NODE_RANK=1 CUDA_VISIBLE_DEVICES=$dev1 \
    "$PYTHON" -m multinode agent --listen 127.0.0.3:29922 -- true &
agents+=($!)
sleep 1
exe=$(readlink "/proc/${agents[0]}/exe")
if [[ $exe == "$bin" ]]; then
    record "python -m multinode agent is the binary (exec)" PASS "$exe"
else
    record "python -m multinode agent is the binary (exec)" FAIL "/proc/PID/exe is '$exe'"
fi
t=$(now)
NCCL_DEBUG=INFO MULTINODE_NODE_RANK=0 CUDA_VISIBLE_DEVICES=0 \
    timeout 300 multinode agent --listen 127.0.0.2:29922 -- sh bench/gpu/reference.sh >"$out/reference.txt" 2>&1
rc=$?
wait "${agents[0]}"
worker_rc=$?
agents=()
grep -E 'sum=|via|NET/' "$out/reference.txt" | grep -v NVLS | head -n 12
n=$(grep -cE 'rank [01]/2 sum=3.0' "$out/reference.txt")
if ((rc == 0 && worker_rc == 0 && n == 2)); then
    record "reference script from the wheel" PASS "both ranks sum=3.0 in $(secs "$t" "$(now)") s"
else
    record "reference script from the wheel" FAIL "head rc=$rc worker rc=$worker_rc, $n ranks with sum=3.0"
    tail -n 30 "$out/reference.txt"
fi

summarize "$out/wheel.log"
