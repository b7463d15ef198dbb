#!/usr/bin/env bash
# The tree of relays across 32 containers (each its own network stack), with
# `--fanout 4`: the head talks to 4 relays of 7-8 nodes, and each of them to
# relays of 2 (relays of relays). The head's JOB (fixtures/tree-job.sh):
# - runs the same script flat (--fanout 1000) and as a tree, alternated,
#   3 rounds: the output of every node (rank and host name) and its exit
#   code (RANK % 5) must arrive, in the report too; both are timed;
# - runs `sleep 1234` as a tree, and node1 (the relay of ranks 1-8, itself
#   the parent of the relays node2, node4 and node6) is killed: exec_all must
#   end, exit 255, report ranks 1-8 lost and end the others (fail-fast), and
#   no `sleep 1234` or relay's exec_all may be left on any node.
# shellcheck source-path=SCRIPTDIR source=../lib.sh disable=SC2317 # functions run through mn_poll
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

MN_NODES=()
for ((i = 0; i < 32; i++)); do MN_NODES+=("node$i"); done
# Given folded, as Slurm would give it.
MN_HOSTLIST='node[0-31]:1'
MN_JOB_ENV=(-e "MULTINODE_HOSTLIST=$MN_HOSTLIST")
rounds=3
relay=node1

t_start=$(mn_now)
mn_cluster -- --idle-timeout 60 -- /fixtures/tree-job.sh "$rounds"
check_ok "32 containers started in $(mn_since "$t_start")s"
if ! mn_poll 200 test -f "$MN_RESULTS/timed"; then
    check_fail "the timed runs did not end within 200 s"
    finish
fi

while IFS= read -r line; do
    case $line in
    ok\ *) check_ok "${line#ok }" ;;
    *) check_fail "${line#fail }" ;;
    esac
done < <(python3 - "$MN_RESULTS" "$rounds" <<'PY'
import json, os, statistics, sys
results, rounds = sys.argv[1], int(sys.argv[2])
want = {f"rank={r} host=node{r}" for r in range(32)}
walls = {"flat": [], "tree": []}
for line in open(os.path.join(results, "times")):
    mode, i, rc, t0, t1 = line.split()
    walls[mode].append(float(t1) - float(t0))
    name = f"{mode} run {i}"
    if rc in ("1", "2", "3", "4"):
        print(f"ok {name}: exit code {rc} (a node's RANK % 5)")
    else:
        print(f"fail {name}: exit code {rc}, not one of the nodes' 1-4")
    lines = open(os.path.join(results, f"{mode}-{i}.out")).read().splitlines()
    if sorted(lines) == sorted(want):
        print(f"ok {name}: every node's line, once")
    else:
        print(f"fail {name}: output {sorted(set(lines) ^ want)[:4]}... ({len(lines)} lines)")
    report = json.load(open(os.path.join(results, f"{mode}-{i}.json")))
    bad = [(n["rank"], n["status"], n["exit"]) for n in report["nodes"]
           if n["exit"] != n["rank"] % 5 or n["status"] != ("ok" if n["rank"] % 5 == 0 else "failed")]
    if len(report["nodes"]) == 32 and not bad:
        print(f"ok {name}: the report has every node's exit code")
    else:
        print(f"fail {name}: report: {len(report['nodes'])} nodes, wrong: {bad[:5]}")
for mode, w in walls.items():
    if len(w) != rounds:
        print(f"fail {mode}: {len(w)} runs, not {rounds}")
flat, tree = statistics.median(walls["flat"]), statistics.median(walls["tree"])
print(f"ok timed, 32 nodes, median of {rounds} alternated: flat {flat:.3f}s, tree (--fanout 4) {tree:.3f}s, "
      f"tree/flat {tree / flat:.2f} (flat {', '.join(f'{x:.3f}' for x in walls['flat'])}; "
      f"tree {', '.join(f'{x:.3f}' for x in walls['tree'])})")
PY
)

if ! mn_poll 60 mn_all_have '^ *[0-9]+ sleep 1234$' "${MN_NODES[@]}"; then
    check_fail "sleep 1234 did not start on every node within 60 s"
    finish
fi
check_ok "sleep 1234 runs on all 32 nodes (through relays of relays)"
t_kill=$(mn_now)
docker kill "$(mn_ctr "$relay")" >/dev/null
if ! mn_poll 30 test -f "$MN_RESULTS/kill.done"; then
    check_fail "exec_all still runs 30 s after the relay $relay was killed"
    finish
fi
read -r rc t_end <"$MN_RESULTS/kill.done"
check_within "exec_all ended after the relay $relay was killed" 10 "$(mn_since "$t_kill" "$t_end")"
check_eq "exec_all's exit status (a lost node)" 255 "$rc"
check_eq "the report: ranks lost, and the others' status" "lost=1,2,3,4,5,6,7,8 others=killed" \
    "$(python3 -c '
import json, sys
nodes = json.load(open(sys.argv[1]))["nodes"]
lost = [str(n["rank"]) for n in nodes if n["status"] == "lost"]
others = sorted({n["status"] for n in nodes if n["status"] != "lost"})
print("lost=" + ",".join(lost) + " others=" + ",".join(others))' "$MN_RESULTS/kill.json")"

# Nothing of the job left anywhere: no sleep 1234, no relay's exec_all.
left() {
    local host out=''
    for host in "${MN_NODES[@]}"; do
        [[ $host == "$relay" ]] && continue
        if mn_has_proc "$host" '^ *[0-9]+ (sleep 1234$|.*exec-all )'; then
            out+="$host: $(mn_procs "$host" | grep -E 'sleep 1234$|exec-all ' | tr '\n' ';') "
        fi
    done
    printf '%s' "$out"
}
nothing_left() { [[ -z $(left) ]]; }
if mn_poll 20 nothing_left; then
    check_ok "nothing of the job left on the 31 other nodes ($(mn_since "$t_kill")s after the kill)"
else
    check_fail "left running: $(left)"
fi

touch "$MN_RESULTS/release"
code=$(mn_wait_exit node0 30) || code="still running 30 s later"
check_eq "the head's exit status" 0 "$code"
bad=''
for host in "${MN_NODES[@]:2}"; do
    code=$(mn_wait_exit "$host" 20) || code=running
    [[ $code == 0 ]] || bad+="$host=$code "
done
check_eq "workers released, exit status other than 0" "" "$bad"
finish
