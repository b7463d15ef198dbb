#!/usr/bin/env bash
# `multinode check` names the node whose /dev/shm is too small for NCCL
# (Docker's default is 64 MiB; NCCL issue #290): node1 runs with
# `--shm-size=64m`, the head with `--shm-size=1g`, the fix the warning gives.
# --strict turns the warning into exit status 1.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=check-common.bash
source "$(dirname "${BASH_SOURCE[0]}")/check-common.bash"

check_network shm
start_head 'multinode check --format json --strict' --shm-size=1g
start_worker --shm-size=64m
check_job_result
check_eq "exit status (a warning under --strict)" 1 "$check_status"
expect_row dev-shm warn node1 "/dev/shm is 64 MiB, NCCL needs more for several GPUs"
expect_row nodes ok node0,node1 "2 of 2 nodes answered"
finish
