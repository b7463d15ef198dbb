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

# start_loopback_agents N PORT: an agent for each of N loopback "nodes"
# (127.0.0.2 on, node rank r on 127.0.0.(r+2)), each waited for until it
# listens (10 s at most).
start_loopback_agents() {
    local r
    for r in $(seq 0 $(($1 - 1))); do
        MULTINODE_NODE_RANK=$r multinode agent --listen "127.0.0.$((r + 2)):$2" &
        agents+=($!)
    done
    for r in $(seq 0 $(($1 - 1))); do
        for _ in $(seq 100); do
            (exec 3<>"/dev/tcp/127.0.0.$((r + 2))/$2") 2>/dev/null && break
            sleep 0.1
        done
    done
}

# record STEP VERDICT DETAIL: a result line, kept for the summary.
record() { results+=("$1|$2|$3"); printf '>>> %s: %s (%s)\n' "$1" "$2" "$3"; }
# now: seconds since the epoch, to the nanosecond.
now() { date +%s.%N; }
# secs START END: END - START, in seconds to two places.
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }
# gpu_pids: how many compute processes the GPUs run now.
gpu_pids() { nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c '[0-9]'; }

# summarize LOG: the results recorded, a line each, under a header naming
# LOG; exits 1 when one of them is not PASS, else 0.
summarize() {
    local r step verdict detail failed=0
    echo "=== summary (log: $1)"
    for r in "${results[@]}"; do
        IFS='|' read -r step verdict detail <<<"$r"
        printf '%-4s  %s: %s\n' "$verdict" "$step" "$detail"
        [[ $verdict == PASS ]] || failed=1
    done
    exit "$failed"
}
