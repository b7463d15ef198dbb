#!/usr/bin/env python3
"""Restart with real torch on loopback agents, the job's store exec_all's
(`--store auto`) against rank 0's (`--store off`), one build, turns
alternated.

N-1 agents listen on 127.3.0.x, exec_all runs node 0 itself;
`mn-exec-all --nproc-per-node P --max-restarts 1` runs a Python worker
(torch from the tests' venv, gloo on the CPU): every process meets in
`init_process_group()` and all-reduces; in attempt 0 rank 0 then kills
itself (`kill -9`); fail-fast ends the others and attempt 1 meets and
all-reduces again. Recorded per run: `kill_to_all_s`, from rank 0's kill
(its clock) to the last process of attempt 1 past its all-reduce; the
report's `restart_s` (the kill's failure to every process running its
script); the wall time; the MASTER_PORT of each attempt.

Usage: bench/store_restart.py [--nodes 4] [--nproc 2] [--runs 3]
Torch: BENCH_PYTHON, else target/test-venv/bin/python (tests/install-deps.sh).
The build: BENCH_MULTINODE, else target/release/multinode, else target/debug.
JSON lines in bench/results/store_restart.jsonl; a summary on stdout.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.environ.get("BENCH_RESULTS") or os.path.join(HERE, "results")
PORT = 29978
MASTER_PORT = 29979
SECRET = "bench-store-secret-0123456789abcd"
WORKER = r'''
import datetime, os, signal, time
import torch, torch.distributed as dist
rank, attempt = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
x = torch.ones(1)
dist.all_reduce(x)
print("met attempt=%d rank=%d t=%.6f port=%s" % (attempt, rank, time.time(), os.environ["MASTER_PORT"]), flush=True)
if attempt == 0:
    dist.barrier()
    if rank == 0:
        print("kill t=%.6f" % time.time(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(300)
dist.barrier()
dist.destroy_process_group()
'''


def multinode_bin():
    for b in (os.environ.get("BENCH_MULTINODE"),
              os.path.join(REPO, "target", "release", "multinode"),
              os.path.join(REPO, "target", "debug", "multinode")):
        if b and os.access(b, os.X_OK):
            return b
    sys.exit("bench/store_restart.py: no multinode build: cargo build --release")


def wait_port(h, limit=60):
    t = time.monotonic()
    while time.monotonic() - t < limit:
        try:
            socket.create_connection((h, PORT), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"no agent on {h}:{PORT}")


def one_run(a, mode, env, hosts, tmp, python, worker):
    report = os.path.join(tmp, f"report-{mode}.json")
    t = time.monotonic()
    r = subprocess.run(["mn-exec-all", "--hosts", ",".join(hosts), "--node-rank", "0",
                        "--nproc-per-node", str(a.nproc), "--bind", "none",
                        "--master-port", str(MASTER_PORT), "--store", mode,
                        "--max-restarts", "1", "--report", report,
                        "-c", f"GLOO_SOCKET_IFNAME=lo {python} {worker}"],
                       env=env, stdin=subprocess.DEVNULL, capture_output=True)
    wall = time.monotonic() - t
    out = r.stdout.decode(errors="replace")
    kill = [float(l.split(" t=")[1]) for l in out.splitlines() if l.startswith("kill ")]
    met = [l for l in out.splitlines() if l.startswith("met attempt=1 ")]
    ports = sorted({l.split("port=")[1] for l in out.splitlines() if l.startswith("met ")})
    last = max((float(l.split(" t=")[1].split()[0]) for l in met), default=None)
    world = a.nodes * a.nproc
    ok = r.returncode == 0 and len(kill) == 1 and len(met) == world
    try:
        with open(report) as f:
            attempts = json.load(f).get("attempts", [])
        restart = attempts[1].get("restart_s") if len(attempts) == 2 else None
    except (OSError, ValueError):
        restart = None
    row = {"mode": mode, "nodes": a.nodes, "nproc": a.nproc, "ok": ok, "rc": r.returncode,
           "kill_to_all_s": round(last - kill[0], 4) if ok else None,
           "restart_s": restart, "wall": round(wall, 3), "ports": ports}
    if not ok:
        row["stderr"] = r.stderr.decode(errors="replace")[-600:]
    print(json.dumps(row), flush=True)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    python = os.environ.get("BENCH_PYTHON") or os.path.join(REPO, "target", "test-venv", "bin", "python")
    if not os.access(python, os.X_OK):
        sys.exit(f"bench/store_restart.py: no python with torch at {python}: run tests/install-deps.sh")
    binary = multinode_bin()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        bins = os.path.join(tmp, "bin")
        os.makedirs(bins)
        for link in ("multinode", "mn-exec-all", "mn-ssh"):
            os.symlink(os.path.abspath(binary), os.path.join(bins, link))
        # The head's python3 (the store's) is the venv's.
        with open(os.path.join(bins, "python3"), "w") as f:
            f.write(f'#!/bin/sh\nexec {python} "$@"\n')
        os.chmod(os.path.join(bins, "python3"), 0o755)
        worker = os.path.join(tmp, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER)
        env = dict(os.environ, PATH=bins + ":/usr/bin:/bin", MULTINODE_SECRET=SECRET,
                   MULTINODE_AGENT_PORT=str(PORT))
        env.pop("RUST_LOG", None)
        hosts = [f"127.3.0.{i + 2}" for i in range(a.nodes)]
        agents = [subprocess.Popen(["multinode", "agent", "--listen", f"{h}:{PORT}"], env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL) for h in hosts[1:]]
        try:
            for h in hosts[1:]:
                wait_port(h)
            for run in range(a.runs):
                for mode in (("off", "auto") if run % 2 == 0 else ("auto", "off")):
                    row = one_run(a, mode, env, hosts, tmp, python, worker)
                    rows.append(dict(row, run_id=stamp, run=run))
        finally:
            for ag in agents:
                ag.terminate()
            for ag in agents:
                ag.wait()
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "store_restart.jsonl"), "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")

    def cell(vals):
        vals = sorted(v for v in vals if v is not None)
        if not vals:
            return "none"
        return f"{statistics.median(vals):.2f} [{vals[0]:.2f}-{vals[-1]:.2f}] x{len(vals)}"
    print("| store | kill to every process past its all-reduce (s) | restart_s | wall |")
    print("| --- | --- | --- | --- |")
    for mode in ("off", "auto"):
        ok = [r for r in rows if r["mode"] == mode and r["ok"]]
        print(f"| {mode} | {cell([r['kill_to_all_s'] for r in ok])} "
              f"| {cell([r['restart_s'] for r in ok])} | {cell([r['wall'] for r in ok])} |")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
