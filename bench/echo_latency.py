#!/usr/bin/env python3
"""Keystroke echo latency through a terminal session (issue 31).

Each tool runs `stty raw -echo; echo READY; exec cat` with a terminal
(`-tt`) on a node of this machine, under a pty of this script's (the
client's local terminal): one byte is written to that pty, and the time
until the same byte comes back is one sample. The path is a keystroke's
in an editor or a shell's line editing: client, network, server, the
remote pty, the remote program, and back. The tools take turns, one
sample each in a new random order each round, N samples each, so that
the machine's load falls on all alike; GAP ms pass before each sample
(keys are typed apart), so that no tool's work after its echo falls on
another's sample.

Tools:
- `mn-ssh -tt` to a `multinode agent` (127.0.0.2),
- OpenSSH `ssh -tt -i KEY` (the job's key from `multinode keygen`) to the agent,
- OpenSSH `ssh -tt` to a private stock `sshd` (127.0.0.1) on the same
  machine: the reference (goal: the agent no worse).

Usage: bench/echo_latency.py [--n 500] [--gap-ms 2] [--syscalls]
One JSON line a tool in bench/results/echo-latency.jsonl; a table on stdout.
--syscalls: each client runs under `strace -f -c` instead, and the table is
the system calls it made a keystroke (its connection's setup included,
spread over N); timings under strace mean nothing and are not kept.
Needs python3, OpenSSH's ssh, sshd and ssh-keygen, root (the private sshd
logs in as root with a key, as tests/integration/openssh.rs does), and a
release build (BENCH_MULTINODE: another binary). BENCH_MULTINODE_BEFORE:
a second binary, measured in the same run as one more tool (its mn-ssh to
its own agent on 127.0.0.3): a change's before and after side by side.
"""
import argparse
import json
import os
import pty
import random
import select
import shutil
import signal
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
BEFORE = os.environ.get("BENCH_MULTINODE_BEFORE")
AGENT_HOST, AGENT_PORT = "127.0.0.2", 29967
BEFORE_HOST = "127.0.0.3"
SECRET = "bench-echo-latency-secret-0123456789"
REMOTE = "stty raw -echo; echo READY; exec cat"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(host, port, limit=20):
    t = time.monotonic()
    while time.monotonic() - t < limit:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {host}:{port}")


class Session:
    """A client under a pty of ours, until its remote `cat` is ready."""

    def __init__(self, name, argv, env, strace=None):
        self.name, self.strace = name, strace
        if strace:
            argv = ["strace", "-f", "-c", "-o", strace] + argv
        pid, fd = pty.fork()
        if pid == 0:
            os.execvpe(argv[0], argv, env)
        self.pid, self.fd = pid, fd
        self.read_until(b"READY", 20)
        # What follows READY (its newline) is not a sample.
        time.sleep(0.2)
        self.drain()

    def read_until(self, what, limit):
        seen = b""
        end = time.monotonic() + limit
        while what not in seen:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                sys.exit(f"{self.name}: no {what!r} within {limit} s: {seen!r}")
            seen += os.read(self.fd, 4096)
        return seen

    def drain(self):
        while select.select([self.fd], [], [], 0)[0]:
            os.read(self.fd, 4096)

    def sample(self, byte):
        """Seconds from writing `byte` to reading it back."""
        t = time.perf_counter()
        os.write(self.fd, byte)
        got = b""
        while byte not in got:
            if not select.select([self.fd], [], [], 5)[0]:
                sys.exit(f"{self.name}: no echo within 5 s")
            got += os.read(self.fd, 64)
        return time.perf_counter() - t

    def close(self):
        pid = self.pid
        if self.strace:
            # The client, not strace: strace then writes its table and ends.
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    pid = int(f.read().split()[0])
            except (OSError, IndexError, ValueError):
                pass
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)

    def syscalls(self):
        """Calls in strace's table: the `total` line's count."""
        with open(self.strace) as f:
            total = [line.split() for line in f if line.rstrip().endswith(" total")]
        return int(total[-1][3])


def sshd(tmp):
    """A private stock sshd on 127.0.0.1 that takes root with one key."""
    port = free_port()
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                        os.path.join(tmp, name)], check=True)
    shutil.copy(os.path.join(tmp, "client_key.pub"), os.path.join(tmp, "authorized_keys"))
    with open(os.path.join(tmp, "sshd_config"), "w") as f:
        f.write(f"ListenAddress 127.0.0.1:{port}\nHostKey {tmp}/host_key\nPidFile none\n"
                f"AuthorizedKeysFile {tmp}/authorized_keys\nPermitRootLogin prohibit-password\n"
                "PubkeyAuthentication yes\nPasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nUseDNS no\n"
                "PrintMotd no\nPrintLastLog no\nLogLevel ERROR\n")
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", os.path.join(tmp, "sshd_config")],
                            stdin=subprocess.DEVNULL)
    wait_port("127.0.0.1", port)
    return proc, port


def openssh(key, port, host):
    return ["ssh", "-tt", "-i", key, "-p", str(port), "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-o", "KexAlgorithms=curve25519-sha256", host, REMOTE]


def environment(tmp, binary, name, secret, port, extra=None):
    """A clean environment whose PATH has `multinode` and `mn-ssh` as
    `binary` (links in TMP/NAME), with the job's secret and agent port."""
    bindir = os.path.join(tmp, name)
    os.mkdir(bindir)
    for prog in ("multinode", "mn-ssh"):
        os.symlink(os.path.abspath(binary), os.path.join(bindir, prog))
    return {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
            "USER": os.environ.get("USER", "root"),
            "MULTINODE_SECRET": secret, "MULTINODE_AGENT_PORT": str(port), **(extra or {})}


def start_agent(env, host, port):
    """`multinode agent` (the one on env's PATH) on HOST:PORT, quiet."""
    return subprocess.Popen(["multinode", "agent", "--listen", f"{host}:{port}"],
                            env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--gap-ms", type=float, default=2.0,
                    help="pause between two samples, so that no tool's work after its "
                         "echo falls on the next tool's sample")
    ap.add_argument("--syscalls", action="store_true",
                    help="count each client's system calls a keystroke (strace -c)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mn-echo-bench-")
    env = environment(tmp, MULTINODE, "bin", SECRET, AGENT_PORT, {"TERM": "xterm"})
    agents = [start_agent(env, AGENT_HOST, AGENT_PORT)]
    if BEFORE:
        env_before = environment(tmp, BEFORE, "bin-before", SECRET, AGENT_PORT,
                                 {"TERM": "xterm"})
        agents.append(start_agent(env_before, BEFORE_HOST, AGENT_PORT))
    server, sshd_port = sshd(tmp)
    sessions = []
    try:
        wait_port(AGENT_HOST, AGENT_PORT)
        if BEFORE:
            wait_port(BEFORE_HOST, AGENT_PORT)
        job_key = os.path.join(tmp, "id_job")
        subprocess.run(["multinode", "keygen", "-o", job_key], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        tools = [
            ("mn-ssh -tt → agent", ["mn-ssh", "-tt", AGENT_HOST, REMOTE], env),
            ("ssh -tt → agent", openssh(job_key, AGENT_PORT, AGENT_HOST), env),
            ("ssh -tt → sshd", openssh(os.path.join(tmp, "client_key"), sshd_port, "127.0.0.1"),
             env),
        ]
        if BEFORE:
            tools.insert(1, ("mn-ssh -tt, before", ["mn-ssh", "-tt", BEFORE_HOST, REMOTE],
                             env_before))
        sessions = [Session(name, argv, e,
                            os.path.join(tmp, f"strace-{k}") if a.syscalls else None)
                    for k, (name, argv, e) in enumerate(tools)]
        samples = {s.name: [] for s in sessions}
        # A new order each round, and a pause before each sample: what a
        # server or client does after its echo (sshd makes most of its
        # system calls then) would otherwise always fall on the same next tool.
        order = random.Random(31)
        for i in range(a.n):
            byte = bytes([ord("a") + i % 26])
            for s in order.sample(sessions, len(sessions)):
                time.sleep(a.gap_ms / 1000)
                samples[s.name].append(s.sample(byte))
        if a.syscalls:
            for s in sessions:
                s.close()
            print(f"system calls a keystroke, client side, {a.n} keystrokes a tool "
                  "(setup included)")
            for s in sessions:
                print(f"{s.name:<22} {s.syscalls() / a.n:>6.1f}")
            sessions = []
            return
        stamp = time.strftime("%Y%m%d-%H%M%S")
        load = os.getloadavg()[0]
        os.makedirs(RESULTS, exist_ok=True)
        print(f"echo latency, {a.n} keystrokes a tool, {a.gap_ms:g} ms apart, "
              f"load average {load:.1f}")
        print(f"{'tool':<22} {'median µs':>10} {'p99 µs':>8} {'max µs':>8}")
        with open(os.path.join(RESULTS, "echo-latency.jsonl"), "a") as out:
            for name, xs in samples.items():
                xs = sorted(x * 1e6 for x in xs)
                med = statistics.median(xs)
                p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
                print(f"{name:<22} {med:>10.0f} {p99:>8.0f} {xs[-1]:>8.0f}")
                out.write(json.dumps({"run": stamp, "tool": name, "n": a.n, "gap_ms": a.gap_ms,
                                      "median_us": round(med), "p99_us": round(p99),
                                      "max_us": round(xs[-1]), "load1": round(load, 2)}) + "\n")
    finally:
        for s in sessions:
            s.close()
        for p in agents + [server]:
            p.terminate()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
