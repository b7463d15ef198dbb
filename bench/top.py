#!/usr/bin/env python3
"""What `multinode top` costs (issue 42, item 5), on loopback agents.

1. One refresh at N nodes: N agents listen on 127.1.x.y (one per "node"),
   one mn-exec-all runs a Python sleeper on all of them, and
   `multinode top --once --format json` over the N agents is timed (one
   refresh: every agent asked at once, each sampling its processes over
   top's 500 ms window). Every refresh is checked: N rows, each with the
   sleeper as its main process. The target: within 1 s at 256 nodes.

2. A job's step rate with and without `top --interval 2` beside it: a
   synthetic loop (fixed CPU work a step, a line every 10 steps) on
   --job-nodes nodes measures its own steps a second over --seconds; runs
   alternate without and with top, --pairs times. The target: less than
   1% slower with top.

The agents' PATH has no py-spy (none on this machine; with py-spy each
Python rank also pays 3 `py-spy dump`s a refresh).

Usage: bench/top.py [--n 256] [--runs 5] [--job-nodes 2] [--seconds 20] [--pairs 3]
JSON lines in bench/results/top.jsonl; a table on stdout.
Needs python3 and a release build (BENCH_MULTINODE: another binary).
"""
import argparse
import json
import os
import re
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
        print(f"step {step}", flush=True)
print(f"rate {step / (time.monotonic() - start):.3f}", flush=True)
"""


def wait_port(host, limit=30):
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


def refresh_at_scale(a, env, tmp, stamp):
    hosts = [host(i) for i in range(a.n)]
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
        for run in range(a.runs):
            t = time.monotonic()
            r = subprocess.run(top, env=env, capture_output=True)
            wall = time.monotonic() - t
            row = {"run_id": stamp, "what": "top --once", "n": a.n, "run": run,
                   "wall": round(wall, 4), "ok": check(r), "rc": r.returncode}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if job:
            job.terminate()
            job.wait()
        stop(agents)
    return rows


def job_rate(a, env, tmp, stamp):
    hosts = [host(1000 + i) for i in range(a.job_nodes)]
    agents = start_agents(hosts, env)
    prog = os.path.join(tmp, "loop.py")
    with open(prog, "w") as f:
        f.write(LOOP)
    rows = []
    try:
        job_hosts = ",".join(hosts)
        for pair in range(a.pairs):
            for with_top in (False, True):
                top = None
                if with_top:
                    top = subprocess.Popen(
                        ["multinode", "top", "--hosts", job_hosts, "--node-rank", "0",
                         "--interval", "2", "--progress", r"step (\d+)"],
                        env=env, stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                r = subprocess.run(["mn-exec-all", "--hosts", job_hosts, "--node-rank", "0",
                                    "--exclude", "0", "--label",
                                    "-c", f"exec /usr/bin/python3 {prog} {a.seconds}"],
                                   env=env, capture_output=True, text=True)
                # exec_all runs on none of the job's nodes here (--exclude 0 ... its
                # node is 127.1.x.y's rank 0): every rank is an agent's command.
                if top:
                    top.terminate()
                    top.wait()
                rates = [float(m) for m in re.findall(r"rate ([0-9.]+)", r.stdout)]
                row = {"run_id": stamp, "what": "job step rate", "with_top": with_top,
                       "pair": pair, "nodes": a.job_nodes, "seconds": a.seconds,
                       "rates": rates, "mean_rate": round(statistics.mean(rates), 3) if rates else None,
                       "ok": r.returncode == 0 and len(rates) == a.job_nodes - 1}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        stop(agents)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--job-nodes", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--pairs", type=int, default=3)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mn-top-bench-")
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    for name in ("multinode", "mn-exec-all", "mn-ssh"):
        os.symlink(os.path.abspath(MULTINODE), os.path.join(bindir, name))
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           "MULTINODE_SECRET": SECRET, "MULTINODE_AGENT_PORT": str(PORT)}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        rows = refresh_at_scale(a, env, tmp, stamp)
        rows += job_rate(a, env, tmp, stamp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "top.jsonl"), "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    walls = [r["wall"] for r in rows if r["what"] == "top --once"]
    print(f"\none refresh at {a.n} nodes ({a.runs} runs): median {statistics.median(walls):.3f} s, "
          f"{min(walls):.3f}-{max(walls):.3f} s, all checked: "
          f"{all(r['ok'] for r in rows if r['what'] == 'top --once')}")
    off = [r["mean_rate"] for r in rows if r["what"] == "job step rate" and not r["with_top"]]
    on = [r["mean_rate"] for r in rows if r["what"] == "job step rate" and r["with_top"]]
    if off and on and None not in off + on:
        m_off, m_on = statistics.median(off), statistics.median(on)
        print(f"job step rate ({a.job_nodes - 1} ranks, {a.seconds:.0f} s each, {a.pairs} pairs): "
              f"without top {m_off:.2f}/s, with top --interval 2 {m_on:.2f}/s: "
              f"{(m_on / m_off - 1) * 100:+.2f}%")
    if not all(r["ok"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
