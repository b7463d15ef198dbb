#!/usr/bin/env bash
# The health check (docs/restarts.md): 5 containers, node4 the spare; node2's
# container alone holds a marker file, /health/xid-79, as a node whose GPU
# fell off the bus would fail `nvidia-smi`. The head's JOB runs
# `mn-exec-all --spares 1 --health-check CMD`, CMD failing (with a line on
# stderr) where the marker is. node2 must be skipped before the start, the
# spare node4 must take its place as rank 3 (ranks are dense, in hostlist
# order), the job must end 0, and the report must say that node2 failed the
# health check; nothing of the check or the job is left on any node.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

MN_NODES=(node0 node1 node2 node3 node4)
MN_HOSTLIST='node[0-4]:1'
MN_JOB_ENV=(-e "MULTINODE_HOSTLIST=$MN_HOSTLIST")
sick=node2
mkdir -p "$MN_TMP/health"
echo 'GPU 0: Xid 79, fallen off the bus' >"$MN_TMP/health/xid-79"

# shellcheck disable=SC2016 # expanded on the nodes
job=(/fixtures/hold.sh execall mn-exec-all --spares 1 --report /results/report.json
    --health-check 'echo "checked $(hostname)" >>/results/checked; if [ -e /health/xid-79 ]; then cat /health/xid-79 >&2; exit 1; fi'
    -c 'echo "rank=$RANK nnodes=$MULTINODE_NNODES hosts=$MULTINODE_HOSTLIST_NOSLOTS host=$(hostname)" >>/results/ran')
# Workers first, the head last (it waits for them anyway); the sick node
# alone has the marker.
for host in node4 node3 node2 node1 node0; do
    opts=()
    [[ $host == "$sick" ]] && opts=(-v "$MN_TMP/health:/health:ro")
    mn_node "$host" "${opts[@]}" -- --idle-timeout 60 -- "${job[@]}"
done
mn_wait_done 60 "the start"
check_eq "exec_all's exit status" 0 "$MN_RC"
check_eq "the health check ran on every node, spare included, once" "node0 node1 node2 node3 node4" \
    "$(sed -n 's/^checked //p' "$MN_RESULTS/checked" | sort | tr '\n' ' ' | sed 's/ $//')"
check_eq "what ran, by rank" \
    "rank=0 nnodes=4 hosts=node0,node1,node3,node4 host=node0;rank=1 nnodes=4 hosts=node0,node1,node3,node4 host=node1;rank=2 nnodes=4 hosts=node0,node1,node3,node4 host=node3;rank=3 nnodes=4 hosts=node0,node1,node3,node4 host=node4;" \
    "$(sort "$MN_RESULTS/ran" | tr '\n' ';')"

mn_save_logs node0
for line in "mn-exec-all: health check: $sick failed; excluded" "2 $sick: GPU 0: Xid 79, fallen off the bus"; do
    if grep -qF -- "$line" "$MN_TMP/node0.out" "$MN_TMP/node0.err"; then
        check_ok "the head's output says: $line"
    else
        check_fail "the head's output does not say: $line"
    fi
done

mn_report_checks "$MN_RESULTS/report.json" "$sick" <<'PY'
sick = sys.argv[2]
check("attempts", len(attempts), 1)
if attempts:
    a = attempts[0]
    check("attempt 0's hosts", a["hosts"], ["node0", "node1", "node3", "node4"])
    check("failed the health check before attempt 0", a["health_failed"], [sick])
    check("attempt 0", (a["exit_code"], a["failure"], a["then"]), (0, None, "succeeded"))
check("exit code", report["exit_code"], 0)
check("the nodes", [n["host"] for n in report["nodes"]], ["node0", "node1", "node3", "node4"])
PY

mn_none_left . "${MN_NODES[@]}"

mn_release 0 node1 node2 node3 node4
finish
