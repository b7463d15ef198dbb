#!/bin/bash
# Stops what this bench started, by pid only, and removes what setup.sh
# created (the user, the nft table). Safe to run twice.
. "$(dirname "$0")/common.sh"
cd "$BENCH_STATE" 2>/dev/null || exit 0
for s in cm/*; do
  [ -S "$s" ] || continue
  h=$(basename "$s"); h=${h%-*}
  ssh -F ssh_config_cm -O exit "$h" 2>/dev/null || true
done
# Agents bench.py started and did not stop (it stops them itself unless killed).
if [ -f agents.pids ]; then
  n=0
  while read -r pid; do
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null &&
       tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q ' agent --listen 127\.'; then
      kill "$pid" && n=$((n + 1))
    fi
  done < agents.pids
  [ "$n" -gt 0 ] && echo "stopped $n agents"
  rm -f agents.pids
fi
if [ -f sshd-reaper.pid ]; then   # forwards SIGTERM to its sshd -D
  pid=$(cat sshd-reaper.pid); kill "$pid" 2>/dev/null && echo "stopped sshd reaper $pid"
  rm -f sshd-reaper.pid; sleep 0.5
fi
if [ -f sshd.pid ]; then
  pid=$(cat sshd.pid); kill "$pid" 2>/dev/null && echo "stopped sshd $pid"
  rm -f sshd.pid
fi
if [ -f nft_table ]; then
  nft delete table inet "$NFT_TABLE" 2>/dev/null && echo "deleted nft table $NFT_TABLE"
  rm -f nft_table
fi
if [ -f cgroups ]; then
  for g in sshd agents relays; do
    for _ in $(seq 20); do rmdir "/sys/fs/cgroup/cpuacct/${BENCH_NAME}_$g" 2>/dev/null && break; sleep 0.25; done
  done
  rm -f cgroups
fi
if [ -f pid_max ]; then
  cat pid_max > /proc/sys/kernel/pid_max && echo "kernel.pid_max back to $(cat pid_max)"
  rm -f pid_max
fi
if [ -f created_user ]; then
  # the user's sessions are gone with sshd; userdel refuses while any remain
  for _ in $(seq 20); do pgrep -u "$BENCH_USER" >/dev/null || break; sleep 0.5; done
  userdel "$BENCH_USER" && rm -f created_user && echo "removed user $BENCH_USER"
fi
if [ "${PURGE:-0}" = 1 ]; then cd /; rm -rf "$BENCH_STATE" && echo "removed $BENCH_STATE"; fi
true
