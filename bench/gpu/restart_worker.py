"""One rank of the restart benchmark (bench/gpu/restart_vs_torchrun.sh).

Appends to the log file given (O_APPEND, one line a write) when its
process starts, before torch is imported ("start"), once the process
group is up ("ready"), and rank 0 each step ("step N"); each line has the
attempt, the rank, the wall clock and the pid. Gloo on the CPU: the
benchmark times the launchers, not the GPU. The attempt is the launcher's
restart count (MULTINODE_RESTART_COUNT or TORCHELASTIC_RESTART_COUNT). A
first attempt runs until it is killed; a later one runs STEPS steps and
ends 0.
"""
import os
import sys
import time

LOG = sys.argv[1]
ATTEMPT = int(os.environ.get("MULTINODE_RESTART_COUNT", "0")) + int(
    os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
STEPS = 5


def log(rank, what):
    line = f"{ATTEMPT} {rank} {what} {time.time():.6f} {os.getpid()}\n"
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode())
    os.close(fd)


log(os.environ.get("RANK", "?"), "start")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
rank = dist.get_rank()
log(rank, "ready")
x = torch.ones(1024)
step = 0
while ATTEMPT == 0 or step < STEPS:
    dist.all_reduce(x)
    step += 1
    if rank == 0:
        log(rank, f"step{step}")
    time.sleep(0.1)
dist.barrier()
dist.destroy_process_group()
