#!/usr/bin/env python3
"""One connection a node (issue 53, item 1): `--nproc-per-node 8` of `true`
(bound first as by default, and `--bind none`) against one command a node
that starts 8 `true`s in a shell loop, on the
same N loopback agents (one `multinode agent` per address 127.0.K.J), in
one run, alternated round by round. With --base, the same `--nproc-per-node`
run of another build (main's: before) is alternated with them.

    cargo build --release
    bench/procs_per_node.py --ns 8,128 --runs 10 [--base OTHER/multinode]

Node 0 (127.0.0.1) is excluded (--exclude 0): every process runs behind an
agent, reached through the network. Prints the median, min and max wall
time of each (N, tool) and the ratio of each tool's median to the loop's;
writes a row a run to bench/results/procs-per-node/runs.jsonl (or --out).
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
SECRET = "bench-secret-0123456789abcdef-0123456789"
PORT = int(os.environ.get("BENCH_AGENT_PORT", "29990"))
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": os.environ.get("HOME", "/root"),
    "USER": os.environ.get("USER", "root"),
    "LANG": "C.UTF-8",
    "MULTINODE_SECRET": SECRET,
    "MULTINODE_AGENT_PORT": str(PORT),
}
LOOP = "for i in 1 2 3 4 5 6 7 8; do true & done; wait"


def hosts(n):
    """N loopback addresses 127.0.K.J (J in 2..251)."""
    return ["127.0.%d.%d" % (i // 250, 2 + i % 250) for i in range(n)]


def start_agents(binary, hs, logf):
    procs = [subprocess.Popen([binary, "agent", "--listen", "%s:%d" % (h, PORT)],
                              stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                              env=ENV, start_new_session=True) for h in hs]
    for h, p in zip(hs, procs):
        deadline = time.time() + 60
        while True:
            if p.poll() is not None:
                stop(procs)
                sys.exit("the agent on %s exited with %s" % (h, p.returncode))
            try:
                socket.create_connection((h, PORT), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    stop(procs)
                    sys.exit("the agent on %s does not listen" % h)
                time.sleep(0.02)
    return procs


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def exec_all(bindir, hs, args):
    """Runs mn-exec-all of `bindir` over `hs`; its wall time in seconds."""
    env = dict(ENV, MULTINODE_TRANSPORT="agent", MULTINODE_NODE_RANK="0",
               MULTINODE_HOSTLIST=",".join(["127.0.0.1:1"] + [h + ":1" for h in hs]))
    t0 = time.monotonic()
    r = subprocess.run([os.path.join(bindir, "mn-exec-all"), "--exclude", "0"] + args,
                       env=env, stdin=subprocess.DEVNULL, capture_output=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit("mn-exec-all %s failed (%d): %s" % (args, r.returncode, r.stderr.decode()[-2000:]))
    return wall


def bindir(binary, tmp, name):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    # One binary, called by three names (argv[0] dispatch).
    for name in ("mn-exec-all", "mn-ssh", "multinode"):
        os.symlink(os.path.abspath(binary), os.path.join(d, name))
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ns", default="8,128")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--nproc", type=int, default=8)
    ap.add_argument("--bin", default=os.path.join(REPO, "target", "release", "multinode"))
    ap.add_argument("--base", help="another build's multinode (before), alternated too")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "procs-per-node", "runs.jsonl"))
    a = ap.parse_args()
    run_id = time.strftime("%Y%m%dT%H%M%S")
    tmp = tempfile.mkdtemp(prefix="mn-procs-bench-")
    procs = ["--nproc-per-node", str(a.nproc), "-c", "true"]
    # By default each process is bound first (`multinode bind --bind auto`,
    # an exec of multinode a process); `--bind none` runs the script directly.
    unbound = ["--bind", "none"] + procs
    after = bindir(a.bin, tmp, "after")
    tools = [("nproc-per-node", after, procs),
             ("nproc-per-node --bind none", after, unbound),
             ("shell loop", after, ["-c", LOOP.replace("8", str(a.nproc))])]
    if a.base:
        base = bindir(a.base, tmp, "base")
        tools += [("nproc-per-node (base)", base, procs),
                  ("nproc-per-node --bind none (base)", base, unbound)]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    out = open(a.out, "a")
    summary = []
    with open(os.path.join(tmp, "agents.log"), "ab") as logf:
        for n in [int(x) for x in a.ns.split(",")]:
            hs = hosts(n)
            agents = start_agents(a.bin, hs, logf)
            try:
                for _, d, args in tools:  # one warm-up each, not counted
                    exec_all(d, hs, args)
                walls = {name: [] for name, _, _ in tools}
                for i in range(a.runs):
                    # Alternated, the order rotated each round.
                    order = tools[i % len(tools):] + tools[:i % len(tools)]
                    for name, d, args in order:
                        w = exec_all(d, hs, args)
                        walls[name].append(w)
                        out.write(json.dumps({"run_id": run_id, "n": n, "nproc": a.nproc,
                                              "tool": name, "round": i, "wall": w}) + "\n")
                        out.flush()
            finally:
                stop(agents)
            loop = statistics.median(walls["shell loop"])
            for name, w in walls.items():
                summary.append("| %d | %s | %d | %.3f [%.3f-%.3f] | %.2fx |" % (
                    n, name, len(w), statistics.median(w), min(w), max(w),
                    statistics.median(w) / loop))
    shutil.rmtree(tmp, ignore_errors=True)
    print("run %s: %d processes a node (`true`)" % (run_id, a.nproc))
    print("| N | tool | runs | wall s median [min-max] | median / shell loop's |")
    print("|---|---|---|---|---|")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
