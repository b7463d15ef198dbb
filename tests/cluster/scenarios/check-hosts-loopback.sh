#!/usr/bin/env bash
# The 127.0.1.1 trap: node1's /etc/hosts maps the head's name to 127.0.1.1
# (`--add-host node0:127.0.1.1`), as Debian's installer does for a machine's
# own name. `multinode check` fails `host-names`, naming node1 (the node whose
# /etc/hosts is wrong) and what it resolves node0 to.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=check-common.bash
source "$(dirname "${BASH_SOURCE[0]}")/check-common.bash"

check_network hosts
start_head 'multinode check --format json'
start_worker --add-host node0:127.0.1.1
check_job_result
check_eq "exit status (a failing check)" 1 "$check_status"
expect_row host-names fail node1 "node0 → 127.0.1.1"
# The head's own address is still a real one.
expect_row head-address ok node0 "not loopback"
finish
