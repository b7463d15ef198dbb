#!/bin/bash
# The peers' side of the bench, set up fairly for every tool: a
# private stock sshd on port $SSHD_PORT that serves every 127.x address
# ("nodes" 127.0.0.2 ...), fenced to loopback, MaxStartups 2000, UsePAM no,
# a dedicated remote user with an empty home, and client configs that pin
# KexAlgorithms curve25519-sha256. The agents are started by bench.py (one
# per node address), not here.
set -euo pipefail
. "$(dirname "$0")/common.sh"

if ss -Hltn "sport = :$SSHD_PORT" | grep -q .; then
  if [ -f "$BENCH_STATE/sshd.pid" ] && kill -0 "$(cat "$BENCH_STATE/sshd.pid")" 2>/dev/null; then
    echo "sshd of this bench already running (pid $(cat "$BENCH_STATE/sshd.pid"))"
    exit 0
  fi
  echo "port $SSHD_PORT is taken by another program: set BENCH_SSHD_PORT" >&2
  exit 1
fi

mkdir -p "$BENCH_STATE" "$BENCH_STATE/cm" /run/sshd
# Thousands of agents (bench.py --ns 4096: ~4 threads each, and the relays):
# pid_max counts threads; raised for the bench, restored by teardown.sh.
if [ "$(cat /proc/sys/kernel/pid_max)" -lt 131072 ] && [ ! -f "$BENCH_STATE/pid_max" ]; then
  cat /proc/sys/kernel/pid_max > "$BENCH_STATE/pid_max"
  echo 131072 > /proc/sys/kernel/pid_max
fi
chmod 711 "$BENCH_STATE"
if ! id "$BENCH_USER" >/dev/null 2>&1; then
  useradd -M -p '*' -d "$BENCH_STATE/home" -s /bin/bash -c "multinode bench (bench/lib/setup.sh)" "$BENCH_USER"
  touch "$BENCH_STATE/created_user"
fi
mkdir -p "$BENCH_STATE/home/.ssh"
cd "$BENCH_STATE"
[ -f id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -C mn-bench -f id_ed25519
[ -f ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f ssh_host_ed25519_key
cp id_ed25519.pub home/.ssh/authorized_keys
chown -R "$BENCH_USER": home
chmod 700 home

cat > sshd_config <<CONF
# bind 0.0.0.0 (accepts every 127.x destination); fenced below and by nft
ListenAddress 0.0.0.0:$SSHD_PORT
HostKey $BENCH_STATE/ssh_host_ed25519_key
PidFile $BENCH_STATE/sshd.pid
AuthorizedKeysFile %h/.ssh/authorized_keys
PermitRootLogin no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
# the defaults (10:30:100 / 10) randomly drop concurrent handshakes
MaxStartups 2000
MaxSessions 100
LogLevel ERROR
AllowUsers $BENCH_USER@127.0.0.0/8
CONF

client() {
cat <<CONF
Host *
  Port $SSHD_PORT
  User $BENCH_USER
  IdentityFile $BENCH_STATE/id_ed25519
  IdentitiesOnly yes
  BatchMode yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  GlobalKnownHostsFile /dev/null
  CheckHostIP no
  LogLevel ERROR
  ForwardAgent no
  ForwardX11 no
  ConnectTimeout 60
  KexAlgorithms curve25519-sha256
CONF
}
client > ssh_config
{ client; cat <<CONF
  ControlMaster auto
  ControlPath $BENCH_STATE/cm/%h-%p
  ControlPersist 3600
CONF
} > ssh_config_cm
chmod 600 ssh_config ssh_config_cm

if command -v nft >/dev/null; then
  nft delete table inet "$NFT_TABLE" 2>/dev/null || true
  nft -f - <<NFT
table inet $NFT_TABLE {
  chain input {
    type filter hook input priority 0; policy accept;
    iifname != "lo" tcp dport { $SSHD_PORT, $AGENT_PORT } drop
  }
}
NFT
  touch nft_table
fi

/usr/sbin/sshd -t -f sshd_config
rm -f sshd.pid sshd-reaper.pid
# sshd -D under a child-subreaper so that all server CPU is measurable
setsid "$BENCH_DIR/lib/sshd-reaper.py" "$BENCH_STATE/sshd-reaper.pid" -- \
  /usr/sbin/sshd -D -f "$BENCH_STATE/sshd_config" </dev/null >/dev/null 2>&1 &
for _ in $(seq 100); do [ -s sshd.pid ] && [ -s sshd-reaper.pid ] && break; sleep 0.1; done
# Exact server CPU: one cpuacct cgroup for sshd (with every session it forks)
# and one the agents join (bench.py); descendants stay in their group. A
# third holds exec_all's relays (the tree past --fanout): bench.py's
# `multinode` beside mn-exec-all moves a relay's `multinode exec-all` there,
# so its CPU is counted with the head's, not the nodes'.
CG=/sys/fs/cgroup/cpuacct
if [ -d "$CG" ]; then
  for g in sshd agents relays; do mkdir -p "$CG/${BENCH_NAME}_$g"; done
  echo "$(cat sshd-reaper.pid)" > "$CG/${BENCH_NAME}_sshd/cgroup.procs"
  echo "$(cat sshd.pid)" > "$CG/${BENCH_NAME}_sshd/cgroup.procs"
  touch cgroups
fi
echo "sshd pid $(cat sshd.pid) (reaper $(cat sshd-reaper.pid)) on port $SSHD_PORT"
ssh -F ssh_config 127.0.0.2 'echo ssh to 127.0.0.2 ok: $(id -un)'
