#!/usr/bin/env bash
# A frozen node and a saturated one, at the same time, with the default
# liveness settings (a node silent for 4 s is lost: a probe every second,
# docs/exec-all.md):
# - saturated: the head's JOB runs `mn-exec-all --nodes 1 -c 'sleep 62'`
#   (silent: only keepalives show node1 is alive) while node1 runs one busy
#   loop per core for 60 s. exec_all must end 0 with node1 ok: no false loss.
# - frozen: a second exec_all on the head runs `sleep 1234` on node2, which
#   is then frozen (`docker pause`: its kernel still acknowledges TCP, no
#   process runs). exec_all must report node2 lost and end within 5 s. Thawed,
#   node2's agent sees the connection gone and ends `sleep 1234`.
# shellcheck source-path=SCRIPTDIR source=../lib.sh disable=SC2317 # functions run through mn_poll
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

busy=node1 frozen=node2
mn_cluster -- --idle-timeout 60 -- /fixtures/hold.sh execall \
    mn-exec-all --nodes 1 --report /results/busy.json -c 'sleep 62'
if ! mn_poll 30 mn_has_proc "$busy" '^ *[0-9]+ sleep 62$'; then
    check_fail "the job did not start on $busy within 30 s"
    finish
fi
t_job=$(mn_now)
cores=$(docker exec "$(mn_ctr "$busy")" nproc)
docker exec -d "$(mn_ctr "$busy")" sh -c \
    "i=0; while [ \$i -lt $cores ]; do timeout 60 sh -c 'while :; do :; done' & i=\$((i + 1)); done; wait"
# The busy loops' processes on node1 (each loop is `timeout` and its `sh`).
loops() { docker exec "$(mn_ctr "$busy")" pgrep -c -f '^sh -c while :; do :; done$' || true; }
every_core_busy() { (($(loops) >= cores)); }
if mn_poll 10 every_core_busy; then
    check_ok "$busy: $cores busy loops (every core) for 60 s"
else
    check_fail "$busy: the busy loops did not start"
fi

docker exec -d "$(mn_ctr node0)" sh -c \
    '. /multinode/generic-helper && mn-exec-all --nodes 2 --report /results/frozen.json -c "sleep 1234"
     echo "$? $(date +%s.%N)" >/results/frozen.tmp && mv /results/frozen.tmp /results/frozen.done'
if ! mn_poll 30 mn_has_proc "$frozen" '^ *[0-9]+ sleep 1234$'; then
    check_fail "the second job did not start on $frozen within 30 s"
    finish
fi
sleep 1
t_pause=$(mn_now)
docker pause "$(mn_ctr "$frozen")" >/dev/null
if mn_poll 30 test -f "$MN_RESULTS/frozen.done"; then
    read -r rc t_end <"$MN_RESULTS/frozen.done"
    check_within "exec_all ended after $frozen froze" 5 "$(mn_since "$t_pause" "$t_end")"
    check_eq "exec_all's exit status (a lost node)" 255 "$rc"
    check_eq "$frozen in the report" lost \
        "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes"][0]["status"])' "$MN_RESULTS/frozen.json")"
else
    check_fail "exec_all still runs 30 s after $frozen froze"
fi
docker unpause "$(mn_ctr "$frozen")" >/dev/null
if mn_poll 20 eval "! mn_has_proc $frozen '^ *[0-9]+ sleep 1234$'"; then
    check_ok "$frozen thawed: its agent ended sleep 1234"
else
    check_fail "$frozen thawed: sleep 1234 still runs 20 s later"
fi

# The saturated node's job: 62 s from its start, plus the launch.
if mn_poll 90 test -f "$MN_RESULTS/execall.done"; then
    read -r rc t_end <"$MN_RESULTS/execall.done"
    check_eq "the job on saturated $busy: exec_all's exit status" 0 "$rc"
    check_within "the job on saturated $busy took (sleep 62)" 70 "$(mn_since "$t_job" "$t_end")"
    # Where the time went, should the bound above fail: the node's command
    # as exec_all saw it (connected to exit status), and the run's end.
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); n=r["nodes"][0]
print("[frozen-node] %s: command %.1f s (connected %.1f -> ended %.1f), run started %.1f, job seen %s, exec_all ended %s"
      % (n["host"], n["duration_s"] or -1, n["started"] or -1, n["ended"] or -1, r["started"], sys.argv[2], sys.argv[3]))' \
        "$MN_RESULTS/busy.json" "$t_job" "$t_end" || true
    check_eq "$busy in the report" ok \
        "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes"][0]["status"])' "$MN_RESULTS/busy.json")"
else
    check_fail "the job on $busy did not end within 90 s"
fi
check_eq "busy loops left on $busy" 0 "$(loops)"

mn_release 0 node1 node2 node3
finish
