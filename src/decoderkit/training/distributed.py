"""Data parallelism under ``torchrun``: process group set-up, DDP wrapping, small reductions.

Launched plainly, everything here is a no-op for a single process (rank 0 of 1). Under
``torchrun --nproc_per_node=N`` the environment (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR)
selects gloo on CPU or NCCL on CUDA; only rank 0 writes checkpoints and logs.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from decoderkit.base.errors import UsageError


@dataclass(frozen=True)
class Context:
    """Where this process sits in the job."""

    rank: int  # global process index, 0 = the one that writes
    world: int  # number of processes
    device: torch.device  # this process's device

    @property
    def is_main(self) -> bool:
        """True on rank 0, the one process that writes checkpoints and logs."""
        return self.rank == 0


DEVICES = ("auto", "cpu", "cuda")  # auto: CUDA when present, else CPU


def world_size() -> int:
    """Processes in this job: torchrun's WORLD_SIZE, 1 when run directly."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_rank() -> int:
    """This process's rank as torchrun's environment gives it (RANK), 0 when run directly:
    known before ``setup`` joins the process group (a command's checks before any work)."""
    return int(os.environ.get("RANK", "0"))


def say(text: str) -> None:
    """``text`` on stderr once per job: by the process torchrun launched as rank 0 (or the only
    one), so a command's notes are not printed once per process."""
    if launched_rank() == 0:
        print(text, file=sys.stderr)


def setup(device: str = "auto") -> Context:
    """Join the process group when started by torchrun; pick the device ("auto", "cpu", "cuda")."""
    if device not in DEVICES:
        raise UsageError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("device 'cuda' was requested but no CUDA device is available")
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    world = world_size()
    if world == 1:
        return Context(0, 1, torch.device("cuda" if use_cuda else "cpu"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo")
    target = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    return Context(dist.get_rank(), dist.get_world_size(), target)


def wrap(module: nn.Module, ctx: Context) -> nn.Module:
    """DistributedDataParallel around ``module`` when there is more than one process."""
    if ctx.world == 1:
        return module
    ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(module, device_ids=ids)


def all_sum(value: float, ctx: Context) -> float:
    """The sum of ``value`` over all processes (itself for one process)."""
    if ctx.world == 1:
        return value
    t = torch.tensor([float(value)], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t)
    return float(t.item())


def any_true(flag: bool, ctx: Context) -> bool:
    """True on every process if ``flag`` is true on any (so all stop together)."""
    return all_sum(float(flag), ctx) > 0


def teardown(ctx: Context) -> None:
    """Destroy the process group of a multi-process job; a no-op for a single process."""
    if ctx.world > 1 and dist.is_initialized():
        dist.destroy_process_group()
