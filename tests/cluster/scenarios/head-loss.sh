#!/usr/bin/env bash
# The head is lost while its JOB runs `mn-exec-all -c 'sleep 1234'` on the
# 4 nodes, with `--idle-timeout 5` on every agent, twice:
# - kill: `docker kill node0` (its kernel closes the connections);
# - power-off: node0 is cut from the network, then killed (nothing comes
#   back: keepalives must notice).
# Every worker must end the job's processes and exit 255 on its own, its log
# naming the head as unreachable: after the loss is noticed (at once, or by
# keepalive: about 4 s) and the idle timeout (5 s), within 20 s in all.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

idle=5
workers=("${MN_NODES[@]:1}")

# lose_head HOW: one cluster, the head lost by HOW (kill or power-off).
lose_head() {
    local how=$1 host t_kill code left
    local -A gone=() exited=()
    mn_cluster_phase "$how"
    mn_cluster -- --idle-timeout "$idle" -- mn-exec-all -c 'sleep 1234'
    if ! mn_poll 30 mn_all_have '^ *[0-9]+ sleep 1234$' "${MN_NODES[@]}"; then
        check_fail "$how: the job did not start on every node within 30 s"
        return
    fi
    check_ok "$how: sleep 1234 runs on every node"

    t_kill=$(mn_now)
    if [[ $how == power-off ]]; then
        docker network disconnect -f "$MN_NET" "$(mn_ctr node0)"
    fi
    docker kill "$(mn_ctr node0)" >/dev/null
    # For each worker: when the job's process was gone, when the container exited.
    while mn_before "$t_kill" 40; do
        left=0
        for host in "${workers[@]}"; do
            [[ -n ${exited[$host]:-} ]] && continue
            left=1
            if ! mn_running "$host"; then
                exited[$host]=$(mn_now)
                gone[$host]=${gone[$host]:-${exited[$host]}}
            elif [[ -z ${gone[$host]:-} ]] && ! mn_has_proc "$host" '^ *[0-9]+ sleep 1234$'; then
                gone[$host]=$(mn_now)
            fi
        done
        ((left)) || break
        sleep 0.2
    done
    for host in "${workers[@]}"; do
        if [[ -z ${exited[$host]:-} ]]; then
            check_fail "$how: $host still runs 40 s after the head was lost: $(mn_procs "$host" | tr '\n' ';')"
            continue
        fi
        check_ok "$how: $host: the job's process ended $(mn_since "$t_kill" "${gone[$host]}")s after the loss"
        check_within "$how: $host exited after the head was lost" 20 "$(mn_since "$t_kill" "${exited[$host]}")"
        code=$(docker inspect -f '{{.State.ExitCode}}' "$(mn_ctr "$host")")
        check_eq "$how: $host's exit status" 255 "$code"
        mn_save_logs "$host"
        if grep -q "the head node0:[0-9]* has been unreachable for $idle s" "$MN_TMP/$host.err"; then
            check_ok "$how: $host's log says the head has been unreachable for $idle s"
        else
            check_fail "$how: $host's log does not say the head was unreachable: $(tail -n 1 "$MN_TMP/$host.err")"
        fi
    done
}

lose_head kill
lose_head power-off
finish
