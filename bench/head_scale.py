#!/usr/bin/env python3
"""The head's CPU a connection at several node counts, with the head and
the agents on CPUs of their own, as on a cluster.

    bench/head_scale.py BIN_DIR [NS] [RUNS] [HEAD_CPUS] [AGENT_CPUS]
    # defaults: 256,4096 5 (the first two CPUs) (every other CPU)
    bench/head_scale.py target/release 256,4096 5 0-1 2-15

BIN_DIR holds `multinode`, `mn-exec-all` and `mn-ssh` (a build's
target/release). Starts max(NS) agents on
loopback addresses 127.1.x.y (port HEAD_SCALE_PORT, default 29880), pinned
to AGENT_CPUS, then runs `mn-exec-all -c true` flat (every node reached by
the head itself) on the first N of them, pinned to HEAD_CPUS, RUNS times
each N, the Ns alternated. Prints, for each N, the median and range of the
wall time and of exec_all's CPU a connection (user + system, from wait4),
its peak RSS, and the ratio of each N's CPU a connection to the first N's.
No root needed; the agents and their commands end with the script.
"""
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time


def cpus_of(spec):
    out = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def address(i):
    # 127.1.0.1 .. : 250 a /24, never .0 or .255
    return "127.1.%d.%d" % (i // 250, i % 250 + 1)


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    bins = args[0]
    mine = os.sched_getaffinity(0)
    try:
        ns = [int(n) for n in (args[1] if len(args) > 1 else "256,4096").split(",")]
        runs = int(args[2]) if len(args) > 2 else 5
        head = cpus_of(args[3]) if len(args) > 3 else set(sorted(mine)[:2])
        agents = cpus_of(args[4]) if len(args) > 4 else (mine - head) or mine
    except ValueError as e:
        print("head_scale: %s: NS is a list such as 256,4096, RUNS a number, CPUs a list "
              "such as 0-1 or 2-15 (see --help)" % e, file=sys.stderr)
        return 2
    if min(ns) < 1 or runs < 1:
        print("head_scale: NS and RUNS must be 1 or more (see --help)", file=sys.stderr)
        return 2
    if not head <= mine or not agents <= mine:
        print("head_scale: CPUs %s / %s: this machine has %s; give HEAD_CPUS and AGENT_CPUS among them"
              % (sorted(head), sorted(agents), sorted(mine)), file=sys.stderr)
        return 2
    port = int(os.environ.get("HEAD_SCALE_PORT", "29880"))
    env = dict(os.environ, MULTINODE_SECRET="head-scale-bench-secret-0123456789")
    # An agent's runtime starts a thread a CPU it may use: as on a node of 2.
    agent_env = dict(env, TOKIO_WORKER_THREADS="2")
    # Each agent: a connection, 3 pipes a command, its keeper.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    def pin(cpus):
        return lambda: os.sched_setaffinity(0, cpus)

    procs = []
    try:
        for i in range(max(ns)):
            procs.append(subprocess.Popen(
                [os.path.join(bins, "multinode"), "agent", "--listen", "%s:%d" % (address(i), port)],
                env=agent_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, preexec_fn=pin(agents), start_new_session=True))
        deadline = time.monotonic() + 60 + max(ns) / 20
        for i in range(max(ns)):
            while True:
                try:
                    socket.create_connection((address(i), port), timeout=1).close()
                    break
                except OSError:
                    if procs[i].poll() is not None or time.monotonic() > deadline:
                        print("head_scale: the agent on %s:%d did not start" % (address(i), port),
                              file=sys.stderr)
                        return 1
                    time.sleep(0.05)
        rows = {n: [] for n in ns}
        for _ in range(runs):
            for n in ns:
                # Rank 0 is the head: listed, never reached (--exclude 0).
                hosts = ["127.0.0.2:1"] + ["%s:1" % address(i) for i in range(n)]
                run_env = dict(env, MULTINODE_HOSTLIST=",".join(hosts), MULTINODE_NODE_RANK="0",
                               MULTINODE_AGENT_PORT=str(port), MULTINODE_TRANSPORT="agent")
                argv = [os.path.join(bins, "mn-exec-all"), "--exclude", "0",
                        "--fanout", str(n + 1), "-c", "true"]
                t0 = time.monotonic()
                p = subprocess.Popen(argv, env=run_env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=pin(head))
                err = p.stderr.read()
                # wait4: this process's own CPU and peak RSS, not all children's.
                _, status, usage = os.wait4(p.pid, 0)
                p.returncode = os.waitstatus_to_exitcode(status)
                wall = time.monotonic() - t0
                if p.returncode != 0:
                    print("head_scale: mn-exec-all on %d nodes exited %d: %s"
                          % (n, p.returncode, err.decode(errors="replace")[-2000:]), file=sys.stderr)
                    return 1
                cpu = usage.ru_utime + usage.ru_stime
                rows[n].append((wall, cpu / n * 1e3, usage.ru_maxrss / 1024))
                time.sleep(1)  # the agents' teardown of the channels
    finally:
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def med(xs):
        return statistics.median(xs)

    print("flat mn-exec-all -c true; head on CPUs %s, agents on %s; %d runs each, alternated"
          % (fmt(head), fmt(agents), runs))
    base = med([r[1] for r in rows[ns[0]]])
    for n in ns:
        walls = [r[0] for r in rows[n]]
        cpus = [r[1] for r in rows[n]]
        print("N=%d: wall s %.3f [%.3f-%.3f], head CPU a connection ms %.3f [%.3f-%.3f], "
              "%.2fx N=%d's, peak RSS MB %.1f"
              % (n, med(walls), min(walls), max(walls), med(cpus), min(cpus), max(cpus),
                 med(cpus) / base, ns[0], max(r[2] for r in rows[n])))
    return 0


def fmt(cpus):
    return ",".join(map(str, sorted(cpus)))


if __name__ == "__main__":
    sys.exit(main())
