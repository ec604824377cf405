"""Where each training process runs: its device, the torchrun process group, the DDP wrapper.

Data-parallel training starts one process per device with ``torchrun --nproc_per_node N``
(gloo on CPU, NCCL on GPUs); a run outside torchrun is one process and needs no group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from sbert_core.training.config import TrainingConfig


def training_device(config: TrainingConfig) -> torch.device:
    """The device this process trains on: the config's, else ``cuda:LOCAL_RANK`` or the CPU."""
    if config.device is not None:
        device = torch.device(config.device)
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and device.index is None:
        # One GPU per process under torchrun.
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


@dataclass(frozen=True)
class Processes:
    """This process's place among the processes that train together.

    Attributes:
        rank: this process's number, 0 for the main one.
        world_size: how many processes train together.
        owns_group: whether :func:`join_processes` started the process group (and so
            :func:`leave_processes` ends it).
    """

    rank: int
    world_size: int
    owns_group: bool

    @property
    def is_main(self) -> bool:
        """True on the process that evaluates and writes checkpoints."""
        return self.rank == 0


def join_processes(device: torch.device) -> Processes:
    """Join the process group torchrun describes (WORLD_SIZE > 1), or run alone."""
    if dist.is_available() and dist.is_initialized():
        return Processes(dist.get_rank(), dist.get_world_size(), owns_group=False)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Processes(0, 1, owns_group=False)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Processes(dist.get_rank(), dist.get_world_size(), owns_group=True)


def finish_together(processes: Processes) -> None:
    """Wait until every process has finished training (call only on success).

    Tearing gloo down while a peer is still busy (the main process evaluating or writing a
    checkpoint) can abort the other process ("terminate called without an active exception").
    """
    if processes.world_size > 1 and dist.is_initialized():
        dist.barrier()


def leave_processes(processes: Processes) -> None:
    """End the process group if :func:`join_processes` started it."""
    if processes.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def data_parallel(loss: nn.Module, device: torch.device, processes: Processes) -> nn.Module:
    """``loss`` wrapped to average gradients over the processes; itself when alone."""
    if processes.world_size == 1:
        return loss
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(
        loss,
        device_ids=[device.index] if device.type == "cuda" else None,
        # Buffers (position ids) never change; broadcasting them each step is wasted traffic.
        broadcast_buffers=False,
    )
