"""A training loop that resumes from its checkpoint (bench/gpu/restart.sh).

torchrun starts it on every node of an attempt; gloo all-reduces each
step's gradients (the ranks share one GPU, which NCCL refuses); rank 0
writes a checkpoint every CKPT_EVERY steps, atomically, in the folder given,
which every "node" of this one machine sees. A new attempt loads it and
goes on from its step: what a real job does after multinode restarted it.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

STEPS = 60
CKPT_EVERY = 10


def main():
    ckpt_dir = sys.argv[1]
    path = os.path.join(ckpt_dir, "ckpt.pt")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = os.environ.get("MULTINODE_RESTART_COUNT", "?")
    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    if os.path.exists(path):
        state = torch.load(path, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    print(f"attempt {attempt} rank {rank}/{world} node {os.environ.get('MULTINODE_LOCAL_IP')} "
          f"resumes at step {start}", flush=True)
    for step in range(start, STEPS):
        x = torch.randn(64, 256, device=device)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            g = p.grad.detach().cpu()
            dist.all_reduce(g)
            p.grad.copy_(g / world)
        opt.step()
        done = step + 1
        if rank == 0 and done % CKPT_EVERY == 0:
            tmp = path + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": done}, tmp)
            os.replace(tmp, path)
            print(f"attempt {attempt} checkpoint at step {done} loss {loss.item():.5f}", flush=True)
            with open(os.path.join(ckpt_dir, "progress"), "w") as f:
                f.write(f"{attempt} {done}\n")
        time.sleep(0.25)
    dist.barrier()
    if rank == 0:
        print(f"attempt {attempt} finished {STEPS} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
