# NCCL bootstrapped by MPI (as nccl-tests are): the rank and world size come
# from MPI, the rendezvous address is broadcast by MPI rank 0, and the
# all-reduce of a CUDA tensor runs through NCCL.
import os, socket, torch
import torch.distributed as dist
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
master = comm.bcast(os.environ.get("MN_MPI_MASTER", "127.0.0.2") if rank == 0 else None, root=0)
dist.init_process_group("nccl", init_method=f"tcp://{master}:29501", rank=rank, world_size=size)
torch.cuda.set_device(0)  # each agent exposes its own GPU through CUDA_VISIBLE_DEVICES
t = torch.ones(1, device="cuda") * (rank + 1)
dist.all_reduce(t)
print(f"mpi rank {rank}/{size} sum={t.item()} host={socket.gethostname()} "
      f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
dist.destroy_process_group()
