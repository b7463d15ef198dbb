#!/usr/bin/env python3
"""Name resolution of a hostlist: `multinode hosts` on N names behind a slow DNS server.

`multinode hosts` looks up every name of the hostlist (getaddrinfo, the C
library's resolver). Each run happens in a private network and mount
namespace (tests/fixtures/with-slow-dns.sh: `unshare -rmn`) whose only DNS
server is tests/fixtures/slow-dns.py on 127.0.0.1, answering every query
DELAY seconds late; nothing leaves the namespace. The time is taken inside
the namespace, around `multinode hosts` alone. Every run is checked: exit
code 0 and the right address for every name.

With BENCH_BASE=/path/to/another/multinode (a build of an earlier commit),
its runs alternate with this build's: before/after in one run.

Usage: bench/resolve.py [--n 1000] [--delays 0,0.01,0.05] [--runs 3]
One JSON line per run in bench/results/resolve.jsonl; a table on stdout.
Needs unshare (user namespaces), ip, python3 and a release build.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.environ.get("BENCH_RESULTS") or os.path.join(HERE, "results")
MULTINODE = os.environ.get("BENCH_MULTINODE") or os.path.join(
    REPO, "target", "release", "multinode")
BASE = os.environ.get("BENCH_BASE")
WRAP = os.path.join(REPO, "tests", "fixtures", "with-slow-dns.sh")

# Runs inside the namespace: times `multinode hosts` alone, checks its answer.
INNER = r"""
import json, subprocess, sys, time
n, argv = int(sys.argv[1]), sys.argv[2:]
t = time.monotonic()
r = subprocess.run(argv, capture_output=True)
wall = time.monotonic() - t
rows = json.loads(r.stdout) if r.returncode == 0 else []
want = ["10.77.%d.%d" % (i // 250, i % 250 + 1) for i in range(n)]
ok = r.returncode == 0 and [row["address"] for row in rows] == want
print(json.dumps({"wall": wall, "ok": ok, "rc": r.returncode,
                  "stderr": r.stderr.decode(errors="replace")[-300:]}))
"""


def one(binary, n, delay):
    hostlist = "n[%04d-%04d]" % (0, n - 1)
    argv = [WRAP, str(delay), sys.executable, "-c", INNER, str(n),
            binary, "hosts", "--hosts", hostlist, "--format", "json"]
    p = subprocess.run(argv, capture_output=True, text=True,
                       env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/")})
    line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "{}"
    result = json.loads(line)
    most = None
    for word_line in p.stderr.splitlines():
        if "at most" in word_line:
            most = int(word_line.split("at most ")[1].split()[0])
    result["dns_most_at_once"] = most
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--delays", default="0,0.01,0.05")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--run-id", default=time.strftime("%Y%m%d-%H%M%S"))
    a = ap.parse_args()
    tools = [("multinode", MULTINODE)] + ([("multinode (base)", BASE)] if BASE else [])
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    os.makedirs(RESULTS, exist_ok=True)
    out = open(os.path.join(RESULTS, "resolve.jsonl"), "a")
    walls = {}
    for delay in [float(d) for d in a.delays.split(",")]:
        for r in range(a.runs):
            order = tools if r % 2 == 0 else list(reversed(tools))
            for tool, binary in order:
                res = one(binary, a.n, delay)
                rec = {"run_id": a.run_id, "suite": "resolve", "tool": tool, "n": a.n,
                       "dns_delay": delay, "commit": commit, "loadavg": os.getloadavg()[0],
                       **res}
                out.write(json.dumps(rec) + "\n")
                out.flush()
                print("%-18s n=%d delay=%.3f s: %.3f s %s (DNS held %s at once)" % (
                    tool, a.n, delay, res.get("wall", float("nan")),
                    "ok" if res.get("ok") else "FAILED " + res.get("stderr", ""),
                    res.get("dns_most_at_once")), flush=True)
                if res.get("ok"):
                    walls.setdefault((tool, delay), []).append(res["wall"])
    print("\n| tool | DNS delay | N | wall s, median [min-max] xruns |")
    print("|---|---|---|---|")
    for (tool, delay), w in sorted(walls.items()):
        print("| %s | %g s | %d | %.3f [%.3f-%.3f] x%d |" % (
            tool, delay, a.n, statistics.median(w), min(w), max(w), len(w)))


if __name__ == "__main__":
    main()
