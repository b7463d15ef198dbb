#!/usr/bin/env python3
"""Time to snapshot a running job: `multinode ps` across N loopback agents.

N agents listen on 127.0.0.2 ... (one per "node"), and one mn-exec-all runs
a Python program that sleeps on all of them (its own node, 127.0.0.1, is
not in the snapshot's hostlist). Then `multinode ps --format json` over the
N agents is timed, alternating with `mn-exec-all -c true` over the same
agents (connect, authenticate, run a command on every node: the floor any
request to every node pays). Every snapshot is checked: N nodes answered,
each with the sleeping program in it. The agents' PATH has no py-spy (the
target: under 2 s for 64 nodes without py-spy); --py-spy puts it on PATH.

Usage: bench/snapshot.py [--n 64] [--runs 5] [--py-spy]
One JSON line per run in bench/results/snapshot.jsonl; a table on stdout.
Needs python3 and a release build (BENCH_MULTINODE: another binary).
"""
import argparse
import json
import os
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
PORT = 29961
SECRET = "bench-snapshot-secret-0123456789"


def wait_port(host, limit=20):
    t = time.monotonic()
    while time.monotonic() - t < limit:
        try:
            socket.create_connection((host, PORT), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"no agent on {host}:{PORT}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--py-spy", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mn-snap-bench-")
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    for name in ("multinode", "mn-exec-all", "mn-ssh"):
        os.symlink(os.path.abspath(MULTINODE), os.path.join(bindir, name))
    path = f"{bindir}:/usr/bin:/bin"
    if a.py_spy:
        spy = shutil.which("py-spy")
        if not spy:
            sys.exit("--py-spy: py-spy is not on PATH")
        path = f"{bindir}:{os.path.dirname(spy)}:/usr/bin:/bin"
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/root"),
           "MULTINODE_SECRET": SECRET, "MULTINODE_AGENT_PORT": str(PORT)}
    hosts = [f"127.0.0.{i + 2}" for i in range(a.n)]
    agents = [subprocess.Popen(["multinode", "agent", "--listen", f"{h}:{PORT}"],
                               env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for h in hosts]
    job = None
    rows = []
    try:
        for h in hosts:
            wait_port(h)
        prog = os.path.join(tmp, "sleeper.py")
        with open(prog, "w") as f:
            f.write("import time\ndef wait_for_the_others():\n    time.sleep(100000)\nwait_for_the_others()\n")
        job_hosts = ",".join(["127.0.0.1"] + hosts)
        job = subprocess.Popen(["mn-exec-all", "--hosts", job_hosts, "--node-rank", "0",
                                "-c", f"exec /usr/bin/python3 {prog}"],
                               env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ps_hosts = ",".join(hosts)
        ps = ["multinode", "ps", "--hosts", ps_hosts, "--node-rank", "0", "--format", "json"]
        exec_true = ["mn-exec-all", "--hosts", job_hosts, "--node-rank", "0", "--exclude", "0",
                     "-c", "true"]
        # Every program running before the first timed run.
        t = time.monotonic()
        while True:
            r = subprocess.run(ps, env=env, capture_output=True)
            doc = json.loads(r.stdout) if r.returncode == 0 else None
            if doc and all(any(prog in p["cmdline"] for p in s["processes"])
                           for s in doc["snapshots"]):
                break
            if time.monotonic() - t > 60:
                sys.exit(f"the job did not start everywhere: {r.stderr.decode()[-500:]}")
            time.sleep(0.5)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for run in range(a.runs):
            for tool, argv in (("multinode ps", ps), ("mn-exec-all -c true", exec_true)):
                t = time.monotonic()
                r = subprocess.run(argv, env=env, capture_output=True)
                wall = time.monotonic() - t
                ok = r.returncode == 0
                if tool == "multinode ps" and ok:
                    doc = json.loads(r.stdout)
                    ok = (doc["nodes"] == a.n and
                          all(any(prog in p["cmdline"] for p in s["processes"])
                              for s in doc["snapshots"]))
                row = {"run_id": stamp, "tool": tool, "n": a.n, "py_spy": a.py_spy,
                       "run": run, "wall": round(wall, 4), "ok": ok, "rc": r.returncode}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        if job:
            job.terminate()
            job.wait()
        for p in agents:
            p.terminate()
        for p in agents:
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "snapshot.jsonl"), "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"\n{a.n} nodes, py-spy {'on PATH' if a.py_spy else 'absent'}, {a.runs} runs each")
    print("| tool | median | min–max | all checked |")
    print("|---|---|---|---|")
    for tool in ("multinode ps", "mn-exec-all -c true"):
        w = [r["wall"] for r in rows if r["tool"] == tool]
        ok = all(r["ok"] for r in rows if r["tool"] == tool)
        print(f"| `{tool}` | {statistics.median(w):.3f} s | {min(w):.3f}–{max(w):.3f} s | {'yes' if ok else 'NO'} |")
    if not all(r["ok"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
