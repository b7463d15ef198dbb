# shellcheck shell=bash
# Sourced by bench/gpu's scripts: the agents a script starts (their PIDs
# in `agents`), ended when it exits, and the small helpers every script
# used to define for itself.
# shellcheck disable=SC2317 # stop_agents runs from the EXIT trap

agents=()

# stop_agents: SIGTERM to every agent started, then waits for each.
stop_agents() {
    for pid in "${agents[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${agents[@]}"; do wait "$pid" 2>/dev/null; done
    agents=()
}
trap stop_agents EXIT

# record STEP VERDICT DETAIL: a result line, kept for the summary.
record() { results+=("$1|$2|$3"); printf '>>> %s: %s (%s)\n' "$1" "$2" "$3"; }
# now: seconds since the epoch, to the nanosecond.
now() { date +%s.%N; }
# secs START END: END - START, in seconds to two places.
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }
# gpu_pids: how many compute processes the GPUs run now.
gpu_pids() { nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c '[0-9]'; }
