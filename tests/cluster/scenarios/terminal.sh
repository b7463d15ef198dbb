#!/usr/bin/env bash
# Terminals from the head's container to another (issue 31), as a person
# types them, through `script`'s pty (tests/cluster/fixtures/term.py):
# - `mn-ssh -tt node1`: `tty` names a pts, `stty size` is the local 30 100
#   and follows a resize to 23 61, Ctrl-C ends the foreground `sleep` and
#   not the shell (`$?` 130), `exit 7` gives 7;
# - `multinode shell 1`: the same, and `$RANK` there is 1;
# - OpenSSH's `ssh -tt -i KEY node1`, with the job's key and known_hosts
#   line from `multinode keygen --known-hosts` (docs/agent.md): the same;
# - `kill -9` of a `mn-ssh -tt node2`, and of an OpenSSH `ssh -tt node3`,
#   whose shell runs two `sleep`s (one in the background, a group of its
#   own): the node keeps neither (within 15 s).
# The job: every node's agent, the head's JOB an exec_all of `sleep 600`.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

mn_cluster -- --idle-timeout 30 -- mn-exec-all -c 'exec sleep 600'
if mn_poll 60 mn_all_have '^ *[0-9]+ sleep 600$' "${MN_NODES[@]}"; then
    check_ok "the job runs on every node"
else
    check_fail "the job did not start on every node within 60 s"
fi
head=$(mn_ctr node0)
# report OUTPUT STATUS WHAT: term.py's `ok`/`FAIL` lines as checks.
report() {
    local line
    while IFS= read -r line; do
        case $line in
        'ok    '*) check_ok "${line#ok    }" ;;
        'FAIL  '*) check_fail "${line#FAIL  }" ;;
        esac
    done <<<"$1"
    (($2 == 0)) || check_fail "term.py $3 exited $2: $(tail -n 3 <<<"$1")"
}
term() {
    local out status=0
    out=$(docker exec "$head" python3 /fixtures/term.py "$@" 2>&1) || status=$?
    report "$out" "$status" "$1 '$2'"
}
term drive "mn-ssh -tt node1"
term drive "multinode shell 1" 1
# OpenSSH's client, as docs/agent.md logs in with it.
if docker exec "$head" sh -c 'multinode keygen --known-hosts -o /tmp/id_job >/tmp/agents_known_hosts'; then
    check_ok "multinode keygen wrote the job's key and known_hosts line on the head"
else
    check_fail "multinode keygen failed on the head"
fi
openssh="ssh -tt -i /tmp/id_job -o IdentitiesOnly=yes -o BatchMode=yes \
-o UserKnownHostsFile=/tmp/agents_known_hosts -o StrictHostKeyChecking=yes -p 29922"
term drive "$openssh node1"

# orphan NODE CLIENT: kill -9 of CLIENT (a terminal on NODE whose shell runs
# two sleeps) leaves nothing on NODE.
orphan() {
    local node=$1 client=$2 tag killer status=0
    tag=4242${node#node}.$$
    rm -f "$MN_RESULTS/kill-now"
    docker exec "$head" python3 /fixtures/term.py orphan "$client" "$tag" \
        /results/kill-now >"$MN_TMP/orphan.out" 2>&1 &
    killer=$!
    if mn_poll 30 eval "[[ \$(mn_procs $node | grep -c 'sleep $tag\$') == 2 ]]"; then
        check_ok "$node runs the shell's two sleeps"
    else
        check_fail "$node does not run the shell's two sleeps: $(mn_procs "$node" | tr '\n' ';')"
    fi
    touch "$MN_RESULTS/kill-now"
    wait "$killer" || status=$?
    report "$(cat "$MN_TMP/orphan.out")" "$status" "orphan '$client'"
    if mn_poll 15 eval "! mn_has_proc $node 'sleep $tag\$'"; then
        check_ok "$node kept nothing of the killed client's shell"
    else
        check_fail "$node still runs: $(mn_procs "$node" | grep "sleep $tag" | tr '\n' ';')"
    fi
}
orphan node2 "mn-ssh -tt node2"
orphan node3 "$openssh node3"
finish
