#!/usr/bin/env bash
# The reference script on a real Slurm cluster (slurm.sh: slurmctld on ctl,
# slurmd on node1 to node4), submitted with `sbatch` by an ordinary user as
# docs/slurm.md tells users: the batch script and job.sh are taken from the
# page (job.sh must be the reference script, byte for byte), with the
# stand-in torchrun first on PATH. Then the same with the page's
# SLURM_NODEID variant. Each time: the job COMPLETED with exit 0; torchrun
# ran once on each node, in its own container, with RANK = its index in
# SLURM_JOB_NODELIST, --nnodes=4, the head's (node1's) address, from Slurm's
# own variables (node[1-4], 2(x4)); its lines are in the job's output file;
# nothing is left on any node. Also the page's scontrol line for 8 slots a
# node.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=../slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/../slurm.sh"

mn_slurm_cluster
mn_doc_to_results slurm.md slurm-job.sh job.sh
if cmp -s "$MN_RESULTS/job.sh" "$MN_FIXTURES/reference-job.sh"; then
    check_ok "docs/slurm.md's job.sh is the reference script, byte for byte"
else
    check_fail "docs/slurm.md's job.sh differs from fixtures/reference-job.sh"
fi

# run_job NAME: submits docs/slurm.md's batch script NAME and checks the run.
run_job() {
    local name=$1 job t0 state host n want got
    rm -f "$MN_RESULTS"/torchrun.*
    mn_doc_to_results slurm.md "$name" "$name"
    t0=$(mn_now)
    job=$(mn_sbatch "$name")
    if ! state=$(mn_job_wait "$job" 90); then
        check_fail "$name: job $job still $(mn_job_field "$job" JobState) after 90 s"
        return
    fi
    check_ok "$name: job $job ended in $(mn_since "$t0") s"
    check_eq "$name: job state and exit code" "COMPLETED 0:0" "$state"
    cp "$MN_RESULTS/slurm-$job.out" "$MN_TMP/$name.out"
    for n in "${!MN_NODES[@]}"; do
        host=${MN_NODES[$n]}
        if [[ ! -f $MN_RESULTS/torchrun.$host ]]; then
            check_fail "$name: torchrun did not run on $host"
            continue
        fi
        want=$(printf '%s ' "host=$host" "rank=$n" "ip=${MN_IP[$host]}" \
            "MULTINODE_LOCAL_IP=${MN_IP[$host]}" \
            "arg=--nnodes=4" "arg=--node-rank=$n" "arg=--nproc-per-node=2" \
            "arg=--master-addr=${MN_IP[node1]}" "arg=--master-port=29500" \
            "arg=/workspace/train.py")
        got=$(tr '\n' ' ' <"$MN_RESULTS/torchrun.$host")
        check_eq "$name: torchrun on $host (host, RANK, eth0, MULTINODE_LOCAL_IP, arguments)" "$want" "$got"
        want="MULTINODE_HOSTLIST=node1:1,node2:1,node3:1,node4:1 MULTINODE_NODE_IP=${MN_IP[node1]} "
        want+="SLURM_JOB_CPUS_PER_NODE=2(x4) SLURM_JOB_NODELIST=node[1-4] SLURM_NODEID=$n "
        want+="SLURM_NODELIST=node[1-4] SLURM_TASKS_PER_NODE=1(x4) "
        got=$(tr '\n' ' ' <"$MN_RESULTS/torchrun.$host.env")
        check_eq "$name: what Slurm and multinode gave $host" "$want" "$got"
    done
    got=$(grep -c '^torchrun stand-in on node[1-4]: RANK=[0-3] --nnodes=4 ' "$MN_TMP/$name.out" || true)
    check_eq "$name: torchrun lines in the job's output file" 4 "$got"
    if mn_poll 10 mn_slurm_clean "${MN_NODES[@]}"; then
        check_ok "$name: nothing left on any node"
    else
        mn_check_clean "$name" "${MN_NODES[@]}"
    fi
}

run_job slurm-agents.sbatch
sed 's/^/  | /' "$MN_TMP/slurm-agents.sbatch.out"
run_job slurm-nodeid.sbatch

# The page's line for 8 slots a node, with Slurm's scontrol.
line=$(mn_doc_block "$MN_ROOT/docs/slurm.md" slurm-hostlist-8.sh)
got=$(docker exec -e 'SLURM_JOB_NODELIST=node[1-4]' "$(mn_ctr ctl)" \
    sh -c "$line"' && echo "$MULTINODE_HOSTLIST"')
check_eq "docs/slurm.md's 8-slot host list" "node1:8,node2:8,node3:8,node4:8" "$got"
finish
