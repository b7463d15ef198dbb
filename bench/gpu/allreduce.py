# The reference document's all-reduce program, with two opt-in extras for
# the harness: MN_GPU_STAMP=1 prints the wall time when the first all-reduce
# is done; MN_GPU_FAIL_RANK=N makes rank N raise after NCCL is up (the other
# ranks then block in a second all-reduce until they are ended);
# MN_GPU_BACKEND=gloo all-reduces the CUDA tensor through gloo, so that two
# ranks can share one GPU (NCCL refuses a GPU used by two ranks).
import os, time, torch
import torch.distributed as dist
dist.init_process_group(os.environ.get("MN_GPU_BACKEND", "nccl"))
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
t = torch.ones(1, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(t)
torch.cuda.synchronize()
if os.environ.get("MN_GPU_STAMP") == "1":
    print(f"FIRST_ALLREDUCE_DONE rank={dist.get_rank()} t={time.time():.6f}", flush=True)
print(f"rank {dist.get_rank()}/{dist.get_world_size()} sum={t.item()}", flush=True)
fail = os.environ.get("MN_GPU_FAIL_RANK")
if fail is not None:
    if dist.get_rank() == int(fail):
        raise RuntimeError(f"rank {dist.get_rank()} fails on purpose after NCCL is up")
    print(f"rank {dist.get_rank()} pid={os.getpid()} waiting in a second all-reduce", flush=True)
    dist.all_reduce(t)
dist.destroy_process_group()
