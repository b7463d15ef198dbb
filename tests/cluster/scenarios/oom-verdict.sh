#!/usr/bin/env bash
# A node is OOM-killed, and the first-failure verdict says so. Three nodes;
# node1's container runs with --memory 128m (no swap), and its rank
# allocates past that while the other ranks sleep. The head's JOB runs
# `mn-exec-all --report FILE --output DIR` (the command of docs/diagnose.md). Then:
# - exec_all exits 137 (rank 1's shell: its python was SIGKILLed);
# - the verdict, on stderr and in the report, names rank 1 (node1) as the
#   first failure, OOM-killed (read by node1's agent from its container's
#   cgroup), with its last NCCL-like warning line and its last lines;
# - the whole job is down within the documented bound (--grace 3 s + 2 s)
#   of that failure, and no job process is left on any node;
# - DIR holds every rank's stdout and stderr.
# shellcheck disable=SC2016 # the script is expanded by each node's shell
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

MN_NODES=(node0 node1 node2)
MN_HOSTLIST=$(printf "%s:$MN_SLOTS," "${MN_NODES[@]}")
MN_HOSTLIST=${MN_HOSTLIST%,}
MN_JOB_ENV=(-e "MULTINODE_HOSTLIST=$MN_HOSTLIST")

# Rank 1 prints a line like NCCL's warnings (a stand-in: no GPU here), then
# grows until the kernel kills it; the others wait as ranks do in a collective.
script='if [ "$RANK" = 1 ]; then
  echo "node1:42:42 [1] NCCL WARN stand-in: Connection closed by remote peer" >&2
  echo "rank 1 allocating"
  python3 -c "
b = []
while True:
    b.append(bytearray(8 << 20))"
else
  echo "rank $RANK waiting"; exec sleep 600
fi'
printf '%s\n' "$script" >"$MN_RESULTS/job.sh"
# The command of docs/diagnose.md, run in /results.
command=$(mn_doc_block "$MN_ROOT/docs/diagnose.md" oom-verdict)

for host in node2 node1 node0; do
    opts=()
    [[ $host == node1 ]] && opts=(--memory 128m --memory-swap 128m)
    mn_node "$host" "${opts[@]}" -- -- /fixtures/hold.sh oom sh -c \
        "cd /results && { $command; } 2>/results/summary.txt"
done

if ! mn_poll 60 test -f "$MN_RESULTS/oom.done"; then
    check_fail "exec_all still runs 60 s after the start"
else
    read -r rc _ <"$MN_RESULTS/oom.done"
    check_eq "exec_all's exit status (rank 1's shell: 128+SIGKILL)" 137 "$rc"
    if grep -q '^  OOM-killed: yes' "$MN_RESULTS/summary.txt"; then
        check_ok "the summary says OOM-killed: $(grep '^first failure:' "$MN_RESULTS/summary.txt")"
    else
        check_fail "the summary does not say OOM-killed: $(tr '\n' '|' <"$MN_RESULTS/summary.txt")"
    fi
    while IFS= read -r line; do
        case $line in
        ok\ *) check_ok "${line#ok }" ;;
        *) check_fail "${line#fail }" ;;
        esac
    done < <(python3 - "$MN_RESULTS/report.json" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(f"fail no readable report: {e}")
    sys.exit()
v = report.get("verdict") or {}
def check(what, ok, got):
    print(f"{'ok' if ok else 'fail'} report: {what}: {got!r}")
check("first failure is rank 1 on node1", (v.get("rank"), v.get("host")) == (1, "node1"), (v.get("rank"), v.get("host")))
check("OOM-killed", v.get("oom_killed") is True, v.get("oom_killed"))
check("exit 137, SIGKILL", (v.get("exit"), v.get("signal")) == (137, "SIGKILL"), (v.get("exit"), v.get("signal")))
check("its last NCCL line", "NCCL WARN stand-in" in (v.get("nccl_line") or ""), v.get("nccl_line"))
check("its last lines", "rank 1 allocating" in v.get("last_lines", []), v.get("last_lines"))
down = v.get("down_after_s")
check("the job down within --grace 3 s + 2 s of it", down is not None and down <= 5.0, down)
others = {n["host"]: n for n in report["nodes"] if n["rank"] != 1}
check("the others were not OOM-killed", all(n.get("oom_kills") == 0 for n in others.values()),
      {h: n.get("oom_kills") for h, n in others.items()})
PY
    )
    for rank in 0 1 2; do
        if [[ -f $MN_RESULTS/logs/$rank.out && -f $MN_RESULTS/logs/$rank.err ]]; then
            check_ok "--output: rank $rank: $(head -n 1 "$MN_RESULTS/logs/$rank.out")"
        else
            check_fail "--output: no $rank.out and $rank.err: $(ls "$MN_RESULTS/logs" 2>&1 | tr '\n' ' ')"
        fi
    done
    # Then its shell's word on the kill (dash: "Killed").
    check_eq "--output: rank 1's stderr, first line" \
        "node1:42:42 [1] NCCL WARN stand-in: Connection closed by remote peer" \
        "$(head -n 1 "$MN_RESULTS/logs/1.err")"
    # What the user saw, for docs/diagnose.md.
    sed 's/^/  | /' "$MN_RESULTS/summary.txt"
    for host in "${MN_NODES[@]}"; do
        if mn_has_proc "$host" '^ *[0-9]+ (sleep 600$|python3|mn-exec-all |[^ ]*multinode supervise )'; then
            check_fail "a job process is left on $host: $(mn_procs "$host" | tr '\n' ';')"
        else
            check_ok "no job process left on $host"
        fi
    done
fi

mn_release 137 node1 node2
finish
