#!/usr/bin/env bash
# Multi-host tests: each node is a Docker container of the multinode image on a
# private network of the test's own. No registry is used: the image is built
# locally (docker/build-image.sh, which builds the base image with debootstrap
# when it is missing or its recipe changed).
#
# Usage: tests/cluster/run.sh [--list] [SCENARIO...]
#   With no SCENARIO, runs every tests/cluster/scenarios/*.sh in name order.
#   Exits 0 when every scenario passed, 1 when one failed, 2 on bad usage.
#
# Environment:
#   MULTINODE_IMAGE       image tag to build, test and remove (default multinode:test)
#   MN_KEEP_IMAGE=1       keep that image at the end (for debugging)
#   MN_SCENARIO_TIMEOUT   seconds per scenario (default 300)
#
# Every container and network a scenario makes carries the labels
# org.multinode.test-run=RUN_ID and org.multinode.test-scenario=NAME: they are
# removed when the scenario ends, and at the end of the run, whatever happened
# (failure, timeout, TERM, Ctrl-C), with the image. Only the base image stays
# (it is cached).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
usage() {
    sed -n '/^# Usage:/,/^# *Exits/ s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
    exit 2
}

list_scenarios() {
    local f
    for f in "$here"/scenarios/*.sh; do
        [[ -e $f ]] && basename "$f" .sh
    done
}

scenarios=()
for arg in "$@"; do
    case $arg in
    --list) list_scenarios; exit 0 ;;
    -h | --help) usage ;;
    -*) printf 'run.sh: error: unknown option %s\n' "$arg" >&2; usage ;;
    *)
        name=${arg%.sh}
        name=${name##*/}
        if [[ ! -f $here/scenarios/$name.sh ]]; then
            printf 'run.sh: error: no scenario %s (see run.sh --list)\n' "$arg" >&2
            exit 2
        fi
        scenarios+=("$name")
        ;;
    esac
done
if ((${#scenarios[@]} == 0)); then
    mapfile -t scenarios < <(list_scenarios)
fi

for tool in docker python3 cargo; do
    command -v "$tool" >/dev/null || { printf 'run.sh: error: %s not found\n' "$tool" >&2; exit 2; }
done
docker info >/dev/null 2>&1 || { printf 'run.sh: error: the Docker engine does not answer\n' >&2; exit 2; }

export MN_IMAGE=${MULTINODE_IMAGE:-multinode:test}
export MULTINODE_IMAGE=$MN_IMAGE
export MN_RUN_ID=${MN_RUN_ID:-$(date +%s)-$$}
export MN_LABEL=org.multinode.test-run=$MN_RUN_ID
export MN_ROOT=$root
MN_CRATE_VERSION=$(cargo metadata --offline --no-deps --format-version 1 --manifest-path "$root/Cargo.toml" |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "multinode"))')
export MN_CRATE_VERSION
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/multinode-cluster.XXXXXX")

# Removes the containers and networks that carry every given label.
remove_labelled() {
    local filters=() ids label
    for label in "$@"; do filters+=(--filter "label=$label"); done
    ids=$(docker ps -aq "${filters[@]}")
    if [[ -n $ids ]]; then
        # shellcheck disable=SC2086 # one ID a word
        docker rm -f -v $ids >/dev/null && log "removed $(wc -w <<<"$ids") container(s)"
    fi
    ids=$(docker network ls -q "${filters[@]}")
    if [[ -n $ids ]]; then
        # A network keeps the endpoints of containers just removed for a
        # moment (tens of containers on a busy machine): try again a while,
        # then warn. A network left over costs nothing but its name and
        # subnet; it must not fail the run.
        local try removed=0
        for try in 1 2 3 4 5 6 7 8 9 10; do
            # shellcheck disable=SC2086
            if docker network rm $ids >/dev/null 2>&1; then
                removed=1
                break
            fi
            sleep "0.$try"
        done
        if ((removed)); then
            log "removed $(wc -w <<<"$ids") network(s)"
        else
            log "warning: could not remove network(s) $(docker network ls --format '{{.Name}}' "${filters[@]}" | tr '\n' ' ')(stale endpoints); left behind"
        fi
    fi
}

scenario_pid='' tail_pid=''
cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    if [[ -n $scenario_pid ]] && kill -0 "$scenario_pid" 2>/dev/null; then
        # timeout(1) passes the TERM on to the scenario.
        log "stopping scenario $MN_SCENARIO"
        kill -TERM "$scenario_pid"
    fi
    # Removing the containers also ends any `docker run` client still attached.
    remove_labelled "$MN_LABEL"
    [[ -n $scenario_pid ]] && wait "$scenario_pid" 2>/dev/null
    [[ -n $tail_pid ]] && kill "$tail_pid" 2>/dev/null
    if [[ ${MN_KEEP_IMAGE:-0} == 1 ]]; then
        log "kept $MN_IMAGE (MN_KEEP_IMAGE=1)"
    elif docker image inspect "$MN_IMAGE" >/dev/null 2>&1; then
        docker rmi "$MN_IMAGE" >/dev/null && log "removed image $MN_IMAGE"
    fi
    rm -rf "$run_tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs one scenario under timeout(1), its output in $MN_TMP/output and shown
# live; sets rc. Run in the background and waited for, so that a signal to
# the runner is handled at once.
run_scenario() {
    local limit=${MN_SCENARIO_TIMEOUT:-300}
    : >"$MN_TMP/output"
    timeout -k 10 "$limit" bash "$here/scenarios/$MN_SCENARIO.sh" </dev/null >"$MN_TMP/output" 2>&1 &
    scenario_pid=$!
    tail -s 0.2 -n +1 -f --pid="$scenario_pid" "$MN_TMP/output" &
    tail_pid=$!
    rc=0
    wait "$scenario_pid" || rc=$?
    wait "$tail_pid" || true
    scenario_pid='' tail_pid=''
    if ((rc == 124)); then
        echo "FAIL $MN_SCENARIO: timed out after ${limit}s"
    elif ((rc != 0)) && ! grep -q "^FAIL $MN_SCENARIO" "$MN_TMP/output"; then
        echo "FAIL $MN_SCENARIO: exited with status $rc without a verdict"
    fi
    # What the scenario left behind goes now, not at the end of the run.
    remove_labelled "$MN_LABEL" "org.multinode.test-scenario=$MN_SCENARIO"
}

log "run $MN_RUN_ID: ${#scenarios[@]} scenario(s): ${scenarios[*]}"
t0=$SECONDS
"$root/docker/build-image.sh"
log "image ready in $((SECONDS - t0))s"

passed=() failed=()
for name in "${scenarios[@]}"; do
    export MN_SCENARIO=$name MN_TMP=$run_tmp/$name
    mkdir -p "$MN_TMP"
    log "--- $name"
    t=$SECONDS
    run_scenario
    if ((rc == 0)); then passed+=("$name"); else failed+=("$name"); fi
    log "--- $name: $([[ $rc == 0 ]] && echo passed || echo failed) in $((SECONDS - t))s"
done

log "${#passed[@]} passed, ${#failed[@]} failed${failed:+: ${failed[*]}} (total $((SECONDS - t0))s)"
((${#failed[@]} == 0))
