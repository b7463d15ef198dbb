# shellcheck shell=bash
# Sourced after lib.sh by the slurm-* scenarios: a real Slurm cluster made of
# containers of the test image (Debian's slurm-wlm and munge are in the base
# image). slurmctld runs on "ctl", slurmd on node1 to nodeN (N is
# MN_SLURM_NODES, 4 unless the scenario sets it before sourcing this file),
# each under `docker run --init` (tini reaps and forwards), with one munge
# key made for the cluster and fixtures/slurm/slurm.conf, its `NodeName=`
# line naming node[1-N]. Jobs are submitted on ctl with sbatch, from
# /results (the shared scratch folder), so a job's output file and ./job.sh
# are /results/... on every node.

MN_SLURM_NODES=${MN_SLURM_NODES:-4}
# shellcheck disable=SC2034 # lib.sh reads them
mapfile -t MN_NODES < <(seq -f 'node%g' 1 "$MN_SLURM_NODES")
# shellcheck disable=SC2034
MN_EXTRA_HOSTS=(ctl)
# The fixture's slurm.conf, with the cluster's nodes (mn_slurm_cluster writes it).
MN_SLURM_CONF=$MN_TMP/slurm.conf
# The PATH jobs are submitted with (sbatch passes it on to the job and srun to
# the steps): the stand-in torchrun first.
MN_SLURM_PATH=/fixtures/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Jobs run as mnuser (fixtures/slurm/start.sh adds it on every host), who
# writes job outputs and records to /results.
chmod 0777 "$MN_RESULTS"

# mn_slurm_host HOST ctl|node: starts HOST's container running slurmctld or
# slurmd in the foreground (fixtures/slurm/start.sh).
mn_slurm_host() {
    local host=$1 role=$2 hosts=()
    mapfile -t hosts < <(mn_add_hosts)
    mn_docker -d --init --name "$(mn_ctr "$host")" --hostname "$host" \
        --network "$MN_NET" --network-alias "$host" --ip "${MN_IP[$host]}" "${hosts[@]}" \
        -v "$MN_TMP/munge.key:/slurm/munge.key:ro" \
        -v "$MN_SLURM_CONF:/etc/slurm/slurm.conf:ro" \
        -v "$MN_RESULTS:/results" -v "$MN_FIXTURES:/fixtures:ro" \
        "$MN_IMAGE" /fixtures/slurm/start.sh "$role" >/dev/null
}

# The nodes' states as sinfo gives them, e.g. "4 idle".
mn_slurm_states() {
    docker exec "$(mn_ctr ctl)" sinfo -h -o '%D %T' 2>/dev/null | sort | tr '\n' ' ' | sed 's/ $//'
}
mn_slurm_all_idle() { [[ $(mn_slurm_states) == "${#MN_NODES[@]} idle" ]]; }

# mn_slurm_cluster: the network, a munge key, slurm.conf, the controller and
# the MN_SLURM_NODES slurmd; waits until every node is idle (60 s at most).
mn_slurm_cluster() {
    local host t0
    t0=$(mn_now)
    if ! grep -q '^NodeName=node\[1-4\] ' "$MN_FIXTURES/slurm/slurm.conf"; then
        check_fail "fixtures/slurm/slurm.conf has no 'NodeName=node[1-4] ' line to set the nodes in"
        finish
    fi
    sed "s/^NodeName=node\[1-4\] /NodeName=node[1-$MN_SLURM_NODES] /" \
        "$MN_FIXTURES/slurm/slurm.conf" >"$MN_SLURM_CONF"
    mn_cluster_network
    head -c 1024 /dev/urandom >"$MN_TMP/munge.key"
    mn_slurm_host ctl ctl
    for host in "${MN_NODES[@]}"; do
        mn_slurm_host "$host" node
    done
    if mn_poll 60 mn_slurm_all_idle; then
        check_ok "Slurm cluster up in $(mn_since "$t0") s: $(mn_slurm_states) ($(
            docker exec "$(mn_ctr ctl)" sinfo -h -o '%N' | head -n 1))"
    else
        check_fail "Slurm cluster not ready after 60 s: $(mn_slurm_states)"
        finish
    fi
}

# mn_sbatch SCRIPT [SBATCH-OPTIONS...]: submits /results/SCRIPT as mnuser
# from /results on ctl; prints the job ID.
mn_sbatch() {
    local script=$1
    shift
    docker exec -u mnuser -w /results -e "PATH=$MN_SLURM_PATH" "$(mn_ctr ctl)" \
        sbatch --parsable "$@" "/results/$script"
}

# mn_job_field JOB NAME: a field of `scontrol show job JOB` (JobState, ExitCode, ...).
mn_job_field() {
    docker exec "$(mn_ctr ctl)" scontrol show job -o "$1" 2>/dev/null |
        tr ' ' '\n' | sed -n "s/^$2=//p"
}

# mn_job_ended JOB: whether JOB is in a final state.
mn_job_ended() {
    case $(mn_job_field "$1" JobState) in
    COMPLETED | FAILED | CANCELLED | NODE_FAIL | TIMEOUT | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) return 0 ;;
    *) return 1 ;;
    esac
}

# mn_job_wait JOB LIMIT: waits until JOB has ended; prints "STATE EXITCODE"
# (status 1 and nothing printed if it still runs after LIMIT seconds).
mn_job_wait() {
    mn_poll "$2" mn_job_ended "$1" || return 1
    echo "$(mn_job_field "$1" JobState) $(mn_job_field "$1" ExitCode)"
}

# mn_slurm_procs HOST: HOST's processes other than what a Slurm node always
# runs (tini, slurmd, munged) and this ps, one `PID ARGS` a line: once a job
# is over, anything here is left over. Status 2 when HOST is not running.
mn_slurm_procs() {
    local out
    out=$(docker exec "$(mn_ctr "$1")" ps -eo pid=,args= 2>/dev/null) || return 2
    awk '$2 == "/sbin/docker-init" { next }
         $2 == "slurmd" && $3 == "-D" { next }
         $2 == "munged" && NF == 2 { next }
         $2 == "ps" && $3 == "-eo" { next }
         { print }' <<<"$out"
}

# mn_job_procs HOST: what mn_slurm_procs lists, less Slurm's own part of a
# running job (slurmstepd, the batch script, srun): what the job started.
mn_job_procs() {
    mn_slurm_procs "$1" | awk '$2 ~ /^slurmstepd:/ { next }
        $2 == "/bin/sh" && $3 ~ /\/slurm_script$/ { next }
        $2 == "srun" { next }
        { print }'
}

# mn_slurm_clean HOST...: whether none of HOST has anything left over.
mn_slurm_clean() {
    local host
    for host in "$@"; do
        [[ -z $(mn_slurm_procs "$host") ]] || return 1
    done
}

# mn_jobs_clean HOST...: whether nothing the job started is left on any HOST.
mn_jobs_clean() {
    local host
    for host in "$@"; do
        [[ -z $(mn_job_procs "$host") ]] || return 1
    done
}

# mn_check_clean WHAT HOST...: records that nothing is left on each HOST,
# or what is (MN_PROCS=mn_job_procs: nothing the job started).
mn_check_clean() {
    local what=$1 host left
    shift
    for host in "$@"; do
        left=$("${MN_PROCS:-mn_slurm_procs}" "$host" | tr '\n' ';')
        if [[ -z $left ]]; then
            check_ok "$what: nothing left on $host"
        else
            check_fail "$what: left on $host: $left"
        fi
    done
}

# mn_doc_to_results PAGE NAME FILE: the code block of docs/PAGE marked NAME
# (see mn_doc_block), as the executable /results/FILE.
mn_doc_to_results() {
    mn_doc_block "$MN_ROOT/docs/$1" "$2" >"$MN_RESULTS/$3"
    chmod +x "$MN_RESULTS/$3"
}
