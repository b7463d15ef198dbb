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
  penalized_deadline_s
                  seconds a stalled connection of a penalized source is held
                  (agent with --login-timeout 8; two of its connections ran
                  out of time first)
  mn_ssh_flood    `mn-ssh HOST true` from 127.0.0.1, median of 10, while 2,000
                  connections from another address are held (agent with a
                  1,024-descriptor limit), and the same without the flood
  mn_ssh_own_address
                  the same while 127.0.0.1 itself is penalized (50 of its
                  connections cut at the deadline, --login-timeout 5) and
                  holds 64 connections that never log in, topped up before
                  each run (issue 32, point 1)
  mn_ssh_all_slots
                  the same while 4 other addresses hold 64 connections each,
                  every one of the 256 slots, topped up before each run
                  (issue 32, point 2)

Usage: bench/login_limits.py [--quick] [--attacks]
  --quick: skip the 30 s deadline; --attacks: only the three mn-ssh figures
  of points 1 and 2 (quiet, own address, all slots).
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


def held_for(s, limit=60):
    """Seconds until the agent closes `s`."""
    t0 = time.time()
    s.settimeout(limit)
    try:
        while s.recv(4096):
            pass
    except OSError:
        pass
    return time.time() - t0


def penalized_deadline():
    agent = Agent("127.0.9.6", ("--login-timeout", "8"))
    try:
        stalled = [connect("127.0.9.201", agent.host) for _ in range(2)]
        # Held until the agent closes them at the 8 s deadline: 2 x 10 s of penalty.
        for s in stalled:
            held_for(s)
        close_all(stalled)
        s = connect("127.0.9.201", agent.host)
        try:
            return round(held_for(s), 1)
        finally:
            s.close()
    finally:
        agent.stop()


class Holder:
    """`per_source` connections from each of `sources` that never log in,
    re-opened as the agent closes them."""

    def __init__(self, host, sources, per_source):
        self.host, self.per_source = host, per_source
        self.socks = {src: [] for src in sources}
        self.refill()

    def refill(self):
        new = []
        for src, socks in self.socks.items():
            alive = []
            for s in socks:
                try:
                    while True:
                        if not s.recv(65536):
                            raise OSError("closed")
                except BlockingIOError:
                    alive.append(s)
                except OSError:
                    s.close()
            while len(alive) < self.per_source:
                s = connect(src, self.host)
                s.sendall(b"SSH-2.0-x\r\n")
                alive.append(s)
                new.append(s)
            self.socks[src] = alive
        if new:
            settle(new)

    def close(self):
        for socks in self.socks.values():
            close_all(socks)


def mn_ssh(link, host):
    """Seconds `mn-ssh HOST true` took (inf when it failed)."""
    t0 = time.time()
    p = subprocess.run([link, "-o", "ConnectTimeout=20", host, "true"],
                       env=env(), capture_output=True)
    return time.time() - t0 if p.returncode == 0 else float("inf")


def summary(times):
    return {"median_s": round(statistics.median(times), 4), "max_s": round(max(times), 4),
            "failed": sum(1 for t in times if t == float("inf"))}


def mn_ssh_link(tmp):
    link = os.path.join(tmp, "mn-ssh")
    if not os.path.lexists(link):
        os.symlink(os.path.realpath(MULTINODE), link)
    return link


def mn_ssh_attacked(tmp, attack):
    """`mn-ssh HOST true` from 127.0.0.1, 10 times, during `attack`."""
    link = mn_ssh_link(tmp)
    if attack == "own_address":
        agent = Agent("127.0.9.8", ("--login-timeout", "5"))
        sources = ["127.0.0.1"]
        # 50 connections from the client's own address cut at the deadline.
        cut = [connect("127.0.0.1", agent.host) for _ in range(50)]
        for s in cut:
            s.sendall(b"SSH-2.0-x\r\n")
        for s in cut:
            held_for(s)
        close_all(cut)
    else:
        agent = Agent("127.0.9.9")
        sources = ["127.0.12.%d" % i for i in range(2, 6)]
    holder = None
    try:
        holder = Holder(agent.host, sources, 64)
        times = []
        for _ in range(10):
            holder.refill()
            times.append(mn_ssh(link, agent.host))
        return summary(times)
    finally:
        if holder:
            holder.close()
        agent.stop()


def mn_ssh_times(tmp, flood):
    agent = Agent("127.0.9.7", (), nofile=1024)
    link = mn_ssh_link(tmp)
    socks = []
    try:
        for _ in range(flood):
            s = connect("127.0.9.202", agent.host)
            s.sendall(b"SSH-2.0-x\r\n")
            socks.append(s)
        if socks:
            settle(socks)
        return summary([mn_ssh(link, agent.host) for _ in range(10)])
    finally:
        close_all(socks)
        agent.stop()


def everything(res, tmp, quick):
    """Every measurement but the three of mn-ssh quiet and attacked."""
    if not quick:
        res["deadline_default_s"] = deadline(())
    res["deadline_5s_s"] = deadline(("--login-timeout", "5"))
    res["held_one_source"] = dict(zip(("held", "closed"), held(["127.0.9.203"], 2000, 1024)))
    res["held_all"] = dict(zip(("held", "closed"),
                               held(["127.0.11.%d" % i for i in range(2, 18)], 100)))
    res["rss_kexinit"] = rss_per_conn(kexinit())
    res["rss_256k_packet"] = rss_per_conn(big_ignore())
    res["attempts"] = attempts(tmp)
    res["penalized_deadline_s"] = penalized_deadline()
    res["mn_ssh_flood"] = mn_ssh_times(tmp, 2000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip the 30 s default deadline")
    ap.add_argument("--attacks", action="store_true",
                    help="only mn-ssh quiet and during the attacks of issue 32, points 1 and 2")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 8192:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(8192, hard), hard))
    tmp = tempfile.mkdtemp(prefix="mn-login-limits-")
    res = {"run_id": time.strftime("%Y%m%d-%H%M%S"),
           "commit": subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip(),
           "binary": os.path.relpath(os.path.realpath(MULTINODE), REPO)}
    try:
        if not a.attacks:
            everything(res, tmp, a.quick)
        res["mn_ssh_quiet"] = mn_ssh_times(tmp, 0)
        res["mn_ssh_own_address"] = mn_ssh_attacked(tmp, "own_address")
        res["mn_ssh_all_slots"] = mn_ssh_attacked(tmp, "all_slots")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "login-limits.jsonl"), "a") as f:
        f.write(json.dumps(res) + "\n")
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
