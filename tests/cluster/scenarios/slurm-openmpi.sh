#!/usr/bin/env bash
# Open MPI's mpirun inside a Slurm allocation, as docs/slurm.md tells users:
# a job of 4 nodes x 2 tasks whose batch script fixes MULTINODE_HOSTLIST to
# the job's slots, then starts one agent per node with srun; the head's
# job.sh runs `mpirun -H "$MULTINODE_HOSTLIST" -np "$MULTINODE_TOTAL_SLOTS"
# --mca plm rsh --mca ras ^slurm --mca plm_rsh_agent "$MULTINODE_SSH_WRAPPER"`
# of tests/fixtures/mpi_allreduce.c. Both scripts come from the page. Checks:
# the job COMPLETED with exit 0; 8 ranks, each once, 2 on each node, size 8,
# allreduce sum 28; nothing is left on any node.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=../slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/../slurm.sh"

mn_compile_mpi mpicc.openmpi
mn_slurm_cluster
mn_doc_to_results slurm.md slurm-mpi.sbatch job.sbatch
mn_doc_to_results slurm.md slurm-mpi-job.sh mpi-job.sh
t0=$(mn_now)
job=$(mn_sbatch job.sbatch)
if state=$(mn_job_wait "$job" 120); then
    check_ok "job $job ended in $(mn_since "$t0") s"
    check_eq "job state and exit code" "COMPLETED 0:0" "$state"
else
    check_fail "job $job still $(mn_job_field "$job" JobState) after 120 s"
fi
out=$MN_RESULTS/slurm-$job.out
sed 's/^/  | /' "$out"
mn_check_allreduce "$out"
if mn_poll 10 mn_slurm_clean "${MN_NODES[@]}"; then
    check_ok "nothing left on any node"
else
    mn_check_clean "after the job" "${MN_NODES[@]}"
fi
finish
