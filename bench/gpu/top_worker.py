"""One rank of bench/gpu/top.sh: real torch, a synchronised loop.

    top_worker.py SLOW SECONDS

Each step every rank does its CPU part (matmuls on the CPU: rank SLOW twice
as many; -1: none slower) and its CUDA part (the same CUDA matmuls on every
rank, waited for), then all-reduces one CUDA tensor with gloo (the ranks
that finish first wait there for the slow one), and prints `step N`. The
work that is doubled is the CPU part: the four ranks share this machine's
one GPU, which runs one process's kernels at a time, so a rank's extra
kernels would slow every rank's alike. Runs SECONDS, then every rank
leaves at the same step and exits 0.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

SLOW, SECONDS = int(sys.argv[1]), float(sys.argv[2])
TIMES = os.environ.get("TOP_WORKER_TIMES") == "1"
CPU_MATMULS, CUDA_MATMULS = 40, 4

torch.set_num_threads(2)
dist.init_process_group("gloo")
rank = dist.get_rank()
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
g = torch.randn(2048, 2048, device=device)
c = torch.randn(512, 512)
t = torch.ones(1, device=device)
cpu_work = CPU_MATMULS * (2 if rank == SLOW else 1)
end = time.time() + SECONDS
step = 0
while True:
    for _ in range(cpu_work):
        d = c @ c
    for _ in range(CUDA_MATMULS):
        h = g @ g
    torch.cuda.synchronize()
    dist.all_reduce(t)
    step += 1
    # TOP_WORKER_TIMES=1 (bench/gpu/top_cost.sh): each line with its time.
    print(f"step {step} {time.time():.6f}" if TIMES else f"step {step}", flush=True)
    # Every rank leaves at the same step: rank 0 decides, the others follow.
    done = torch.tensor([1.0 if (rank == 0 and time.time() > end) else 0.0])
    dist.all_reduce(done)
    if done.item() > 0:
        break
dist.barrier()
dist.destroy_process_group()
