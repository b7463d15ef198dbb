#!/usr/bin/env python3
"""What the environment sent to each node costs (docs/scale.md).

Every node gets MULTINODE_HOSTLIST and MULTINODE_HOSTLIST_NOSLOTS (~24 bytes
a node here), so the bytes sent per connection grow with N. This runs
`mn-exec-all -c true` on N agents with an extra exported variable PAD of 0,
25,000 and 100,000 bytes, alternated, and prints the medians of client and
agent CPU per connection. Needs lib/setup.sh (for the cgroups) and a
release build; starts and stops its own agents.

Usage: bench/env_size.py [N] [runs]     (defaults: 256 5)
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

PADS = (0, 25000, 100000)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    for alias in (bench.MN_SSH, bench.MN_EXEC_ALL, os.path.join(bench.STATE, "bin", "multinode")):
        os.makedirs(os.path.dirname(alias), exist_ok=True)
        if not os.path.lexists(alias):
            os.symlink(os.path.realpath(bench.MULTINODE), alias)
    agents = bench.Agents(n)
    ctx = bench.Ctx(bench.Sshd(), agents)
    got = {pad: [] for pad in PADS}
    try:
        agents.start()
        for _ in range(runs):
            for pad in PADS:
                tool = "mn-exec-all PAD=%d bytes" % pad

                def build(hs, cmd, n, pad=pad):
                    argv, env, kind = bench.t_mn()(hs, cmd, n)
                    if pad:
                        env["PAD"] = "x" * pad
                    return argv, env, kind
                bench.TOOLS[tool] = build
                r = bench.run_once(ctx, tool, n, "true")
                if not r["ok"]:
                    raise SystemExit("%s: %s" % (tool, r["bad"]))
                got[pad].append(r)
    finally:
        agents.stop()
    print("N=%d, %d runs each, medians" % (n, runs))
    for pad, rs in got.items():
        def m(f):
            return statistics.median(r[f] for r in rs)
        print("PAD %6d bytes: wall %.3f s, client %.3f ms a connection, agents %.3f ms a node"
              % (pad, m("wall"), m("client_cpu") / n * 1000, m("server_cpu") / n * 1000))


if __name__ == "__main__":
    main()
