#!/usr/bin/env python3
"""What `multinode top` costs (issue 42, item 5), on loopback agents, with
two builds side by side (`--before BIN`: the build to compare with; the
other is this tree's release build), their turns alternated.

1. One refresh at N nodes: N agents listen on 127.1.x.y (one per "node"),
   one mn-exec-all runs a Python sleeper on all of them, and
   `multinode top --once --format json` over the N agents is timed (one
   refresh: every agent asked at once, each sampling its processes over
   top's window). Every refresh is checked: N rows, each with the sleeper
   as its main process. Also the agents' CPU a refresh (utime + stime of
   every agent and its reaped children, from /proc/PID/stat, less the
   same agents' CPU over as long idle), per node, and top's own (wait4).
   Then a live top's refreshes, back to back (`--interval 0.05`): the
   time between two of its JSON lines, after the first (which logs in).
   The target: within 1 s at 256 nodes. Each round starts the agents and
   the job afresh for one build, then for the other.

2. A job's step rate with and without a live `top --interval 2
   --progress 'step (\\d+)'` beside it: one synthetic loop a rank (fixed
   CPU work a step, `step N T` every 10 steps, T its CLOCK_MONOTONIC),
   each rank pinned to a CPU with taskset (rank r on CPU r mod the CPUs;
   nothing else is kept off its CPU), runs for --pairs x 2 windows of
   --window s; top is started at the start of every second window and
   stopped at its end (so a top window also pays top's logins), the order
   within a pair alternating (off-on, on-off: a drift cancels). The rate
   of a window comes from the ranks' own times; a pair's ratio is its
   on-window's rate over its off-window's. The agents' CPU is read at
   each window's edges. Done for each --job-ranks count (1: a CPU to
   spare, as on a GPU node; 2: every CPU of this machine busy).
   The target: less than 1% slower with top.

The agents' PATH is this build's and /usr/bin:/bin: no py-spy (with it,
each Python rank also pays 3 `py-spy dump`s a refresh) and no nvidia-smi.

Usage: bench/top.py --before BIN [--n 256] [--runs 5] [--rounds 2]
       [--job-ranks 1,2] [--pairs 8] [--window 6] [--parts scale,job]
JSON lines in bench/results/top.jsonl; a summary on stdout.
Needs python3, taskset and a release build (BENCH_MULTINODE: another binary).
"""
import argparse
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.environ.get("BENCH_RESULTS") or os.path.join(HERE, "results")
MULTINODE = os.environ.get("BENCH_MULTINODE") or os.path.join(
    REPO, "target", "release", "multinode")
PORT = 29971
SECRET = "bench-top-secret-0123456789abcdef"
TICK = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count()

LOOP = """
import sys, time
seconds = float(sys.argv[1])
def work():
    x = 0
    for i in range(20000):
        x += i
    return x
start = time.monotonic()
step = 0
while time.monotonic() - start < seconds:
    work()
    step += 1
    if step % 10 == 0:
        print(f"step {step} {time.monotonic():.6f}", flush=True)
"""


def wait_port(host, limit=60):
    t = time.monotonic()
    while time.monotonic() - t < limit:
        try:
            socket.create_connection((host, PORT), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"no agent on {host}:{PORT}")


def host(i):
    return f"127.1.{i // 200}.{i % 200 + 2}"


def start_agents(hosts, env):
    agents = [subprocess.Popen(["multinode", "agent", "--listen", f"{h}:{PORT}"],
                               env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for h in hosts]
    for h in hosts:
        wait_port(h)
    return agents


def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()


def cpu_ticks(procs):
    """utime + stime + cutime + cstime of every process, in clock ticks."""
    total = 0
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])
        except OSError:
            pass
    return total


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def refresh_at_scale(a, version, env, tmp, stamp, rnd, base):
    hosts = [host(base + i) for i in range(a.n)]
    agents = start_agents(hosts, env)
    job = None
    rows = []
    try:
        prog = os.path.join(tmp, "sleeper.py")
        with open(prog, "w") as f:
            f.write("import time\ndef wait_for_the_others():\n    time.sleep(100000)\nwait_for_the_others()\n")
        job_hosts = ",".join(["127.0.0.1"] + hosts)
        job = subprocess.Popen(["mn-exec-all", "--hosts", job_hosts, "--node-rank", "0",
                                "-c", f"exec /usr/bin/python3 {prog}"],
                               env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        top = ["multinode", "top", "--hosts", ",".join(hosts), "--node-rank", "0",
               "--once", "--format", "json"]

        def check(r):
            if r.returncode != 0:
                return False
            doc = json.loads(r.stdout)
            return (doc["ranks"] == a.n and
                    all(row.get("comm") == "python3" for row in doc["rows"]))
        t = time.monotonic()
        while not check(subprocess.run(top, env=env, capture_output=True)):
            if time.monotonic() - t > 120:
                sys.exit("the job did not start everywhere")
            time.sleep(0.5)
        time.sleep(1)
        walls = []
        ticks0, client0, t0 = cpu_ticks(agents), children_cpu(), time.monotonic()
        for run in range(a.runs):
            t = time.monotonic()
            r = subprocess.run(top, env=env, capture_output=True)
            wall = time.monotonic() - t
            walls.append(wall)
            row = {"run_id": stamp, "what": "top --once", "version": version, "round": rnd,
                   "n": a.n, "run": run, "wall": round(wall, 4), "ok": check(r),
                   "rc": r.returncode}
            rows.append(row)
            print(json.dumps(row), flush=True)
        busy = cpu_ticks(agents) - ticks0
        client = children_cpu() - client0
        spent = time.monotonic() - t0
        ticks1 = cpu_ticks(agents)
        time.sleep(spent)
        idle = cpu_ticks(agents) - ticks1
        row = {"run_id": stamp, "what": "refresh cpu", "version": version, "round": rnd,
               "n": a.n, "refreshes": a.runs,
               "agent_ms_per_node": round((busy - idle) / TICK * 1000 / a.runs / a.n, 3),
               "agent_idle_ms_per_node": round(idle / TICK * 1000 / a.runs / a.n, 3),
               "top_cpu_s": round(client / a.runs, 4), "ok": True}
        rows.append(row)
        print(json.dumps(row), flush=True)
        # A live top's refreshes back to back (--interval shorter than one):
        # the time between two refreshes' JSON lines is one refresh. The
        # first pays the logins; the next --runs are timed.
        live = subprocess.Popen(["multinode", "top", "--hosts", ",".join(hosts),
                                 "--node-rank", "0", "--format", "json", "--interval", "0.05"],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        try:
            docs = [json.loads(live.stdout.readline())]
            ticks0 = cpu_ticks(agents)
            docs += [json.loads(live.stdout.readline()) for _ in range(a.runs + 1)]
            live_busy = cpu_ticks(agents) - ticks0
        finally:
            # Closed first: a top blocked writing a refresh to a full pipe
            # ends on the broken pipe.
            live.stdout.close()
            live.terminate()
            live.wait()
        times = [d["time_ms"] for d in docs]
        for run, (t0_ms, t1_ms) in enumerate(zip(times[1:], times[2:])):
            doc = docs[run + 2]
            row = {"run_id": stamp, "what": "live refresh", "version": version, "round": rnd,
                   "n": a.n, "run": run, "wall": round((t1_ms - t0_ms) / 1000, 4),
                   "ok": doc["ranks"] == a.n and all(r.get("comm") == "python3"
                                                     for r in doc["rows"])}
            rows.append(row)
            print(json.dumps(row), flush=True)
        # Over a+1 refreshes (from the end of the first): the idle share
        # taken at the rate measured above.
        live_s = (times[-1] - times[0]) / 1000
        live_idle = idle / spent * live_s
        row = {"run_id": stamp, "what": "live refresh cpu", "version": version, "round": rnd,
               "n": a.n, "refreshes": a.runs + 1,
               "agent_ms_per_node": round((live_busy - live_idle) / TICK * 1000
                                          / (a.runs + 1) / a.n, 3), "ok": True}
        rows.append(row)
        print(json.dumps(row), flush=True)
    finally:
        if job:
            job.terminate()
            job.wait()
        stop(agents)
    return rows


def rate_between(points, lo, hi):
    """Steps a second between times lo and hi, from (time, step) points."""
    inside = [(t, s) for t, s in points if lo <= t <= hi]
    if len(inside) < 2:
        return None
    (t0, s0), (t1, s1) = inside[0], inside[-1]
    return (s1 - s0) / (t1 - t0)


def job_slowdown(a, version, env, tmp, stamp, ranks, base):
    hosts = [host(base + i) for i in range(ranks + 1)]
    agents = start_agents(hosts, env)
    prog = os.path.join(tmp, "loop.py")
    with open(prog, "w") as f:
        f.write(LOOP)
    rows = []
    seconds = a.pairs * 2 * a.window + 6
    job_hosts = ",".join(hosts)
    job = None
    try:
        # exec_all runs on none of the job's nodes (--exclude 0): every rank
        # is an agent's command, as on a compute node.
        # Its output to a file: a pipe read only at the end would fill and
        # hold the ranks back.
        out_path = os.path.join(tmp, f"job-{version}-{ranks}.out")
        with open(out_path, "w") as out_file:
            job = subprocess.Popen(
                ["mn-exec-all", "--hosts", job_hosts, "--node-rank", "0", "--exclude", "0",
                 "--label", "-c",
                 f"exec taskset -c $(( (RANK - 1) % {CPUS} )) /usr/bin/python3 {prog} {seconds}"],
                env=env, stdin=subprocess.DEVNULL, stdout=out_file,
                stderr=subprocess.DEVNULL)
        time.sleep(2)
        windows = []
        for pair in range(a.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            for with_top in order:
                top = None
                ticks0 = cpu_ticks(agents)
                lo = time.monotonic()
                if with_top:
                    top = subprocess.Popen(
                        ["multinode", "top", "--hosts", job_hosts, "--node-rank", "0",
                         "--interval", "2", "--format", "json", "--progress", r"step (\d+)"],
                        env=env, stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(a.window)
                if top:
                    top.terminate()
                    top.wait()
                hi = time.monotonic()
                windows.append((pair, with_top, lo, hi, cpu_ticks(agents) - ticks0))
        job.wait()
        with open(out_path) as f:
            out = f.read()
        points = {}
        for line in out.splitlines():
            m = re.match(r"(.+?): step (\d+) ([0-9.]+)$", line)
            if m:
                points.setdefault(m.group(1), []).append((float(m.group(3)), int(m.group(2))))
        if len(points) != ranks:
            sys.exit(f"expected {ranks} ranks' steps, got {len(points)}")
        for pair, with_top, lo, hi, ticks in windows:
            rates = [rate_between(p, lo, hi) for p in points.values()]
            row = {"run_id": stamp, "what": "job window", "version": version,
                   "ranks": ranks, "pair": pair, "with_top": with_top,
                   "window_s": round(hi - lo, 3),
                   "rate": round(statistics.mean(rates), 3) if None not in rates else None,
                   "agent_cpu_ms": round(ticks / TICK * 1000, 1),
                   "ok": job.returncode == 0 and None not in rates}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if job and job.poll() is None:
            job.terminate()
            try:
                job.wait(timeout=10)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
        stop(agents)
    return rows


def summary(rows, a):
    ok = all(r["ok"] for r in rows)
    for version in ("before", "after"):
        walls = [r["wall"] for r in rows if r["what"] == "top --once" and r["version"] == version]
        live = [r["wall"] for r in rows if r["what"] == "live refresh" and r["version"] == version]
        cpu = [r for r in rows if r["what"] == "refresh cpu" and r["version"] == version]
        lcpu = [r for r in rows if r["what"] == "live refresh cpu" and r["version"] == version]
        if walls and live:
            print(f"{version}: one refresh at {a.n} nodes: --once median {statistics.median(walls):.3f} s "
                  f"({min(walls):.3f}-{max(walls):.3f}, {len(walls)} runs); live median "
                  f"{statistics.median(live):.3f} s ({min(live):.3f}-{max(live):.3f}, {len(live)}); "
                  f"agents' CPU a --once refresh "
                  f"{statistics.median(r['agent_ms_per_node'] for r in cpu):.2f} ms a node, "
                  f"a live one {statistics.median(r['agent_ms_per_node'] for r in lcpu):.2f} ms; "
                  f"top's own {statistics.median(r['top_cpu_s'] for r in cpu):.3f} s")
    for version in ("before", "after"):
        for ranks in a.job_ranks:
            w = [r for r in rows if r["what"] == "job window" and r["version"] == version
                 and r["ranks"] == ranks]
            if not w:
                continue
            ratios = []
            for pair in sorted({r["pair"] for r in w}):
                on = [r["rate"] for r in w if r["pair"] == pair and r["with_top"]]
                off = [r["rate"] for r in w if r["pair"] == pair and not r["with_top"]]
                if on and off and None not in on + off:
                    ratios.append(on[0] / off[0])
            cpu_on = statistics.mean(r["agent_cpu_ms"] / r["window_s"] for r in w if r["with_top"])
            cpu_off = statistics.mean(r["agent_cpu_ms"] / r["window_s"] for r in w if not r["with_top"])
            q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
            print(f"{version}: {ranks} rank(s) pinned, {len(ratios)} pairs of {a.window:.0f} s: "
                  f"with/without top median {statistics.median(ratios):.4f} "
                  f"(quartiles {q[0]:.4f}-{q[2]:.4f}, {min(ratios):.4f}-{max(ratios):.4f}); "
                  f"agents' CPU {cpu_off * 100 / 1000:.2f}% of a CPU without top, "
                  f"{cpu_on * 100 / 1000:.2f}% with ({(cpu_on - cpu_off) * 2 / (ranks + 1):.1f} ms "
                  f"a node a 2 s refresh)")
    return ok


def bindir(tmp, name, binary):
    d = os.path.join(tmp, name)
    os.mkdir(d)
    for tool in ("multinode", "mn-exec-all", "mn-ssh"):
        os.symlink(os.path.abspath(binary), os.path.join(d, tool))
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the build to compare with")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--job-ranks", default="1,2")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--window", type=float, default=6)
    ap.add_argument("--parts", default="scale,job", help="scale, job or both")
    a = ap.parse_args()
    parts = set(a.parts.split(","))
    if not parts or not parts <= {"scale", "job"}:
        print(f"bench/top.py: --parts {a.parts!r}: scale, job or scale,job", file=sys.stderr)
        sys.exit(2)
    try:
        a.job_ranks = [int(x) for x in a.job_ranks.split(",")]
    except ValueError:
        print(f"bench/top.py: --job-ranks {a.job_ranks!r}: a list of numbers", file=sys.stderr)
        sys.exit(2)
    if not os.access(a.before, os.X_OK):
        print(f"bench/top.py: --before {a.before}: not an executable", file=sys.stderr)
        sys.exit(2)
    tmp = tempfile.mkdtemp(prefix="mn-top-bench-")
    envs = {}
    for version, binary in (("before", a.before), ("after", MULTINODE)):
        envs[version] = {"PATH": f"{bindir(tmp, version, binary)}:/usr/bin:/bin",
                         "HOME": os.environ.get("HOME", "/root"),
                         "MULTINODE_SECRET": SECRET, "MULTINODE_AGENT_PORT": str(PORT)}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rows = []
    base = 0
    try:
        for rnd in range(a.rounds if "scale" in parts else 0):
            order = ("before", "after") if rnd % 2 == 0 else ("after", "before")
            for version in order:
                rows += refresh_at_scale(a, version, envs[version], tmp, stamp, rnd, base)
                base += a.n
        for k, ranks in enumerate(a.job_ranks if "job" in parts else []):
            order = ("before", "after") if k % 2 == 0 else ("after", "before")
            for version in order:
                rows += job_slowdown(a, version, envs[version], tmp, stamp, ranks, base)
                base += ranks + 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "top.jsonl"), "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print()
    if not summary(rows, a):
        sys.exit(1)


if __name__ == "__main__":
    main()
