# One rank stuck in a CUDA kernel that never ends (a spin loop), while the
# other waits for it in a collective (gloo, on the CPU): what `multinode ps`
# shows on a GPU machine (bench/gpu/snapshot.sh, part A). Each node's RANK
# comes from exec_all; the head's address from MULTINODE_NODE_IP.
import os
import time

import cupy as cp
import torch
import torch.distributed as dist

SPIN = cp.RawKernel(r'''
extern "C" __global__ void spin(volatile int *flag) {
    while (*flag == 0) { }
}
''', "spin")


def spin_forever():
    flag = cp.zeros(1, dtype=cp.int32)
    SPIN((1,), (1,), (flag,))
    print(f"rank {RANK} SPINNING in a CUDA kernel that never ends", flush=True)
    cp.cuda.runtime.deviceSynchronize()  # never returns


def wait_for_rank0():
    # This rank's GPU holds a tensor, idle (on a machine of two GPUs; with
    # one, rank 0's GPU is left to rank 0).
    keep = None
    if os.environ.get("MN_SPIN_WAITER_GPU", "1") == "1":
        keep = torch.ones(1 << 20, device="cuda")
    print(f"rank {RANK} WAITING in all_reduce for rank 0", flush=True)
    t = torch.ones(1)
    dist.all_reduce(t)  # rank 0 never comes
    return keep


def main():
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{os.environ['MULTINODE_NODE_IP']}:29510",
        rank=RANK,
        world_size=int(os.environ["MULTINODE_NNODES"]),
    )
    if RANK == 0:
        spin_forever()
    else:
        wait_for_rank0()


RANK = int(os.environ["RANK"])
main()
