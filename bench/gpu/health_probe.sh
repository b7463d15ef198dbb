#!/usr/bin/env bash
# What a GPU node tells of its health and speed, as `check --gpu` (issue 55)
# would read it: every nvidia-smi query field it needs asked one at a time
# (a field an older or newer driver does not know is reported as such, not
# fatal), the same fields at once as CSV, the ECC, page-retirement,
# row-remapper, clock, PCIe and performance sections of `nvidia-smi -q`,
# NVLink's state, whether the kernel log (XID errors) is readable, and the
# speed probes with the image's own torch: bf16 matmul TFLOPs and pinned
# host-to-device / device-to-host GB/s. Run on the GPU machine from the
# repository root; writes everything under $OUT (or a temporary folder):
#
#   bench/gpu/health_probe.sh
set -u
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
exec > >(tee -a "$out/health_probe.log") 2>&1

FIELDS=(
    index name uuid pci.bus_id driver_version vbios_version
    persistence_mode
    ecc.mode.current ecc.mode.pending
    ecc.errors.corrected.volatile.total ecc.errors.uncorrected.volatile.total
    ecc.errors.corrected.aggregate.total ecc.errors.uncorrected.aggregate.total
    retired_pages.single_bit_ecc.count retired_pages.double_bit.count retired_pages.pending
    remapped_rows.correctable remapped_rows.uncorrectable remapped_rows.pending remapped_rows.failure
    pcie.link.gen.current pcie.link.gen.max pcie.link.gen.gpucurrent pcie.link.gen.gpumax pcie.link.gen.hostmax
    pcie.link.width.current pcie.link.width.max
    clocks.sm clocks.max.sm clocks.mem clocks.max.mem clocks.gr clocks.max.gr
    clocks.applications.graphics clocks.default_applications.graphics
    clocks_event_reasons.active clocks_throttle_reasons.active
    clocks_event_reasons.gpu_idle clocks_event_reasons.applications_clocks_setting
    clocks_event_reasons.sw_power_cap clocks_event_reasons.hw_slowdown
    clocks_event_reasons.hw_thermal_slowdown clocks_event_reasons.hw_power_brake_slowdown
    clocks_event_reasons.sw_thermal_slowdown clocks_event_reasons.sync_boost
    temperature.gpu temperature.memory power.draw power.limit enforced.power.limit
    memory.total memory.used utilization.gpu compute_mode mig.mode.current
    fabric.state fabric.status
)

echo "== nvidia-smi --version"
nvidia-smi --version
echo "== each field alone (name: value, or the error)"
good=()
for f in "${FIELDS[@]}"; do
    if v=$(nvidia-smi --query-gpu="$f" --format=csv,noheader,nounits 2>&1); then
        printf '%s: %s\n' "$f" "$v"
        good+=("$f")
    else
        printf '%s: ERROR rc=%s %s\n' "$f" "$?" "$(echo "$v" | head -1)"
    fi
done
echo "== the valid fields at once, with the header"
nvidia-smi --query-gpu="$(IFS=,; echo "${good[*]}")" --format=csv,nounits | tee "$out/query.csv"
echo "== nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE,CLOCK,PCIE (exit code after)"
nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE,CLOCK > "$out/q-sections.txt" 2>&1; echo "rc=$?"
cat "$out/q-sections.txt"
echo "== nvidia-smi -q (whole, to q-full.txt)"
nvidia-smi -q > "$out/q-full.txt" 2>&1; echo "rc=$? lines=$(wc -l < "$out/q-full.txt")"
grep -n -i -A3 "pci\b\|link\|GPU Link Info" "$out/q-full.txt" | head -40
echo "== nvidia-smi nvlink --status"
nvidia-smi nvlink --status 2>&1 | head -40; echo "rc=$?"
echo "== nvidia-smi topo -m"
nvidia-smi topo -m 2>&1 | head -20
echo "== the kernel log (XID errors)"
{ dmesg 2>&1 | tail -3; echo "dmesg rc=${PIPESTATUS[0]}"; } 2>&1
ls -l /dev/kmsg /var/log/kern.log 2>&1
echo "== speed, with the image's torch"
python3 - <<'PY' 2>&1 | tee "$out/speed.txt"
import time, torch
d = torch.device("cuda:0")
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
n = 8192
a = torch.randn(n, n, device=d, dtype=torch.bfloat16)
b = torch.randn(n, n, device=d, dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
reps = 50
t = time.perf_counter()
for _ in range(reps):
    a @ b
torch.cuda.synchronize()
dt = time.perf_counter() - t
print(f"matmul bf16 {n}: {2 * n**3 * reps / dt / 1e12:.1f} TFLOPs ({dt:.3f} s for {reps})")
size = 1 << 30
h = torch.empty(size, dtype=torch.uint8, pin_memory=True)
g = torch.empty(size, dtype=torch.uint8, device=d)
for name, dst, src in (("h2d", g, h), ("d2h", h, g)):
    dst.copy_(src, non_blocking=True); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    print(f"{name} pinned 1 GiB x10: {10 * size / (time.perf_counter() - t) / 1e9:.1f} GB/s")
PY
echo "== after: the GPU's processes (none of this probe's should be left)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
