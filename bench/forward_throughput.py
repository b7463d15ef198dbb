#!/usr/bin/env python3
"""Throughput of a forwarded port (`-L`) (issue 31).

A sink/source server (a child of this script) listens on 127.0.0.1; each
tool holds a `-N -L 127.0.0.1:LOCAL:127.0.0.1:SERVER` forward, and this
script pushes SIZE bytes through it each way: up (the server reads them all
and says so) and down (the server writes them, this script reads them all).
One sample is one transfer on a fresh forwarded connection, timed from the
request to the last byte (up: to the server's answer). The tools take
turns, the order rotating each round, one warm-up round first, so that the
machine's load falls on all alike.

Tools:
- `mn-ssh -N -L` to a `multinode agent` (127.0.0.2),
- OpenSSH `ssh -N -L -i KEY` (the job's key from `multinode keygen`) to the
  agent,
- OpenSSH `ssh -N -L` to a private stock `sshd` (127.0.0.1) on the same
  machine: the reference (goal: mn-ssh and the agent at least as fast).

CPU: the client's (the tool's process) and the server's (the agent, or the
sshd and every process it forked), user + system from /proc, during each
transfer, as seconds a GiB.

Usage: bench/forward_throughput.py [--size-mib 1024] [--runs 5]
One JSON line a tool and direction in bench/results/forward-throughput.jsonl;
a table on stdout. Needs python3, OpenSSH's ssh, sshd and ssh-keygen, root
(as bench/echo_latency.py: the private sshd logs in as root with a key), and
a release build (BENCH_MULTINODE: another binary). BENCH_MULTINODE_BEFORE:
a second binary, measured in the same run by its own agent on 127.0.0.3
with both clients (its `mn-ssh`, and OpenSSH's `ssh`): a change's before
and after side by side.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.environ.get("BENCH_RESULTS") or os.path.join(HERE, "results")
MULTINODE = os.environ.get("BENCH_MULTINODE") or os.path.join(
    REPO, "target", "release", "multinode")
BEFORE = os.environ.get("BENCH_MULTINODE_BEFORE")
AGENT_HOST, AGENT_PORT = "127.0.0.2", 29968
BEFORE_HOST = "127.0.0.3"
SECRET = "bench-forward-throughput-secret-0123"
CHUNK = 1 << 20
TICK = os.sysconf("SC_CLK_TCK")

sys.path.insert(0, HERE)
from echo_latency import environment, free_port, sshd, start_agent, wait_port  # noqa: E402


def recv_exact(conn, n):
    got = bytearray()
    while len(got) < n:
        b = conn.recv(n - len(got))
        if not b:
            raise EOFError(f"closed after {len(got)} of {n} bytes")
        got += b
    return bytes(got)


def serve_one(conn):
    """`U` SIZE: read SIZE bytes, answer b"ok"; `D` SIZE: write SIZE bytes."""
    with conn:
        try:
            op, size = struct.unpack("!cQ", recv_exact(conn, 9))
        except (EOFError, OSError):
            # A probe of the forward's port (wait_port) that asked nothing.
            return
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        if op == b"U":
            left = size
            while left:
                n = conn.recv_into(view[:min(left, CHUNK)])
                if not n:
                    return
                left -= n
            conn.sendall(b"ok")
        elif op == b"D":
            block = os.urandom(CHUNK)
            left = size
            while left:
                n = min(left, CHUNK)
                conn.sendall(block[:n])
                left -= n


def serve(port):
    """The sink/source server, until stdin closes (its parent is gone)."""
    s = socket.create_server(("127.0.0.1", port))
    threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    print("listening", flush=True)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve_one, args=(c,), daemon=True).start()


def cpu_of(pids):
    """User + system seconds of `pids` and all their descendants now."""
    children = {}
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        children.setdefault(int(fields[1]), []).append(pid)
        stats[pid] = (int(fields[11]) + int(fields[12])) / TICK
    total, todo = 0.0, list(pids)
    while todo:
        pid = todo.pop()
        total += stats.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


def transfer(port, op, size):
    """Seconds for one transfer through 127.0.0.1:`port`."""
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    with c:
        t = time.perf_counter()
        c.sendall(struct.pack("!cQ", op, size))
        if op == b"U":
            block = os.urandom(CHUNK)
            left = size
            while left:
                n = min(left, CHUNK)
                c.sendall(block[:n])
                left -= n
            if recv_exact(c, 2) != b"ok":
                sys.exit("the server did not take the upload")
        else:
            buf = bytearray(CHUNK)
            view = memoryview(buf)
            left = size
            while left:
                n = c.recv_into(view[:min(left, CHUNK)])
                if not n:
                    sys.exit(f"download ended {left} bytes short")
                left -= n
        return time.perf_counter() - t


class Tool:
    def __init__(self, name, argv, env, server_pids):
        self.name, self.server_pids = name, server_pids
        self.port = free_port()
        argv = argv[:1] + ["-N", "-L", f"127.0.0.1:{self.port}:127.0.0.1:{SERVER_PORT}"] + argv[1:]
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
        wait_port("127.0.0.1", self.port)

    def run(self, op, size):
        c0, s0 = cpu_of([self.proc.pid]), cpu_of(self.server_pids)
        secs = transfer(self.port, op, size)
        c1, s1 = cpu_of([self.proc.pid]), cpu_of(self.server_pids)
        return secs, c1 - c0, s1 - s0

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def binary_name(binary):
    """The binary measured: relative to the repository when inside it."""
    path = os.path.abspath(binary)
    if path.startswith(REPO + os.sep):
        return os.path.relpath(path, REPO)
    return os.path.basename(path)


def openssh(key, port, host):
    return ["ssh", "-i", key, "-p", str(port), "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-o", "KexAlgorithms=curve25519-sha256", host]


SERVER_PORT = 0


def main():
    global SERVER_PORT
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tools", default="",
                    help="names to keep, comma-separated substrings (default: all)")
    a = ap.parse_args()
    size = a.size_mib << 20
    tmp = tempfile.mkdtemp(prefix="mn-fwd-bench-")
    env = environment(tmp, MULTINODE, "bin", SECRET, AGENT_PORT)
    SERVER_PORT = free_port()
    sink = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve",
                             str(SERVER_PORT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    if sink.stdout.readline() != b"listening\n":
        sys.exit("the sink/source server did not start")
    agent = start_agent(env, AGENT_HOST, AGENT_PORT)
    agents = [agent]
    if BEFORE:
        env_before = environment(tmp, BEFORE, "bin-before", SECRET, AGENT_PORT)
        before = start_agent(env_before, BEFORE_HOST, AGENT_PORT)
        agents.append(before)
    server, sshd_port = sshd(tmp)
    tools = []
    try:
        wait_port(AGENT_HOST, AGENT_PORT)
        if BEFORE:
            wait_port(BEFORE_HOST, AGENT_PORT)
        job_key = os.path.join(tmp, "id_job")
        subprocess.run(["multinode", "keygen", "-o", job_key], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        wanted = [w for w in a.tools.split(",") if w]
        specs = [
            ("mn-ssh -L → agent", ["mn-ssh", AGENT_HOST], [agent.pid]),
            ("ssh -L → agent", openssh(job_key, AGENT_PORT, AGENT_HOST), [agent.pid]),
            ("ssh -L → sshd", openssh(os.path.join(tmp, "client_key"), sshd_port, "127.0.0.1"),
             [server.pid]),
        ]
        if BEFORE:
            # The job's key is the same: the secret is.
            specs[1:1] = [
                ("mn-ssh -L → agent, before", ["mn-ssh", BEFORE_HOST], [before.pid],
                 env_before),
                ("ssh -L → agent, before", openssh(job_key, AGENT_PORT, BEFORE_HOST),
                 [before.pid], env_before),
            ]
        specs = [s if len(s) == 4 else s + (env,) for s in specs]
        tools = [Tool(name, argv, tool_env, pids) for name, argv, pids, tool_env in specs
                 if not wanted or any(w in name for w in wanted)]
        samples = {(t.name, op): [] for t in tools for op in (b"U", b"D")}
        for r in range(a.runs + 1):
            for k in range(len(tools)):
                t = tools[(r + k) % len(tools)]
                for op in (b"U", b"D"):
                    got = t.run(op, size)
                    if r > 0:
                        samples[(t.name, op)].append(got)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        load = os.getloadavg()[0]
        os.makedirs(RESULTS, exist_ok=True)
        print(f"forwarded-port throughput, {a.size_mib} MiB a transfer, {a.runs} runs, "
              f"load average {load:.1f}")
        print(f"{'tool':<26} {'way':<5} {'MB/s median':>11} {'min-max':>11} "
              f"{'client CPU s/GiB':>16} {'server CPU s/GiB':>16}")
        gib = size / (1 << 30)
        with open(os.path.join(RESULTS, "forward-throughput.jsonl"), "a") as out:
            for (name, op), xs in samples.items():
                rates = sorted(size / 1e6 / s for s, _, _ in xs)
                client = statistics.median(c for _, c, _ in xs) / gib
                srv = statistics.median(v for _, _, v in xs) / gib
                way = "up" if op == b"U" else "down"
                med = statistics.median(rates)
                print(f"{name:<26} {way:<5} {med:>11.0f} {rates[0]:>5.0f}-{rates[-1]:<5.0f} "
                      f"{client:>16.2f} {srv:>16.2f}")
                out.write(json.dumps({
                    "run": stamp, "tool": name, "way": way, "size_mib": a.size_mib,
                    "runs": a.runs, "mb_s_median": round(med), "mb_s_min": round(rates[0]),
                    "mb_s_max": round(rates[-1]), "client_cpu_s_per_gib": round(client, 2),
                    "server_cpu_s_per_gib": round(srv, 2), "load1": round(load, 2),
                    "binary": binary_name(BEFORE if name.endswith(", before") else MULTINODE),
                }) + "\n")
    finally:
        for t in tools:
            t.close()
        for p in agents + [server]:
            p.terminate()
            p.wait()
        sink.stdin.close()
        sink.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
