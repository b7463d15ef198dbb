#!/usr/bin/env bash
# Restarts with a spare (docs/restarts.md), set through the environment as
# a platform would: 5 containers, MULTINODE_SPARES=1 and
# MULTINODE_MAX_RESTARTS=2 on every node. The head's JOB runs mn-exec-all
# (through the head agent's shared connections), whose first attempt sleeps
# on node0-node3 (node4 is the spare). node2 is killed (`docker kill`) mid-run:
# attempt 1 must run on node0, node1, node3 and node4 with ranks 0-3, the
# job must end 0, the report must say what happened, and no job process may
# be left on any node.
# shellcheck source-path=SCRIPTDIR source=../lib.sh disable=SC2317 # functions run through mn_poll
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

MN_NODES=(node0 node1 node2 node3 node4)
MN_HOSTLIST='node[0-4]:1'
MN_JOB_ENV=(-e "MULTINODE_HOSTLIST=$MN_HOSTLIST" -e MULTINODE_SPARES=1 -e MULTINODE_MAX_RESTARTS=2)
lost=node2

# shellcheck disable=SC2016 # expanded on the nodes
mn_cluster -- --idle-timeout 60 -- /fixtures/hold.sh execall \
    mn-exec-all --grace 2 --report /results/report.json -c \
    'echo "attempt=$MULTINODE_RESTART_COUNT rank=$RANK nnodes=$MULTINODE_NNODES host=$(hostname)" >>/results/ran
     [ "$MULTINODE_RESTART_COUNT" = 0 ] && exec sleep 1234; exit 0'
if ! mn_poll 30 mn_all_have '^ *[0-9]+ sleep 1234$' node0 node1 node2 node3; then
    check_fail "attempt 0 did not start on node0-node3 within 30 s"
    finish
fi
check_ok "attempt 0: sleep 1234 runs on node0-node3"
if mn_has_proc node4 '^ *[0-9]+ sleep 1234$'; then
    check_fail "the spare node4 runs attempt 0"
else
    check_ok "the spare node4 waits"
fi

t_kill=$(mn_now)
docker kill "$(mn_ctr "$lost")" >/dev/null
mn_wait_done 60 "$lost was killed"
check_eq "exec_all's exit status (attempt 1 succeeded)" 0 "$MN_RC"
check_within "from the kill to the end of attempt 1" 15 "$(mn_since "$t_kill" "$MN_T_END")"
check_eq "what attempt 1 ran, by rank" \
    "attempt=1 rank=0 nnodes=4 host=node0;attempt=1 rank=1 nnodes=4 host=node1;attempt=1 rank=2 nnodes=4 host=node3;attempt=1 rank=3 nnodes=4 host=node4;" \
    "$(grep '^attempt=1 ' "$MN_RESULTS/ran" | sort | tr '\n' ';')"

mn_report_checks "$MN_RESULTS/report.json" <<'PY'
check("attempts", len(attempts), 2)
if len(attempts) == 2:
    a0, a1 = attempts
    check("attempt 0's hosts", a0["hosts"], ["node0", "node1", "node2", "node3"])
    check("attempt 0's first failure", (a0["verdict"] or {}).get("host"), "node2")
    check("attempt 0's failure", (a0["verdict"] or {}).get("how"), "lost")
    check("excluded after attempt 0", a0["excluded"], [{"host": "node2", "why": "lost"}])
    check("attempt 1's hosts", a1["hosts"], ["node0", "node1", "node3", "node4"])
    check("attempt 1", a1["then"], "succeeded")
    rs = a1.get("restart_s")
    print(f"{'ok' if isinstance(rs, float) and rs > 0 else 'fail'} report: from node2's loss to attempt 1 running: {rs} s")
check("exit code", report["exit_code"], 0)
PY

mn_none_left '^ *[0-9]+ (sleep 1234$|mn-exec-all |[^ ]*multinode supervise )' node0 node1 node3 node4

mn_release 0 node1 node3 node4
finish
