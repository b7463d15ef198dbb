#!/usr/bin/env bash
# Local port forwarding from the head's container to other containers
# (issue 31), through `mn-ssh -N -L ... node1` on the head:
# - to an HTTP server that listens on node1's 127.0.0.1 only: `curl` on the
#   head gets its file byte for byte;
# - through node1 to node2 as the hostlist names it (a server on node2's
#   address): `curl` gets node2's file;
# - to 169.254.169.254 and to node1's own address (not the name the
#   hostlist gives it): refused by node1's agent, whose words mn-ssh shows,
#   `curl` gets no reply, and node1's listener on that address is never
#   connected to;
# - `kill -9` of the `mn-ssh -N` while a forwarded connection is open:
#   node1 keeps neither that connection nor mn-ssh's (within 15 s).
# The job: every node's agent, the head's JOB an exec_all of `sleep 600`.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# What the two servers serve: random bytes, so that a byte lost, added or
# changed on the way shows.
mkdir -p "$MN_RESULTS/www1" "$MN_RESULTS/www2"
head -c 300000 /dev/urandom >"$MN_RESULTS/www1/blob.bin"
head -c 100000 /dev/urandom >"$MN_RESULTS/www2/node2.bin"

mn_cluster -- --idle-timeout 30 -- mn-exec-all -c 'exec sleep 600'
if mn_poll 60 mn_all_have '^ *[0-9]+ sleep 600$' "${MN_NODES[@]}"; then
    check_ok "the job runs on every node"
else
    check_fail "the job did not start on every node within 60 s"
fi
head=$(mn_ctr node0)
node1=$(mn_ctr node1)
node1_ip=${MN_IP[node1]}

docker exec -d "$node1" python3 -m http.server --bind 127.0.0.1 8000 --directory /results/www1
docker exec -d "$(mn_ctr node2)" python3 -m http.server --bind "${MN_IP[node2]}" 8001 \
    --directory /results/www2
# A listener on node1's own address that writes down every connection it
# accepts: a refused forward must not reach it.
docker exec -d "$node1" python3 -c '
import socket, sys
s = socket.create_server((sys.argv[1], 8002))
open("/results/listening-8002", "w").close()
while True:
    c, peer = s.accept()
    with open("/results/accepted-8002", "a") as f:
        f.write(f"{peer}\n")
    c.close()
' "$node1_ip"
# listens HOST PORT: whether a socket of HOST's listens on PORT.
# shellcheck disable=SC2317 # called through mn_poll
listens() { [[ -n $(docker exec "$(mn_ctr "$1")" ss -Htln "sport = :$2") ]]; }
if mn_poll 20 listens node1 8000 && mn_poll 20 listens node2 8001 &&
    mn_poll 20 test -e "$MN_RESULTS/listening-8002"; then
    check_ok "the servers listen on node1 (127.0.0.1:8000, $node1_ip:8002) and node2 (:8001)"
else
    check_fail "the servers did not start within 20 s"
fi

docker exec -d "$head" sh -c "echo \$\$ >/results/mn-ssh.pid; exec mn-ssh -N \
    -L 127.0.0.1:18080:127.0.0.1:8000 -L 127.0.0.1:18081:node2:8001 \
    -L 127.0.0.1:18082:169.254.169.254:80 -L 127.0.0.1:18083:$node1_ip:8002 \
    node1 2>/results/mn-ssh.err"
# head_listens PORT: whether the head listens on 127.0.0.1:PORT.
# shellcheck disable=SC2317 # called through mn_poll
head_listens() { [[ -n $(docker exec "$head" ss -Htln "src = 127.0.0.1:$1") ]]; }
if mn_poll 20 head_listens 18083; then
    check_ok "mn-ssh -N listens on the head's 127.0.0.1:18080-18083"
else
    check_fail "mn-ssh -N does not listen on the head: $(cat "$MN_RESULTS/mn-ssh.err" 2>&1)"
fi
pid=$(cat "$MN_RESULTS/mn-ssh.pid")

# fetch PORT FILE: curl on the head of FILE through the forward on PORT, into
# /results/got-FILE; prints curl's exit status.
fetch() {
    local rc=0
    docker exec "$head" curl -sf --max-time 10 -o "/results/got-$2" \
        "http://127.0.0.1:$1/$2" >/dev/null 2>&1 || rc=$?
    echo "$rc"
}
check_eq "curl through -L to node1's 127.0.0.1:8000" 0 "$(fetch 18080 blob.bin)"
if cmp -s "$MN_RESULTS/www1/blob.bin" "$MN_RESULTS/got-blob.bin"; then
    check_ok "node1's file came byte for byte ($(wc -c <"$MN_RESULTS/got-blob.bin") bytes)"
else
    check_fail "node1's file differs: $(cmp "$MN_RESULTS/www1/blob.bin" "$MN_RESULTS/got-blob.bin" 2>&1)"
fi
check_eq "curl through -L via node1 to node2:8001" 0 "$(fetch 18081 node2.bin)"
if cmp -s "$MN_RESULTS/www2/node2.bin" "$MN_RESULTS/got-node2.bin"; then
    check_ok "node2's file came byte for byte"
else
    check_fail "node2's file differs: $(cmp "$MN_RESULTS/www2/node2.bin" "$MN_RESULTS/got-node2.bin" 2>&1)"
fi

# Refused: curl gets no reply (52: empty reply, 56: reset), mn-ssh says the
# agent's reason in OpenSSH's words.
for to in "18082 169.254.169.254:80" "18083 $node1_ip:8002"; do
    port=${to%% *} dest=${to#* }
    rc=$(fetch "$port" x)
    if [[ $rc == 52 || $rc == 56 ]]; then
        check_ok "curl through -L to $dest gets no reply (curl $rc)"
    else
        check_fail "curl through -L to $dest: want no reply (52 or 56), got curl $rc"
    fi
    said="open failed: administratively prohibited: $dest is not forwarded to: an agent forwards only to its node's loopback (127.0.0.0/8, ::1, localhost) and to the job's nodes as the hostlist names them node0, node1, node2, node3"
    if mn_poll 5 grep -qF -- "$said" "$MN_RESULTS/mn-ssh.err"; then
        check_ok "mn-ssh shows node1's refusal of $dest"
    else
        check_fail "mn-ssh does not show the refusal of $dest: $(cat "$MN_RESULTS/mn-ssh.err")"
    fi
done
if [[ -e $MN_RESULTS/accepted-8002 ]]; then
    check_fail "node1's $node1_ip:8002 was connected to: $(tr '\n' ' ' <"$MN_RESULTS/accepted-8002")"
else
    check_ok "node1's $node1_ip:8002 was never connected to"
fi
if docker exec "$node1" ss -Htn | grep -q '169\.254\.169\.254'; then
    check_fail "node1 has a connection to 169.254.169.254"
else
    check_ok "node1 has no connection to 169.254.169.254"
fi

# A forwarded connection held open (a request not ended), then mn-ssh killed.
docker exec -d "$head" python3 -c '
import socket, time
c = socket.create_connection(("127.0.0.1", 18080))
c.sendall(b"GET /blob.bin HTTP/1.1\r\n")
time.sleep(600)
'
# On node1: the agent's end of the forwarded connection, and mn-ssh's
# connection (its address as the head's `ss` shows it).
forwarded() { docker exec "$node1" ss -Htn state established state close-wait 'dport = :8000'; }
# shellcheck disable=SC2317 # called through mn_poll
held() { [[ -n $(forwarded) ]]; }
if mn_poll 10 held; then
    check_ok "node1's agent holds the forwarded connection to 127.0.0.1:8000"
else
    check_fail "node1's agent did not connect to 127.0.0.1:8000 for the held connection"
fi
client=$(docker exec "$head" ss -Htnp state established "dst ${node1_ip}" |
    awk -v p="pid=$pid," 'index($0, p) { print $3; exit }')
[[ -n $client ]] || check_fail "no connection of mn-ssh (pid $pid) to node1 on the head"
of_client() { docker exec "$node1" ss -Htn state established state close-wait "dst $client"; }
[[ -n $(of_client) ]] || check_fail "node1 does not see mn-ssh's connection from $client"
# shellcheck disable=SC2317 # called through mn_poll
none_left() { [[ -z $(forwarded) && -z $(of_client) ]]; }
docker exec "$head" kill -9 "$pid"
if mn_poll 15 none_left; then
    check_ok "after kill -9 of mn-ssh, node1 keeps neither its connection ($client) nor the forwarded one"
else
    check_fail "node1 still holds: $(forwarded | tr '\n' ';') $(of_client | tr '\n' ';')"
fi
if mn_poll 5 eval '! head_listens 18080'; then
    check_ok "nothing listens on the head's 18080 any more"
else
    check_fail "the head still listens on 18080"
fi
finish
