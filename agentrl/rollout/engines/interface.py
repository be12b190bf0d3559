"""The engine-worker interface: what every backend of ``agentrl.rollout.engines`` shares.

``rollout.engines: K ≥ 1`` plays each iteration's groups on K workers (local processes,
``agentrl.rollout.engines.procs``, or Ray actors, ``agentrl.rollout.engines.ray_actors``)
behind one interface, ``EngineWorkers`` (opened by ``agentrl.rollout.engines.factory``; the
body of one worker is ``agentrl.rollout.engines.worker.EngineWorker``). This module holds:

- ``EngineSpec`` (how a worker builds its engine), ``WorkerScore``, ``EngineWorkerError``;
- the sharding: ``shard_groups`` gives each worker a contiguous block of whole groups
  (groups are never split), ``shard_config`` the worker's ``CollectConfig`` — always with
  ``turn_seeds`` (every (episode, turn) samples from its own seed), so the episodes are the
  same whatever the number of workers;
- ``aborted_episodes``: the episodes a dead worker still held come back with status
  ``aborted`` and the reason in ``Episode.error`` (stored and shown, never scored 0, P5).

No torch here (the engine module is imported lazily inside the worker).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from agentrl.config import VLLMSpec
from agentrl.rollout.collector import CollectConfig, plan_episodes
from agentrl.types import Episode, EpisodeStatus

#: ``rollout.backend`` values for engine workers.
ENGINE_BACKENDS = ("local", "ray")


class EngineWorkerError(RuntimeError):
    """An engine worker could not start (the message carries its traceback), or raised while
    collecting (a bug or bad config, e.g. an env that cannot be built — not a crash)."""


@dataclass(frozen=True)
class EngineSpec:
    """How a worker builds its engine.

    Attributes:
        model: the policy's Hugging Face folder (tokenizer + config; the weights are
            replaced by the trainer's at start).
        dtype: ``float32 | bfloat16 | float16`` (the policy dtype).
        device: torch device of the worker's engine (``policy.device`` forms; ``cpu`` here).
        num_threads: torch intra-op threads per worker (1 on shared CPUs).
        max_context: context length in tokens (None: the model's).
        prefix_cache_mb: the engine's prefix KV cache bound, MiB (0 = off; ``agentrl.llm.prefix_cache``).
        decode_attention: ``grouped | sdpa`` (``agentrl.llm.decode_attention``).
        engine: ``hf`` | ``vllm`` (``policy.engine``).
        vllm: the vLLM engine's arguments (``policy.vllm``) when ``engine == "vllm"``.
        visible_devices: ``CUDA_VISIBLE_DEVICES`` of the worker's process, set before CUDA
            starts (None: inherited); see ``place_workers``.
        weight_bucket_mb: MiB per bucket of the trainer → engine weight broadcast.
        constrained: build a vLLM engine with admissible-action masking (``policy.action_constraint``).
    """

    model: str
    dtype: str = "float32"
    device: str = "cpu"
    num_threads: int = 1
    max_context: int | None = None
    prefix_cache_mb: int = 1024
    decode_attention: str = "grouped"
    engine: str = "hf"
    vllm: VLLMSpec | None = None
    visible_devices: str | None = None
    weight_bucket_mb: float = 512.0
    constrained: bool = False


def place_workers(spec: EngineSpec, devices: Sequence[str] | None, n: int) -> list[EngineSpec]:
    """One spec per worker (``rollout.engine_devices``): ``cuda:N`` → the worker's process sees
    only GPU N (``visible_devices = "N"``) and its engine uses ``cuda:0``; ``cpu`` → the CPU,
    with no GPU visible (``visible_devices = ""``). None: every worker gets ``spec`` as it is.

    Raises:
        ValueError: ``devices`` does not have ``n`` entries, or an entry is neither form.
    """
    if devices is None:
        return [spec] * n
    if len(devices) != n:
        raise ValueError(f"rollout.engine_devices has {len(devices)} entries for {n} engine workers")
    out = []
    for d in devices:
        if d == "cpu":
            out.append(replace(spec, device="cpu", visible_devices=""))
        elif d.startswith("cuda:") and d[5:].isdigit():
            out.append(replace(spec, device="cuda:0", visible_devices=d[5:]))
        else:
            raise ValueError(f"rollout.engine_devices entry {d!r} is not cpu or cuda:N")
    return out


@dataclass(frozen=True)
class WorkerScore:
    """One worker's answer to ``EngineWorkers.score``: float32[C] teacher-forced logprobs of
    the completion and the policy version of the weights it holds."""

    worker: int
    logprobs: np.ndarray
    policy_version: int


class EngineWorkers(Protocol):
    """K rollout engine workers (``rollout.engines``), opened once per run.

    Attributes:
        n: number of workers. restarts: workers restarted so far (a health metric).
        policy_version: the version of the weights last pushed.
    """

    n: int
    restarts: int
    policy_version: int

    def collect(self, cc: CollectConfig, on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        """Play all groups of ``cc`` split over the workers; episodes sorted by id, those of
        a worker that died marked ``aborted`` (the worker is restarted with the current weights)."""
        ...

    def push_weights(self, state: Mapping[str, object], version: int) -> None:
        """Give every worker the inference weights ``state`` as policy ``version``; returns
        once all have loaded them."""
        ...

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[WorkerScore]:
        """Every worker's teacher-forced logprobs of ``completion_ids`` after ``prompt_ids``."""
        ...

    def pids(self) -> list[int]:
        """OS process id of each worker (tests kill one to check the restart)."""
        ...

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        ...


def shard_groups(n_groups: int, n_workers: int) -> list[tuple[int, ...]]:
    """Contiguous blocks of group indices, one per worker, sizes differing by at most 1
    (``shard_groups(5, 2) == [(0, 1, 2), (3, 4)]``); workers beyond ``n_groups`` get ``()``."""
    q, r = divmod(n_groups, n_workers)
    out, start = [], 0
    for k in range(n_workers):
        size = q + (1 if k < r else 0)
        out.append(tuple(range(start, start + size)))
        start += size
    return out


def shard_config(cc: CollectConfig, groups: tuple[int, ...]) -> CollectConfig:
    """The worker's config: only ``groups``, per-turn seeds, no progress bar.

    Raises:
        ValueError: ``cc.sampling.seed`` is None (per-turn seeds need a base seed).
    """
    if cc.sampling.seed is None:
        raise ValueError("engine workers need a sampling seed (SamplingParams.seed) for per-turn seeds")
    return replace(cc, groups=groups, turn_seeds=True, progress=False)


def aborted_episodes(cc: CollectConfig, have: set[int], reason: str) -> list[Episode]:
    """The planned episodes of ``cc`` (a shard config) whose id is not in ``have``, with status
    ``aborted`` and ``error = reason`` (no turns: the worker's partial turns died with it)."""
    out = []
    for ep in plan_episodes(cc, cc.env_id):
        if ep.episode_id not in have:
            ep.status, ep.error = EpisodeStatus.ABORTED, reason
            out.append(ep)
    return out
