#!/usr/bin/env python3
"""Per-node costs from bench.py's fanout lines: for each (n, command, tool),
the median wall time, client CPU per node (the head), server CPU per node
(the agents or sshd: the node's side), client peak RSS, and the ratio of
pdsh's median wall time to the tool's (same run).

    bench/per_node.py bench/results/scale/fanout.jsonl [RUN_ID]
"""
import json
import statistics
import sys
from collections import defaultdict

path = sys.argv[1]
want = sys.argv[2] if len(sys.argv) > 2 else None
rows = [json.loads(l) for l in open(path)]
if want is None:
    want = rows[-1]["run_id"]
rows = [r for r in rows if r["run_id"] == want and r["ok"]]
by = defaultdict(list)
for r in rows:
    by[(r["n"], r["cmd"], r["tool"])].append(r)
print(f"run {want}")
print("| N | command | tool | runs | wall s median [min-max] | head CPU a node, ms | node CPU a node, ms | head peak RSS MB | pdsh wall / tool wall |")
print("|---|---|---|---|---|---|---|---|---|")
for (n, cmd, tool), rs in sorted(by.items()):
    w = [r["wall"] for r in rs]
    pdsh = by.get((n, cmd, "pdsh -f32 (default)"))
    ratio = (f"{statistics.median([r['wall'] for r in pdsh]) / statistics.median(w):.1f}x"
             if pdsh else "")
    med = lambda k: statistics.median([r[k] for r in rs])
    print(f"| {n} | {cmd} | {tool} | {len(rs)} | {statistics.median(w):.3f} [{min(w):.3f}-{max(w):.3f}] | "
          f"{1000 * med('client_cpu') / n:.2f} | {1000 * med('server_cpu') / n:.2f} | "
          f"{med('client_maxrss_kb') / 1024:.1f} | {ratio} |")
