#!/usr/bin/env bash
# docs/kubernetes.md's Kubeflow PyTorchJob, with no Kubernetes (k8s.sh): the
# manifest is taken from the page and checked (both replica types run the
# agent, no privileges); each pod runs as a container named as the training
# operator names it (bert-master-0, bert-worker-<i>), each name resolving as
# its own Service would, with the variables the operator (1.7 and later)
# sets: MASTER_ADDR, MASTER_PORT, WORLD_SIZE (nodes x nprocPerNode), RANK,
# PET_NODE_RANK, PET_NNODES, PET_NPROC_PER_NODE; then the manifest's own, its
# command, the reference script as /workspace/job.sh and the stand-in
# torchrun. Checks: the head (the master) exits 0, the workers are released;
# torchrun ran on each pod with RANK = its rank, --nnodes=4, the master's
# address, and the hostlist master:2,worker-0:2,...
# shellcheck disable=SC2154 # the manifest's variables come from mn_k8s_manifest
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=../k8s.sh
source "$(dirname "${BASH_SOURCE[0]}")/../k8s.sh"

mn_k8s_manifest k8s-pytorchjob.yaml
check_eq "replicas (master, workers)" "1 3" "$master_replicas $worker_replicas"
check_eq "the workers run what the master runs" "${master_command[*]}" "${worker_command[*]}"
check_eq "the agent's port is declared" 29922 "$(printf '%s\n' "${master_ports[@]}" | grep -x 29922)"
check_eq "restart policy" "Never Never" "$master_restart $worker_restart"
mn_k8s_check_security master
mn_k8s_check_security worker

nnodes=$((master_replicas + worker_replicas))
MN_NODES=("$pt_name-master-0")
for ((i = 0; i < worker_replicas; i++)); do
    MN_NODES+=("$pt_name-worker-$i")
done
mn_cluster_network
hostlist=
for host in "${MN_NODES[@]}"; do
    # A Service per pod, named like it: the bare name resolves in the namespace.
    MN_K8S_NAMES[$host]="$host $host.$MN_K8S_DOMAIN"
    hostlist+="$host:$pt_nproc,"
done
hostlist=${hostlist%,}
for ((i = ${#MN_NODES[@]} - 1; i >= 0; i--)); do
    host=${MN_NODES[$i]}
    if ((i == 0)); then prefix=master; else prefix=worker; fi
    envs="${prefix}_env[@]" cmd="${prefix}_command[@]"
    MN_K8S_WANT_ENV[$host]="MULTINODE_HOSTLIST=$hostlist MULTINODE_NODE_IP=${MN_IP[${MN_NODES[0]}]} PET_NODE_RANK=$i "
    mapfile -t env < <(mn_k8s_env_opts "PYTHONUNBUFFERED=0" \
        "MASTER_PORT=23456" "MASTER_ADDR=$pt_name-master-0" \
        "WORLD_SIZE=$((nnodes * pt_nproc))" "RANK=$i" \
        "PET_NPROC_PER_NODE=$pt_nproc" "PET_NODE_RANK=$i" "PET_NNODES=$nnodes" \
        "${!envs}")
    mn_k8s_pod "$host" "" "$master_user:$master_group" "${env[@]}" \
        -v "$MN_FIXTURES/reference-job.sh:/workspace/job.sh:ro" -- "${!cmd}" >/dev/null
done
mn_k8s_check_run 60
finish
