#!/usr/bin/env bash
# One node has another MULTINODE_SECRET than the rest (node2). Its agent
# derives other keys, so the head's agent and it reject each other. The head
# must fail at once (well within its --wait-timeout of 120 s: its container
# runs at most 5 s), exit 255 with an error that names node2 alone and the
# secret, and run nothing: the JOB (which would record that it started, then
# exec_all) never starts. The head releases the other workers: they exit 0.
# node2 exits 255, naming the head: as soon as the head is gone if it reached
# the head's agent in time to see its key (it then names the secret too),
# else when its own limit of 10 s without a head (--wait-timeout 10) is up.
# shellcheck disable=SC2016 # the JOB is expanded by the head's shell
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

bad=node2
agent=(--wait-timeout 10 --idle-timeout 5)
job='touch /results/job-started; mn-exec-all -c "touch /results/ran.\$(hostname)"'
for host in node3 node2 node1 node0; do
    if [[ $host == "$bad" ]]; then
        MN_NODE_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n') \
            mn_node "$host" -- "${agent[@]}" -- sh -c "$job"
    else
        mn_node "$host" -- "${agent[@]}" -- sh -c "$job"
    fi
done
if code=$(mn_wait_exit node0 30); then
    check_within "the head's container ran for" 5 "$(mn_ran_for node0)"
    check_eq "the head's exit status" 255 "$code"
else
    check_fail "the head still runs 30 s later"
fi
mn_save_logs node0
error=$(grep 'error' "$MN_TMP/node0.err" | tail -n 1) || true
if grep -q "rank 2 $bad" <<<"$error" && grep -q 'MULTINODE_SECRET' <<<"$error" &&
    ! grep -Eq 'rank [13] ' <<<"$error"; then
    check_ok "the head's error names $bad alone, and the secret: $error"
else
    check_fail "the head's error should name $bad (rank 2) alone, and the secret: '$error'"
fi
ran=$(find "$MN_RESULTS" -mindepth 1 -printf '%f ')
check_eq "what the JOB left in /results (nothing: it never ran)" "" "$ran"

for host in node1 node2 node3; do
    code=$(mn_wait_exit "$host" 20) || code="still running 20 s later"
    if [[ $host == "$bad" ]]; then
        check_eq "$host's exit status" 255 "$code"
        mn_save_logs "$host"
        error=$(grep 'error' "$MN_TMP/$host.err" | tail -n 1) || true
        if grep -q 'cannot follow the head: node0:[0-9]* is not an agent of this job.*MULTINODE_SECRET' <<<"$error"; then
            check_ok "$host's error names the head and the secret: $error"
        elif grep -q 'the head node0:[0-9]* has been unreachable for 10 s' <<<"$error"; then
            check_ok "$host did not reach the head in time to see its key: $error"
        else
            check_fail "$host's error should name the head: '$error'"
        fi
    else
        check_eq "$host released, exit status" 0 "$code"
    fi
done
finish
