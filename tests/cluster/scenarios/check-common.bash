# shellcheck shell=bash disable=SC2034 # check_status is read by the scenarios
# Shared by the check-* scenarios, sourced after ../lib.sh (not a scenario
# itself: run.sh runs *.sh only). A job of two containers, node0 (the head)
# and node1, on a private network, each running the agent lifecycle
# `multinode agent -- JOB`: the worker serves, the head waits for it, runs
# JOB (a `multinode check`), and releases it.
#
# The head starts first (it waits for its workers): a worker resolves the
# head's name when it starts, and Docker's DNS knows only running containers.
# Workers are given the head's address (MULTINODE_NODE_IP, as a platform
# does), so that a worker whose /etc/hosts is wrong still starts and the
# check, not the agent, reports it.
#
# `multinode check` fans out through exec_all's collect(); until that is
# built, check_job_result records one FAIL saying so.

MN_CHECK_SECRET=check-scenario-secret-0123456789abcdef
MN_CHECK_HOSTS=node0:1,node1:1
mn_check_net=
mn_check_head_ip=

# check_network NAME: the job's private network.
check_network() {
    mn_check_net=$(mn_network "$1")
}

# start_head JOB [docker run options...]: node0, detached, running `sh -c JOB`
# as the job of its agent; sets mn_check_head_ip.
start_head() {
    local job=$1
    shift
    mn_docker -d --name "$(mn_name node0)" --hostname node0 --network "$mn_check_net" \
        --network-alias node0 \
        -e MULTINODE_SECRET="$MN_CHECK_SECRET" -e MULTINODE_HOSTLIST="$MN_CHECK_HOSTS" \
        "$@" "$MN_IMAGE" multinode agent --wait-timeout 60 -- sh -c "$job" >/dev/null
    mn_check_head_ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' \
        "$(mn_name node0)")
}

# start_worker [docker run options...] [-- command prefix...]: node1, detached.
# A command prefix runs before the agent (for example to rename an interface):
#   start_worker --cap-add NET_ADMIN -- sh -c 'ip link set eth0 down && ... && exec "$@"' sh
start_worker() {
    local opts=() prefix=()
    while (($#)) && [[ $1 != -- ]]; do
        opts+=("$1")
        shift
    done
    (($#)) && shift
    prefix=("$@")
    mn_docker -d --name "$(mn_name node1)" --hostname node1 --network "$mn_check_net" \
        --network-alias node1 \
        -e MULTINODE_SECRET="$MN_CHECK_SECRET" -e MULTINODE_HOSTLIST="$MN_CHECK_HOSTS" \
        -e MULTINODE_NODE_IP="$mn_check_head_ip" \
        "${opts[@]}" "$MN_IMAGE" "${prefix[@]}" multinode agent --idle-timeout 120 -- true >/dev/null
}

# check_job_result: waits for the head; its job's stdout goes to
# $MN_TMP/check.out, stderr to $MN_TMP/check.err, status to check_status.
# When the fan-out is not built, or the job did not get to answer (a status
# other than check's 0 and 1), records the failure and finishes.
check_status=0
check_job_result() {
    local head
    head=$(mn_name node0)
    check_status=$(timeout 150 docker wait "$head") || check_status=timeout
    docker logs "$head" >"$MN_TMP/check.out" 2>"$MN_TMP/check.err"
    if grep -q "fan-out is not built yet" "$MN_TMP/check.err"; then
        check_fail "multinode check needs exec_all's collect(), which is not built yet"
        finish
    fi
    if [[ $check_status != 0 && $check_status != 1 ]]; then
        check_fail "the head's job ended with status $check_status: $(grep -v '^\s*$' "$MN_TMP/check.err" | tail -n 1)"
        finish
    fi
}

# check_row CHECK: prints `STATUS|NODES|DETAIL` of one row of the JSON
# report in $MN_TMP/check.out (NODES comma-separated), or `missing|...`.
check_row() {
    python3 - "$MN_TMP/check.out" "$1" <<'PY'
import json, sys
path, check = sys.argv[1:]
try:
    rows = json.load(open(path))
except ValueError as e:
    print(f"unreadable||{e}")
    sys.exit()
row = next((r for r in rows if isinstance(r, dict) and r.get("check") == check), None)
if row is None:
    print("missing||")
else:
    print("|".join([row["status"], ",".join(row["nodes"]), row["detail"].replace("|", "/")]))
PY
}

# expect_row CHECK STATUS NODES DETAIL_SUBSTRING: one row, checked; NODES is
# a glob (`*node1*`) matched against the comma-separated nodes.
expect_row() {
    local status nodes detail
    IFS='|' read -r status nodes detail < <(check_row "$1")
    check_eq "$1: status" "$2" "$status"
    # shellcheck disable=SC2053 # a glob on purpose
    if [[ $nodes == $3 ]]; then
        check_ok "$1: nodes $nodes"
    else
        check_fail "$1: nodes '$nodes' do not match '$3'"
    fi
    if [[ $detail == *"$4"* ]]; then
        check_ok "$1: detail has '$4'"
    else
        check_fail "$1: detail '$detail' lacks '$4'"
    fi
}
