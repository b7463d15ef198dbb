#!/usr/bin/env bash
# docs/kubernetes.md's MPIJob (MPI Operator v2beta1, runLauncherAsWorker),
# with no Kubernetes (k8s.sh): the manifest is taken from the page and
# checked; the pods run as containers named as the operator names them
# (mpi-launcher, mpi-worker-<i>, subdomain mpi), the launcher with the
# hostfile the operator writes (/etc/mpi/hostfile: the launcher first, then
# the workers, as <pod>.mpi.default.svc slots=2) and the Open MPI variables it
# sets, the workers with their readiness probe (the agent listens) awaited
# before the launcher starts (WaitForWorkersReady). The launcher runs the
# manifest's command: the generic-helper, whose topology is the hostfile, and
# mpirun of tests/fixtures/mpi_allreduce.c through mn-ssh. Checks: the
# launcher exits 0; 8 ranks, 2 in each pod, size 8, allreduce sum 28; the
# workers' agents end on SIGTERM (the pods' deletion), exit 0.
# shellcheck disable=SC2154 # the manifest's variables come from mn_k8s_manifest
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=../k8s.sh
source "$(dirname "${BASH_SOURCE[0]}")/../k8s.sh"

mn_k8s_manifest k8s-mpijob.yaml
check_eq "the launcher is a worker; it starts once the workers are ready" \
    "True WaitForWorkersReady" "$mpi_launcher_as_worker $mpi_launcher_policy"
check_eq "the workers run a plain agent" "multinode agent" "${worker_command[*]}"
check_eq "the workers' readiness: the agent's port" "29922 29922" "${worker_ports[*]} $worker_readiness_port"
mn_k8s_check_security launcher
mn_k8s_check_security worker

MN_SLOTS=$mpi_slots
MN_NODES=("$mpi_name-launcher")
for ((i = 0; i < worker_replicas; i++)); do
    MN_NODES+=("$mpi_name-worker-$i")
done
domain=$mpi_name.$MN_K8S_DOMAIN
mn_cluster_network
: >"$MN_TMP/hostfile"
for host in "${MN_NODES[@]}"; do
    MN_K8S_NAMES[$host]="$host.$mpi_name.$MN_K8S_NS.svc $host.$domain"
    echo "$host.$mpi_name.$MN_K8S_NS.svc slots=$mpi_slots" >>"$MN_TMP/hostfile"
done
chmod 0444 "$MN_TMP/hostfile"
mn_compile_mpi mpicc.openmpi

# shellcheck disable=SC2317 # called through mn_poll
listening() { docker exec "$(mn_ctr "$1")" ss -ltnH 'sport = :29922' 2>/dev/null | grep -q .; }
for host in "${MN_NODES[@]:1}"; do
    mapfile -t env < <(mn_k8s_env_opts "K_MPI_JOB_ROLE=worker" "${worker_env[@]}")
    mn_k8s_pod "$host" "$domain" "$worker_user:$worker_group" "${env[@]}" \
        -v "$MN_RESULTS/allreduce:/workspace/allreduce:ro" -- "${worker_command[@]}" >/dev/null
done
for host in "${MN_NODES[@]:1}"; do
    mn_poll 30 listening "$host" || check_fail "$host's agent does not listen after 30 s"
done
launcher=${MN_NODES[0]}
mapfile -t env < <(mn_k8s_env_opts "K_MPI_JOB_ROLE=launcher" \
    "OMPI_MCA_orte_keep_fqdn_hostnames=true" \
    "OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile" \
    "OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10" \
    "OMPI_MCA_orte_set_default_slots=$mpi_slots" "${launcher_env[@]}")
mn_k8s_pod "$launcher" "$domain" "$launcher_user:$launcher_group" "${env[@]}" \
    -v "$MN_TMP/hostfile:/etc/mpi/hostfile:ro" \
    -v "$MN_RESULTS/allreduce:/workspace/allreduce:ro" -- "${launcher_command[@]}" >/dev/null
if code=$(mn_wait_exit "$launcher" 60); then
    check_eq "the launcher's exit status" 0 "$code"
else
    check_fail "the launcher still runs after 60 s"
fi
mn_save_logs "$launcher"
sed 's/^/  | /' "$MN_TMP/$launcher.out" "$MN_TMP/$launcher.err"
mn_check_allreduce "$MN_TMP/$launcher.out"
# The operator deletes the workers once the launcher is done.
for host in "${MN_NODES[@]:1}"; do
    docker kill -s TERM "$(mn_ctr "$host")" >/dev/null
done
for host in "${MN_NODES[@]:1}"; do
    if code=$(mn_wait_exit "$host" 10); then
        check_eq "$host's agent on SIGTERM, exit status" 0 "$code"
    else
        check_fail "$host still runs 10 s after SIGTERM"
    fi
done
finish
