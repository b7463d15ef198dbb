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
# expected runs as `cmd || rc=$?`, which does not trip this trap.
exec 3>&1
trap 'printf "FAIL %s: line %s: command failed (status %s): %s\n" \
    "$MN_SCENARIO" "$LINENO" "$?" "$BASH_COMMAND" >&3; exit 1' ERR

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
