#!/usr/bin/env bash
# `multinode check` names the node whose locked-memory limit is too low:
# node1 runs with `--ulimit memlock=65536:65536` (64 KiB). The containers
# have no GPU and no RDMA device, so this is a warning (docs/check.md: a
# failure with GPUs or RDMA); --strict turns it into exit status 1. (node0
# keeps the engine's default, which may be low too: only node1 is asserted.)
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=check-common.bash
source "$(dirname "${BASH_SOURCE[0]}")/check-common.bash"

check_network memlock
start_head 'multinode check --format json --strict'
start_worker --ulimit memlock=65536:65536
check_job_result
check_eq "exit status (a warning under --strict)" 1 "$check_status"
expect_row memlock warn "*node1" "RLIMIT_MEMLOCK 64 KiB (hard 64 KiB) on node1"
expect_row nodes ok node0,node1 "2 of 2 nodes answered"
finish
