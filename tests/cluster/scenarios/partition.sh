#!/usr/bin/env bash
# A network partition: `docker network disconnect` cuts node2 off while the
# head's JOB runs `mn-exec-all --report FILE -c 'sleep 1234'`. Nothing comes
# back from node2 (no FIN, no RST), so keepalives must notice, on both sides:
# - the head's exec_all (client keepalive: every 1 s, lost after 4 s) must end
#   within 10 s, exit 255, with node2 lost in its report;
# - node2's agent (SSH keepalive every 3 s, 3 misses; TCP keepalive and
#   TCP_USER_TIMEOUT 15 s) must end the job's processes on its side within
#   20 s, although nobody can tell it to: `docker exec` looks inside node2
#   while it is still cut off.
# Then node2 is connected again (same address): its agent, which waited for
# the head (idle timeout 60 s), follows it again, and is released with the
# others when the head's JOB ends: every worker exits 0.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

cut=node2
mn_cluster -- --idle-timeout 60 -- /fixtures/hold.sh execall \
    mn-exec-all --report /results/report.json -c 'sleep 1234'
if ! mn_poll 30 mn_all_have '^ *[0-9]+ sleep 1234$' "${MN_NODES[@]}"; then
    check_fail "the job did not start on every node within 30 s"
    finish
fi
check_ok "sleep 1234 runs on every node"

t_cut=$(mn_now)
docker network disconnect "$MN_NET" "$(mn_ctr "$cut")"
check_ok "$cut cut off"
# Both sides at once: when exec_all ended on the head, and when the job's
# process was gone on the cut-off node.
t_client='' t_agent=''
while [[ -z $t_client || -z $t_agent ]]; do
    if [[ -z $t_client && -f $MN_RESULTS/execall.done ]]; then
        read -r rc t_client <"$MN_RESULTS/execall.done"
    fi
    if [[ -z $t_agent ]] && ! mn_has_proc "$cut" '^ *[0-9]+ sleep 1234$'; then
        t_agent=$(mn_now)
    fi
    mn_before "$t_cut" 40 || break
    sleep 0.2
done
if [[ -n $t_client ]]; then
    check_within "client side: the head's exec_all ended after the cut" 10 "$(mn_since "$t_cut" "$t_client")"
    check_eq "exec_all's exit status" 255 "$rc"
    status=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(next(n["status"] for n in r["nodes"] if n["host"] == sys.argv[2]))' "$MN_RESULTS/report.json" "$cut")
    check_eq "report: $cut" lost "$status"
else
    check_fail "client side: exec_all still runs 40 s after the cut"
fi
if [[ -n $t_agent ]]; then
    check_within "agent side: the job's process on $cut ended after the cut" 20 "$(mn_since "$t_cut" "$t_agent")"
    check_eq "processes on $cut besides its agent" "" "$(mn_procs "$cut" | tr '\n' ';')"
else
    check_fail "agent side: sleep 1234 still runs on $cut 40 s after the cut"
fi
for host in node0 node1 node3; do
    if mn_has_proc "$host" '^ *[0-9]+ (sleep 1234$|mn-exec-all |[^ ]*multinode supervise )'; then
        check_fail "a job process is left on $host: $(mn_procs "$host" | tr '\n' ';')"
    else
        check_ok "no job process left on $host"
    fi
done

docker network connect --ip "${MN_IP[$cut]}" --alias "$cut" "$MN_NET" "$(mn_ctr "$cut")"
check_ok "$cut connected again"
touch "$MN_RESULTS/release"
code=$(mn_wait_exit node0 30) || code="still running 30 s later"
check_eq "the head's exit status (exec_all's)" 255 "$code"
for host in node1 node2 node3; do
    code=$(mn_wait_exit "$host" 30) || code="still running 30 s later"
    check_eq "$host released, exit status" 0 "$code"
done
finish
