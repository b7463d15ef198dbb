#!/usr/bin/env python3
"""multinode side by side with pdsh, ClusterShell, pssh and OpenSSH (stdlib only).

Run through bench/run.sh, which builds the release binary, starts the peers'
sshd (lib/setup.sh) and stops everything afterwards (lib/teardown.sh). This
script starts one `multinode agent` per node address itself and stops them
(by pid) before it returns.

Method (a fair side-by-side setup of the peers): N "nodes" are the loopback addresses
127.0.0.2, 127.0.0.3, ... (127.0.K.J, J in 2..251: never anything outside
127.0.0.0/8). The peers reach one private stock sshd on port 2222 that
accepts every 127.x destination; multinode reaches one agent per address.
Every tool uses curve25519 key exchange (OpenSSH through KexAlgorithms; the
agents prefer it too). Tools are alternated run by run (the order rotates
each round); each run first waits up to QUIET_MAX_WAIT s for an idle machine
and records the load it saw. Every run is checked: exit code 0, nothing on
stderr, and an answer from every host.

One JSON line per run in results/<suite>.jsonl:
  wall         seconds from spawn to exit of the tool
  client_cpu   user+sys of the tool and all its waited-for children (wait4)
  client_maxrss_kb  largest single process of the tool's tree (GNU time %M:
               wait4 here would count the fork of this Python process)
  relay_cpu    CPU seconds of exec_all's relays (the tree past --fanout: the
               `multinode exec-all` a relay node runs for its group), from
               the relays' cpuacct group (0 for a flat run); user and
               sys apart in relay_user, relay_sys
  server_cpu   CPU seconds of the server side, after minus before: every
               sshd process and remote command, or every agent and its
               commands (cgroup-v1 cpuacct groups made by lib/setup.sh, exact
               in ns; without them: cutime of the sshd listener and its
               subreaper, or utime+stime+cutime+cstime of the agents); the
               relays' CPU is not in it
  total_cpu    machine-wide busy CPU seconds (/proc/stat)
  pre_busy     busy cores in the 0.5 s before the run (load of other work)
  ok, bad      the check's verdict
"""
import argparse
import json
import os
import platform
import re
import resource
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
STATE = os.environ.get("BENCH_STATE") or os.path.join(
    os.environ.get("TMPDIR") or "/tmp", "mn-bench")
RESULTS = os.environ.get("BENCH_RESULTS") or os.path.join(HERE, "results")
SSHD_PORT = int(os.environ.get("BENCH_SSHD_PORT", "2222"))
# The peers' login user (lib/common.sh's BENCH_USER).
BENCH_USER = os.environ.get("BENCH_USER", "mnbench")
AGENT_PORT = int(os.environ.get("BENCH_AGENT_PORT", "29990"))
# Names this bench's cpuacct groups (lib/common.sh).
BENCH_NAME = os.environ.get("BENCH_NAME", "mn_bench")
# One binary, called by three names (argv[0] dispatch): bench.py links
# mn-ssh and mn-exec-all to it under $BENCH_STATE/bin.
MULTINODE = os.environ.get("BENCH_MULTINODE") or os.path.join(
    REPO, "target", "release", "multinode")
MN_SSH = os.path.join(STATE, "bin", "mn-ssh")
MN_EXEC_ALL = os.path.join(STATE, "bin", "mn-exec-all")
# BENCH_BASE=/path/to/another/multinode adds "(base)" variants of the
# multinode tools, alternated with the others: before/after in one run.
BASE = os.environ.get("BENCH_BASE")
BASE_EXEC_ALL = os.path.join(STATE, "bin-base", "mn-exec-all")
BASE_SSH = os.path.join(STATE, "bin-base", "mn-ssh")
CFG = os.path.join(STATE, "ssh_config")
CFG_CM = os.path.join(STATE, "ssh_config_cm")
SECRET = "bench-secret-0123456789abcdef-0123456789"
CLK = os.sysconf("SC_CLK_TCK")
QUIET_MAX_WAIT = float(os.environ.get("QUIET_MAX_WAIT", "10"))
# More options for every agent, e.g. BENCH_AGENT_ARGS="--login-timeout 300":
# a tree of 256 relays over 4,096 agents on 2 cores holds ~3,800 handshakes
# at once, past the agents' 30 s login deadline (docs/scale.md).
AGENT_ARGS = os.environ.get("BENCH_AGENT_ARGS", "").split()
# CPUs for the agents and for the rest (the head's tools, this script), e.g.
# BENCH_AGENT_CPUS=1 BENCH_HEAD_CPUS=0: on a cluster the head has cores of
# its own, and its CPU a connection is then not the agents' cache misses.
# Unset: every process may run anywhere.
def _cpus(var):
    v = os.environ.get(var)
    return {int(c) for c in v.split(",")} if v else None
AGENT_CPUS = _cpus("BENCH_AGENT_CPUS")
HEAD_CPUS = _cpus("BENCH_HEAD_CPUS")
GEN = "head -c 100000000 /dev/zero | tr '\\0' a | fold -w 100"
GEN_LINES = 1000000

# Every tool runs with this environment (plus its own variables): exec_all
# exports the head's environment to every node, so a fat one would cost it.
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": os.environ.get("HOME", "/root"),
    "USER": "root",
    "LANG": "C.UTF-8",
}


def hosts(n):
    """N distinct loopback addresses 127.0.K.J (J in 2..251). Loopback only."""
    return ["127.0.%d.%d" % (i // 250, 2 + i % 250) for i in range(n)]


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- probes

def stat_fields(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


def own_and_children_cpu(pid):
    """utime+stime+cutime+cstime (index = stat field - 3)."""
    try:
        f = stat_fields(pid)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return sum(int(f[i]) for i in (11, 12, 13, 14)) / CLK


def children_cpu(pid):
    try:
        f = stat_fields(pid)
    except FileNotFoundError:
        return 0.0
    return (int(f[13]) + int(f[14])) / CLK


def children(pid):
    kids = set()
    try:
        for t in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, t)) as f:
                kids.update(int(x) for x in f.read().split())
    except FileNotFoundError:
        pass
    return kids


def status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def pss_kb(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def sys_busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / CLK


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def wait_quiet(limit=0.15, window=0.5):
    """Wait (at most QUIET_MAX_WAIT s) until the machine is nearly idle; return
    the busy cores seen in the last window and the seconds waited."""
    t0 = time.time()
    while True:
        b0 = sys_busy()
        time.sleep(window)
        busy = (sys_busy() - b0) / window
        if busy < limit or time.time() - t0 > QUIET_MAX_WAIT:
            return busy, time.time() - t0


CPUACCT = "/sys/fs/cgroup/cpuacct"


class CpuGroup:
    """A cgroup-v1 cpuacct group (lib/setup.sh creates them): the exact CPU
    time of every process in it and of all their descendants, alive or not.
    /proc/PID/stat counts in clock ticks per process, which rounds an agent's
    few milliseconds a run down to nothing."""

    def __init__(self, name):
        self.path = os.path.join(CPUACCT, name)
        if not os.path.isdir(self.path):
            self.path = None

    def add_self(self):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write("0\n")

    def cpu(self):
        with open(os.path.join(self.path, "cpuacct.usage")) as f:
            return int(f.read()) / 1e9

    def user_sys(self):
        """(user, sys) seconds: cpuacct.stat, in clock ticks."""
        v = {}
        with open(os.path.join(self.path, "cpuacct.stat")) as f:
            for line in f:
                k, x = line.split()
                v[k] = int(x) / CLK
        return v.get("user", 0.0), v.get("system", 0.0)


RELAYS = CpuGroup(BENCH_NAME + "_relays")

# What bench.py puts beside mn-exec-all as `multinode` when the relays'
# group exists: the head sends its path to the nodes (MULTINODE_BIN), so a
# relay's `multinode exec-all` starts through it and moves into the relays'
# group; the `multinode supervise` a relay runs for its own node's command
# moves back to the agents' group (that is node work). argv[0] stays this
# path, so the relay finds the same wrapper for its supervise.
RELAY_WRAPPER = """#!/bin/bash
# made by bench/bench.py: counts exec_all's relays apart (see bench.py)
case $1 in
  exec-all) echo $$ > %(cg)s/%(name)s_relays/cgroup.procs ;;
  supervise) echo $$ > %(cg)s/%(name)s_agents/cgroup.procs ;;
esac
exec -a "$0" %(real)s "$@"
"""


class Sshd:
    def __init__(self):
        with open(os.path.join(STATE, "sshd.pid")) as f:
            self.pid = int(f.read())
        with open(os.path.join(STATE, "sshd-reaper.pid")) as f:
            self.reaper = int(f.read())
        self.group = CpuGroup(BENCH_NAME + "_sshd")

    def cpu(self):
        if self.group.path:
            return self.group.cpu()
        return children_cpu(self.pid) + children_cpu(self.reaper)

    def procs(self):
        return children(self.pid) | (children(self.reaper) - {self.pid})

    def wait_idle(self, baseline, timeout=60):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.procs() <= baseline:
                return True
            time.sleep(0.02)
        return False


class Agents:
    """One `multinode agent --listen ADDR:PORT` per node address."""

    def __init__(self, n):
        self.hosts = hosts(n)
        self.procs = []
        self.home = os.path.join(STATE, "agent-home")
        os.makedirs(self.home, exist_ok=True)
        self.log = open(os.path.join(STATE, "agents.log"), "ab")
        self.group = CpuGroup(BENCH_NAME + "_agents")
        self.pidfile = open(os.path.join(STATE, "agents.pids"), "a")

    def env(self):
        e = dict(BASE_ENV)
        e.update(HOME=self.home, MULTINODE_SECRET=SECRET,
                 MULTINODE_AGENT_PORT=str(AGENT_PORT))
        return e

    def preexec(self):
        if self.group.path:
            self.group.add_self()
        if AGENT_CPUS:
            os.sched_setaffinity(0, AGENT_CPUS)

    def start(self):
        t0 = time.time()
        env = self.env()
        for h in self.hosts:
            p = subprocess.Popen(
                [MULTINODE, "agent", "--listen", "%s:%d" % (h, AGENT_PORT)] + AGENT_ARGS,
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                env=env, cwd=self.home, start_new_session=True,
                preexec_fn=self.preexec)
            self.procs.append(p)
            self.pidfile.write("%d\n" % p.pid)
        self.pidfile.flush()
        for h, p in zip(self.hosts, self.procs):
            deadline = time.time() + 60
            while True:
                if p.poll() is not None:
                    raise SystemExit("agent on %s exited with %s (see %s/agents.log)"
                                     % (h, p.returncode, STATE))
                try:
                    socket.create_connection((h, AGENT_PORT), timeout=1).close()
                    break
                except OSError:
                    if time.time() > deadline:
                        raise SystemExit("agent on %s does not listen" % h)
                    time.sleep(0.02)
        log("[agents] %d up in %.1fs" % (len(self.procs), time.time() - t0))

    def pids(self, n=None):
        return [p.pid for p in self.procs[:n]]

    def cpu(self, n=None):
        if self.group.path:
            return self.group.cpu()
        return sum(own_and_children_cpu(pid) for pid in self.pids(n))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.time() + 20
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        self.pidfile.close()
        os.unlink(self.pidfile.name)
        log("[agents] stopped")


# ---------------------------------------------------------------- tools
# A tool: (hosts, remote command, n) -> (argv, extra env, kind). kind is
# "sshd" or "agent": which server side it uses (for server CPU).

def mn_env(hs, extra=None):
    e = {"MULTINODE_SECRET": SECRET, "MULTINODE_AGENT_PORT": str(AGENT_PORT),
         "MULTINODE_TRANSPORT": "agent",
         # Node 0 is 127.0.0.1 and excluded (--exclude 0): every measured node
         # is a remote agent, reached through the network like the peers' nodes.
         "MULTINODE_HOSTLIST": ",".join(["127.0.0.1:1"] + [h + ":1" for h in hs]),
         "MULTINODE_NODE_RANK": "0"}
    # Passed on when set: 4,096 agents and a tree's relays on 2 cores leave a
    # connection silent past the default 4 s (docs/scale.md).
    if os.environ.get("MULTINODE_LOST_AFTER"):
        e["MULTINODE_LOST_AFTER"] = os.environ["MULTINODE_LOST_AFTER"]
    e.update(extra or {})
    return e


def t_mn(label=False, extra_args=(), exe=MN_EXEC_ALL, shared=False):
    def build(hs, cmd, n):
        argv = [exe, "--exclude", "0"] + list(extra_args)
        if label:
            argv.append("--label")
        extra = {"MULTINODE_MUX_SOCKET": MASTER.socket} if shared else None
        return argv + ["-c", cmd], mn_env(hs, extra), "agent"
    return build


class Master:
    """The head's agent for the "(shared)" tools: `multinode agent
    --mux-socket`, its connections to the agents shared with exec_all. Not in
    the agents' group: its CPU is the head's, added to the client's."""

    def __init__(self):
        self.socket = os.path.join(STATE, "mux.sock")
        self.proc = None

    def start(self, agents):
        if os.path.lexists(self.socket):
            os.unlink(self.socket)
        self.proc = subprocess.Popen(
            [MULTINODE, "agent", "--listen", "127.0.0.1:%d" % (AGENT_PORT + 1),
             "--mux-socket", self.socket],
            stdin=subprocess.DEVNULL, stdout=agents.log, stderr=agents.log,
            env=agents.env(), cwd=agents.home, start_new_session=True)
        deadline = time.time() + 30
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit("the head agent (--mux-socket) did not start (see %s/agents.log)" % STATE)
            time.sleep(0.02)

    def cpu(self):
        return own_and_children_cpu(self.proc.pid) if self.proc else 0.0

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


MASTER = Master()


def t_pdsh(fanout=None):
    def build(hs, cmd, n):
        argv = ["pdsh", "-R", "ssh"]
        if fanout == "N":
            argv += ["-f", str(n)]
        return argv + ["-w", ",".join(hs), cmd], {
            "PDSH_SSH_ARGS": "-F %s -x %%h" % CFG}, "sshd"
    return build


def t_clush(hs, cmd, n):
    return ["clush", "-f", str(n), "-o", "-F " + CFG, "-w", ",".join(hs), cmd], {}, "sshd"


def t_pssh(hs, cmd, n):
    hf = os.path.join(STATE, "hosts-%d" % n)
    with open(hf, "w") as f:
        f.write("\n".join(hs) + "\n")
    return ["parallel-ssh", "-p", str(n), "-t", "0", "-i", "-x", "-F " + CFG,
            "-h", hf, cmd], {}, "sshd"


LOOP = r'''cfg=$1 cmd=$2; shift 2; pids=()
for h in "$@"; do ssh -F "$cfg" "$h" "$cmd" & pids+=($!); done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done; exit $rc'''


def t_loop(hs, cmd, n):
    return ["bash", "-c", LOOP, "loop", CFG, cmd] + hs, {}, "sshd"


LOCAL = r'''cmd=$1; shift; pids=()
for h in "$@"; do bash -c "$cmd" & pids+=($!); done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done; exit $rc'''


def t_local(hs, cmd, n):
    return ["bash", "-c", LOCAL, "local", cmd] + hs, {}, "none"


TOOLS = {
    "mn-exec-all": t_mn(),
    "mn-exec-all --label": t_mn(label=True),
    "pdsh -f32 (default)": t_pdsh(None),
    "pdsh -fN": t_pdsh("N"),
    "clush -fN": t_clush,
    "pssh -pN": t_pssh,
    "ssh loop": t_loop,
    "local (no ssh)": t_local,
    # The tree relay (docs/scale.md): flat, the default (256 direct), 32 direct.
    "mn-exec-all (flat)": t_mn(extra_args=("--fanout", "1000000")),
    "mn-exec-all --fanout 32": t_mn(extra_args=("--fanout", "32")),
    # At N=256, 16 relays of 16: the shape of the default tree at N=4,096
    # (256 relays of 16), so the two give the CPU a node of one tree shape
    # at two sizes.
    "mn-exec-all --fanout 16": t_mn(extra_args=("--fanout", "16")),
    # Through a head agent's shared connections (MULTINODE_MUX_SOCKET, as
    # inside `multinode agent -- JOB`): that agent's CPU counts as the head's.
    "mn-exec-all (shared)": t_mn(shared=True),
    "mn-exec-all --label (shared)": t_mn(label=True, shared=True),
    "mn-exec-all --label (flat)": t_mn(label=True, extra_args=("--fanout", "1000000")),
}
if BASE:
    TOOLS["mn-exec-all (base)"] = t_mn(exe=BASE_EXEC_ALL)
    TOOLS["mn-exec-all --label (base)"] = t_mn(label=True, exe=BASE_EXEC_ALL)
    TOOLS["mn-exec-all (flat) (base)"] = t_mn(extra_args=("--fanout", "1000000"),
                                              exe=BASE_EXEC_ALL)
    TOOLS["mn-exec-all --label (flat) (base)"] = t_mn(
        label=True, extra_args=("--fanout", "1000000"), exe=BASE_EXEC_ALL)
LABELLED = ("pdsh", "clush", "mn-exec-all --label")


def check(tool, cmd, n, hs, rc, out, err):
    """'' if the run is valid, else why not."""
    if rc != 0:
        return "rc=%d %s" % (rc, err[-200:].strip())
    if err.strip():
        return "stderr: " + err[-200:].strip()
    lines = out.splitlines()
    if tool.startswith("pssh"):
        succ = sum("[SUCCESS]" in line for line in lines)
        if succ != n:
            return "pssh SUCCESS=%d" % succ
        lines = [line for line in lines if not re.match(r"^\[\d+\] ", line)]
    if cmd == "true":
        return "" if not lines else "unexpected output"
    if len(lines) != n:
        return "got %d lines, want %d" % (len(lines), n)
    if tool.startswith(LABELLED):
        seen = {line.split(":")[0].split()[-1] for line in lines}
        if seen != set(hs):
            return "answers from %d distinct hosts, want %d" % (len(seen), n)
    return ""


# ---------------------------------------------------------------- one run

class Ctx:
    def __init__(self, sshd, agents):
        self.sshd = sshd
        self.agents = agents


def run_once(ctx, tool, n, cmd, discard=False):
    hs = hosts(n)
    argv, extra, kind = TOOLS[tool](hs, cmd, n)
    env = dict(BASE_ENV)
    env.update(extra)
    pre_busy, waited = wait_quiet()
    base = ctx.sshd.procs()
    s0 = ctx.sshd.cpu() if kind == "sshd" else ctx.agents.cpu(n) if kind == "agent" else 0.0
    m0 = MASTER.cpu()
    r0 = RELAYS.user_sys() if RELAYS.path else (0.0, 0.0)
    b0 = sys_busy()
    outp = os.path.join(STATE, "out.tmp")
    errp = os.path.join(STATE, "err.tmp")
    rssp = os.path.join(STATE, "rss.tmp")
    with open(os.devnull if discard else outp, "w") as fo, open(errp, "w") as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen((TIME_RSS + [rssp] if TIME_RSS else []) + argv,
                             stdin=subprocess.DEVNULL,
                             stdout=fo, stderr=fe, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = rc = os.waitstatus_to_exitcode(status)
    maxrss = read_maxrss(rssp, ru.ru_maxrss)
    idle = ctx.sshd.wait_idle(base) if kind == "sshd" else True
    time.sleep(0.1)  # agents: connection teardown after the client exits
    s1 = ctx.sshd.cpu() if kind == "sshd" else ctx.agents.cpu(n) if kind == "agent" else 0.0
    master = MASTER.cpu() - m0 if "MULTINODE_MUX_SOCKET" in extra else 0.0
    r1 = RELAYS.user_sys() if RELAYS.path else (0.0, 0.0)
    b1 = sys_busy()
    out = "" if discard else open(outp).read()
    err = open(errp).read()
    bad = check(tool, "true" if discard else cmd, n, hs, rc, out, err)
    if not idle:
        bad = (bad + " server-not-idle").strip()
    return {"tool": tool, "n": n, "wall": wall,
            "client_cpu": ru.ru_utime + ru.ru_stime + master, "master_cpu": master,
            "client_user": ru.ru_utime,
            "client_sys": ru.ru_stime, "client_maxrss_kb": maxrss,
            "relay_cpu": (r1[0] - r0[0]) + (r1[1] - r0[1]),
            "relay_user": r1[0] - r0[0], "relay_sys": r1[1] - r0[1],
            "server_cpu": s1 - s0, "server": kind, "total_cpu": b1 - b0,
            "pre_busy": pre_busy, "waited": waited, "load1": loadavg()[0],
            "rc": rc, "ok": not bad, "bad": bad, "stderr": err[-300:]}


# The tool's peak RSS. wait4's ru_maxrss counts the child as forked from this
# Python process (~18 MB) before its exec: every tool would show at least
# that. GNU time forks from a ~2 MB process and reports the child's tree.
TIME_RSS = ["/usr/bin/time", "-f", "%M", "-o"] if os.access("/usr/bin/time", os.X_OK) else []


def read_maxrss(path, fallback):
    if not TIME_RSS:
        return fallback
    try:
        with open(path) as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return fallback


def rounds(tools, runs, fn):
    """Calls fn(tool, i) for i in range(runs), tools alternating; the order
    rotates each round so no tool always goes first (or right after another)."""
    for i in range(runs):
        k = i % len(tools)
        for tool in tools[k:] + tools[:k]:
            fn(tool, i)


class Out:
    def __init__(self, suite, run_id):
        os.makedirs(RESULTS, exist_ok=True)
        self.f = open(os.path.join(RESULTS, suite + ".jsonl"), "a")
        self.suite = suite
        self.run_id = run_id

    def write(self, r):
        r.update(suite=self.suite, run_id=self.run_id, ts=time.time())
        self.f.write(json.dumps(r) + "\n")
        self.f.flush()


# ---------------------------------------------------------------- suites

def suite_fanout(ctx, a, run_id):
    out = Out("fanout", run_id)
    for n in a.ns:
        for cmd in a.cmds:
            tools = []
            for t in a.fanout_tools:
                if t == "pdsh -f32 (default)" and n <= 32:
                    continue  # the same as pdsh -f N
                if t.startswith("mn-exec-all --label") and cmd == "true":
                    continue
                if t.startswith("mn-exec-all") and "--label" not in t and cmd == "hostname":
                    continue  # labelled, so every host's answer is checked
                tools.append(t)
            fast = [t for t in tools if t.startswith("mn-")]
            slow = [t for t in tools if t not in fast]
            slow_runs = a.runs if n <= a.slow_max_n else a.slow_runs
            walls = {t: [] for t in tools}

            def one(tool, i, warm=False):
                r = run_once(ctx, tool, n, cmd)
                if warm:
                    if not r["ok"]:
                        log("  !! warm-up %s n=%d %s: %s" % (tool, n, cmd, r["bad"]))
                    return
                r.update(cmd=cmd, run=i)
                out.write(r)
                walls[tool].append(r["wall"])
                if not r["ok"]:
                    log("  !! %s n=%d %s run %d: %s" % (tool, n, cmd, i, r["bad"]))

            if n <= a.slow_max_n:
                rounds(tools, 1, lambda t, i: one(t, i, warm=True))
                rounds(tools, a.runs, one)
            else:
                # Big N: the sshd-based tools take ~20 s a run; they get
                # slow_runs runs, mn-exec-all the full count, still alternated.
                rounds(fast, 1, lambda t, i: one(t, i, warm=True))
                for i in range(max(a.runs, slow_runs)):
                    order = (fast if i < a.runs else []) + (slow if i < slow_runs else [])
                    k = i % max(1, len(order))
                    for t in order[k:] + order[:k]:
                        one(t, i)
            for t in tools:
                w = walls[t]
                if w:
                    log("fanout %-22s n=%-5d %-8s wall min/med/max %.3f/%.3f/%.3f (%d)" % (
                        t, n, cmd, min(w), statistics.median(w), max(w), len(w)))


def suite_latency(ctx, a, run_id):
    """One remote command, hyperfine -N: mn-ssh vs a cold ssh vs ssh over a
    ControlMaster socket; mn-ssh to sshd for reference. Rounds of
    --runs-per-round each with the order rotated; medians over all rounds."""
    out = Out("latency", run_id)
    h = "127.0.0.2"
    env = dict(BASE_ENV)
    env.update(MULTINODE_SECRET=SECRET, MULTINODE_AGENT_PORT=str(AGENT_PORT))
    subprocess.run(["ssh", "-F", CFG_CM, h, "true"], check=True, env=env,
                   stdin=subprocess.DEVNULL)
    subprocess.run(["ssh", "-F", CFG_CM, "-O", "check", h], check=True, env=env,
                   stderr=subprocess.DEVNULL)
    key = os.path.join(STATE, "id_ed25519")
    cases = [
        ("mn-ssh HOST true (agent)", "%s %s true" % (MN_SSH, h)),
        ("ssh HOST true (cold, curve25519)", "ssh -F %s %s true" % (CFG, h)),
        ("ssh HOST true (ControlMaster)", "ssh -F %s %s true" % (CFG_CM, h)),
    ] + ([("mn-ssh HOST true (agent, base)", "%s %s true" % (BASE_SSH, h))] if BASE else []) + [
        ("mn-ssh HOST true (to sshd)",
         "env MULTINODE_TRANSPORT=openssh %s -p %d -l %s -i %s "
         "-o StrictHostKeyChecking=no %s true" % (MN_SSH, SSHD_PORT, BENCH_USER, key, h)),
    ]
    try:
        for rnd in range(a.latency_rounds):
            k = rnd % len(cases)
            order = cases[k:] + cases[:k]
            pre_busy, _ = wait_quiet()
            with tempfile.NamedTemporaryFile(suffix=".json") as tf:
                argv = ["hyperfine", "-N", "--warmup", "3", "--runs", str(a.latency_runs),
                        "--export-json", tf.name, "--style", "none"]
                for name, c in order:
                    argv += ["-n", name, c]
                subprocess.run(argv, check=True, env=env, stdout=subprocess.DEVNULL)
                data = json.load(open(tf.name))
            for res in data["results"]:
                out.write({"name": res["command"], "round": rnd, "times": res["times"],
                           "user": res["user"], "system": res["system"],
                           "median": res["median"], "pre_busy": pre_busy,
                           "load1": loadavg()[0], "exit_codes": res.get("exit_codes")})
            log("latency round %d: %s" % (rnd, ", ".join(
                "%s %.4f" % (r["command"].split(" (")[0] + " (" + r["command"].split(" (")[1],
                             r["median"]) for r in data["results"])))
    finally:
        subprocess.run(["ssh", "-F", CFG_CM, "-O", "exit", h], env=env,
                       stderr=subprocess.DEVNULL)


def verify_relay(ctx, tool, n, cmd):
    """Untimed: every line arrives (the generator's last line has no newline,
    so a tool may or may not add one)."""
    hs = hosts(n)
    argv, extra, _ = TOOLS[tool](hs, cmd, n)
    env = dict(BASE_ENV)
    env.update(extra)
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
    w = subprocess.run(["wc", "-l"], stdin=p.stdout, capture_output=True, text=True)
    p.stdout.close()
    rc = p.wait()
    got = int(w.stdout.split()[0])
    ok = rc == 0 and n * GEN_LINES - n <= got <= n * GEN_LINES
    log("[verify] %s: rc=%d lines=%d (want %d..%d) %s" % (
        tool, rc, got, n * GEN_LINES - n, n * GEN_LINES, "OK" if ok else "MISMATCH"))
    return ok


def suite_relay(ctx, a, run_id):
    out = Out("relay", run_id)
    n = 8
    tools = a.relay_tools
    verified = {t: verify_relay(ctx, t, n, GEN) for t in tools}

    def one(tool, i):
        r = run_once(ctx, tool, n, GEN, discard=True)
        r.update(cmd="gen100mb", run=i, bytes=n * 100000000, verified=verified[tool])
        r["ok"] = r["ok"] and verified[tool]
        out.write(r)
        log("relay %-22s run %d wall %.2f  %.0f MB/s  client %.2f CPU-s  server %.2f%s" % (
            tool, i, r["wall"], n * 100 / r["wall"], r["client_cpu"], r["server_cpu"],
            "" if r["ok"] else "  !! " + r["bad"]))

    rounds(tools, a.relay_runs, one)


def suite_memory(ctx, a, run_id):
    out = Out("memory", run_id)
    pids = ctx.agents.pids()
    rss = sorted(status_kb(p, "VmRSS") for p in pids)
    pss = sorted(pss_kb(p) for p in pids)
    out.write({"what": "agent idle", "agents": len(pids),
               "rss_kb_median": statistics.median(rss), "rss_kb_max": rss[-1],
               "pss_kb_median": statistics.median(pss), "pss_kb_sum": sum(pss)})
    log("memory: idle agent RSS median %d kB (PSS %d kB), %d agents PSS total %.0f MB" % (
        statistics.median(rss), statistics.median(pss), len(pids), sum(pss) / 1024))
    # 64 concurrent sessions on one node: mn-ssh to its agent vs ssh to sshd.
    h = "127.0.0.2"
    agent = pids[0]
    env = dict(BASE_ENV)
    env.update(MULTINODE_SECRET=SECRET, MULTINODE_AGENT_PORT=str(AGENT_PORT))
    for what, argv in [("agent, 64 sessions", [MN_SSH, h, "sleep 4"]),
                       ("sshd, 64 sessions", ["ssh", "-F", CFG, h, "sleep 4"])]:
        sshd = ctx.sshd
        procs = [subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL) for _ in range(64)]
        time.sleep(2.5)
        if what.startswith("agent"):
            kids = children(agent)
            rss_kb = status_kb(agent, "VmRSS")
            pss = pss_kb(agent)
            extra = {"agent_rss_kb": rss_kb, "agent_hwm_kb": status_kb(agent, "VmHWM"),
                     "agent_pss_kb": pss, "commands": len(kids),
                     "commands_pss_kb": sum(pss_kb(k) for k in kids)}
        else:
            server = set()
            todo = list(sshd.procs())
            while todo:
                p = todo.pop()
                if p not in server:
                    server.add(p)
                    todo.extend(children(p))
            sshd_pids = [p for p in server if open("/proc/%d/comm" % p).read().strip().startswith("sshd")]
            pss = sum(pss_kb(p) for p in sshd_pids)
            extra = {"sshd_processes": len(sshd_pids), "sshd_pss_kb": pss,
                     "sshd_rss_kb_sum": sum(status_kb(p, "VmRSS") for p in sshd_pids)}
        rcs = [p.wait() for p in procs]
        r = {"what": what, "ok": all(rc == 0 for rc in rcs)}
        r.update(extra)
        out.write(r)
        log("memory: %s: %s" % (what, extra))


def suite_check(ctx, a, run_id):
    """`multinode check` from the head (127.0.0.1, rank 0) across N agents:
    wall time and client CPU; a run counts when every node answered (the
    JSON's `nodes` row) and the exit code is 0 (warnings are expected on
    loopback: the head's address is 127.0.0.1)."""
    out = Out("check", run_id)
    port = AGENT_PORT + 7  # the rendezvous port the check binds on the head
    for n in a.check_ns:
        hs = hosts(n)
        env = dict(BASE_ENV)
        env.update(mn_env(hs))
        del env["MULTINODE_TRANSPORT"]
        env["PATH"] = os.path.dirname(MN_EXEC_ALL) + ":" + env["PATH"]
        for i in range(a.check_runs):
            pre_busy, _ = wait_quiet()
            s0 = ctx.agents.cpu(n)
            t0 = time.perf_counter()
            # The link beside mn-ssh: the check reaches the nodes through it.
            p = subprocess.Popen([os.path.join(STATE, "bin", "multinode"), "check",
                                  "--port", str(port), "--format", "json"],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env, text=True)
            stdout, stderr = p.communicate()
            wall = time.perf_counter() - t0
            time.sleep(0.1)
            s1 = ctx.agents.cpu(n)
            bad = ""
            try:
                report = json.loads(stdout)
                rows = {c["check"]: c for c in report}
                nodes = rows["nodes"]
                want = "%d of %d nodes answered" % (n + 1, n + 1)
                if nodes["status"] != "ok" or nodes.get("detail") != want:
                    bad = "nodes: %s" % nodes.get("detail")
                elif p.returncode != 0:
                    bad = "rc=%d %s" % (p.returncode, stderr[-200:].strip())
            except (ValueError, KeyError, TypeError) as e:
                bad = "unreadable report (%s): rc=%d %s" % (e, p.returncode, stderr[-200:].strip())
            out.write({"tool": "multinode check", "n": n, "wall": wall,
                       "server_cpu": s1 - s0, "pre_busy": pre_busy, "rc": p.returncode,
                       "ok": not bad, "bad": bad})
            log("check n=%d run %d wall %.2f  agents %.2f CPU-s%s" % (
                n, i, wall, s1 - s0, "" if not bad else "  !! " + bad))


SUITES = {"fanout": suite_fanout, "latency": suite_latency,
          "relay": suite_relay, "memory": suite_memory, "check": suite_check}


def sh_free():
    with open("/proc/meminfo") as f:
        kb = {l.split(":")[0]: int(l.split()[1]) for l in f}
    return "MemAvailable %.1f GiB" % (kb["MemAvailable"] / 2**20)


def machine(run_id, args):
    def sh(c):
        try:
            return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""
    return {
        "run_id": run_id, "args": args, "nproc": os.cpu_count(),
        "model": sh("lscpu | sed -n 's/^Model name: *//p'"),
        "kernel": platform.release(), "mem": sh("free -g | awk '/Mem:/{print $2\" GiB\"}'"),
        "aes": "aes" in open("/proc/cpuinfo").read().split(),
        "openssh": sh("ssh -V 2>&1"), "pdsh": sh("pdsh -V 2>&1 | head -1"),
        "clush": sh("clush --version 2>&1"), "pssh": sh("parallel-ssh --version 2>&1"),
        "hyperfine": sh("hyperfine --version"),
        "multinode_commit": sh("git -C %s rev-parse --short HEAD" % REPO),
        "multinode_dirty": bool(sh("git -C %s status --porcelain -- src Cargo.toml" % REPO)),
        "loadavg_start": loadavg(),
        "lost_after": os.environ.get("MULTINODE_LOST_AFTER"),
        "agent_args": AGENT_ARGS,
        # Whether BENCH_BASE was given (not its path: results name no path of the machine).
        "base": "BENCH_BASE" if BASE else None,
        "agent_cpus": sorted(AGENT_CPUS) if AGENT_CPUS else None,
        "head_cpus": sorted(HEAD_CPUS) if HEAD_CPUS else None,
    }


def main():
    if HEAD_CPUS:
        os.sched_setaffinity(0, HEAD_CPUS)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suites", default="latency,memory,fanout,relay,check")
    ap.add_argument("--ns", default="1,8,32,128,256,1024")
    ap.add_argument("--cmds", default="true,hostname")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--slow-runs", type=int, default=1,
                    help="runs of the sshd-based tools past --slow-max-n")
    ap.add_argument("--slow-max-n", type=int, default=256)
    ap.add_argument("--fanout-tools", default=",".join(
        ["mn-exec-all", "mn-exec-all --label", "pdsh -f32 (default)", "pdsh -fN",
         "clush -fN", "pssh -pN", "ssh loop"]))
    ap.add_argument("--relay-tools", default=",".join(
        ["mn-exec-all", "mn-exec-all --label", "pdsh -fN", "ssh loop"]))
    ap.add_argument("--relay-runs", type=int, default=5)
    ap.add_argument("--latency-rounds", type=int, default=5)
    ap.add_argument("--latency-runs", type=int, default=10)
    ap.add_argument("--check-ns", default="1,32,256")
    ap.add_argument("--check-runs", type=int, default=3)
    ap.add_argument("--run-id", default=time.strftime("%Y%m%d-%H%M%S"))
    a = ap.parse_args()
    a.ns = [int(x) for x in a.ns.split(",")]
    a.cmds = a.cmds.split(",")
    a.fanout_tools = a.fanout_tools.split(",")
    a.relay_tools = a.relay_tools.split(",")
    a.check_ns = [int(x) for x in a.check_ns.split(",")]
    suites = a.suites.split(",")
    for s in suites:
        if s not in SUITES:
            raise SystemExit("unknown suite %r (have %s)" % (s, ", ".join(SUITES)))
    if not os.access(MULTINODE, os.X_OK):
        raise SystemExit("%s missing: cargo build --release" % MULTINODE)
    os.makedirs(os.path.join(STATE, "bin"), exist_ok=True)
    os.makedirs(os.path.join(STATE, "bin-base"), exist_ok=True)
    # mn-exec-all wants `multinode` beside it (for `multinode supervise`).
    links = [(MN_SSH, MULTINODE), (MN_EXEC_ALL, MULTINODE),
             (os.path.join(STATE, "bin", "multinode"), MULTINODE)]
    if BASE:
        links += [(BASE_SSH, BASE), (BASE_EXEC_ALL, BASE),
                  (os.path.join(STATE, "bin-base", "multinode"), BASE)]
    for alias, target in links:
        if os.path.lexists(alias):
            os.unlink(alias)
        if os.path.basename(alias) == "multinode" and RELAYS.path:
            with open(alias, "w") as f:
                f.write(RELAY_WRAPPER % {"cg": CPUACCT, "name": BENCH_NAME,
                                         "real": os.path.realpath(target)})
            os.chmod(alias, 0o755)
        else:
            os.symlink(os.path.realpath(target), alias)
    # One descriptor a connection (the head, sshd's tools) and a few a child.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < min(hard, 65536):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    os.makedirs(RESULTS, exist_ok=True)
    m = machine(a.run_id, sys.argv[1:])
    need = max([max(a.ns) if "fanout" in suites else 8]
               + (a.check_ns if "check" in suites else []))
    agents = Agents(need)
    ctx = Ctx(Sshd(), agents)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        agents.start()
        if any("(shared)" in t for t in a.fanout_tools + a.relay_tools):
            MASTER.start(agents)
        pss = [pss_kb(p) for p in agents.pids()]
        rss = [status_kb(p, "VmRSS") for p in agents.pids()]
        m["agents"] = {"n": len(pss), "pss_mb_sum": round(sum(pss) / 1024),
                       "rss_kb_median": statistics.median(rss)}
        log("[agents] %d idle: PSS %.0f MB in all, RSS median %d kB; %s" % (
            len(pss), sum(pss) / 1024, statistics.median(rss),
            sh_free()))
        for s in suites:
            log("##### suite %s %s (load %s)" % (s, time.strftime("%T"), loadavg()))
            SUITES[s](ctx, a, a.run_id)
    finally:
        MASTER.stop()
        agents.stop()
        m["loadavg_end"] = loadavg()
        with open(os.path.join(RESULTS, "machine.jsonl"), "a") as f:
            f.write(json.dumps(m) + "\n")


if __name__ == "__main__":
    main()
