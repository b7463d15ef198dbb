#!/usr/bin/env bash
# NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME name an interface one node lacks:
# node1 renames its eth0 to ens5 before starting its agent. The head's
# `multinode check` (with both variables, which exec_all passes on to node1)
# fails both rows naming node1 and what node1 has.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=check-common.bash
source "$(dirname "${BASH_SOURCE[0]}")/check-common.bash"

check_network ifname
start_head 'NCCL_SOCKET_IFNAME==eth0 GLOO_SOCKET_IFNAME=eth0 multinode check --format json'
# Taking the link down drops the default route: it is put back.
# shellcheck disable=SC2016 # the script runs in the container's shell
start_worker --cap-add NET_ADMIN -- sh -c '
    gw=$(ip route show default | awk "{print \$3; exit}")
    ip link set eth0 down && ip link set eth0 name ens5 && ip link set ens5 up &&
        { [ -z "$gw" ] || ip route add default via "$gw"; } && exec "$@"' sh
check_job_result
check_eq "exit status (a failing check)" 1 "$check_status"
expect_row nccl-socket-ifname fail node1 "NCCL_SOCKET_IFNAME='=eth0' matches no interface with an address (the node has lo, ens5)"
expect_row gloo-socket-ifname fail node1 "GLOO_SOCKET_IFNAME='eth0': no interface eth0 with an address"
finish
