# shellcheck shell=bash
# Sourced after lib.sh by the k8s-* scenarios: Kubernetes' job shapes with no
# Kubernetes. A manifest of docs/kubernetes.md is taken apart
# (k8s-manifest.py: the command, the environment, the names and counts, the
# security context) and each pod becomes a container of the test image that
# gets what Kubernetes would give it:
# - the pod's host name, and with a subdomain the FQDN Kubernetes writes
#   into /etc/hosts (`IP NAME.SUBDOMAIN.NAMESPACE.svc.cluster.local NAME`:
#   Docker's --hostname/--domainname write the same line);
# - the names the other pods look up (what the cluster DNS would answer),
#   in /etc/hosts and as network aliases, and the namespace's search
#   domain; no name lookup leaves the machine;
# - the variables Kubernetes or the operator sets, the manifest's own, and a
#   Secret's value where the manifest takes one;
# - the manifest's user and group, no capabilities, no privilege escalation,
#   a read-only root file system (a tmpfs /tmp), and the command as PID 1.
# /results and /fixtures are mounted as in every scenario; the PATH has the
# stand-in torchrun first.

MN_K8S_NS=default
MN_K8S_DOMAIN=$MN_K8S_NS.svc.cluster.local
MN_K8S_PATH=/fixtures/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The pods run as the manifests' user, who writes the records to /results.
chmod 0777 "$MN_RESULTS"
# The names each pod can look up (host -> "name name ..."), set by the scenario.
declare -A MN_K8S_NAMES=()

# mn_k8s_manifest NAME: the manifest marked NAME in docs/kubernetes.md,
# taken apart into shell variables (see k8s-manifest.py).
mn_k8s_manifest() {
    local vars
    mn_doc_block "$MN_ROOT/docs/kubernetes.md" "$1" >"$MN_TMP/$1"
    vars=$(python3 "$MN_ROOT/tests/cluster/k8s-manifest.py" "$MN_TMP/$1")
    eval "$vars"
}

# mn_k8s_env_opts NAME=VALUE...: docker's -e options, one word a line, a
# Secret's value (@secret:...) replaced by the job secret.
mn_k8s_env_opts() {
    local kv name value
    for kv in "$@"; do
        name=${kv%%=*} value=${kv#*=}
        case $value in
        @secret:*) value=$MN_SECRET ;;
        @unsupported) check_fail "the manifest sets $name in a way the test does not know" ;;
        esac
        printf -- '-e\n%s=%s\n' "$name" "$value"
    done
}

# mn_k8s_check_security PREFIX: the pod template PREFIX runs unprivileged.
mn_k8s_check_security() {
    local p=$1 user group nonroot ro noesc drop
    user=${p}_user group=${p}_group nonroot=${p}_nonroot ro=${p}_readonly
    noesc=${p}_no_escalation drop="${p}_caps_drop[*]"
    check_eq "$p: runs as" "1000:1000 non-root=True" "${!user}:${!group} non-root=${!nonroot}"
    check_eq "$p: no capabilities, no privilege escalation, read-only root" \
        "ALL True True" "${!drop} ${!noesc} ${!ro}"
}

# mn_k8s_pod HOST DOMAIN USER [DOCKER-OPTIONS...] -- COMMAND...: starts pod
# HOST (DOMAIN: its subdomain's domain, or empty), detached. With
# MN_K8S_ONCE=1, runs COMMAND in a container that is pod HOST instead (same
# name, address, files and variables), in the foreground, and removes it.
mn_k8s_pod() {
    local host=$1 domain=$2 user=$3 opts=() hosts=() aliases=() h name
    shift 3
    while (($#)) && [[ $1 != -- ]]; do
        opts+=("$1")
        shift
    done
    shift
    [[ -n $MN_NET ]] || mn_cluster_network
    for h in "${MN_NODES[@]}"; do
        for name in ${MN_K8S_NAMES[$h]}; do
            hosts+=(--add-host "$name:${MN_IP[$h]}")
        done
    done
    for name in ${MN_K8S_NAMES[$host]}; do
        aliases+=(--network-alias "$name")
    done
    if [[ ${MN_K8S_ONCE:-0} == 1 ]]; then
        opts+=(--rm --name "$(mn_ctr "$host-once")")
    else
        opts+=(-d --name "$(mn_ctr "$host")")
    fi
    mn_docker "${opts[@]}" --hostname "$host" ${domain:+--domainname "$domain"} \
        --network "$MN_NET" --ip "${MN_IP[$host]}" "${aliases[@]}" "${hosts[@]}" \
        --dns-search "$MN_K8S_DOMAIN" \
        --user "$user" --cap-drop ALL --security-opt no-new-privileges \
        --read-only --tmpfs /tmp \
        -v "$MN_RESULTS:/results" -v "$MN_FIXTURES:/fixtures:ro" -e "PATH=$MN_K8S_PATH" \
        "$MN_IMAGE" "$@"
}

# mn_k8s_check_run HEAD-EXIT-LIMIT: the head (MN_NODES[0]) exits 0, the others
# are released (exit 0); torchrun ran on pod i with RANK=i, the pod's own
# address, --nnodes=N, the head's address; the head's output has its lines.
# MN_K8S_WANT_ENV[host]: the topology variables torchrun must have seen.
declare -A MN_K8S_WANT_ENV=()
mn_k8s_check_run() {
    local n host code want got nodes=${#MN_NODES[@]} head=${MN_NODES[0]}
    if code=$(mn_wait_exit "$head" "$1"); then
        check_eq "the head's exit status (the job's)" 0 "$code"
    else
        check_fail "the head still runs after $1 s"
    fi
    for n in "${!MN_NODES[@]}"; do
        host=${MN_NODES[$n]}
        if code=$(mn_wait_exit "$host" 20); then
            [[ $host == "$head" ]] || check_eq "$host released, exit status" 0 "$code"
        else
            check_fail "$host still runs 20 s after the job ended"
        fi
        if [[ ! -f $MN_RESULTS/torchrun.$host ]]; then
            check_fail "torchrun did not run on $host"
            continue
        fi
        want=$(printf '%s ' "host=$host" "rank=$n" "ip=${MN_IP[$host]}" \
            "MULTINODE_LOCAL_IP=${MN_IP[$host]}" \
            "arg=--nnodes=$nodes" "arg=--node-rank=$n" "arg=--nproc-per-node=2" \
            "arg=--master-addr=${MN_IP[$head]}" "arg=--master-port=29500" \
            "arg=/workspace/train.py")
        got=$(tr '\n' ' ' <"$MN_RESULTS/torchrun.$host")
        check_eq "torchrun on $host (host, RANK, eth0, MULTINODE_LOCAL_IP, arguments)" "$want" "$got"
        got=$(tr '\n' ' ' <"$MN_RESULTS/torchrun.$host.env")
        check_eq "what $host was given" "${MN_K8S_WANT_ENV[$host]}" "$got"
    done
    mn_save_logs "$head"
    got=$(grep -c '^torchrun stand-in on ' "$MN_TMP/$head.out" || true)
    check_eq "torchrun lines relayed to the head's output" "$nodes" "$got"
}
