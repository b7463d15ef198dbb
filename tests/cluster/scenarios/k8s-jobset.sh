#!/usr/bin/env bash
# docs/kubernetes.md's JobSet, with no Kubernetes (k8s.sh): the manifest is
# taken from the page and checked (one replicated Job, Indexed, parallelism =
# completions = MULTINODE_NNODES, the agent's port, no privileges); each pod
# runs as a container named as JobSet names it, pt-node-0-<i>, in the
# subdomain JobSet gives it (the JobSet's name: its own headless Service),
# with JOB_COMPLETION_INDEX=i, the manifest's variables and command, the
# reference script as /workspace/job.sh and the stand-in torchrun. Checks:
# the head exits 0, the others are released; torchrun ran on each pod with
# RANK = its index, --nnodes=4 and the head's address, given the FQDN hostlist.
# shellcheck disable=SC2154 # the manifest's variables come from mn_k8s_manifest
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=../k8s.sh
source "$(dirname "${BASH_SOURCE[0]}")/../k8s.sh"

mn_k8s_manifest k8s-jobset.yaml
check_eq "replicated Jobs of the JobSet (replicas)" 1 "$rjob_replicas"
check_eq "completion mode" Indexed "$job_mode"
check_eq "parallelism" "$job_completions" "$job_parallelism"
check_eq "MULTINODE_NNODES is the completions" "MULTINODE_NNODES=$job_completions" \
    "$(printf '%s\n' "${pod_env[@]}" | grep '^MULTINODE_NNODES=')"
check_eq "the agent's port" 29922 "${pod_ports[*]}"
check_eq "restart policy, backoff limit, JobSet restarts" "Never 0 0" \
    "$pod_restart $job_backoff $js_max_restarts"
mn_k8s_check_security pod

# JobSet: Job <jobset>-<replicated job>-<job index>, pods <job>-<pod index>,
# subdomain the JobSet's name.
domain=$js_subdomain.$MN_K8S_DOMAIN
MN_NODES=()
for ((i = 0; i < job_completions; i++)); do
    MN_NODES+=("$js_name-$rjob_name-0-$i")
done
mn_cluster_network
hostlist=
for host in "${MN_NODES[@]}"; do
    MN_K8S_NAMES[$host]="$host.$domain"
    hostlist+="$host.$domain:1,"
done
hostlist=${hostlist%,}
for ((i = ${#MN_NODES[@]} - 1; i >= 0; i--)); do
    host=${MN_NODES[$i]}
    MN_K8S_WANT_ENV[$host]="JOB_COMPLETION_INDEX=$i MULTINODE_HOSTLIST=$hostlist MULTINODE_NODE_IP=${MN_IP[${MN_NODES[0]}]} "
    mapfile -t env < <(mn_k8s_env_opts "JOB_COMPLETION_INDEX=$i" "${pod_env[@]}")
    mn_k8s_pod "$host" "$domain" "$pod_user:$pod_group" "${env[@]}" \
        -v "$MN_FIXTURES/reference-job.sh:/workspace/job.sh:ro" -- "${pod_command[@]}" >/dev/null
done
mn_k8s_check_run 60
finish
