#!/usr/bin/env bash
# A node's agent killed, then `scancel` while exec_all restarts the job on
# the spare, on a real Slurm cluster (docs/restarts.md, docs/slurm.md). A
# 5-node Slurm cluster; docs/slurm.md's batch script for restarts (5 nodes,
# srun without --kill-on-bad-exit) and its job.sh: MULTINODE_SPARES=1
# (node5 is the spare), exec_all with --max-restarts 2 and a health check
# that sleeps once /results/slow-health exists, so that the restart stays
# under way. Once attempt 0 runs on node1-node4 (not on the spare), node3's
# agent is killed (SIGKILL): exec_all finds node3 lost, ends the attempt,
# excludes node3 and starts the restart on node1, node2, node4 and node5,
# whose health check runs there; then `scancel`. Checks: the job ends
# CANCELLED; nothing the job started is left on any node, within a few
# seconds and at the end; exec_all's report says node3 was lost and
# excluded and attempt 1 was stopped in its health check (exit 143).
# shellcheck source-path=SCRIPTDIR source=../lib.sh disable=SC2317 # functions run through mn_poll
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
MN_SLURM_NODES=5
# shellcheck source=../slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/../slurm.sh"

victim=node3
mn_slurm_cluster
mn_doc_to_results slurm.md slurm-restart.sbatch job.sbatch
mn_doc_to_results slurm.md slurm-restart-job.sh job.sh

# has HOST PROGRAM: whether the job runs PROGRAM (`sleep 1234`) on HOST.
has() { mn_job_procs "$1" | grep -Eq "^ *[0-9]+ $2\$"; }
all_have() {
    local program=$1 host
    shift
    for host in "$@"; do has "$host" "$program" || return 1; done
}

job=$(mn_sbatch job.sbatch)
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
pid=$(mn_slurm_procs "$victim" | awk '$2 ~ /(^|\/)multinode$/ && $3 == "agent" { print $1; exit }')
if [[ -z $pid ]]; then
    check_fail "no agent found on $victim: $(mn_slurm_procs "$victim" | tr '\n' ';')"
    finish
fi
docker exec "$(mn_ctr "$victim")" kill -KILL "$pid"
restarting=(node1 node2 node4 node5)
if mn_poll 30 all_have 'sleep 4500' "${restarting[@]}"; then
    check_ok "restart under way: the health check runs on ${restarting[*]}"
else
    check_fail "the health check of the restart did not run on ${restarting[*]} within 30 s ($(mn_job_field "$job" JobState))"
fi
check_eq "nodes where attempt 0's program is left" "" \
    "$(for h in "${MN_NODES[@]}"; do has "$h" 'sleep 1234' && echo "$h"; done | tr '\n' ' ')"
check_eq "what is left on $victim, whose agent was killed" "" "$(mn_job_procs "$victim" | tr '\n' ';')"

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
line="attempt 0: rank 2 ($victim) lost; $victim excluded (lost), spare node5 as rank 3; restart 1 on 4 node(s)"
if grep -qF "$line" "$out"; then
    check_ok "the job's output says: $line"
else
    check_fail "the job's output does not say: $line"
fi
# What exec_all recorded: scancel's SIGTERM reached it in the health check.
mn_report_checks "$MN_RESULTS/report.json" <<'PY'
check("attempts", [(a["attempt"], a["failure"]) for a in attempts],
      [(0, "rank 2 (node3) lost"), (1, "not started: stopped during the health check")])
if len(attempts) == 2:
    check("excluded after attempt 0", attempts[0]["excluded"], [{"host": "node3", "why": "lost"}])
    check("attempt 1's nodes", attempts[1]["hosts"], ["node1", "node2", "node4", "node5"])
    check("no node failed the health check", attempts[1]["health_failed"], [])
    check("after attempt 1", attempts[1]["then"], "stopped (a signal, --timeout or closed output): not restarted")
check("exec_all's exit code (128 + SIGTERM)", report["exit_code"], 143)
PY
if mn_poll 10 mn_slurm_clean "${MN_NODES[@]}"; then
    check_ok "nothing left on any node"
else
    mn_check_clean "after the job" "${MN_NODES[@]}"
fi
finish
