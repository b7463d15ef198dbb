#!/usr/bin/env bash
# Open MPI across the 4 containers, launched as the reference document says:
#   mpirun -H "$MULTINODE_HOSTLIST" --mca plm_rsh_agent "$MULTINODE_SSH_WRAPPER"
#          -np "$MULTINODE_TOTAL_SLOTS" prog
# as the head's JOB (as root: --allow-run-as-root; MPI's TCP traffic on eth0).
# prog is tests/fixtures/mpi_allreduce.c, compiled in the image with
# mpicc.openmpi. Checks: the head exits 0; 8 ranks, each once, with size 8
# and the allreduce sum 28; 2 ranks on each container, which each report
# their own host name; every worker is released and exits 0.
# shellcheck disable=SC2016 # the JOB is expanded by the head's shell
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

mn_compile_mpi mpicc.openmpi
job='mpirun -H "$MULTINODE_HOSTLIST" --mca plm_rsh_agent "$MULTINODE_SSH_WRAPPER" -np "$MULTINODE_TOTAL_SLOTS" --allow-run-as-root --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 /results/allreduce'
t0=$(mn_now)
mn_cluster -- -- sh -c "$job"
if code=$(mn_wait_exit node0 90); then
    check_eq "the head's exit status (mpirun's)" 0 "$code"
else
    check_fail "mpirun still runs after 90 s"
fi
check_ok "containers started and mpirun done in $(mn_since "$t0") s"
mn_save_logs node0
mn_check_allreduce "$MN_TMP/node0.out"
for host in "${MN_NODES[@]:1}"; do
    code=$(mn_wait_exit "$host" 20) || code="still running 20 s later"
    check_eq "$host released, exit status" 0 "$code"
done
finish
