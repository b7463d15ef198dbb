#!/usr/bin/env bash
# `multinode bind` on a real GPU machine (issue 41), in one call, from the
# repository root (the `nvidia-h100-x1`/`nvidia-h200` device kinds: one GPU,
# 16 CPUs, one NUMA node):
#
#   MN_GPU_BIN=$PWD/.gpu-bin bench/gpu/bind.sh   # MN_GPU_BIN: folder with multinode
#
# 1. the machine's facts: CPUs, NUMA nodes, the GPU's PCI bus id, its sysfs
#    numa_node and local_cpulist, this shell's own CPUs;
# 2. `--bind numa`: the exec'd program's Cpus_allowed_list (from /proc) must
#    be the GPU's local_cpulist within this shell's CPUs, and its memory
#    policy preferred (or, where the GPU has no NUMA node, unbound and said);
# 3. `--bind auto`: one NUMA node, so the program is left as it was;
# 4. `taskset -c 0-3` around it: never wider than the launcher's CPUs;
# 5. `--bind cores` for 4 local ranks: disjoint shares of the node's CPUs;
# 6. real torchrun: `torchrun --no-python multinode bind --report-bindings
#    -- python3 ...` with 1 worker, then 4 (auto: left unbound, one NUMA
#    node), every worker past init_process_group (gloo) with a CUDA matmul
#    and an all-reduce, printing its CPUs.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/gpu/lib.sh
. "$here/lib.sh"
results=()
BIN=${MN_GPU_BIN:?set MN_GPU_BIN to a folder holding multinode}
export PATH=$BIN:$PATH
allowed() { awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status; }
section() { printf '\n=== %s\n' "$*"; }

section "1. the machine"
nproc
echo "NUMA nodes: $(find /sys/devices/system/node -maxdepth 1 -name 'node[0-9]*' | wc -l)"
echo "has_cpu: $(cat /sys/devices/system/node/has_cpu 2>/dev/null)"
nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
sysbus=$(echo "${bus#0000}" | tr 'A-F' 'a-f')
dev=/sys/bus/pci/devices/$sysbus
echo "sysfs: $dev"
gpu_node=$(cat "$dev/numa_node")
gpu_cpus=$(cat "$dev/local_cpulist")
echo "numa_node: $gpu_node; local_cpulist: $gpu_cpus"
own=$(allowed)
echo "this shell's CPUs: $own"
multinode --version

section "2. --bind numa"
out=$(LOCAL_RANK=0 multinode bind --bind numa --report-bindings -- sh -c 'grep -E "^(Cpus_allowed_list|Mems_allowed_list)" /proc/self/status; cat /proc/self/numa_maps 2>/dev/null | head -1' 2>&1)
echo "$out"
got=$(echo "$out" | awk '/^Cpus_allowed_list/ {print $2}')
if [ "$gpu_node" = "-1" ]; then
    if echo "$out" | grep -q "unbound" && [ "$got" = "$own" ]; then record "numa, GPU without a NUMA node" PASS "unbound and said, CPUs $got"; else record "numa, GPU without a NUMA node" FAIL "$got"; fi
else
    want=$(python3 - "$gpu_cpus" "$own" <<'PY'
import sys
def parse(s):
    out=set()
    for part in s.split(','):
        a,_,b=part.partition('-'); out.update(range(int(a), int(b or a)+1))
    return out
def fmt(c):
    c=sorted(c); runs=[]; 
    for x in c:
        if runs and x==runs[-1][1]+1: runs[-1][1]=x
        else: runs.append([x,x])
    return ','.join(f'{a}-{b}' if a!=b else f'{a}' for a,b in runs)
print(fmt(parse(sys.argv[1]) & parse(sys.argv[2])))
PY
)
    if [ "$got" = "$want" ]; then record "numa: CPUs = the GPU's local_cpulist within this shell's" PASS "$got"; else record "numa: CPUs = the GPU's local_cpulist within this shell's" FAIL "got $got, want $want"; fi
fi

section "3. --bind auto (one NUMA node: unbound)"
out=$(LOCAL_RANK=0 multinode bind --report-bindings -- grep Cpus_allowed_list /proc/self/status 2>&1)
echo "$out"
got=$(echo "$out" | awk '/^Cpus_allowed_list/ {print $2}')
if [ "$got" = "$own" ] && echo "$out" | grep -q unbound; then record "auto on one NUMA node leaves it unbound" PASS "$got"; else record "auto on one NUMA node leaves it unbound" FAIL "$got"; fi

section "4. taskset -c 0-3: never wider than the launcher's CPUs"
out=$(LOCAL_RANK=0 taskset -c 0-3 multinode bind --bind numa --report-bindings -- grep Cpus_allowed_list /proc/self/status 2>&1)
echo "$out"
got=$(echo "$out" | awk '/^Cpus_allowed_list/ {print $2}')
if [ "$gpu_node" = "-1" ] || [ "$got" = "0-3" ]; then record "within taskset -c 0-3" PASS "${got:-unbound}"; else record "within taskset -c 0-3" FAIL "$got"; fi

section "5. --bind cores, 4 local ranks on one GPU: refused (more processes than GPUs)"
for r in 0 1 2 3; do
    LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 multinode bind --bind cores --report-bindings -- grep Cpus_allowed_list /proc/self/status 2>&1
    echo "exit $?"
done | tee /tmp/mn-bind-cores.txt
if grep -q "exit 2" /tmp/mn-bind-cores.txt; then record "cores: 4 processes, 1 GPU" PASS "one line, exit 2"; else record "cores: 4 processes, 1 GPU" FAIL "see above"; fi

section "6. real torchrun --no-python multinode bind"
cat > /tmp/mn-bind-worker.py <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
x = torch.randn(1024, 1024, device="cuda")
y = (x @ x).sum().item()
t = torch.tensor([1.0])
dist.all_reduce(t)
allowed = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Cpus_allowed_list")][0]
print(f"rank {dist.get_rank()}/{dist.get_world_size()} local {os.environ['LOCAL_RANK']} sum={t.item()} cpus={allowed} matmul_ok={y == y}", flush=True)
dist.destroy_process_group()
PY
out=$(torchrun --standalone --nproc-per-node 1 --no-python multinode bind --report-bindings -- python3 /tmp/mn-bind-worker.py 2>&1)
rc=$?
echo "$out" | grep -v "^\s*$" | tail -20
n=$(echo "$out" | grep -c "sum=1.0")
if [ "$rc" = 0 ] && [ "$n" = 1 ]; then record "torchrun --no-python multinode bind, 1 worker" PASS "$(echo "$out" | grep -o 'cpus=[^ ]*')"; else record "torchrun --no-python multinode bind, 1 worker" FAIL "rc=$rc"; fi

out=$(torchrun --standalone --nproc-per-node 4 --no-python multinode bind --report-bindings -- python3 /tmp/mn-bind-worker.py 2>&1)
rc=$?
echo "$out" | grep -E "multinode bind|sum=" | sort
n=$(echo "$out" | grep -c "sum=4.0")
if [ "$rc" = 0 ] && [ "$n" = 4 ]; then record "torchrun --nproc-per-node 4, auto: 4 workers on 1 GPU left unbound" PASS "4 x sum=4.0"; else record "torchrun --nproc-per-node 4, auto" FAIL "rc=$rc, $n workers"; fi

section "summary"
printf '%s\n' "${results[@]}" | tr '|' '\t'
