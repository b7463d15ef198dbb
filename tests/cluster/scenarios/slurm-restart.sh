#!/usr/bin/env bash
# `scancel` of a real Slurm job while exec_all restarts it (docs/restarts.md).
# A 5-node Slurm cluster; docs/slurm.md's batch script submitted with
# `sbatch -N5` (one agent per node by srun); job.sh sets MULTINODE_SPARES=1
# (node5 is the spare) and runs exec_all with --max-restarts 2 and a health
# check that sleeps once /results/slow-health exists, so that the restart
# takes long enough to be caught in the middle. Once attempt 0 runs on
# node1-node4 (not on the spare), its program on node3 is killed (SIGKILL):
# exec_all ends the attempt on every node and restarts, running the health
# check on the 5 nodes, spare included; then `scancel`. Checks: the job
# ends CANCELLED; nothing the job started (agents, exec_all, health checks,
# the attempt's programs) is left on any node, within a few seconds and at
# the end; exec_all's report says attempt 1 was stopped in its health check
# (exit 143), no node failing it.
# shellcheck source-path=SCRIPTDIR source=../lib.sh disable=SC2317 # functions run through mn_poll
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
MN_SLURM_NODES=5
# shellcheck source=../slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/../slurm.sh"

victim=node3
mn_slurm_cluster
mn_doc_to_results slurm.md slurm-agents.sbatch job.sbatch
cat >"$MN_RESULTS/job.sh" <<'EOF'
#!/bin/sh
export MULTINODE_SPARES=1
. /multinode/generic-helper
exec_all --max-restarts 2 --grace 2 --report /results/report.json \
    --health-check 'echo "$(hostname)" >>/results/checked; [ ! -e /results/slow-health ] || exec sleep 4500' \
    -c 'echo "attempt=$MULTINODE_RESTART_COUNT rank=$RANK host=$(hostname)" >>/results/ran; exec sleep 1234'
EOF
chmod +x "$MN_RESULTS/job.sh"

# has HOST PROGRAM: whether the job runs PROGRAM (`sleep 1234`) on HOST.
has() { mn_job_procs "$1" | grep -Eq "^ *[0-9]+ $2\$"; }
all_have() {
    local program=$1 host
    shift
    for host in "$@"; do has "$host" "$program" || return 1; done
}

job=$(mn_sbatch job.sbatch -N5)
if ! mn_poll 60 all_have 'sleep 1234' node1 node2 node3 node4; then
    check_fail "attempt 0 did not start on node1-node4 within 60 s ($(mn_job_field "$job" JobState))"
    finish
fi
check_ok "job $job ($(mn_job_field "$job" NumNodes) nodes): attempt 0 runs on node1-node4"
if has node5 'sleep 1234'; then
    check_fail "the spare node5 runs attempt 0"
else
    check_ok "the spare node5 waits (it runs its agent only)"
fi

# From now on the health check sleeps: the restart stays under way.
touch "$MN_RESULTS/slow-health"
pid=$(mn_job_procs "$victim" | awk '$2 == "sleep" && $3 == "1234" && NF == 3 { print $1; exit }')
docker exec "$(mn_ctr "$victim")" kill -KILL "$pid"
if mn_poll 30 all_have 'sleep 4500' "${MN_NODES[@]}"; then
    check_ok "restart under way: the health check runs on node1-node5"
else
    check_fail "the health check of the restart did not run on every node within 30 s"
fi
check_eq "attempt 0's programs ended before the restart" "" \
    "$(for h in "${MN_NODES[@]}"; do has "$h" 'sleep 1234' && echo "$h"; done | tr '\n' ' ')"

t0=$(mn_now)
docker exec -u mnuser "$(mn_ctr ctl)" scancel "$job"
if mn_poll 20 mn_jobs_clean "${MN_NODES[@]}"; then
    check_within "everything the job started ended on every node after scancel" 8 "$(mn_since "$t0")"
else
    MN_PROCS=mn_job_procs mn_check_clean "20 s after scancel" "${MN_NODES[@]}"
fi
if state=$(mn_job_wait "$job" 60); then
    check_eq "job state" CANCELLED "${state% *}"
else
    check_fail "job $job still $(mn_job_field "$job" JobState) 60 s after scancel"
fi
check_eq "attempts that ran" "attempt=0 rank=0 host=node1;attempt=0 rank=1 host=node2;attempt=0 rank=2 host=node3;attempt=0 rank=3 host=node4;" \
    "$(sort "$MN_RESULTS/ran" | tr '\n' ';')"
out=$MN_RESULTS/slurm-$job.out
sed 's/^/  | /' "$out"
if grep -q "attempt 0: rank 2 ($victim) killed by SIGKILL.*; restart 1 on 4 node(s)" "$out"; then
    check_ok "the job's output says attempt 0 failed on $victim and a restart began"
else
    check_fail "the job's output does not say that attempt 0 failed on $victim and a restart began"
fi
# What exec_all recorded: scancel's SIGTERM reached it in the health check.
while IFS= read -r line; do
    case $line in
    ok\ *) check_ok "${line#ok }" ;;
    *) check_fail "${line#fail }" ;;
    esac
done < <(python3 - "$MN_RESULTS/report.json" <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(f"fail no readable report from exec_all: {e}")
    sys.exit()
attempts = report.get("attempts") or []
def check(what, got, want):
    print(f"{'ok' if got == want else 'fail'} report: {what}: {got!r}" + ("" if got == want else f", not {want!r}"))
check("attempts", [(a["attempt"], a["failure"]) for a in attempts],
      [(0, "rank 2 (node3) killed by SIGKILL"), (1, "not started: stopped during the health check")])
if len(attempts) == 2:
    check("attempt 1's nodes", attempts[1]["hosts"], ["node1", "node2", "node3", "node4"])
    check("no node failed the health check", attempts[1]["health_failed"], [])
    check("after attempt 1", attempts[1]["then"], "stopped (a signal, --timeout or closed output): not restarted")
check("exec_all's exit code (128 + SIGTERM)", report["exit_code"], 143)
PY
)
if mn_poll 10 mn_slurm_clean "${MN_NODES[@]}"; then
    check_ok "nothing left on any node"
else
    mn_check_clean "after the job" "${MN_NODES[@]}"
fi
finish
