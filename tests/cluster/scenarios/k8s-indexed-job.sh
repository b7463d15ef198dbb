#!/usr/bin/env bash
# docs/kubernetes.md's Indexed Job with a headless Service, with no
# Kubernetes (k8s.sh): the manifest is taken from the page and checked for
# coherence (headless Service selecting the Job's pods, the pods' subdomain
# naming it, Indexed, parallelism = completions = MULTINODE_NNODES, the agent's
# port, no privileges); then each of its pods runs as a container with the
# pod's host name train-<i>, its FQDN train-<i>.train.default.svc.cluster.local,
# JOB_COMPLETION_INDEX=i, the manifest's variables (the secret from the
# "Secret"), the manifest's command, the reference script as
# /workspace/job.sh and the stand-in torchrun. Checks: `multinode hosts` in
# pod 2 lists the four FQDNs; the head exits 0, the others are released;
# torchrun ran on each pod with RANK = its index, --nnodes=4 and the head's
# address, and was given the FQDN hostlist.
# shellcheck disable=SC2154 # the manifest's variables come from mn_k8s_manifest
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=../k8s.sh
source "$(dirname "${BASH_SOURCE[0]}")/../k8s.sh"

mn_k8s_manifest k8s-indexed-job.yaml
check_eq "the Service is headless" None "$svc_cluster_ip"
check_eq "the Service selects the Job's pods" "job-name=$job_name" "${svc_selector[*]}"
check_eq "the pods' subdomain is the Service" "$svc_name" "$pod_subdomain"
check_eq "completion mode" Indexed "$job_mode"
check_eq "parallelism" "$job_completions" "$job_parallelism"
check_eq "MULTINODE_NNODES is the completions" "MULTINODE_NNODES=$job_completions" \
    "$(printf '%s\n' "${pod_env[@]}" | grep '^MULTINODE_NNODES=')"
check_eq "the agent's port" 29922 "${pod_ports[*]}"
check_eq "restart policy, backoff limit" "Never 0" "$pod_restart $job_backoff"
mn_k8s_check_security pod

domain=$svc_name.$MN_K8S_DOMAIN
MN_NODES=()
for ((i = 0; i < job_completions; i++)); do
    MN_NODES+=("$job_name-$i")
done
mn_cluster_network
hostlist=
for host in "${MN_NODES[@]}"; do
    MN_K8S_NAMES[$host]="$host.$domain"
    hostlist+="$host.$domain:1,"
done
hostlist=${hostlist%,}
# What the page shows: `multinode hosts` in pod 2 (run before the job, in a
# container that is pod 2: the job is over in a second or two).
mapfile -t env < <(mn_k8s_env_opts "JOB_COMPLETION_INDEX=2" "${pod_env[@]}")
if listing=$(MN_K8S_ONCE=1 mn_k8s_pod "${MN_NODES[2]}" "$domain" "$pod_user:$pod_group" \
    "${env[@]}" -- multinode hosts 2>&1); then
    printf '%s\n' "$listing" | sed 's/^/  | /'
    got=$(awk 'NR > 1 { printf "%s:%s ", $2, $4 }' <<<"$listing")
    want=
    for host in "${MN_NODES[@]}"; do want+="$host.$domain:${MN_IP[$host]} "; done
    check_eq "multinode hosts in ${MN_NODES[2]} (names, addresses)" "$want" "$got"
else
    check_fail "multinode hosts in ${MN_NODES[2]}: $listing"
fi

for ((i = ${#MN_NODES[@]} - 1; i >= 0; i--)); do
    host=${MN_NODES[$i]}
    MN_K8S_WANT_ENV[$host]="JOB_COMPLETION_INDEX=$i MULTINODE_HOSTLIST=$hostlist MULTINODE_NODE_IP=${MN_IP[${MN_NODES[0]}]} "
    mapfile -t env < <(mn_k8s_env_opts "JOB_COMPLETION_INDEX=$i" "${pod_env[@]}")
    mn_k8s_pod "$host" "$domain" "$pod_user:$pod_group" "${env[@]}" \
        -v "$MN_FIXTURES/reference-job.sh:/workspace/job.sh:ro" -- "${pod_command[@]}" >/dev/null
done
mn_k8s_check_run 60
finish
