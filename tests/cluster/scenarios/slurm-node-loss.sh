#!/usr/bin/env bash
# A node lost mid-job on a real Slurm cluster. docs/slurm.md's batch script
# (one agent per node with srun --kill-on-bad-exit=1), with a job.sh that
# runs `exec_all --report /results/report.json -c 'sleep 1234'`; once sleep
# runs on every node, node3's container is killed (docker kill: the machine
# is gone). Checks: exec_all ends within 10 s and exits 255, its report names
# node3 (rank 2) lost and first failure; within 10 s nothing of the job is
# left on node1, node2 and node4 (multinode's doing: Slurm only signals an
# agent's own process group here, and has not even noticed yet); Slurm ends
# the job NODE_FAIL once slurmctld declares node3 down (SlurmdTimeout=10 s);
# the job's output names node3; nothing is left then.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=../slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/../slurm.sh"

lost=node3
survivors=(node1 node2 node4)
mn_slurm_cluster
mn_doc_to_results slurm.md slurm-agents.sbatch job.sbatch
cat >"$MN_RESULTS/job.sh" <<'EOF'
#!/bin/sh
. /multinode/generic-helper
exec_all --report /results/report.json -c 'sleep 1234'
EOF
chmod +x "$MN_RESULTS/job.sh"

# shellcheck disable=SC2317 # called through mn_poll
has_sleep() { mn_slurm_procs "$1" | grep -Eq '^ *[0-9]+ sleep 1234$'; }
# shellcheck disable=SC2317
all_sleep() {
    local host
    for host in "${MN_NODES[@]}"; do has_sleep "$host" || return 1; done
}

job=$(mn_sbatch job.sbatch)
if ! mn_poll 60 all_sleep; then
    check_fail "the job did not start on every node within 60 s ($(mn_job_field "$job" JobState))"
    finish
fi
check_ok "job $job: sleep 1234 runs on every node"

t_kill=$(mn_now)
docker kill "$(mn_ctr "$lost")" >/dev/null
if mn_poll 30 test -f "$MN_RESULTS/report.json"; then
    python3 - "$MN_RESULTS/report.json" "$lost" "$t_kill" >"$MN_TMP/report.check" <<'PY'
import json, sys
path, lost, t_kill = sys.argv[1], sys.argv[2], float(sys.argv[3])
report = json.load(open(path))
nodes = {n["host"]: n for n in report["nodes"]}
print("exit", report["exit_code"])
print("status", nodes[lost]["status"])
print("first", report["first_failure"])
print("after %.1f" % (max(n["ended"] for n in report["nodes"]) - t_kill))
PY
    read -r _ code < <(grep '^exit ' "$MN_TMP/report.check")
    read -r _ status < <(grep '^status ' "$MN_TMP/report.check")
    read -r _ first < <(grep '^first ' "$MN_TMP/report.check")
    read -r _ after < <(grep '^after ' "$MN_TMP/report.check")
    check_eq "exec_all's exit code" 255 "$code"
    check_eq "$lost in exec_all's report" lost "$status"
    check_eq "first failure (rank)" 2 "$first"
    check_within "exec_all ended every node after $lost was lost" 10 "$after"
else
    check_fail "exec_all wrote no report within 30 s of the loss"
fi
if mn_poll 10 mn_jobs_clean "${survivors[@]}"; then
    check_ok "nothing the job started left on ${survivors[*]} $(mn_since "$t_kill") s after the loss (job still $(mn_job_field "$job" JobState))"
else
    MN_PROCS=mn_job_procs mn_check_clean "10 s after the loss" "${survivors[@]}"
fi
if state=$(mn_job_wait "$job" 120); then
    # The exit code is the batch script's: 255:0 when srun returned first,
    # 0:15 when Slurm's SIGTERM for the node failure came first.
    check_ok "Slurm ended the job $(mn_since "$t_kill") s after the loss, exit code ${state#* }"
    check_eq "job state" NODE_FAIL "${state% *}"
else
    check_fail "job $job still $(mn_job_field "$job" JobState) 120 s after the loss"
fi
check_eq "node3's state" "down*" "$(docker exec "$(mn_ctr ctl)" sinfo -h -n "$lost" -o '%T')"
out=$MN_RESULTS/slurm-$job.out
sed 's/^/  | /' "$out"
if grep -q "rank 2 ($lost) lost" "$out"; then
    check_ok "the job's output names $lost"
else
    check_fail "the job's output does not name $lost"
fi
mn_check_clean "after the job" "${survivors[@]}"
finish
