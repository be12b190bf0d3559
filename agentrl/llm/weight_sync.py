"""Weight transport through shared memory (torch; ``agentrl.rollout`` stays torch-free). Engine
workers on the trainer's host use it (``rollout.weight_transport: shared_memory``, the ``auto``
choice for local workers, issue 52: no socket, ~6× faster than the broadcast group there);
engines on other hosts take the broadcast group of ``agentrl.llm.weight_broadcast``.

``SharedWeights`` holds one copy of the inference state dict that every local engine
worker process can read: CPU tensors are allocated once in shared memory
(``Tensor.share_memory_()``) and each push copies the new values into them in place; CUDA
tensors travel by CUDA IPC through the same ``torch.multiprocessing`` pickling (no copy to
the host). The object is handed to each worker process once, at start (spawn pickles it
with torch's reductions: the workers map the same memory); a push is then
``publish(state, version)`` in the trainer, and each worker loads the buffers into its
engine with ``load_into(engine)`` — told to by a message (the synchronous loop: the trainer
waits for every acknowledgement), or on its own when it sees a newer ``version``
(asynchronous rollouts, ``agentrl.rollout.engines.stream``). A sequence counter in shared
memory (a seqlock: odd while the trainer writes) tells a worker whether the weights changed
under it while it loaded them; it then loads again, so it never keeps half-written weights
and the version it records is the one of the weights it holds. No lock: a worker killed
mid-load cannot block the trainer, and the trainer (the only writer) never waits.
"""

from __future__ import annotations

import time
from typing import Mapping

import torch

__all__ = ["SharedWeights", "spawn_context", "to_host"]


def spawn_context():
    """The ``torch.multiprocessing`` "spawn" context (its pickler carries shared-memory and
    CUDA tensors by handle)."""
    import torch.multiprocessing as tmp

    return tmp.get_context("spawn")


def _alloc(t: torch.Tensor) -> torch.Tensor:
    buf = t.detach().clone()
    return buf if buf.is_cuda else buf.share_memory_()


class SharedWeights:
    """A state dict in memory shared with worker processes, allocated once, written in place.

    Args:
        state: ``{name: tensor}`` (e.g. ``agentrl.update.lora.inference_state_dict``), any
            dtype / device; the buffers copy its dtype, shape and device.
        version: the policy version of ``state``.
    Attributes:
        tensors: ``{name: tensor}``, the shared buffers (read them, never resize them).
        nbytes: total bytes of the buffers (tied weights counted once).
    """

    def __init__(self, state: Mapping[str, torch.Tensor], version: int = 0) -> None:
        ctx = spawn_context()
        self._version = ctx.Value("q", int(version), lock=False)
        self._seq = ctx.Value("q", 0, lock=False)  # even: stable, odd: a write in progress
        shared: dict[tuple, torch.Tensor] = {}  # tied weights (one tensor under two names) share a buffer
        self.tensors = {}
        for name, t in state.items():
            key = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
            if key not in shared:
                shared[key] = _alloc(t)
            self.tensors[name] = shared[key]
        self.nbytes = sum(t.numel() * t.element_size() for t in shared.values())

    @property
    def version(self) -> int:
        """The policy version of the weights in the buffers (a peek; may be mid-write)."""
        return int(self._version.value)

    def publish(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """``write(state)`` and set ``version`` (one writer: the trainer). Loads that overlap
        it see the sequence counter move and load again.

        Raises:
            ValueError: ``version`` is lower than the buffers' (versions never go back).
            KeyError / ValueError: see ``write``.
        """
        if int(version) < self.version:
            raise ValueError(f"SharedWeights.publish: version {version} after {self.version}; policy versions "
                             "published to engines never go back")
        self._seq.value += 1  # odd: writing
        try:
            self.write(state)
            self._version.value = int(version)
        finally:
            self._seq.value += 1

    def load_into(self, engine, poll_s: float = 0.005) -> int:
        """Load the buffers into ``engine`` (``engine.update_weights``) as their version,
        again until no write overlapped the load; returns that version."""
        while True:
            seq = int(self._seq.value)
            if seq % 2:
                time.sleep(poll_s)
                continue
            version = int(self._version.value)
            engine.update_weights(self.tensors, version)
            if int(self._seq.value) == seq:
                return version

    def wait(self, version: int | None = None, timeout_s: float | None = None, poll_s: float = 0.005) -> int:
        """Block until the buffers hold ``version`` (None: any); returns their version (the
        ``WeightReceiver`` call an engine worker makes).

        Raises:
            TimeoutError: not within ``timeout_s``.
        """
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while version is not None and self.version != int(version):
            if end is not None and time.monotonic() > end:
                raise TimeoutError(f"shared weights: version {version} not published in {timeout_s}s "
                                   f"(they hold {self.version})")
            time.sleep(poll_s)
        return self.version

    def close(self) -> None:
        """Nothing to stop (the buffers go with the last process that maps them)."""

    def write(self, state: Mapping[str, torch.Tensor]) -> None:
        """Copy ``state`` into the buffers in place (dtype cast when it differs).

        Raises:
            KeyError: names missing from or unknown to the buffers (lists a few).
            ValueError: a tensor whose shape differs from its buffer.
        """
        missing, unknown = set(self.tensors) - set(state), set(state) - set(self.tensors)
        if missing or unknown:
            raise KeyError(f"SharedWeights.write: missing {sorted(missing)[:5]}, unknown {sorted(unknown)[:5]}; "
                           "push the same state-dict layout every time")
        with torch.no_grad():
            for name, t in state.items():
                buf = self.tensors[name]
                if buf.shape != t.shape:
                    raise ValueError(f"SharedWeights.write: {name} has shape {tuple(t.shape)}, buffer {tuple(buf.shape)}")
                buf.copy_(t.detach())


def to_host(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{name: CPU tensor}`` (detached; the same tensors when already on the CPU) — what a
    Ray ``put`` ships to engine actors on other nodes."""
    return {name: t.detach().cpu() for name, t in state.items()}
