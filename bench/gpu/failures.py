# The two failures of bench/gpu/failures.sh, under torchrun (which sets the
# ranks); both "nodes" are on one GPU.
#   oom:           rank 1 asks for 400 GiB on its GPU (CUDA out of memory)
#                  while rank 0 sleeps (gloo: no NCCL in the way).
#   duplicate-gpu: both ranks all-reduce through NCCL on the same GPU
#                  (NCCL's "Duplicate GPU detected").
import os
import sys
import time

import torch
import torch.distributed as dist

MODE = sys.argv[1]
if MODE not in ("oom", "duplicate-gpu"):
    sys.exit(f"failures.py: unknown mode {MODE!r}: oom or duplicate-gpu")
dist.init_process_group("gloo" if MODE == "oom" else "nccl")
rank = dist.get_rank()
print(f"rank {rank} of {dist.get_world_size()} up", flush=True)
if MODE == "oom":
    if rank == 1:
        torch.empty(400 * 2**30, dtype=torch.uint8, device="cuda")
    time.sleep(600)  # rank 0 waits until exec_all ends it
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
print(f"rank {rank}: all_reduce went through on a shared GPU", flush=True)
