# All-reduces in a loop; after a few steps rank 1 stops calling the
# collective (sleeps forever in Python) while rank 0 enters the next
# all-reduce and waits inside NCCL. /workspace/train.py of
# bench/gpu/snapshot.sh, part B (torchrun sets the ranks).
import os
import time

import torch
import torch.distributed as dist

STEPS_BEFORE_HANG = 5


def straggle(rank):
    print(f"rank {rank} STRAGGLING: stops calling all_reduce, sleeps", flush=True)
    while True:
        time.sleep(3600)


def train_step(t):
    dist.all_reduce(t)
    torch.cuda.synchronize()  # rank 0 waits here for the all-reduce


def main():
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    rank = dist.get_rank()
    t = torch.ones(1 << 20, device="cuda")
    for step in range(10**9):
        if step == STEPS_BEFORE_HANG and rank == 1:
            straggle(rank)
        train_step(t)
        if step < STEPS_BEFORE_HANG:
            print(f"rank {rank} step {step} ok", flush=True)


main()
