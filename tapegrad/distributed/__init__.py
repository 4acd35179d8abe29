"""tapegrad.distributed: PyTorch's torch.distributed on MPI (mpi4py), for programs started
with `mpirun -n N python train.py`. See docs/distributed.md.

mpi4py is imported, and MPI initialised, by init_process_group(backend="mpi"); importing
tapegrad.distributed needs neither."""
from . import distributed_c10d
from .distributed_c10d import (Backend, GroupMember, ProcessGroup, ReduceOp, Work, _unchecked,
                               all_gather, all_gather_into_tensor, all_gather_object,
                               all_reduce, all_to_all, all_to_all_single, barrier, broadcast,
                               broadcast_object_list, destroy_process_group, gather,
                               get_backend, get_global_rank, get_group_rank,
                               get_process_group_ranks, get_rank, get_world_size, group,
                               init_process_group, irecv, is_available, is_gloo_available,
                               is_initialized, is_mpi_available, is_nccl_available,
                               is_torchelastic_launched, isend, new_group, recv, reduce,
                               reduce_scatter, reduce_scatter_tensor, scatter, send)

__all__ = distributed_c10d.__all__
