#!/usr/bin/env bash
# A worker that comes late, and one that never comes.
# - late: node3's container starts 10 s after the others. The head waits for
#   it (--wait-timeout is 120 s by default), then runs the JOB
#   (`mn-exec-all -c 'echo ran ...'`) on all 4 nodes and exits 0; every
#   worker is released and exits 0.
# - missing: node3 never starts, --wait-timeout 5. The head must give up
#   after 5 s with an error that names node3 (rank 3) alone, and exit 255
#   without running the JOB. It releases the workers (each release bounded
#   by 2 s: its container runs at most 8 s): they exit 0 at once, instead of
#   waiting out their idle timeout (30 s).
# shellcheck disable=SC2016 # the JOB is expanded by the head's shell
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

job='touch /results/job-started; mn-exec-all -c "echo ran rank=\$RANK host=\$(hostname)"'

mn_cluster_phase late
for host in node2 node1 node0; do
    mn_node "$host" -- -- sh -c "$job"
done
sleep 10
if mn_running node0 && [[ ! -e $MN_RESULTS/job-started ]]; then
    check_ok "late: 10 s without node3, the head still waits and the job has not started"
else
    check_fail "late: without node3, the head did not wait (running: $(mn_running node0 && echo yes || echo no))"
fi
t_late=$(mn_now)
mn_node node3 -- -- sh -c "$job"
if mn_poll 30 test -e "$MN_RESULTS/job-started"; then
    check_ok "late: the job started $(mn_since "$t_late") s after node3's container did"
else
    check_fail "late: the job did not start within 30 s of node3"
fi
code=$(mn_wait_exit node0 30) || code="still running 30 s later"
check_eq "late: the head's exit status" 0 "$code"
mn_save_logs node0
check_eq "late: nodes the job ran on" "node0 node1 node2 node3 " \
    "$(sed -n 's/^ran rank=[0-9]* host=//p' "$MN_TMP/node0.out" | sort | tr '\n' ' ')"
for host in node1 node2 node3; do
    code=$(mn_wait_exit "$host" 20) || code="still running 20 s later"
    check_eq "late: $host released, exit status" 0 "$code"
done

mn_cluster_phase missing
for host in node2 node1 node0; do
    mn_node "$host" -- --wait-timeout 5 -- sh -c "$job"
done
if code=$(mn_wait_exit node0 30); then
    check_within "missing: the head's container ran for" 8 "$(mn_ran_for node0)"
    check_eq "missing: the head's exit status" 255 "$code"
else
    check_fail "missing: the head still waits 30 s later"
fi
mn_save_logs node0
error=$(grep 'error' "$MN_TMP/node0.err" | tail -n 1) || true
if grep -q 'rank 3 node3' <<<"$error" && ! grep -Eq 'rank [12] ' <<<"$error"; then
    check_ok "missing: the head's error names node3 alone: $error"
else
    check_fail "missing: the head's error should name node3 (rank 3) alone: '$error'"
fi
if [[ -e $MN_RESULTS/job-started ]]; then
    check_fail "missing: the JOB ran"
else
    check_ok "missing: the JOB did not run"
fi
for host in node1 node2; do
    code=$(mn_wait_exit "$host" 10) || code="still running 10 s after the head gave up"
    check_eq "missing: $host released, exit status" 0 "$code"
done
finish
