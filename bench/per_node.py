#!/usr/bin/env python3
"""Per-node costs from bench.py's fanout lines: for each (n, command, tool),
the median wall time, client CPU per node (the head: mn-exec-all and the
processes it waited for), the relays' CPU per node (a tree's `multinode
exec-all` on its relay nodes, which run on the nodes but do the head's work
for their group), the two together (median of each run's sum, with the
range), server CPU per node (the agents or sshd: the node's side, relays
not included), client peak RSS, and the ratio of pdsh's median wall time
to the tool's (same run).

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
print("| N | command | tool | runs | wall s median [min-max] | head CPU a node, ms | "
      "relays' CPU a node, ms | head + relays a node, ms median [min-max] | "
      "node CPU a node, ms | head peak RSS MB median [max] | pdsh wall / tool wall |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for (n, cmd, tool), rs in sorted(by.items()):
    w = [r["wall"] for r in rs]
    pdsh = by.get((n, cmd, "pdsh -f32 (default)"))
    ratio = (f"{statistics.median([r['wall'] for r in pdsh]) / statistics.median(w):.1f}x"
             if pdsh else "")
    med = lambda k: statistics.median([r.get(k, 0.0) for r in rs])
    both = [1000 * (r["client_cpu"] + r.get("relay_cpu", 0.0)) / n for r in rs]
    rss = [r["client_maxrss_kb"] / 1024 for r in rs]
    print(f"| {n} | {cmd} | {tool} | {len(rs)} | {statistics.median(w):.3f} [{min(w):.3f}-{max(w):.3f}] | "
          f"{1000 * med('client_cpu') / n:.2f} | {1000 * med('relay_cpu') / n:.2f} | "
          f"{statistics.median(both):.2f} [{min(both):.2f}-{max(both):.2f}] | "
          f"{1000 * med('server_cpu') / n:.2f} | "
          f"{statistics.median(rss):.1f} [{max(rss):.1f}] | {ratio} |")
