#!/usr/bin/env bash
# A worker is lost mid-run while the head's JOB runs
# `mn-exec-all --report FILE -c 'sleep 1234'` on the 4 nodes, twice:
# - kill: `docker kill node2`; its kernel closes the connections as the
#   processes die, so exec_all hears of it at once;
# - power-off: node2 is cut from the network, then killed: nothing ever
#   comes back from it (no FIN, no RST), so only exec_all's keepalive can
#   notice (documented: lost after 4 s of silence, a probe every second).
# Either way exec_all must end within 10 s, exit 255, and its report must name
# node2 as lost (and first failure). Fail-fast then ends the others: no
# `sleep 1234` is left on any node, and nothing but the agent on the
# surviving workers. The head's JOB (fixtures/hold.sh) stays up after
# exec_all so the containers can be looked into; then the survivors are
# released and exit 0.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

lost=node2

# lose_worker HOW: one cluster, one run of exec_all, node2 lost by HOW
# (kill or power-off).
lose_worker() {
    local how=$1 host t_kill rc t_end code line
    mn_cluster_phase "$how"
    mn_cluster -- -- /fixtures/hold.sh execall \
        mn-exec-all --report /results/report.json -c 'sleep 1234'
    if ! mn_poll 30 mn_all_have '^ *[0-9]+ sleep 1234$' "${MN_NODES[@]}"; then
        check_fail "$how: the job did not start on every node within 30 s"
        return
    fi
    check_ok "$how: sleep 1234 runs on every node"

    t_kill=$(mn_now)
    if [[ $how == power-off ]]; then
        docker network disconnect -f "$MN_NET" "$(mn_ctr "$lost")"
    fi
    docker kill "$(mn_ctr "$lost")" >/dev/null
    if ! mn_poll 30 test -f "$MN_RESULTS/execall.done"; then
        check_fail "$how: exec_all still runs 30 s after $lost was lost"
        return
    fi
    read -r rc t_end <"$MN_RESULTS/execall.done"
    check_within "$how: exec_all ended after $lost was lost" 10 "$(mn_since "$t_kill" "$t_end")"
    check_eq "$how: exec_all's exit status" 255 "$rc"

    while IFS= read -r line; do
        case $line in
        ok\ *) check_ok "$how: ${line#ok }" ;;
        *) check_fail "$how: ${line#fail }" ;;
        esac
    done < <(python3 - "$MN_RESULTS/report.json" "$lost" "$t_kill" <<'PY'
import json, sys
path, lost, t_kill = sys.argv[1], sys.argv[2], float(sys.argv[3])
try:
    report = json.load(open(path))
except (OSError, ValueError) as e:
    print(f"fail no readable report: {e}")
    sys.exit()
nodes = {n["host"]: n for n in report["nodes"]}
node = nodes.get(lost)
if node is None:
    print(f"fail the report has no {lost}")
    sys.exit()
if node["status"] == "lost":
    print(f"ok report: {lost} lost ({node['error']})")
else:
    print(f"fail report: {lost} is {node['status']!r}, not 'lost'")
if node.get("ended"):
    print(f"ok report: {lost} declared lost {node['ended'] - t_kill:.1f}s after it was lost")
if report.get("first_failure") == node["rank"]:
    print(f"ok report: first failure is rank {node['rank']} ({lost})")
else:
    print(f"fail report: first failure is {report.get('first_failure')}, not rank {node['rank']}")
others = {h: n["status"] for h, n in nodes.items() if h != lost}
if all(s in ("killed", "failed") for s in others.values()):
    print(f"ok report: the others were ended by fail-fast: {others}")
else:
    print(f"fail report: the others should have been ended by fail-fast: {others}")
PY
    )

    for host in "${MN_NODES[@]}"; do
        [[ $host == "$lost" ]] && continue
        if mn_has_proc "$host" '^ *[0-9]+ (sleep 1234$|mn-exec-all |[^ ]*multinode supervise )'; then
            check_fail "$how: a job process is left on $host: $(mn_procs "$host" | tr '\n' ';')"
        else
            check_ok "$how: no job process left on $host"
        fi
        if [[ $host != node0 ]]; then
            check_eq "$how: processes on $host besides its agent" "" "$(mn_procs "$host" | tr '\n' ';')"
        fi
        # mn_procs leaves the agent's group keeper out: one per agent, no more.
        check_eq "$how: group keepers on $host" 1 \
            "$(docker exec "$(mn_ctr "$host")" ps -eo args= | grep -Ec '^[^ ]*multinode keep-groups ' || true)"
    done

    touch "$MN_RESULTS/release"
    code=$(mn_wait_exit node0 30) || code="still running 30 s later"
    check_eq "$how: the head's exit status (exec_all's)" 255 "$code"
    for host in "${MN_NODES[@]}"; do
        [[ $host == node0 || $host == "$lost" ]] && continue
        code=$(mn_wait_exit "$host" 20) || code="still running 20 s later"
        check_eq "$how: $host released, exit status" 0 "$code"
    done
}

lose_worker kill
lose_worker power-off
finish
