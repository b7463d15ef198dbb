#!/usr/bin/env bash
# The reference document's multi-node script, verbatim
# (fixtures/reference-job.sh: `. /multinode/generic-helper`, NNODES with awk,
# `exec_all - "$MULTINODE_NODE_IP" "$NNODES" <<'EOF' torchrun ... EOF`), as
# the JOB of `multinode agent -- JOB` on 4 containers, with a stand-in
# torchrun (fixtures/bin/torchrun) first on PATH that records its arguments,
# RANK and where it ran. The topology comes as Slurm gives it:
# SLURM_JOB_NODELIST=node[0-3], SLURM_TASKS_PER_NODE=2(x4).
# Checks: the head exits 0; every node ran torchrun once, in its own
# container (eth0's address), with RANK = its node rank,
# MULTINODE_LOCAL_IP = its own address, and
# --nnodes=4 --node-rank=R --nproc-per-node=2 --master-addr=<head's address>
# --master-port=29500 /workspace/train.py.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

MN_JOB_ENV=(-e 'SLURM_JOB_NODELIST=node[0-3]' -e 'SLURM_TASKS_PER_NODE=2(x4)')
path=/fixtures/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
t0=$(mn_now)
mn_cluster -e "PATH=$path" -- -- /fixtures/reference-job.sh

if code=$(mn_wait_exit node0 60); then
    check_eq "the head's exit status (the job's)" 0 "$code"
else
    check_fail "the head still runs after 60 s"
fi
check_ok "containers started and the job done in $(mn_since "$t0") s"
for n in "${!MN_NODES[@]}"; do
    host=${MN_NODES[$n]}
    if code=$(mn_wait_exit "$host" 20); then
        [[ $host == node0 ]] || check_eq "$host released, exit status" 0 "$code"
    else
        check_fail "$host still runs 20 s after the job ended"
    fi
    record=$MN_RESULTS/torchrun.$host
    if [[ ! -f $record ]]; then
        check_fail "torchrun did not run on $host"
        continue
    fi
    want=$(printf '%s ' "host=$host" "rank=$n" "ip=${MN_IP[$host]}" \
        "MULTINODE_LOCAL_IP=${MN_IP[$host]}" \
        "arg=--nnodes=4" "arg=--node-rank=$n" "arg=--nproc-per-node=2" \
        "arg=--master-addr=${MN_IP[node0]}" "arg=--master-port=29500" \
        "arg=/workspace/train.py")
    got=$(tr '\n' ' ' <"$record")
    check_eq "torchrun on $host (host, RANK, eth0, MULTINODE_LOCAL_IP, arguments)" "$want" "$got"
done
mn_save_logs node0
runs=$(grep -c '^torchrun stand-in on ' "$MN_TMP/node0.out" || true)
check_eq "torchrun lines relayed to the head's output" 4 "$runs"
finish
