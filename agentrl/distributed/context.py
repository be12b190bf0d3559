"""``DistContext``: who this process is in a training run (rank, world size, device) and the
few collectives the loop needs (all-reduce of counts and metrics, broadcast of the update plan).

One process (``python -m agentrl train``, or ``torchrun --nproc-per-node 1``): no process group,
every collective is the identity, and training is exactly today's single-process loop.
Under ``torchrun --nproc-per-node N`` (N ≥ 2, or a Ray cluster that sets the same variables:
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) ``from_env`` joins
the default process group: NCCL when the device is CUDA (rank r uses ``cuda:LOCAL_RANK``), gloo
on CPU.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["DistContext", "leave_rank", "launched_rank"]

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}

#: Seconds a rank waits in a collective before the group gives up (``AGENTRL_DIST_TIMEOUT_S``):
#: the other ranks wait while rank 0 rolls out and evaluates, which can take far longer than
#: NCCL's default 10 minutes on a real model.
DEFAULT_TIMEOUT_S = 7200


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip().lstrip("-").isdigit() else default


def _device_for(spec: str, local_rank: int, world: int) -> torch.device:
    """``policy.device`` for this rank (``agentrl.llm.device.resolve_device``). Under torchrun
    (``world`` ≥ 2) a CUDA device means one GPU per rank: ``cuda:LOCAL_RANK`` is made the
    current device first, so ``cuda`` / ``auto`` resolve to it.

    Raises:
        ConfigError: CUDA asked for and absent; ``cuda:N`` under torchrun (each rank's GPU is
        its ``LOCAL_RANK``: use ``cuda`` or ``auto``).
    """
    from agentrl.config import ConfigError
    from agentrl.llm.device import resolve_device

    spec = str(spec)
    if world > 1 and spec != "cpu" and torch.cuda.is_available():
        if ":" in spec:
            raise ConfigError(f"policy.device={spec} under torchrun: each rank uses cuda:LOCAL_RANK; "
                              "set policy.device: cuda (or auto) and choose GPUs with CUDA_VISIBLE_DEVICES")
        torch.cuda.set_device(local_rank)
    return resolve_device(spec)


@dataclass
class DistContext:
    """This process's place in a (possibly 1-process) training run.

    Attributes:
        rank / world_size / local_rank: torchrun's ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK``
            (0 / 1 / 0 in one process).
        device: where this rank's model shard and batches live.
        backend: ``"nccl"`` | ``"gloo"`` when a process group is joined, None in one process.
        owns_group: True when ``from_env`` created the group (``close`` then destroys it).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str | None = None
    owns_group: bool = False

    @property
    def distributed(self) -> bool:
        """True when this run has a process group (then the model is FSDP2-sharded)."""
        return self.backend is not None

    @property
    def is_main(self) -> bool:
        """Rank 0: the only rank that rolls out, writes the store, logs and the run folder."""
        return self.rank == 0

    @classmethod
    def from_env(cls, device: str = "auto", *, init_single: bool = False) -> "DistContext":
        """Join the process group torchrun describes (``WORLD_SIZE`` ≥ 2), or stay a single
        process; ``init_single=True`` makes a 1-rank group anyway (to run the FSDP2 code path
        alone, e.g. ``scripts/gpu_check.py``). Reuses a group that is already initialised when
        it has ≥ 2 ranks (or with ``init_single``); a 1-rank default group made by someone else
        — an in-process vLLM engine makes one for its own use — is not a data-parallel run.
        Collectives time out after ``AGENTRL_DIST_TIMEOUT_S`` seconds (default 7200: the other
        ranks wait in one while rank 0 rolls out and evaluates).

        Raises:
            ConfigError: see ``_device_for``; RuntimeError: the rendezvous fails.
        """
        world, rank, local = _env_int("WORLD_SIZE", 1), _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
        dev = _device_for(device, local, world)
        if dist.is_available() and dist.is_initialized() and (dist.get_world_size() >= 2 or init_single):
            return cls(dist.get_rank(), dist.get_world_size(), local, dev, dist.get_backend(), owns_group=False)
        if dist.is_available() and dist.is_initialized():
            return cls(device=dev)  # e.g. vLLM's own 1-rank group: one process, nothing to join
        if world < 2 and not init_single:
            return cls(device=dev)
        if world < 2:  # a 1-rank group on a free local port
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
            rank, world = 0, 1
        backend = "nccl" if dev.type == "cuda" else "gloo"
        timeout = timedelta(seconds=_env_int("AGENTRL_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S))
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout)
        return cls(rank, world, local, dev, backend, owns_group=True)

    def all_reduce(self, values: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Element-wise ``sum`` | ``max`` over the ranks of a tensor (any shape; returned on
        the tensor's own device and dtype). The identity in one process."""
        if not self.distributed:
            return values
        buf = values.detach().to(self.device, copy=True)
        dist.all_reduce(buf, op=_OPS[op])
        return buf.to(values.device)

    def broadcast_object(self, obj: Any = None, src: int = 0) -> Any:
        """Rank ``src``'s picklable ``obj`` on every rank (other ranks pass anything, e.g. None)."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src, device=self.device if self.backend == "nccl" else None)
        return box[0]

    def gather_object(self, obj: Any, dst: int = 0) -> list | None:
        """Every rank's picklable ``obj`` as a list in rank order on rank ``dst``, None on the
        others (``[obj]`` in one process). A collective: every rank calls it."""
        if not self.distributed:
            return [obj]
        box = [None] * self.world_size if self.rank == dst else None  # NCCL: via torch.cuda.current_device()
        dist.gather_object(obj, box, dst=dst)
        return box

    def all_gather(self, values: torch.Tensor) -> torch.Tensor:
        """Every rank's ``values`` (the same shape and dtype on every rank) stacked in rank
        order: shape (world_size, *values.shape), on the tensor's own device. One process:
        ``values[None]``."""
        if not self.distributed:
            return values[None]
        buf = values.detach().to(self.device).contiguous()
        out = [torch.empty_like(buf) for _ in range(self.world_size)]
        dist.all_gather(out, buf)
        return torch.stack(out).to(values.device)

    def barrier(self) -> None:
        """Wait for every rank (no-op in one process)."""
        if self.distributed:
            dist.barrier()

    def close(self, wait: bool = False) -> None:
        """Leave the process group if ``from_env`` created it.

        ``wait=True`` (a normal end, every rank calling it): first wait for every rank, so no
        rank tears its gloo pairs down while a peer is still receiving (gloo then aborts that
        rank: "terminate called without an active exception"). Not on an error path, where a
        peer may never arrive. Nothing to wait for where the group is already gone (vLLM's
        engine shutdown destroys the default group itself)."""
        if self.owns_group and dist.is_initialized():
            if wait and self.distributed:
                dist.barrier()
            dist.destroy_process_group()
        self.backend, self.owns_group = None, False


def launched_rank() -> bool:
    """True in a process torchrun started as one of several ranks (``TORCHELASTIC_RUN_ID`` set and
    ``WORLD_SIZE`` ≥ 2): the process is a rank of its own, so it may end with ``leave_rank``. False
    in one process, and in a Ray actor (a rank inside a worker process Ray owns)."""
    return bool(os.environ.get("TORCHELASTIC_RUN_ID")) and _env_int("WORLD_SIZE", 1) >= 2


def leave_rank(code: int = 0) -> None:
    """End a rank process that finished its work — result written, ``close(wait=True)`` done —
    without the interpreter's finalisation, after flushing stdout and stderr.

    On a loaded CPU about 1 rank exit in 12 aborted in a C++ destructor during finalisation
    ("terminate called without an active exception", SIGABRT, no Python frame left, the result
    already on disk: 3 of 53 gloo runs, 2026-12-06), and torchrun then reports the whole finished
    run as failed. Call it only from a rank's own entry point (a torchrun worker, ``agentrl train``
    under torchrun), never from library code that a host process goes on from.

    Args:
        code: the exit status (int, 0–255).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
