# The hang of issue 30 (points 3 and 4), on one GPU: rank 1 keeps its GPU
# busy in a loop and waits for it in torch.cuda.synchronize, never joining
# the collective; rank 0 waits for rank 1 in a gloo all_reduce (on the
# CPU). What `multinode ps` must show: rank 1 first, in `synchronize <-
# spin_forever <- main`, and rank 0 (run by mn-exec-all itself, outside any
# agent) in `all_reduce <- _exception_logger.<locals>.wrapper <- main`.
# bench/gpu/ps-hang.sh runs it; RANK and the head's address come from exec_all.
import os

import torch
import torch.distributed as dist


def spin_forever():
    a = torch.randn(8192, 8192, device="cuda")
    print(f"rank {RANK} SPINNING: matmuls on the GPU, synchronize after each 20", flush=True)
    while True:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


def main():
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{os.environ['MULTINODE_NODE_IP']}:29510",
        rank=RANK,
        world_size=int(os.environ["MULTINODE_NNODES"]),
    )
    if RANK == 1:
        spin_forever()
    print(f"rank {RANK} WAITING in all_reduce for rank 1", flush=True)
    t = torch.ones(1)
    dist.all_reduce(t)  # rank 1 never comes


RANK = int(os.environ["RANK"])
main()
