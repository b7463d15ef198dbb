"""One process of bench/gpu/procs.sh: torch's own `init_process_group()`
with env:// (no torchrun needed: the launcher gives RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), then all-reduces.

    procs_worker.py LOG MODE [DEVICE]

Appends to LOG (O_APPEND, one line a write) when the process starts,
before torch is imported ("start"), once the process group is up
("ready"), and at each step ("stepN"); a line holds the attempt, the
global rank, what, the wall clock, the pid, the local rank. MODE `steps`:
5 steps, then exit 0; MODE `train`: the first attempt runs until it is
killed, a later one runs 5 steps. DEVICE `cuda`: the all-reduced tensor
lives on the GPU of LOCAL_RANK (modulo the GPUs there are), gloo copies
it; else on the CPU. The attempt is the launcher's restart count.
"""
import os
import sys
import time

LOG = sys.argv[1]
MODE = sys.argv[2]
DEVICE = sys.argv[3] if len(sys.argv) > 3 else "cpu"
ATTEMPT = max(int(os.environ.get("MULTINODE_RESTART_COUNT", "0")),
              int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
LOCAL = os.environ.get("LOCAL_RANK", "?")


def log(rank, what):
    line = f"{ATTEMPT} {rank} {what} {time.time():.6f} {os.getpid()} {LOCAL}\n"
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode())
    os.close(fd)


log(os.environ.get("RANK", "?"), "start")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
log(rank, "ready")
if DEVICE == "cuda":
    device = f"cuda:{int(LOCAL) % torch.cuda.device_count()}"
    x = torch.ones(1024, device=device)
    y = torch.randn(512, 512, device=device)
    assert torch.isfinite(y @ y).all()
else:
    x = torch.ones(1024)
step = 0
while (MODE == "train" and ATTEMPT == 0) or step < 5:
    x.fill_(1)
    dist.all_reduce(x)
    step += 1
    log(rank, f"step{step}")
    time.sleep(0.1)
print(f"rank {rank}/{world} local {LOCAL} sum={x[0].item():.0f} device={x.device}", flush=True)
dist.barrier()
dist.destroy_process_group()
