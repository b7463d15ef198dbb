# shellcheck shell=bash
# Sourced by every scenario under tests/cluster/scenarios/. A scenario runs in
# its own bash process, started by tests/cluster/run.sh, which exports:
#   MN_IMAGE          the multinode image to test
#   MN_RUN_ID         this run's ID; MN_LABEL the label every resource carries
#   MN_SCENARIO       the scenario's name; MN_TMP a scratch folder of its own
#   MN_ROOT           the repository root; MN_CRATE_VERSION the crate's version
#
# A scenario records checks with check_ok/check_fail and ends with finish,
# which prints "PASS name" or "FAIL name: first reason" and sets the exit
# status. A command that fails unexpectedly ends the scenario with a FAIL that
# names it. Everything made through mn_docker/mn_network carries MN_LABEL and
# org.multinode.test-scenario=NAME: the runner removes it when the scenario
# ends, and in any case at the end of the run.
set -Eeuo pipefail

: "${MN_IMAGE:?scenarios are run by tests/cluster/run.sh}"
: "${MN_LABEL:?}" "${MN_RUN_ID:?}" "${MN_SCENARIO:?}" "${MN_TMP:?}"

mn_reasons=()

# The verdict goes to the scenario's stdout (fd 3) even when the failing
# command's own output was redirected to a file. A command whose failure is
# expected runs as `cmd || rc=$?`, which does not trip this trap. In a
# subshell (`x=$(cmd)`, which inherits the trap) it only ends the subshell:
# the command that ran the subshell then fails, and is the one reported.
exec 3>&1
mn_main_pid=$BASHPID mn_status=0
trap 'mn_status=$?
[[ $BASHPID == "$mn_main_pid" ]] || exit 1
printf "FAIL %s: line %s: command failed (status %s): %s\n" \
    "$MN_SCENARIO" "$LINENO" "$mn_status" "$BASH_COMMAND" >&3
{ mn_show_logs || true; } >&3 2>&1
exit 1' ERR

check_ok() { printf '  ok    %s\n' "$*"; }
check_fail() {
    printf '  FAIL  %s\n' "$*"
    mn_reasons+=("$*")
}
# check NAME WANT GOT: equality check.
check_eq() {
    if [[ $3 == "$2" ]]; then
        check_ok "$1: $3"
    else
        check_fail "$1: want '$2', got '$3'"
    fi
}
finish() {
    if ((${#mn_reasons[@]} == 0)); then
        echo "PASS $MN_SCENARIO"
        exit 0
    fi
    mn_show_logs || true
    local more=
    ((${#mn_reasons[@]} > 1)) && more=" (and $((${#mn_reasons[@]} - 1)) more)"
    echo "FAIL $MN_SCENARIO: ${mn_reasons[0]}$more"
    exit 1
}

# A resource name unique to this run: mn_name node0 -> mn-RUNID-SCENARIO-node0.
mn_name() { printf 'mn-%s-%s-%s' "$MN_RUN_ID" "$MN_SCENARIO" "$1"; }

# docker run, labelled for cleanup: mn_docker [docker run options] IMAGE CMD...
mn_docker() {
    docker run --label "$MN_LABEL" --label "org.multinode.test-scenario=$MN_SCENARIO" "$@"
}

# Creates a private bridge network (the engine picks a free subnet) and prints
# its name.
mn_network() {
    local name
    name=$(mn_name "$1")
    docker network create --label "$MN_LABEL" \
        --label "org.multinode.test-scenario=$MN_SCENARIO" "$name" >/dev/null
    printf '%s' "$name"
}

# ---------------------------------------------------------------------------
# A cluster: one container per node, node0 (the head) to node3, on a network
# of the scenario's own, each running the same entrypoint as a scheduler would
# start it: `multinode agent [OPTIONS] -- JOB`, with the same environment on
# every node (the hostlist and the job secret).
#
# Every node has a fixed address on a /24 of the scenario's own, and every
# node's /etc/hosts names them all (besides Docker's DNS, through the network
# aliases): a node that is down, not started or cut off still resolves, as on
# a real cluster, and no name lookup ever leaves the machine.

MN_NODES=(node0 node1 node2 node3)
# Hosts of the cluster that are not nodes of the job (Slurm's controller):
# they get addresses after the nodes, and are in every /etc/hosts too.
MN_EXTRA_HOSTS=()
MN_SLOTS=2
MN_HOSTLIST=$(printf "%s:$MN_SLOTS," "${MN_NODES[@]}")
MN_HOSTLIST=${MN_HOSTLIST%,}
# The job secret: the same on every node, new for every scenario.
MN_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
# How the topology reaches the nodes; a scenario may use Slurm's variables.
MN_JOB_ENV=(-e "MULTINODE_HOSTLIST=$MN_HOSTLIST")
# Mounted at /results (read-write) and /fixtures (read-only) on every node.
MN_RESULTS=$MN_TMP/results
MN_FIXTURES=${MN_ROOT:?}/tests/cluster/fixtures
mkdir -p "$MN_RESULTS"
MN_NET=''
MN_CLUSTER=''
declare -A MN_IP=()

# The container name of a node.
mn_ctr() { mn_name "${MN_CLUSTER:+$MN_CLUSTER-}$1"; }

# mn_cluster_phase NAME: the nodes started from now on are a new cluster NAME
# on the same network (the addresses are reused: the previous cluster's
# containers must have exited), with a /results of its own.
mn_cluster_phase() {
    MN_CLUSTER=$1
    MN_RESULTS=$MN_TMP/results-$1
    mkdir -p "$MN_RESULTS"
}

# Creates the scenario's network on a free /24 and gives every node of
# MN_NODES its address (.10, .11, ...). Docker only lets a container choose
# its address on a network whose subnet was chosen by hand: try a few.
mn_cluster_network() {
    local name base i n subnet prefix
    name=$(mn_name net)
    base=$(($(cksum <<<"$MN_RUN_ID/$MN_SCENARIO" | cut -d' ' -f1) % 250))
    for ((i = 0; i < 40; i++)); do
        prefix=10.213.$(((base + i * 7) % 250 + 1))
        subnet=$prefix.0/24
        if docker network create --label "$MN_LABEL" \
            --label "org.multinode.test-scenario=$MN_SCENARIO" \
            --subnet "$subnet" "$name" >/dev/null 2>"$MN_TMP/network.err"; then
            MN_NET=$name
            local all=("${MN_NODES[@]}" "${MN_EXTRA_HOSTS[@]}")
            for n in "${!all[@]}"; do
                MN_IP[${all[$n]}]=$prefix.$((10 + n))
            done
            return 0
        fi
        grep -qi overlap "$MN_TMP/network.err" || break
    done
    cat "$MN_TMP/network.err" >&2
    return 1
}

# The --add-host options that name every host of the cluster, one a line.
mn_add_hosts() {
    local h
    for h in "${MN_NODES[@]}" "${MN_EXTRA_HOSTS[@]}"; do
        printf -- '--add-host\n%s:%s\n' "$h" "${MN_IP[$h]}"
    done
}

# mn_node HOST [DOCKER-RUN-OPTIONS...] -- [AGENT-OPTIONS...] [-- JOB...]
# Starts HOST's container, detached: `multinode agent -v AGENT-OPTIONS -- JOB`
# (for example `mn_node node1 -- --idle-timeout 5 -- sh -c 'exec_all ...'`).
# MN_NODE_SECRET, when set, replaces the job secret on this node.
mn_node() {
    local host=$1 opts=() hosts=()
    shift
    while (($#)) && [[ $1 != -- ]]; do
        opts+=("$1")
        shift
    done
    (($#)) && shift
    [[ -n $MN_NET ]] || mn_cluster_network
    mapfile -t hosts < <(mn_add_hosts)
    mn_docker -d --name "$(mn_ctr "$host")" --hostname "$host" \
        --network "$MN_NET" --network-alias "$host" --ip "${MN_IP[$host]}" "${hosts[@]}" \
        -e "MULTINODE_SECRET=${MN_NODE_SECRET:-$MN_SECRET}" "${MN_JOB_ENV[@]}" \
        -v "$MN_RESULTS:/results" -v "$MN_FIXTURES:/fixtures:ro" \
        "${opts[@]}" "$MN_IMAGE" multinode agent -v "$@" >/dev/null
}

# mn_cluster [DOCKER-RUN-OPTIONS...] -- [AGENT-OPTIONS...] [-- JOB...]
# Every node of MN_NODES with the same options and command, workers first
# (the order does not matter: the head waits for them).
mn_cluster() {
    local i
    for ((i = ${#MN_NODES[@]} - 1; i >= 0; i--)); do
        mn_node "${MN_NODES[$i]}" "$@"
    done
}

# The seconds since the epoch, to the nanosecond (the containers share the
# host's clock).
mn_now() { date +%s.%N; }

# mn_since T0 [T1]: T1 (default now) - T0 in seconds, one decimal.
mn_since() { awk -v a="$1" -v b="${2:-$(mn_now)}" 'BEGIN { printf "%.1f", b - a }'; }

# mn_before T0 LIMIT: whether less than LIMIT seconds have passed since T0.
mn_before() { awk -v a="$1" -v b="$(mn_now)" -v l="$2" 'BEGIN { exit !(b - a < l) }'; }

# check_within WHAT LIMIT SECONDS: SECONDS <= LIMIT.
check_within() {
    if awk -v v="$3" -v l="$2" 'BEGIN { exit !(v <= l) }'; then
        check_ok "$1: ${3}s (limit ${2}s)"
    else
        check_fail "$1: ${3}s, over the limit of ${2}s"
    fi
}

# mn_poll LIMIT CMD...: runs CMD every 0.2 s until it succeeds (status 0) or
# LIMIT seconds have passed (status 1).
mn_poll() {
    local limit=$1 t0
    shift
    t0=$(mn_now)
    until "$@"; do
        mn_before "$t0" "$limit" || return 1
        sleep 0.2
    done
}

# Whether HOST's container is running.
mn_running() {
    [[ $(docker inspect -f '{{.State.Running}}' "$(mn_ctr "$1")" 2>/dev/null) == true ]]
}

# mn_wait_exit HOST LIMIT: waits until HOST's container has exited and prints
# its exit code; status 1 (printing nothing) if it still runs after LIMIT s.
mn_stopped() { ! mn_running "$1"; }
mn_wait_exit() {
    mn_poll "$2" mn_stopped "$1" || return 1
    docker inspect -f '{{.State.ExitCode}}' "$(mn_ctr "$1")"
}

# mn_ran_for HOST: how long HOST's container ran, from Docker's start and
# finish times (seconds, one decimal).
mn_ran_for() {
    local times
    times=$(docker inspect -f '{{.State.StartedAt}} {{.State.FinishedAt}}' "$(mn_ctr "$1")")
    mn_since "$(date -d "${times% *}" +%s.%N)" "$(date -d "${times#* }" +%s.%N)"
}

# mn_procs HOST: the processes of HOST's container other than its agent (the
# init and the agent both run `multinode agent ...`, and the agent's group
# keeper runs `multinode keep-groups ...`) and other than the head's JOB when
# it is the hold.sh fixture (its supervisor, its shell and its `sleep 0.2`),
# one `PID ARGS` a line. Status 2 when the container is not running.
mn_procs() {
    local out
    out=$(docker exec "$(mn_ctr "$1")" ps -eo pid=,args= 2>/dev/null) || return 2
    awk '$2 == "multinode" && $3 == "agent" { next }
         $2 ~ /(^|\/)multinode$/ && $3 == "keep-groups" { next }
         $2 ~ /(^|\/)multinode$/ && $3 == "supervise" && $7 == "/fixtures/hold.sh" { next }
         $2 == "/bin/sh" && $3 == "/fixtures/hold.sh" { next }
         $2 == "sleep" && $3 == "0.2" && NF == 3 { next }
         $2 == "ps" && $3 == "-eo" { next }
         { print }' <<<"$out"
}

# mn_has_proc HOST PATTERN: whether a process of HOST matches PATTERN (ERE).
mn_has_proc() {
    local procs
    procs=$(mn_procs "$1") || return 1
    grep -Eq -- "$2" <<<"$procs"
}

# The output of HOST's container: stdout (JOB's, on the head) to
# $MN_TMP/HOST.out, stderr (the agent's log) to $MN_TMP/HOST.err.
mn_save_logs() {
    docker logs "$(mn_ctr "$1")" >"$MN_TMP/$1.out" 2>"$MN_TMP/$1.err" || true
}

# On a failure: the last lines of every container of the scenario.
mn_show_logs() {
    local id ids
    ids=$(docker ps -aq --filter "label=$MN_LABEL" \
        --filter "label=org.multinode.test-scenario=$MN_SCENARIO" 2>/dev/null) || return 0
    for id in $ids; do
        docker inspect -f '  --- {{.Name}} ({{.State.Status}}, exit {{.State.ExitCode}}), last lines:' \
            "$id" 2>/dev/null || continue
        docker logs --tail 25 "$id" 2>&1 | sed 's/^/  | /' || true
    done
}

# mn_compile_mpi MPICC: compiles tests/fixtures/mpi_allreduce.c with MPICC in
# a throwaway container, to /results/allreduce on every node.
mn_compile_mpi() {
    mn_docker --rm --network none -v "$MN_ROOT/tests/fixtures:/src:ro" \
        -v "$MN_RESULTS:/results" "$MN_IMAGE" \
        "$1" -O2 -o /results/allreduce /src/mpi_allreduce.c
}

# mn_check_allreduce FILE: checks the output of mpi_allreduce.c run with
# MN_SLOTS ranks on every node of MN_NODES: one line per rank, every rank
# once, the right size and allreduce sum, and MN_SLOTS ranks on each node.
mn_check_allreduce() {
    local file=$1 np=$((${#MN_NODES[@]} * MN_SLOTS)) lines ranks host hosts
    lines=$(grep -c '^rank=' "$file" || true)
    check_eq "rank lines" "$np" "$lines"
    ranks=$(sed -n 's/^rank=\([0-9]*\) .*/\1/p' "$file" | sort -n | tr '\n' ' ')
    check_eq "ranks" "$(seq -s ' ' 0 $((np - 1))) " "$ranks"
    check_eq "size and allreduce sum on every rank" \
        "$np size=$np sum=$((np * (np - 1) / 2))" \
        "$(grep -o 'size=[0-9]* sum=[0-9]*' "$file" | sort | uniq -c | awk '{ print $1, $2, $3 }')"
    for host in "${MN_NODES[@]}"; do
        hosts=$(grep -c " host=$host " "$file" || true)
        check_eq "ranks on $host" "$MN_SLOTS" "$hosts"
    done
    check_ok "placement: $(sed -n 's/^rank=\([0-9]*\) .* host=\([^ ]*\) .*/\1:\2/p' "$file" |
        sort -n | tr '\n' ' ')"
}

# mn_all_have PATTERN HOST...: whether every HOST has a process matching PATTERN.
mn_all_have() {
    local pattern=$1 host
    shift
    for host in "$@"; do
        mn_has_proc "$host" "$pattern" || return 1
    done
}

# mn_doc_block FILE NAME: the text of the fenced code block that follows the
# line `<!-- test: NAME -->` in FILE (a page of docs/), so that a scenario
# runs what the page shows, byte for byte. Fails when there is no such block.
mn_doc_block() {
    awk -v name="$2" '
        $0 == "<!-- test: " name " -->" { want = 1; next }
        want && !inside && /^```/ { inside = 1; next }
        inside && /^```/ { found = 1; exit }
        inside { print }
        END { exit !found }
    ' "$1"
}

# check_lines: each line of stdin a check: `ok WHAT` passes, any other
# (`fail WHAT`) fails.
check_lines() {
    local line
    while IFS= read -r line; do
        case $line in
        ok\ *) check_ok "${line#ok }" ;;
        *) check_fail "${line#fail }" ;;
        esac
    done
}

# mn_report_checks REPORT [ARG...] <<'PY' ... PY: runs the Python on stdin
# after a preamble that loads exec_all's --report REPORT as `report` (its
# `attempts` list as `attempts`) and defines check(WHAT, GOT, WANT); each
# line it prints (`ok ...`, `fail ...`) is a check. sys.argv is
# [-, REPORT, ARG...]. An unreadable report is one failed check.
mn_report_checks() {
    local body
    body=$(cat)
    check_lines < <({
        mn_report_preamble
        printf '%s\n' "$body"
    } | python3 - "$@")
}
mn_report_preamble() {
    cat <<'PY'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(f"fail no readable report: {e}")
    sys.exit()
attempts = report.get("attempts") or []
def check(what, got, want):
    print(f"{'ok' if got == want else 'fail'} report: {what}: {got!r}" + ("" if got == want else f", not {want!r}"))
PY
}

# mn_wait_done LIMIT SINCE: waits up to LIMIT s for the head's JOB
# (/fixtures/hold.sh execall) to end and sets MN_RC and MN_T_END from its
# execall.done; if it does not, the check fails ("exec_all still runs
# LIMIT s after SINCE") and the scenario ends there.
mn_wait_done() {
    if ! mn_poll "$1" test -f "$MN_RESULTS/execall.done"; then
        check_fail "exec_all still runs $1 s after $2"
        finish
    fi
    # shellcheck disable=SC2034 # read by the scenarios
    read -r MN_RC MN_T_END <"$MN_RESULTS/execall.done"
}

# mn_none_left PATTERN HOST...: one check a HOST, that no process of it
# matches PATTERN (ERE; `.`: none at all but the agent's and hold.sh's).
mn_none_left() {
    local pattern=$1 host
    shift
    for host in "$@"; do
        if mn_has_proc "$host" "$pattern"; then
            check_fail "a job process is left on $host: $(mn_procs "$host" | tr '\n' ';')"
        else
            check_ok "no job process left on $host"
        fi
    done
}

# mn_release HEAD_STATUS WORKER...: releases the head (hold.sh waits for
# $MN_RESULTS/release), checks that it exits HEAD_STATUS (exec_all's) within
# 30 s and that each WORKER then exits 0 within 20 s.
mn_release() {
    local want=$1 host code
    shift
    touch "$MN_RESULTS/release"
    code=$(mn_wait_exit "${MN_NODES[0]}" 30) || code="still running 30 s later"
    check_eq "the head's exit status (exec_all's)" "$want" "$code"
    for host in "$@"; do
        code=$(mn_wait_exit "$host" 20) || code="still running 20 s later"
        check_eq "$host released, exit status" 0 "$code"
    done
}
