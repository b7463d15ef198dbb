#!/usr/bin/env bash
# A fault in the program, not a node (docs/restarts.md): 5 containers, the
# head's JOB runs `mn-exec-all --spares 1 --max-restarts 5` of a program
# that fails (exit 3, a Python-like error line) on whichever node holds
# rank 2, while the others sleep. Attempt 0 fails on node2; attempt 1 on
# node2 again, which is then excluded (it failed first twice in a row: it
# might be a bad node) and the spare node4 joins; attempt 2 fails the same
# way on node3, rank 2 now: the program. The run must stop there, after 3
# attempts and not 6, exit with the program's status (3), say so in the
# summary and in the report's attempts, and leave nothing on any node.
# shellcheck source-path=SCRIPTDIR source=../lib.sh disable=SC2317 # functions run through mn_poll
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

MN_NODES=(node0 node1 node2 node3 node4)
MN_HOSTLIST='node[0-4]:1'
MN_JOB_ENV=(-e "MULTINODE_HOSTLIST=$MN_HOSTLIST")
stop="the fault is in the program, not a node: exit 3 first on node2 and then on node3"

t0=$(mn_now)
# shellcheck disable=SC2016 # expanded on the nodes
mn_cluster -- --idle-timeout 60 -- /fixtures/hold.sh execall \
    mn-exec-all --spares 1 --max-restarts 5 --grace 2 --report /results/report.json -c \
    'echo "attempt=$MULTINODE_RESTART_COUNT rank=$RANK host=$(hostname)" >>/results/ran
     if [ "$RANK" = 2 ]; then sleep 0.5; echo "ValueError: bad batch at step 7" >&2; exit 3; fi
     exec sleep 1234'
mn_wait_done 60 "the start"
check_eq "exec_all's exit status (the program's)" 3 "$MN_RC"
check_ok "the run took $(mn_since "$t0" "$MN_T_END") s from the containers' start"
check_eq "attempts run" "0 1 2" "$(sed -n 's/^attempt=\([0-9]*\) .*/\1/p' "$MN_RESULTS/ran" | sort -u | tr '\n' ' ' | sed 's/ $//')"
check_eq "who held rank 2, by attempt" "attempt=0 host=node2;attempt=1 host=node2;attempt=2 host=node3;" \
    "$(sed -n 's/^\(attempt=[0-9]*\) rank=2 \(host=.*\)/\1 \2/p' "$MN_RESULTS/ran" | sort | tr '\n' ';')"
check_eq "what the spare node4 ran" "attempt=2 rank=3 host=node4" "$(grep 'host=node4$' "$MN_RESULTS/ran" || true)"

mn_report_checks "$MN_RESULTS/report.json" "$stop" <<'PY'
stop = sys.argv[2]
check("attempts", len(attempts), 3)
if len(attempts) == 3:
    first = ["node0", "node1", "node2", "node3"]
    want = [
        (first, "node2", [], "restart"),
        (first, "node2", [{"host": "node2", "why": "failed first in two attempts in a row"}], "restart"),
        (["node0", "node1", "node3", "node4"], "node3", [], stop),
    ]
    for a, (hosts, host, excluded, then) in zip(attempts, want):
        n = a["attempt"]
        v = a["verdict"] or {}
        check(f"attempt {n}'s hosts", a["hosts"], hosts)
        check(f"attempt {n}'s first failure", (v.get("host"), v.get("rank"), v.get("how")), (host, 2, "exit 3"))
        check(f"attempt {n}'s failure", a["failure"], f"rank 2 ({host}) exit 3")
        check(f"attempt {n}'s last line", (v.get("last_lines") or [None])[-1], "ValueError: bad batch at step 7")
        check(f"excluded after attempt {n}", a["excluded"], excluded)
        check(f"after attempt {n}", a["then"], then)
check("exit code", report["exit_code"], 3)
check("the last attempt's first failure", (report.get("verdict") or {}).get("host"), "node3")
PY

mn_save_logs node0
summary="mn-exec-all: attempt 0: rank 2 (node2) exit 3; attempt 1: rank 2 (node2) exit 3, node2 excluded; attempt 2: rank 2 (node3) exit 3; $stop"
if grep -qxF "$summary" "$MN_TMP/node0.out" "$MN_TMP/node0.err"; then
    check_ok "the summary: $summary"
else
    check_fail "no summary line '$summary' in the head's output: $(grep -h 'mn-exec-all: attempt' "$MN_TMP/node0.out" "$MN_TMP/node0.err" | tail -n 1)"
fi

mn_none_left '^ *[0-9]+ (sleep 1234$|mn-exec-all |[^ ]*multinode supervise )' "${MN_NODES[@]}"

mn_release 3 node1 node2 node3 node4
finish
