#!/usr/bin/env python3
"""What a client that does not log in can take from an agent (docs/security.md).

Starts its own `multinode agent`s on 127.0.9.x (loopback only; stopped by
pid before it returns), plays the attacker with raw TCP connections from
other 127.x addresses, and measures:

  deadline        seconds until an "ignore-packet holder" (the SSH banner, then
                  a 16-byte SSH_MSG_IGNORE every 2 s, never a key exchange) is
                  closed, with the default --login-timeout (30 s) and with 5 s
  held_one_source connections a flood of 2,000 from one address still holds
  held_all        connections still held when 16 addresses send 100 each
  rss_per_conn    agent memory (VmRSS, KiB) per connection held after the
                  banner and a key exchange started (KEXINIT), and after the
                  banner and one 256 KiB SSH_MSG_IGNORE packet (the worst a
                  packet can cost, russh's largest), 256 connections each
  attempts        authentication requests one connection may have rejected
                  (OpenSSH `ssh` offering 8 wrong keys; agent log at -v)
  penalty         seconds a source is refused after two connections of it ran
                  out of time
  mn_ssh_flood    `mn-ssh HOST true` from 127.0.0.1, median of 10, while 2,000
                  connections from another address are held (agent with a
                  1,024-descriptor limit), and the same without the flood

Usage: bench/login_limits.py [--quick]      (--quick: skip the 30 s deadline)
One JSON line per run in bench/results/login-limits.jsonl; a summary on stdout.
Needs a release build, OpenSSH's ssh and ssh-keygen; run as root or raise
`ulimit -n` to 8192 first (it holds 2,000 sockets).
"""
import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import struct
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.environ.get("BENCH_RESULTS") or os.path.join(HERE, "results")
MULTINODE = os.environ.get("BENCH_MULTINODE") or os.path.join(
    REPO, "target", "release", "multinode")
SECRET = "login-limits-secret-0123456789abcdef"
PORT = 29922
IGNORE = bytes.fromhex("0000000c" "06" "02" "00000000" "000000000000")  # 16 bytes


def env():
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/"),
            "MULTINODE_SECRET": SECRET}


class Agent:
    def __init__(self, host, args=(), nofile=None, log=None):
        self.host = host
        self.log = log or tempfile.mktemp(prefix="mn-agent-", suffix=".log")

        def limit():
            if nofile:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        self.proc = subprocess.Popen(
            [MULTINODE, "agent", "--listen", "%s:%d" % (host, PORT), *args],
            env=env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.log, "w"), preexec_fn=limit)
        for _ in range(200):
            try:
                socket.create_connection((host, PORT), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)

    def rss_kb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def log_text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def connect(src, host):
    s = socket.socket()
    s.bind((src, 0))
    s.connect((host, PORT))
    return s


def kexinit():
    payload = bytes([20]) + bytes(16)
    for name in ["curve25519-sha256", "ssh-ed25519", "chacha20-poly1305@openssh.com",
                 "chacha20-poly1305@openssh.com", "hmac-sha2-256", "hmac-sha2-256",
                 "none", "none", "", ""]:
        payload += struct.pack("!I", len(name)) + name.encode()
    payload += bytes(5)
    pad = 8 - (5 + len(payload)) % 8
    if pad < 4:
        pad += 8
    return struct.pack("!IB", 1 + len(payload) + pad, pad) + payload + bytes(pad)


def big_ignore(size=256 * 1024):
    """One cleartext SSH_MSG_IGNORE whose packet is `size` bytes long."""
    body = size - 1 - 4 - 1 - 4
    payload = bytes([2]) + struct.pack("!I", body) + bytes(body)
    pad = 8 - (5 + len(payload)) % 8
    if pad < 4:
        pad += 8
    return struct.pack("!IB", 1 + len(payload) + pad, pad) + payload + bytes(pad)


def settle(socks, limit=30):
    """Waits until the agent served (banner) or closed each socket; returns (served, closed)."""
    state = {}
    t0 = time.time()
    for s in socks:
        s.setblocking(False)
    while time.time() - t0 < limit and len(state) < len(socks):
        for i, s in enumerate(socks):
            if state.get(i) == "closed":
                continue
            try:
                data = s.recv(65536)
                state[i] = "served" if data else "closed"
            except BlockingIOError:
                pass
            except OSError:
                state[i] = "closed"
        time.sleep(0.05)
    # A served socket may have been closed since: check once more.
    time.sleep(0.5)
    for i, s in enumerate(socks):
        if state.get(i) == "served":
            try:
                while True:
                    data = s.recv(65536)
                    if not data:
                        state[i] = "closed"
                        break
            except BlockingIOError:
                pass
            except OSError:
                state[i] = "closed"
    served = sum(1 for v in state.values() if v == "served")
    closed = sum(1 for v in state.values() if v == "closed")
    return served, closed


def close_all(socks):
    for s in socks:
        s.close()


def deadline(args):
    agent = Agent("127.0.9.2", args)
    try:
        s = connect("127.0.9.200", agent.host)
        s.sendall(b"SSH-2.0-x\r\n")
        s.settimeout(0.1)
        t0 = time.time()
        nxt = t0
        while time.time() - t0 < 120:
            if time.time() >= nxt:
                try:
                    s.sendall(IGNORE)
                except OSError:
                    break
                nxt += 2
            try:
                if not s.recv(4096):
                    break
            except socket.timeout:
                pass
            except OSError:
                break
        return round(time.time() - t0, 2)
    finally:
        agent.stop()


def held(sources, per_source, nofile=None):
    agent = Agent("127.0.9.3", (), nofile=nofile)
    socks = []
    try:
        for src in sources:
            for _ in range(per_source):
                s = connect(src, agent.host)
                s.sendall(b"SSH-2.0-x\r\n")
                socks.append(s)
        served, closed = settle(socks)
        return served, closed
    finally:
        close_all(socks)
        agent.stop()


def rss_per_conn(payload, n=256):
    agent = Agent("127.0.9.4")
    socks = []
    try:
        time.sleep(0.5)
        before = agent.rss_kb()
        for i in range(n):
            s = connect("127.0.10.%d" % (2 + i // 60), agent.host)
            s.sendall(b"SSH-2.0-x\r\n" + payload)
            socks.append(s)
        served, _ = settle(socks)
        time.sleep(1)
        after = agent.rss_kb()
        return {"held": served, "rss_before_kb": before, "rss_after_kb": after,
                "kb_per_conn": round((after - before) / max(served, 1), 1)}
    finally:
        close_all(socks)
        agent.stop()


def attempts(tmp):
    agent = Agent("127.0.9.5", ("-v",))
    try:
        cmd = ["ssh", "-p", str(PORT), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
               "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
        for i in range(8):
            key = os.path.join(tmp, "k%d" % i)
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
            cmd += ["-i", key]
        p = subprocess.run(cmd + [agent.host, "true"], capture_output=True, text=True)
        time.sleep(0.5)
        keys = agent.log_text().count("rejected a key")
        return {"keys_rejected": keys, "requests_rejected": keys + 1,
                "ssh_says": (p.stderr.strip().splitlines() or [""])[-1]}
    finally:
        agent.stop()


def penalty():
    agent = Agent("127.0.9.6", ("--login-timeout", "1"))
    try:
        stalled = [connect("127.0.9.201", agent.host) for _ in range(2)]
        # Held until the agent closes them at the 1 s deadline: 2 x 10 s of penalty.
        for s in stalled:
            s.settimeout(10)
            try:
                while s.recv(4096):
                    pass
            except OSError:
                pass
        t0 = time.time()
        close_all(stalled)

        def banner():
            s = connect("127.0.9.201", agent.host)
            s.settimeout(5)
            try:
                return s.recv(8).startswith(b"SSH-2.0")
            except OSError:
                return False
            finally:
                s.close()
        while not banner() and time.time() - t0 < 700:
            time.sleep(0.5)
        return round(time.time() - t0, 1)
    finally:
        agent.stop()


def mn_ssh_times(tmp, flood):
    agent = Agent("127.0.9.7", (), nofile=1024)
    link = os.path.join(tmp, "mn-ssh")
    if not os.path.lexists(link):
        os.symlink(os.path.realpath(MULTINODE), link)
    socks = []
    try:
        for _ in range(flood):
            s = connect("127.0.9.202", agent.host)
            s.sendall(b"SSH-2.0-x\r\n")
            socks.append(s)
        if socks:
            settle(socks)
        times = []
        for _ in range(10):
            t0 = time.time()
            p = subprocess.run([link, "-o", "ConnectTimeout=20", agent.host, "true"],
                               env=env(), capture_output=True)
            times.append(time.time() - t0 if p.returncode == 0 else float("inf"))
        return {"median_s": round(statistics.median(times), 4), "max_s": round(max(times), 4)}
    finally:
        close_all(socks)
        agent.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip the 30 s default deadline")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 8192:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, hard), hard))
    tmp = tempfile.mkdtemp(prefix="mn-login-limits-")
    res = {"run_id": time.strftime("%Y%m%d-%H%M%S"),
           "commit": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip()}
    try:
        if not a.quick:
            res["deadline_default_s"] = deadline(())
        res["deadline_5s_s"] = deadline(("--login-timeout", "5"))
        res["held_one_source"] = dict(zip(("held", "closed"), held(["127.0.9.203"], 2000, 1024)))
        res["held_all"] = dict(zip(("held", "closed"),
                                   held(["127.0.11.%d" % i for i in range(2, 18)], 100)))
        res["rss_kexinit"] = rss_per_conn(kexinit())
        res["rss_256k_packet"] = rss_per_conn(big_ignore())
        res["attempts"] = attempts(tmp)
        res["penalty_s"] = penalty()
        res["mn_ssh_flood"] = mn_ssh_times(tmp, 2000)
        res["mn_ssh_quiet"] = mn_ssh_times(tmp, 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "login-limits.jsonl"), "a") as f:
        f.write(json.dumps(res) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
