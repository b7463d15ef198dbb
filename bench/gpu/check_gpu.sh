#!/usr/bin/env bash
# `multinode check --gpu` on a real GPU machine (issue 55): once on a quiet
# GPU, then while another process hammers the same GPU with bf16 matmuls
# (the speed must be flagged against the model's reference), each in table
# and JSON form, with the time the whole check took; then no process of the
# check is left on the GPU. From the repository root, on the GPU machine:
#
#   MN_GPU_BIN=$PWD/.gpu-bin bench/gpu/check_gpu.sh
#
# Writes everything under $OUT (or a temporary folder).
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
bin=${MN_GPU_BIN:-$repo/.gpu-bin}
export PATH="$bin:$PATH"
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
exec > >(tee -a "$out/check_gpu.log") 2>&1
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK; do unset "$v"; done
results=()
check() { multinode check --gpu --hosts 127.0.0.1:1 --node-rank 0 --port 29561 "$@"; }

for pass in quiet hogged; do
    hog=
    if [[ $pass == hogged ]]; then
        python3 -c '
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("hog ready", flush=True)
end = time.time() + 120
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
' &
        hog=$!
        sleep 8
    fi
    echo "=== check --gpu, $pass GPU"
    t=$(now)
    check >"$out/$pass.txt" 2>&1
    rc=$?
    took=$(secs "$t" "$(now)")
    cat "$out/$pass.txt"
    check --format json >"$out/$pass.json" 2>"$out/$pass.json.err"
    echo "exit code $rc, took $took s"
    speed=$(grep -E '^gpu-speed' "$out/$pass.txt" | head -1 | awk '{print $2}')
    if [[ $pass == quiet ]]; then
        if [[ $speed == ok ]]; then
            record "check --gpu, quiet GPU" PASS "gpu-speed ok, exit $rc, $took s"
        else
            record "check --gpu, quiet GPU" FAIL "gpu-speed '$speed', exit $rc"
        fi
    else
        if [[ $speed == warn || $speed == fail ]]; then
            record "check --gpu, hogged GPU" PASS "gpu-speed $speed, exit $rc, $took s"
        else
            record "check --gpu, hogged GPU" FAIL "gpu-speed '$speed', exit $rc"
        fi
    fi
    if [[ -n $hog ]]; then kill "$hog"; wait "$hog" 2>/dev/null; fi
done
sleep 1
left=$(gpu_pids)
if ((left == 0)); then
    record "no process left on the GPU" PASS "0"
else
    record "no process left on the GPU" FAIL "$left"
fi

summarize "$out/check_gpu.log"
