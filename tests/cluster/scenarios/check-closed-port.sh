#!/usr/bin/env bash
# The rendezvous port:
# - closed: `multinode check --local` on node1, with nothing listening on the
#   head's port, reports the connection refused (no fan-out needed);
# - held by another program on the head: `multinode check` fails
#   `rendezvous-port` on node0, and the nodes still reach the port.
# shellcheck disable=SC2016 # single-quoted scripts run in the container's shell
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=check-common.bash
source "$(dirname "${BASH_SOURCE[0]}")/check-common.bash"

check_network port

# Closed: two plain containers, `check --local` on node1 by hand.
mn_docker -d --name "$(mn_name plain0)" --hostname plain0 --network "$mn_check_net" \
    --network-alias plain0 "$MN_IMAGE" sleep infinity >/dev/null
rc=0
mn_docker --rm --hostname plain1 --network "$mn_check_net" --network-alias plain1 "$MN_IMAGE" \
    multinode check --local --hosts plain0:1,plain1:1 --node-rank 1 --port 29501 \
    >"$MN_TMP/local.json" 2>"$MN_TMP/local.err" || rc=$?
check_eq "check --local exit status" 0 "$rc"
got=$(python3 - "$MN_TMP/local.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["rendezvous"]
    print(f'{r["connected"]}|{r["error"]}|{r["addr"].rsplit(":", 1)[1]}')
except (ValueError, KeyError, TypeError) as e:
    print(f"unreadable: {e}")
PY
)
check_eq "node1's connection to plain0:29501" "False|connection refused|29501" "$got"

# Held: a listener on the head's port before the check.
start_head '
    python3 -c "import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((\"0.0.0.0\", 29500)); s.listen(64); time.sleep(120)" &
    # Until the listener is there (it answers a connection).
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection((\"127.0.0.1\", 29500), 1)" 2>/dev/null && break
        sleep 0.1
    done
    multinode check --format json --port 29500'
# shellcheck disable=SC2119 # no options for this worker
start_worker
check_job_result
check_eq "exit status (a failing check)" 1 "$check_status"
expect_row rendezvous-port fail node0 "cannot listen on port 29500 on the head"
expect_row rendezvous-connect ok node0,node1 "but another program holds the port on the head"
finish
