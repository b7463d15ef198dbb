#!/usr/bin/env python3
"""Tables from bench/results/*.jsonl (one bench.py run: the latest, or
--run-id). Writes bench/results/tables.md and replaces the part of
docs/benchmarks.md between `<!-- tables:begin -->` and `<!-- tables:end -->`
(only for bench/results itself: a run kept elsewhere, BENCH_RESULTS=DIR,
writes DIR/tables.md alone, unless --doc).

Medians over the checked runs (ok=true) of the run. A cell marked `*` had
runs that started while other work used more than 0.3 cores (pre_busy):
wall times there may be inflated; CPU seconds are not affected much.
Ratios: the peer's median wall divided by multinode's (>1: multinode faster).
"""
import argparse
import collections
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
RES = os.environ.get("BENCH_RESULTS") or os.path.join(HERE, "results")
DOC = os.path.join(os.path.dirname(HERE), "docs", "benchmarks.md")
BUSY = 0.3


def load(suite, run_id):
    p = os.path.join(RES, suite + ".jsonl")
    if not os.path.exists(p):
        return []
    rows = [json.loads(line) for line in open(p)]
    return [r for r in rows if r.get("run_id") == run_id]


def latest_run_id():
    ids = []
    p = os.path.join(RES, "machine.jsonl")
    if os.path.exists(p):
        ids = [json.loads(line)["run_id"] for line in open(p)]
    return ids[-1] if ids else None


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt_s(x):
    return "%.3f" % x if x < 10 else "%.2f" % x


class Cases:
    def __init__(self, rows, key):
        self.ok = collections.defaultdict(list)
        self.bad = collections.Counter()
        for r in rows:
            k = key(r)
            if r.get("ok", True):
                self.ok[k].append(r)
            else:
                self.bad[k] += 1

    def wall(self, k):
        rs = self.ok.get(k, [])
        return med([r["wall"] for r in rs]) if rs else None

    def cell(self, k):
        rs = self.ok.get(k, [])
        bad = " (%d failed)" % self.bad[k] if self.bad.get(k) else ""
        if not rs:
            return "—" + bad
        w = sorted(r["wall"] for r in rs)
        mark = "*" if any(r.get("pre_busy", 0) >= BUSY for r in rs) else ""
        rng = " [%s–%s]" % (fmt_s(w[0]), fmt_s(w[-1])) if len(w) > 1 else ""
        return "%s%s ×%d%s%s" % (fmt_s(med(w)), rng, len(w), mark, bad)


def fanout_tables(rows):
    md = []
    if not rows:
        return md, None
    cases = Cases(rows, lambda r: (r["tool"], r["n"], r["cmd"]))
    ns = sorted({r["n"] for r in rows})
    for cmd in ("true", "hostname"):
        tools = []
        for r in rows:
            if r["cmd"] == cmd and r["tool"] not in tools:
                tools.append(r["tool"])
        if not tools:
            continue
        mn = "mn-exec-all" if cmd == "true" else "mn-exec-all --label"
        md.append("#### `%s` on N nodes: wall seconds, median [min–max] ×runs\n" % cmd)
        md.append("| tool | " + " | ".join("N=%d" % n for n in ns) + " |")
        md.append("|---|" + "---|" * len(ns))
        for t in tools:
            md.append("| %s | %s |" % (t, " | ".join(cases.cell((t, n, cmd)) for n in ns)))
        md.append("")
        md.append("Ratio: peer median / `%s` median (how many times faster multinode is)\n" % mn)
        md.append("| peer | " + " | ".join("N=%d" % n for n in ns) + " |")
        md.append("|---|" + "---|" * len(ns))
        for t in tools:
            if t.startswith("mn-"):
                continue
            cells = []
            for n in ns:
                a, b = cases.wall((t, n, cmd)), cases.wall((mn, n, cmd))
                cells.append("%.1f×" % (a / b) if a and b else "—")
            md.append("| %s | %s |" % (t, " | ".join(cells)))
        md.append("")
        md.append("CPU per node launched, milliseconds (median of client CPU / N, server CPU / N); "
                  "client = the tool and its children (wait4), server = sshd and every process it "
                  "forked, or the agents and their commands (cpuacct cgroups)\n")
        md.append("| tool | " + " | ".join("N=%d" % n for n in ns) + " |")
        md.append("|---|" + "---|" * len(ns))
        for t in tools:
            cells = []
            for n in ns:
                rs = cases.ok.get((t, n, cmd), [])
                if not rs:
                    cells.append("—")
                    continue
                c = med([r["client_cpu"] for r in rs]) / n * 1000
                s = med([r["server_cpu"] for r in rs]) / n * 1000
                cells.append("%.2f / %.2f" % (c, s))
            md.append("| %s | %s |" % (t, " | ".join(cells)))
        md.append("")
    # peak RSS of the client
    md.append("#### Client peak RSS (MB, largest process of the tool's tree, max over runs)\n")
    tools = []
    for r in rows:
        if r["tool"] not in tools:
            tools.append(r["tool"])
    md.append("| tool | " + " | ".join("N=%d" % n for n in ns) + " |")
    md.append("|---|" + "---|" * len(ns))
    for t in tools:
        cells = []
        for n in ns:
            rs = [r for c in ("true", "hostname") for r in cases.ok.get((t, n, c), [])]
            cells.append("%.1f" % (max(r["client_maxrss_kb"] for r in rs) / 1024) if rs else "—")
        md.append("| %s | %s |" % (t, " | ".join(cells)))
    md.append("")
    return md, cases


def latency_tables(rows):
    md = []
    by = collections.defaultdict(list)
    cpu = collections.defaultdict(list)
    busy = collections.defaultdict(list)
    for r in rows:
        by[r["name"]].extend(r["times"])
        cpu[r["name"]].append(r["user"] + r["system"])
        busy[r["name"]].append(r["pre_busy"])
    if not by:
        return md, {}
    md.append("#### One remote command (hyperfine -N, alternated rounds)\n")
    md.append("| command | median s | min | max | runs | client CPU s (mean) |")
    md.append("|---|---|---|---|---|---|")
    meds = {}
    for name, ts in by.items():
        meds[name] = med(ts)
        mark = "*" if max(busy[name]) >= BUSY else ""
        md.append("| %s | %.4f%s | %.4f | %.4f | %d | %.4f |" % (
            name, meds[name], mark, min(ts), max(ts), len(ts), med(cpu[name])))
    md.append("")
    return md, meds


def relay_tables(rows):
    md = []
    cases = Cases(rows, lambda r: r["tool"])
    if not cases.ok and not cases.bad:
        return md, {}
    md.append("#### Output relay: 8 nodes × 100 MB of 100-byte lines to /dev/null\n")
    md.append("| tool | wall s median [min–max] | MB/s | client CPU s (user+sys) | "
              "server CPU s | client max RSS MB |")
    md.append("|---|---|---|---|---|---|")
    mbps = {}
    for t, rs in list(cases.ok.items()) + [(k, []) for k in cases.bad if k not in cases.ok]:
        if not rs:
            md.append("| %s | %s | | | | |" % (t, cases.cell(t)))
            continue
        w = med([r["wall"] for r in rs])
        mbps[t] = rs[0]["bytes"] / 1e6 / w
        md.append("| %s | %s | %.0f | %.2f (%.2f+%.2f) | %.2f | %.1f |" % (
            t, cases.cell(t), mbps[t], med([r["client_cpu"] for r in rs]),
            med([r["client_user"] for r in rs]), med([r["client_sys"] for r in rs]),
            med([r["server_cpu"] for r in rs]),
            max(r["client_maxrss_kb"] for r in rs) / 1024))
    md.append("")
    return md, mbps


def check_tables(rows):
    md = []
    cases = Cases(rows, lambda r: r["n"])
    if not cases.ok and not cases.bad:
        return md, {}
    md.append("#### `multinode check` across N agents (and the head): wall seconds\n")
    md.append("| N | wall s median [min–max] ×runs | agents' CPU s (median) |")
    md.append("|---|---|---|")
    walls = {}
    for n in sorted(set(cases.ok) | set(cases.bad)):
        rs = cases.ok.get(n, [])
        walls[n] = cases.wall(n)
        cpu = "%.2f" % med([r["server_cpu"] for r in rs]) if rs else ""
        md.append("| %d | %s | %s |" % (n, cases.cell(n), cpu))
    md.append("")
    return md, walls


def memory_tables(rows):
    md = []
    if not rows:
        return md
    md.append("#### Agent memory\n")
    md.append("| case | measure |")
    md.append("|---|---|")
    for r in rows:
        if r["what"] == "agent idle":
            md.append("| agent idle (%d agents) | RSS median %.1f MB (max %.1f), PSS median %.1f MB |" % (
                r["agents"], r["rss_kb_median"] / 1024, r["rss_kb_max"] / 1024,
                r["pss_kb_median"] / 1024))
        elif r["what"].startswith("agent"):
            md.append("| one agent, 64 sessions of `sleep` | agent RSS %.1f MB (peak %.1f), "
                      "PSS %.1f MB; + %d `sh` commands, PSS %.1f MB |" % (
                          r["agent_rss_kb"] / 1024, r["agent_hwm_kb"] / 1024,
                          r["agent_pss_kb"] / 1024, r["commands"],
                          r["commands_pss_kb"] / 1024))
        else:
            md.append("| sshd, 64 sessions of `sleep` | %d sshd processes, PSS %.1f MB "
                      "(RSS sum %.1f MB) |" % (r["sshd_processes"], r["sshd_pss_kb"] / 1024,
                                               r["sshd_rss_kb_sum"] / 1024))
    md.append("")
    return md


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-id")
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--doc", action="store_true",
                    help="replace docs/benchmarks.md's tables even from BENCH_RESULTS")
    a = ap.parse_args()
    run_id = a.run_id or latest_run_id()
    if not run_id:
        raise SystemExit("no results")
    machine = [json.loads(line) for line in open(os.path.join(RES, "machine.jsonl"))]
    m = [x for x in machine if x["run_id"] == run_id][-1]
    md = ["### Run `%s`\n" % run_id,
          "Machine: %s × %s, %s, Linux %s, AES-NI %s. %s; %s; %s; parallel-ssh %s. "
          "multinode %s%s (release build). Load average at start %s, at end %s. "
          "bench.py %s\n" % (
              m["nproc"], m["model"], m["mem"], m["kernel"], "yes" if m["aes"] else "no",
              m["openssh"], m["pdsh"], m["clush"], m["pssh"], m["multinode_commit"],
              " + uncommitted changes" if m["multinode_dirty"] else "",
              m["loadavg_start"], m.get("loadavg_end"), " ".join(m["args"]) or "(defaults)")]
    fan, fcases = fanout_tables(load("fanout", run_id))
    lat, lmeds = latency_tables(load("latency", run_id))
    rel, mbps = relay_tables(load("relay", run_id))
    mem = memory_tables(load("memory", run_id))
    chk, cwalls = check_tables(load("check", run_id))

    # Targets
    tg = ["#### Targets (ratios from this run)\n", "| target | measured | met |", "|---|---|---|"]

    def row(name, value, ok):
        tg.append("| %s | %s | %s |" % (name, value, "yes" if ok else "**no**"))

    a256 = fcases.wall(("pdsh -f32 (default)", 256, "true")) if fcases else None
    b256 = fcases.wall(("mn-exec-all", 256, "true")) if fcases else None
    if a256 and b256:
        row("`mn-exec-all` N=256 `true` ≥ 10× faster than `pdsh -R ssh` (default fanout)",
            "%.1f× (%.3f s vs %.3f s)" % (a256 / b256, b256, a256), a256 / b256 >= 10)
    h256 = fcases.wall(("pdsh -f32 (default)", 256, "hostname")) if fcases else None
    m256 = fcases.wall(("mn-exec-all --label", 256, "hostname")) if fcases else None
    if h256 and m256:
        row("(same for `hostname`, mn-exec-all --label)",
            "%.1f× (%.3f s vs %.3f s)" % (h256 / m256, m256, h256), h256 / m256 >= 10)
    mn = lmeds.get("mn-ssh HOST true (agent)")
    cold = lmeds.get("ssh HOST true (cold, curve25519)")
    cm = lmeds.get("ssh HOST true (ControlMaster)")
    if mn and cold:
        row("`mn-ssh HOST true` ≥ 10× faster than a cold `ssh`",
            "%.1f× (%.4f s vs %.4f s)" % (cold / mn, mn, cold), cold / mn >= 10)
    if mn and cm:
        row("`mn-ssh HOST true` ≤ 1.5× `ssh` over a ControlMaster socket",
            "%.2f× (%.4f s vs %.4f s)" % (mn / cm, mn, cm), mn / cm <= 1.5)
    for t in ("mn-exec-all", "mn-exec-all --label"):
        if t in mbps and "pdsh -fN" in mbps:
            r = mbps[t] / mbps["pdsh -fN"]
            row("`%s` relay ≥ 3× pdsh's bytes/s" % t, "%.1f× (%.0f vs %.0f MB/s)" % (
                r, mbps[t], mbps["pdsh -fN"]), r >= 3)
        if t in mbps and "ssh loop" in mbps:
            r = mbps[t] / mbps["ssh loop"]
            row("`%s` relay ≥ a plain `ssh > /dev/null` loop" % t, "%.2f× (%.0f vs %.0f MB/s)" % (
                r, mbps[t], mbps["ssh loop"]), r >= 1)
    if fcases:
        rs = [r for c in ("true", "hostname") for t in ("mn-exec-all", "mn-exec-all --label")
              for r in fcases.ok.get((t, 1024, c), [])]
        bad = sum(fcases.bad.get((t, 1024, c), 0) for c in ("true", "hostname")
                  for t in ("mn-exec-all", "mn-exec-all --label"))
        if rs:
            peak = max(r["client_maxrss_kb"] for r in rs) / 1024
            row("N=1024 completes, `mn-exec-all` peak RSS < 256 MB",
                "%d/%d runs ok, peak %.1f MB" % (len(rs), len(rs) + bad, peak),
                bad == 0 and peak < 256)
    if cwalls.get(256):
        row("`multinode check` on 256 nodes runs in seconds (< 5 s)",
            "%.2f s" % cwalls[256], cwalls[256] < 5)
    tg.append("")
    text = "\n".join(md + tg + fan + lat + rel + mem + chk)
    with open(os.path.join(RES, "tables.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    default = os.path.realpath(RES) == os.path.realpath(os.path.join(HERE, "results"))
    if not (default or a.doc):
        print(f"(docs/benchmarks.md left as it is: these results are in {RES}; --doc writes them there)")
    elif not a.no_doc and os.path.exists(DOC):
        doc = open(DOC).read()
        b, e = "<!-- tables:begin -->", "<!-- tables:end -->"
        if b in doc and e in doc:
            head, rest = doc.split(b, 1)
            _, tail = rest.split(e, 1)
            with open(DOC, "w") as f:
                f.write(head + b + "\n" + text + "\n" + e + tail)


if __name__ == "__main__":
    main()
