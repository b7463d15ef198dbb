"""What one GPU reading of `nvidia-smi` costs, a run against a sample of
its loop mode (`-lms`), on the GPU machine (issue 42, item 5):

    python3 bench/gpu/nvidia_smi_cost.py [WINDOW]    # default 6 s windows

1. CPU and wall time of one run of each of top's two queries (the devices'
   and the compute processes'), 10 runs each, and of one sample of the same
   queries in loop mode (`-lms 200` for 4 s).
2. What loop mode prints (the first lines), with a CUDA process running:
   whether the compute processes' query repeats its header each sample.
3. What readings cost a running CUDA job (top_worker.py's step without
   gloo: CPU matmuls, CUDA matmuls waited for): its step rate in windows of
   WINDOW s with no reading, with the two queries run back to back without
   pause (a reading as often as they can), and with both in loop mode at
   200 ms; the order off, runs, loop, off, loop, runs, off.
Prints everything; writes nothing.
"""
import os
import resource
import subprocess
import sys
import time

WINDOW = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
DEVICES = ("--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,power.draw,"
           "clocks.sm,clocks.max.sm,clocks_event_reasons.active")
APPS = "--query-compute-apps=pid,used_memory,gpu_uuid"
FMT = "--format=csv,noheader,nounits"


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_run_cost(query, n=10):
    c0, t0 = children_cpu(), time.monotonic()
    for _ in range(n):
        subprocess.run(["nvidia-smi", query, FMT], stdout=subprocess.DEVNULL, check=True)
    return (children_cpu() - c0) / n * 1e3, (time.monotonic() - t0) / n * 1e3


def loop_cost(query, fmt, seconds=4.0, ms=200, show=0):
    c0 = children_cpu()
    p = subprocess.Popen(["nvidia-smi", query, fmt, f"--loop-ms={ms}"], stdout=subprocess.PIPE, text=True)
    time.sleep(seconds)
    p.terminate()
    out, _ = p.communicate()
    cpu = children_cpu() - c0
    lines = out.splitlines()
    if show:
        print(f"--- {query} {fmt} --loop-ms={ms}: {len(lines)} lines in {seconds} s; the first {show}:")
        for line in lines[:show]:
            print("   ", line)
    samples = seconds * 1000 / ms
    return cpu / samples * 1e3, cpu / seconds * 1e3


JOB = r"""
import time, torch
torch.set_num_threads(2)
g = torch.randn(2048, 2048, device="cuda"); c = torch.randn(512, 512)
while True:
    for _ in range(40): d = c @ c
    for _ in range(4): h = g @ g
    torch.cuda.synchronize()
    print(f"{time.time():.6f}", flush=True)
"""


def main():
    print("=== the machine")
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip(), "| CPUs", os.cpu_count())
    job = subprocess.Popen([sys.executable, "-c", JOB], stdout=subprocess.PIPE, text=True, bufsize=1)
    steps = []
    import threading
    threading.Thread(target=lambda: [steps.append(float(l)) for l in job.stdout], daemon=True).start()
    while len(steps) < 20:
        time.sleep(0.1)

    print("=== 1. one reading's CPU and wall (ms), the job running")
    for name, q in (("devices", DEVICES), ("apps", APPS)):
        cpu, wall = one_run_cost(q)
        print(f"run  {name:8s} cpu {cpu:6.1f} ms  wall {wall:6.1f} ms")
    for name, q in (("devices", DEVICES), ("apps", APPS)):
        per, per_s = loop_cost(q, FMT)
        print(f"loop {name:8s} cpu {per:6.2f} ms a sample ({per_s:.1f} ms a second at 200 ms)")

    print("=== 2. what loop mode prints")
    loop_cost(DEVICES, FMT, seconds=1.1, ms=500, show=6)
    loop_cost(APPS, FMT, seconds=1.1, ms=500, show=6)
    loop_cost(APPS, "--format=csv,nounits", seconds=1.1, ms=500, show=8)
    loop_cost("--query-gpu=index,utilization.gpu", "--format=csv,nounits", seconds=1.1, ms=500, show=8)

    print("--- when each line reaches a pipe (flushed a sample at a time?), --loop-ms=500:")
    for q in (DEVICES, APPS):
        p = subprocess.Popen(["nvidia-smi", q, FMT, "--loop-ms=500"], stdout=subprocess.PIPE, bufsize=0)
        t0, seen = time.monotonic(), []
        import select
        while time.monotonic() - t0 < 2.2:
            if select.select([p.stdout], [], [], 0.05)[0]:
                chunk = os.read(p.stdout.fileno(), 65536)
                lines = chunk.count(b"\n")
                seen.append(f"{time.monotonic() - t0:.3f}s {len(chunk)}B {lines} lines")
        p.terminate(); p.wait()
        print("   ", q[:20], " | ".join(seen[:12]))

    print(f"=== 3. the job's step rate, windows of {WINDOW} s")
    def window(mode):
        stop = time.monotonic() + WINDOW
        t0 = time.time()
        readings, procs = 0, []
        c0 = children_cpu()
        if mode == "loop":
            procs = [subprocess.Popen(["nvidia-smi", q, FMT, "--loop-ms=200"], stdout=subprocess.DEVNULL)
                     for q in (DEVICES, APPS)]
            time.sleep(WINDOW)
            for p in procs:
                p.terminate(); p.wait()
            readings = int(WINDOW * 5)
        elif mode == "runs":
            while time.monotonic() < stop:
                a = subprocess.Popen(["nvidia-smi", DEVICES, FMT], stdout=subprocess.DEVNULL)
                b = subprocess.Popen(["nvidia-smi", APPS, FMT], stdout=subprocess.DEVNULL)
                a.wait(); b.wait(); readings += 1
        else:
            time.sleep(WINDOW)
        t1 = time.time()
        cpu = children_cpu() - c0
        inside = [s for s in steps if t0 + 0.5 <= s <= t1]
        rate = (len(inside) - 1) / (inside[-1] - inside[0]) if len(inside) > 1 else 0.0
        print(f"{mode:5s} rate {rate:7.2f} steps/s  readings {readings:4d}  nvidia-smi cpu {cpu*1e3:7.1f} ms")
        return mode, rate, readings
    res = [window(m) for m in ("off", "runs", "loop", "off", "loop", "runs", "off")]
    job.kill(); job.wait()
    off = sorted(r for m, r, _ in res if m == "off")[1]
    for mode in ("runs", "loop"):
        rs = [(r, n) for m, r, n in res if m == mode]
        for r, n in rs:
            print(f"{mode}: ratio {r/off:.4f} against the median off-window, {n} readings in {WINDOW} s")


main()
