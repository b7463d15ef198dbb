#!/usr/bin/env bash
# What a live `multinode top` costs a real GPU job (issue 42, item 5: a
# job's step rate lowered by less than 1%), in one call from the repository
# root (the `nvidia-h100-x1`/`nvidia-h200` kinds):
#
#   bench/gpu/top_cost.sh [PAIRS] [WINDOW]   # default 8 pairs of 6 s windows
#                       # MN_GPU_BIN: folder with multinode, mn-exec-all (default .gpu-bin)
#                       # TOP_COST_ONE_NVSMI=1: node 0's agent alone runs the real
#                       # nvidia-smi, the others a stub: the machine then runs what
#                       # one node of a cluster runs (one agent, one GPU)
#                       # TOP_COST_NO_NVSMI=1: the agents' nvidia-smi is a stub that
#                       # fails at once (what nvidia-smi itself costs, by difference)
#                       # TOP_COST_NODES=N: N loopback nodes, one rank each (default 4;
#                       # 1: one node's job with the GPU to itself, the steadiest rate)
#
# Four loopback "nodes" (TOP_COST_NODES), one rank each, as bench/gpu/top.sh: an agent on
# every node, exec_all on node 0; the even job of bench/gpu/top_worker.py
# (CPU matmuls, CUDA matmuls on the one GPU, a gloo all-reduce a step; the
# ranks move in step), each line `step N T` with the rank's time.time().
# Windows of WINDOW s, in pairs: in one of each pair a live `multinode top
# --interval 2 --progress 'step (\d+)'` runs on a pipe (started at the
# window's start, so it also pays its logins), in the other nothing; the
# order within a pair alternates (off-on, on-off: a drift cancels). A
# window's rate is rank 0's steps over its own times (the window's first
# 0.5 s left out); a pair's ratio, its
# on-window's rate over its off-window's. Every agent here runs
# nvidia-smi for its node each refresh: 4 agents on one machine, 4 times
# what one node of a cluster runs. Also the CPU it all takes: the agents'
# (utime + stime, their reaped children's too: nvidia-smi) over each
# window, and top's own, read at each window's edges.
# In $OUT (or a temp dir): top_cost.log (this), the job's output, the windows.
set -u
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo" || exit 1
pairs=${1:-8}
window=${2:-6}
bin=${MN_GPU_BIN:-$repo/.gpu-bin}
export PATH="$bin:$PATH"
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
exec > >(tee -a "$out/top_cost.log") 2>&1
for v in $(env | sed -n 's/^\(MULTINODE_[A-Z_]*\)=.*/\1/p') RANK LOCAL_RANK WORLD_SIZE MASTER_ADDR MASTER_PORT; do unset "$v"; done
MULTINODE_SECRET=top-cost-$$-$(date +%s%N)
PORT=30620
nodes=${TOP_COST_NODES:-4}
MULTINODE_HOSTLIST=$(for r in $(seq 0 $((nodes - 1))); do printf '127.0.0.%d:1\n' $((r + 2)); done | paste -sd,)
export MULTINODE_SECRET MULTINODE_HOSTLIST
export MULTINODE_AGENT_PORT=$PORT PYTHONUNBUFFERED=1 TOP_WORKER_TIMES=1
results=()
# agents (their PIDs), start_loopback_agents, stop_agents (on EXIT), record, now
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

echo "=== the machine"
date -u
nproc
python3 -c 'import torch; print("torch", torch.__version__, "GPUs", torch.cuda.device_count())'
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
multinode --version

agent_path=$PATH
if [ "${TOP_COST_NO_NVSMI:-0}" = 1 ]; then
    mkdir -p "$out/stub"
    printf '#!/bin/sh\nexit 9\n' >"$out/stub/nvidia-smi"
    chmod +x "$out/stub/nvidia-smi"
    agent_path=$out/stub:$PATH
elif [ "${TOP_COST_ONE_NVSMI:-0}" = 1 ]; then
    mkdir -p "$out/stub"
    # shellcheck disable=SC2016 # the stub's own variables, expanded when it runs
    printf '#!/bin/sh\n[ "$MULTINODE_NODE_RANK" = 0 ] && exec %s "$@"\nexit 9\n' "$(command -v nvidia-smi)" >"$out/stub/nvidia-smi"
    chmod +x "$out/stub/nvidia-smi"
    agent_path=$out/stub:$PATH
fi
# smi_children PID...: the live nvidia-smi children of each (an agent's loops).
smi_children() {
    local pid c
    for pid in "$@"; do
        for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
            [ "$(cat "/proc/$c/comm" 2>/dev/null)" = nvidia-smi ] && echo "$c"
        done
    done
}
# smi_loops PID...: whether any of them has a live nvidia-smi child.
smi_loops() { [ -n "$(smi_children "$@")" ]; }
# ticks PID...: utime + stime + cutime + cstime of each, and utime + stime
# of each one's live nvidia-smi children (an agent's loops, whose time
# reaches its cutime only once they end), summed (clock ticks).
ticks() {
    local t=0 f pid c
    for pid in "$@"; do
        f=$(cut -d')' -f2 "/proc/$pid/stat" 2>/dev/null) || continue
        set -- $f
        t=$((t + ${12} + ${13} + ${14} + ${15}))
        for c in $(smi_children "$pid"); do
            f=$(cut -d')' -f2 "/proc/$c/stat" 2>/dev/null) || continue
            set -- $f
            t=$((t + ${12} + ${13}))
        done
    done
    echo "$t"
}
PATH=$agent_path start_loopback_agents "$nodes" "$PORT"

seconds=$(( pairs * 2 * window + 60 ))
MULTINODE_NODE_RANK=0 mn-exec-all --nproc-per-node 1 --bind none --label \
    -c "exec python3 $repo/bench/gpu/top_worker.py -1 $seconds" >"$out/job.txt" 2>&1 &
job_pid=$!
for _ in $(seq 300); do
    [ "$(grep -c 'step 50 ' "$out/job.txt" 2>/dev/null)" -ge "$nodes" ] && break
    sleep 0.2
done
grep -q 'step 50 ' "$out/job.txt" || { echo "the job did not start"; tail "$out/job.txt"; exit 1; }

echo "=== $pairs pairs of $window s windows"
: >"$out/windows.txt"
for p in $(seq 0 $((pairs - 1))); do
    if [ $((p % 2)) = 0 ]; then order="off on"; else order="on off"; fi
    for w in $order; do
        # An off-window starts once the agents' nvidia-smi loops ended
        # (they outlive the last refresh by 10 s), so that it reads none.
        if [ "$w" = off ]; then
            for _ in $(seq 60); do
                smi_loops "${agents[@]}" || break
                sleep 0.5
            done
        fi
        start=$(now)
        a0=$(ticks "${agents[@]}")
        top_ticks=0
        if [ "$w" = on ]; then
            MULTINODE_NODE_RANK=0 multinode top --interval 2 --progress 'step (\d+)' --format json >"$out/top-$p.json" 2>&1 &
            top_pid=$!
        fi
        sleep "$window"
        if [ "$w" = on ]; then top_ticks=$(ticks "$top_pid"); kill -TERM "$top_pid"; wait "$top_pid" 2>/dev/null; fi
        echo "$p $w $start $(now) $(( $(ticks "${agents[@]}") - a0 )) $top_ticks" >>"$out/windows.txt"
    done
done
kill -TERM "$job_pid" 2>/dev/null
wait "$job_pid" 2>/dev/null

python3 - "$out/job.txt" "$out/windows.txt" "$out" "$nodes" <<'PY' | tee "$out/ratios.txt"
import json, random, statistics, sys, time
job, windows, out, nodes = sys.argv[1:]
# rank 0's lines: "0 HOST: step N T" (--label; T: its time.time(), as `now` here)
steps = []
for line in open(job):
    parts = line.split()
    if len(parts) == 5 and parts[0] == "0" and parts[2] == "step":
        steps.append((float(parts[4]), int(parts[3])))
def rate(a, b):
    inside = [(t, s) for t, s in steps if a <= t <= b]
    if len(inside) < 2:
        return None
    (t0, s0), (t1, s1) = inside[0], inside[-1]
    return (s1 - s0) / (t1 - t0)
import os
tick = os.sysconf("SC_CLK_TCK")
pairs, cpu = {}, {"on": [], "off": [], "top": []}
for line in open(windows):
    p, w, a, b, agents, top = line.split()
    pairs.setdefault(int(p), {})[w] = rate(float(a) + 0.5, float(b))
    secs = float(b) - float(a)
    cpu[w].append(int(agents) / tick / secs)
    if w == "on":
        cpu["top"].append(int(top) / tick / secs)
ratios = [v["on"] / v["off"] for v in pairs.values() if v.get("on") and v.get("off")]
offs = [v["off"] for v in pairs.values() if v.get("off")]
print("steps read:", len(steps), "pairs:", len(ratios))
for p, v in sorted(pairs.items()):
    print(f"pair {p}: off {v.get('off'):.3f} steps/s, on {v.get('on'):.3f} steps/s, ratio {v['on'] / v['off']:.4f}")
med = statistics.median(ratios)
q = statistics.quantiles(ratios, n=4)
random.seed(1)
boot = sorted(statistics.median(random.choices(ratios, k=len(ratios))) for _ in range(2000))
print(f"with/without top, median of {len(ratios)} pairs: {med:.4f}; quartiles {q[0]:.4f}-{q[2]:.4f}; "
      f"range {min(ratios):.4f}-{max(ratios):.4f}; bootstrap 95% of the median {boot[50]:.4f}-{boot[1949]:.4f}; "
      f"steps/s without (median) {statistics.median(offs):.2f}")
on, off, top = (statistics.median(cpu[k]) for k in ("on", "off", "top"))
ncpu = os.cpu_count()
print(f"CPU a second: the agents {off * 1000:.1f} ms idle, {on * 1000:.1f} ms with top (nvidia-smi included); "
      f"top itself {top * 1000:.1f} ms; top's share: {(on - off + top) * 100:.2f}% of one CPU, "
      f"{(on - off + top) * 100 / ncpu:.3f}% of this machine's {ncpu}; {nodes} agents here, one a node of a cluster")
print("VERDICT", "PASS" if boot[50] > 0.99 else "NOT SHOWN", "(the 95% interval's low end above 0.99)")
PY
if grep -q "VERDICT PASS" "$out/ratios.txt"; then record "a GPU job's step rate with a live top: within 1%" PASS "$(grep 'median of' "$out/ratios.txt")"
else record "a GPU job's step rate with a live top: within 1%" FAIL "$(grep 'median of' "$out/ratios.txt")"; fi
printf '%s\n' "${results[@]}" | tr '|' '\t'
for r in "${results[@]}"; do [[ $r == *"|FAIL|"* ]] && exit 1; done
exit 0
