#!/usr/bin/env python3
"""Restart time on loopback agents, two builds side by side (`--before BIN`;
the other is this tree's release build, or BENCH_MULTINODE), their turns
alternated.

N agents listen on 127.2.x.y (one per "node"); one `mn-exec-all
--max-restarts 1 --report FILE` runs a script on all of them and on its
own node: on the first attempt rank 1 exits 3 at once while every other
rank sleeps; fail-fast ends them (SIGTERM), and the second attempt runs
`true` everywhere. Recorded per run: the report's `restart_s` for the
second attempt (from the first attempt's failure to every node of the
second running its script: what a restart costs), the wall time of the
whole run, and the client's CPU (utime + stime, wait4). Each round starts
the agents afresh for one build (its own binary), then for the other;
within a round each build runs --runs times.

Usage: bench/restart.py --before BIN [--ns 8,128] [--runs 5] [--rounds 2]
JSON lines in bench/results/restart.jsonl (BENCH_RESULTS: another
directory); a summary on stdout. Needs python3 and a release build.
"""
import argparse
import json
import os
import resource
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
PORT = 29977
SECRET = "bench-restart-secret-0123456789ab"
SCRIPT = ('if [ "$MULTINODE_RESTART_COUNT" = 0 ]; then '
          '[ "$RANK" = 1 ] && exit 3; exec sleep 60; fi; true')


def host(i):
    return f"127.2.{i // 200}.{i % 200 + 2}"


def wait_port(h, limit=60):
    t = time.monotonic()
    while time.monotonic() - t < limit:
        try:
            socket.create_connection((h, PORT), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"no agent on {h}:{PORT}")


def bin_dir(tmp, name, binary):
    """A directory with `multinode` and `mn-exec-all` of `binary` (argv[0]
    picks the command), first on the PATH of its run and its agents."""
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    for link in ("multinode", "mn-exec-all", "mn-ssh"):
        path = os.path.join(d, link)
        if not os.path.exists(path):
            os.symlink(os.path.abspath(binary), path)
    return d


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_round(a, version, binary, tmp, stamp, rnd, n):
    env = dict(os.environ, PATH=bin_dir(tmp, version, binary) + ":/usr/bin:/bin",
               MULTINODE_SECRET=SECRET, MULTINODE_AGENT_PORT=str(PORT))
    env.pop("RUST_LOG", None)
    hosts = [host(i) for i in range(n)]
    agents = [subprocess.Popen(["multinode", "agent", "--listen", f"{h}:{PORT}"], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
              for h in hosts]
    rows = []
    try:
        for h in hosts:
            wait_port(h)
        report = os.path.join(tmp, f"report-{version}.json")
        for run in range(a.runs):
            cpu0, t = child_cpu(), time.monotonic()
            r = subprocess.run(["mn-exec-all", "--hosts", ",".join(["127.0.0.1"] + hosts),
                                "--node-rank", "0", "--max-restarts", "1",
                                "--report", report, "-c", SCRIPT],
                               env=env, stdin=subprocess.DEVNULL, capture_output=True)
            wall, cpu = time.monotonic() - t, child_cpu() - cpu0
            with open(report) as f:
                doc = json.load(f)
            attempts = doc.get("attempts", [])
            restart = attempts[1].get("restart_s") if len(attempts) == 2 else None
            ok = r.returncode == 0 and restart is not None
            row = {"run_id": stamp, "version": version, "round": rnd, "n": n, "run": run,
                   "restart_s": restart, "wall": round(wall, 4), "client_cpu_s": round(cpu, 4),
                   "rc": r.returncode, "ok": ok}
            if not ok:
                row["stderr"] = r.stderr.decode(errors="replace")[-400:]
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        for p in agents:
            p.terminate()
        for p in agents:
            p.wait()
    return rows


def summary(rows, versions, ns):
    def cell(vals):
        vals = sorted(vals)
        return f"{statistics.median(vals):.3f} [{vals[0]:.3f}-{vals[-1]:.3f}] x{len(vals)}"
    print("| nodes | build | restart_s: median [min-max] xruns | wall | client CPU |")
    print("| --- | --- | --- | --- | --- |")
    for n in ns:
        for v in versions:
            ok = [r for r in rows if r["n"] == n and r["version"] == v and r["ok"]]
            if not ok:
                print(f"| {n} | {v} | no run succeeded | | |")
                continue
            print(f"| {n} | {v} | {cell([r['restart_s'] for r in ok])} "
                  f"| {cell([r['wall'] for r in ok])} | {cell([r['client_cpu_s'] for r in ok])} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the build to compare with")
    p.add_argument("--ns", default="8,128")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    for b in (a.before, MULTINODE):
        if not os.access(b, os.X_OK):
            sys.exit(f"bench/restart.py: no binary at {b}: build it (cargo build --release)")
    ns = [int(x) for x in a.ns.split(",")]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    os.makedirs(RESULTS, exist_ok=True)
    builds = [("before", a.before), ("after", MULTINODE)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in ns:
            for rnd in range(a.rounds):
                order = builds if rnd % 2 == 0 else builds[::-1]
                for version, binary in order:
                    rows += one_round(a, version, binary, tmp, stamp, rnd, n)
    with open(os.path.join(RESULTS, "restart.jsonl"), "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    summary(rows, [b[0] for b in builds], ns)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
