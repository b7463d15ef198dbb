#!/usr/bin/env bash
# A node frozen mid-run, with restarts (docs/restarts.md): 5 containers,
# node4 the spare; the head's JOB runs `mn-exec-all --spares 1
# --max-restarts 2 --hang-timeout 10` whose first attempt sleeps, silent,
# on node0-node3. node2 is frozen (`docker pause`: its kernel still
# acknowledges TCP, no process of it runs) once the attempt runs everywhere.
# The hang timeout is set above the client liveness (a node silent for 4 s
# is lost), as docs/restarts.md says to set it: exec_all must find node2
# lost, not the run hung (no snapshot), end the attempt, exclude node2 and
# run attempt 1 on node0, node1, node3 and the spare node4, which ends 0.
# Nothing of the job may be left on the others; and once node2 is thawed
# (`docker unpause`), its agent must find its client gone and end the
# attempt's `sleep` there too. Then, on a second cluster, the hang timeout
# below the liveness (2 s): the watchdog fires first, the snapshot is kept
# in the attempt, and node2, found lost while the hung attempt ends, is
# excluded all the same: attempt 1 runs on the spare and ends 0.
# shellcheck source-path=SCRIPTDIR source=../lib.sh disable=SC2317 # functions run through mn_poll
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

MN_NODES=(node0 node1 node2 node3 node4)
MN_HOSTLIST='node[0-4]:1'
MN_JOB_ENV=(-e "MULTINODE_HOSTLIST=$MN_HOSTLIST")
frozen=node2
hang=10
# However the scenario ends, the frozen node is thawed (a paused container
# keeps its processes).
trap 'docker unpause "$(mn_ctr "$frozen")" >/dev/null 2>&1 || true' EXIT

# shellcheck disable=SC2016 # expanded on the nodes
mn_cluster -- --idle-timeout 60 -- /fixtures/hold.sh execall \
    mn-exec-all --spares 1 --max-restarts 2 --hang-timeout "$hang" --grace 2 \
    --report /results/report.json -c \
    'echo "attempt=$MULTINODE_RESTART_COUNT rank=$RANK host=$(hostname)" >>/results/ran
     [ "$MULTINODE_RESTART_COUNT" = 0 ] && exec sleep 1234; exit 0'
if ! mn_poll 30 mn_all_have '^ *[0-9]+ sleep 1234$' node0 node1 node2 node3; then
    check_fail "attempt 0 did not start on node0-node3 within 30 s"
    finish
fi
check_ok "attempt 0: sleep 1234 runs on node0-node3"

t_pause=$(mn_now)
docker pause "$(mn_ctr "$frozen")" >/dev/null
mn_wait_done 60 "$frozen froze"
check_eq "exec_all's exit status (attempt 1 succeeded)" 0 "$MN_RC"
check_within "from the freeze to the end of attempt 1" 8 "$(mn_since "$t_pause" "$MN_T_END")"
check_eq "what attempt 1 ran, by rank" \
    "attempt=1 rank=0 host=node0;attempt=1 rank=1 host=node1;attempt=1 rank=2 host=node3;attempt=1 rank=3 host=node4;" \
    "$(grep '^attempt=1 ' "$MN_RESULTS/ran" | sort | tr '\n' ';')"

mn_report_checks "$MN_RESULTS/report.json" "$frozen" "$t_pause" <<'PY'
frozen, t_pause = sys.argv[2], float(sys.argv[3])
check("attempts", len(attempts), 2)
if len(attempts) == 2:
    a0, a1 = attempts
    v = a0["verdict"] or {}
    check("attempt 0's hosts", a0["hosts"], ["node0", "node1", "node2", "node3"])
    check("attempt 0's first failure", (v.get("host"), v.get("how")), (frozen, "lost"))
    check("attempt 0 has a hang snapshot (the watchdog fired)", "snapshot" in a0, False)
    check("excluded after attempt 0", a0["excluded"], [{"host": frozen, "why": "lost"}])
    check("attempt 1's hosts", a1["hosts"], ["node0", "node1", "node3", "node4"])
    check("attempt 1", a1["then"], "succeeded")
    at = v.get("at")
    if isinstance(at, float):
        lost = at - t_pause
        print(f"{'ok' if 2.5 <= lost <= 6 else 'fail'} {frozen} found lost {lost:.1f} s after the freeze (client liveness: 4 s from the last sign of life; limit 2.5-6 s)")
    rs = a1.get("restart_s")
    print(f"{'ok' if isinstance(rs, float) and rs > 0 else 'fail'} report: from {frozen}'s loss to attempt 1 running: {rs} s")
check("exit code", report["exit_code"], 0)
PY

mn_none_left '^ *[0-9]+ (sleep 1234$|mn-exec-all |[^ ]*multinode supervise )' node0 node1 node3 node4

t_thaw=$(mn_now)
docker unpause "$(mn_ctr "$frozen")" >/dev/null
if mn_poll 20 eval "! mn_has_proc $frozen '^ *[0-9]+ (sleep 1234$|[^ ]*multinode supervise )'"; then
    check_ok "$frozen thawed: its agent ended attempt 0's commands within $(mn_since "$t_thaw") s"
else
    check_fail "$frozen thawed: attempt 0's commands still run 20 s later: $(mn_procs "$frozen" | tr '\n' ';')"
fi

mn_release 0 node1 node2 node3 node4

# Second cluster: the hang timeout below the client liveness (2 s), so that
# the watchdog fires first. The first attempt prints a line every 0.5 s
# until /results/quiet exists, then sleeps, silent. node2 is frozen, then
# the others go quiet: the attempt is hung 2 s later, its snapshot taken
# (node2 cannot answer) and kept, and it is ended; node2, found lost while
# it ends, is excluded all the same, and attempt 1 runs on the spare.
mn_cluster_phase hung
check_ok "--- hang timeout 2 s, below the client liveness"
# shellcheck disable=SC2016 # expanded on the nodes
mn_cluster -- --idle-timeout 60 -- /fixtures/hold.sh execall \
    mn-exec-all --spares 1 --max-restarts 1 --hang-timeout 2 --grace 2 \
    --report /results/report.json -c \
    'echo "attempt=$MULTINODE_RESTART_COUNT rank=$RANK host=$(hostname)" >>/results/ran
     [ "$MULTINODE_RESTART_COUNT" = 0 ] || exit 0
     while [ ! -e /results/quiet ]; do echo "tick $RANK"; sleep 0.5; done
     exec sleep 1234'
if ! mn_poll 30 mn_all_have '^ *[0-9]+ sleep 0.5$' node0 node1 node2 node3; then
    check_fail "attempt 0 did not start on node0-node3 within 30 s"
    finish
fi
docker pause "$(mn_ctr "$frozen")" >/dev/null
t_quiet=$(mn_now)
touch "$MN_RESULTS/quiet"
mn_wait_done 60 "the others went quiet"
check_eq "exec_all's exit status (attempt 1 succeeded)" 0 "$MN_RC"
check_within "from the quiet to the end of attempt 1" 25 "$(mn_since "$t_quiet" "$MN_T_END")"
check_eq "what attempt 1 ran, by rank" \
    "attempt=1 rank=0 host=node0;attempt=1 rank=1 host=node1;attempt=1 rank=2 host=node3;attempt=1 rank=3 host=node4;" \
    "$(grep '^attempt=1 ' "$MN_RESULTS/ran" | sort | tr '\n' ';')"
mn_report_checks "$MN_RESULTS/report.json" "$frozen" <<'PY'
frozen = sys.argv[2]
check("attempts", len(attempts), 2)
if len(attempts) == 2:
    a0, a1 = attempts
    check("attempt 0's hosts", a0["hosts"], ["node0", "node1", "node2", "node3"])
    check("attempt 0 hung", (a0["exit_code"], a0["failure"]), (124, "hung (no output or heartbeat for --hang-timeout)"))
    snapshot = json.dumps(a0.get("snapshot"))
    check("attempt 0's snapshot kept, naming the frozen node", a0.get("snapshot") is not None and frozen in snapshot, True)
    check("excluded after attempt 0", a0["excluded"], [{"host": frozen, "why": "lost"}])
    check("attempt 1's hosts", a1["hosts"], ["node0", "node1", "node3", "node4"])
    check("attempt 1", a1["then"], "succeeded")
check("exit code", report["exit_code"], 0)
PY
mn_none_left '^ *[0-9]+ (sleep 1234$|sleep 0.5$|mn-exec-all |[^ ]*multinode supervise )' node0 node1 node3 node4
t_thaw=$(mn_now)
docker unpause "$(mn_ctr "$frozen")" >/dev/null
if mn_poll 20 eval "! mn_has_proc $frozen '^ *[0-9]+ (sleep 1234$|sleep 0.5$|[^ ]*multinode supervise )'"; then
    check_ok "$frozen thawed: its agent ended attempt 0's commands within $(mn_since "$t_thaw") s"
else
    check_fail "$frozen thawed: attempt 0's commands still run 20 s later: $(mn_procs "$frozen" | tr '\n' ';')"
fi
mn_release 0 node1 node2 node3 node4
finish
