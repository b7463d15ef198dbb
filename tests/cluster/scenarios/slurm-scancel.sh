#!/usr/bin/env bash
# `scancel` of a running job on a real Slurm cluster. docs/slurm.md's batch
# script, with a job.sh whose exec_all runs on every node a shell that, on
# SIGTERM, takes a second to "save a checkpoint" (writes
# /results/ckpt.HOST), next to a `sleep` that ignores SIGTERM. Once they run
# everywhere, `scancel JOB`. Checks: every node saved its checkpoint (SIGTERM
# came once, with time to act: not SIGKILL at once); everything the job
# started is gone from every node within the documented grace (3 s) plus
# 3 s (the time to look included: see below), so well before Slurm's
# KillWait (30 s): the TERM-deaf sleeps were ended by multinode's SIGKILL
# after the grace; the job is CANCELLED; nothing is left on any node.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=../slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/../slurm.sh"

grace=3
mn_slurm_cluster
mn_doc_to_results slurm.md slurm-agents.sbatch job.sbatch
cat >"$MN_RESULTS/job.sh" <<'EOF'
#!/bin/sh
. /multinode/generic-helper
exec_all -c '(trap "" TERM; exec sleep 4322) &
trap "sleep 1; echo saved > /results/ckpt.$(hostname); exit 0" TERM
sleep 4321 & wait'
EOF
chmod +x "$MN_RESULTS/job.sh"

# shellcheck disable=SC2317 # called through mn_poll
running() {
    local host procs
    for host in "${MN_NODES[@]}"; do
        procs=$(mn_job_procs "$host")
        grep -Eq '^ *[0-9]+ sleep 4321$' <<<"$procs" || return 1
        grep -Eq '^ *[0-9]+ sleep 4322$' <<<"$procs" || return 1
    done
}

job=$(mn_sbatch job.sbatch)
if ! mn_poll 60 running; then
    check_fail "the job did not start on every node within 60 s ($(mn_job_field "$job" JobState))"
    finish
fi
check_ok "job $job: the commands run on every node"

# on_every_node CHECK: runs `CHECK HOST` for every node at once (one
# `docker exec` after the other takes seconds on a busy machine, and that
# time would count as the job's); true when it holds on each.
# shellcheck disable=SC2317
on_every_node() {
    local host pid rc=0
    local -a pids=()
    for host in "${MN_NODES[@]}"; do
        "$1" "$host" &
        pids+=("$!")
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || rc=1
    done
    return "$rc"
}
# shellcheck disable=SC2317
deaf_gone_on() { ! mn_job_procs "$1" | grep -Eq '^ *[0-9]+ sleep 4322$'; }
# shellcheck disable=SC2317
job_gone_on() { [[ -z $(mn_job_procs "$1") ]]; }

t0=$(mn_now)
docker exec -u mnuser "$(mn_ctr ctl)" scancel "$job"
if mn_poll 20 on_every_node deaf_gone_on; then
    deaf=$(mn_since "$t0")
    if awk -v t="$deaf" -v g="$grace" 'BEGIN { exit !(t >= g - 1 && t <= g + 2) }'; then
        check_ok "the sleeps that ignore SIGTERM were killed ${deaf} s after scancel (grace ${grace} s)"
    else
        check_fail "the sleeps that ignore SIGTERM were killed ${deaf} s after scancel, not after the ${grace} s grace"
    fi
else
    check_fail "the sleeps that ignore SIGTERM still run 20 s after scancel"
fi
# The time is read after a round of `docker exec` on every node (a second
# on a busy machine), after the round that saw the sleeps gone: part of it
# is the measurement, hence grace + 2 s for the sleeps and grace + 3 s for
# everything.
if mn_poll 20 on_every_node job_gone_on; then
    check_within "everything the job started ended on every node after scancel" \
        $((grace + 3)) "$(mn_since "$t0")"
else
    MN_PROCS=mn_job_procs mn_check_clean "20 s after scancel" "${MN_NODES[@]}"
fi
for host in "${MN_NODES[@]}"; do
    if [[ $(cat "$MN_RESULTS/ckpt.$host" 2>/dev/null) == saved ]]; then
        check_ok "$host saved its checkpoint on SIGTERM"
    else
        check_fail "$host did not save its checkpoint: no time between SIGTERM and SIGKILL"
    fi
done
if state=$(mn_job_wait "$job" 60); then
    check_eq "job state" CANCELLED "${state% *}"
else
    check_fail "job $job still $(mn_job_field "$job" JobState) 60 s after scancel"
fi
sed 's/^/  | /' "$MN_RESULTS/slurm-$job.out"
if mn_poll 10 mn_slurm_clean "${MN_NODES[@]}"; then
    check_ok "nothing left on any node"
else
    mn_check_clean "after the job" "${MN_NODES[@]}"
fi
finish
