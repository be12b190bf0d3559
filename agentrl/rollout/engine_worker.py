"""Rollout engine workers: an engine + an env-pool shard per worker, apart from the trainer.

``rollout.engines: K ≥ 1`` plays each iteration's groups on K workers (local processes,
``agentrl.rollout.engine_procs``, or Ray actors, ``agentrl.rollout.ray_engines``) behind
one interface, ``EngineWorkers``. This module holds what both backends share:

- ``EngineWorker``: the body of one worker (an ``HFEngine`` loaded from the policy's folder
  in the policy dtype, its chat renderer and its own ``EnvPool``), run inside the process
  or actor;
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

from agentrl.rollout.collector import CollectConfig, CollectHooks, collect, plan_episodes
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
    """

    model: str
    dtype: str = "float32"
    device: str = "cpu"
    num_threads: int = 1
    max_context: int | None = None
    prefix_cache_mb: int = 1024
    decode_attention: str = "grouped"


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


class EngineWorker:
    """The body of one engine worker: engine + renderer + env pool (inside its process/actor).

    Args:
        spec: how to build the engine.
        state: the trainer's inference weights (``{name: tensor}``) or None (the folder's).
        version: their policy version.
    Raises:
        FileNotFoundError: ``spec.model`` is not a model folder.
    """

    def __init__(self, spec: EngineSpec, state: Mapping | None, version: int) -> None:
        from transformers import AutoTokenizer

        from agentrl.llm.chat import ChatRenderer
        from agentrl.llm.hf import HFEngine

        self.engine = HFEngine.from_pretrained(spec.model, dtype=spec.dtype, device=spec.device,
                                               num_threads=spec.num_threads, max_context=spec.max_context,
                                               prefix_cache_mb=spec.prefix_cache_mb,
                                               decode_attention=spec.decode_attention)
        self.renderer = ChatRenderer(AutoTokenizer.from_pretrained(spec.model))
        self.load(state, version)
        self._pool, self._pool_key = None, None

    def load(self, state: Mapping | None, version: int) -> None:
        """Load ``state`` (strict names) as policy ``version``; None only sets the version."""
        if state is None:
            self.engine.policy_version = int(version)
        else:
            self.engine.update_weights(state, version)

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> tuple[np.ndarray, int]:
        """(float32[C] teacher-forced logprobs, the engine's policy version)."""
        return self.engine.score(prompt_ids, completion_ids), int(self.engine.policy_version)

    def collect(self, cc: CollectConfig, on_episode: Callable[[Episode], None] | None = None,
                hooks: CollectHooks | None = None) -> list[Episode]:
        """Play ``cc`` (a shard config; ``hooks``: the plans of an asynchronous stream too) on
        this worker's env pool (opened once, reopened when the env or its kwargs change, or
        more slots are needed)."""
        n = min(cc.num_slots or cc.n_played, cc.n_played)
        key = (cc.env_id, repr(sorted(cc.env_kwargs.items())), cc.num_workers, cc.step_timeout_s, cc.reset_timeout_s)
        if self._pool is None or self._pool_key != key or self._pool.n < n:
            from agentrl.env.pool import EnvPool

            self.close()
            self._pool = EnvPool(cc.env_id, n, env_kwargs=cc.env_kwargs, num_workers=min(cc.num_workers or 1, n),
                                 step_timeout_s=cc.step_timeout_s, reset_timeout_s=cc.reset_timeout_s)
            self._pool_key = key
        return collect(self.engine, self.renderer, cc, pool=self._pool, on_episode=on_episode, hooks=hooks)

    def close(self) -> None:
        """Close the env pool (the engine goes with the process)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def open_engine_workers(backend: str, n: int, spec: EngineSpec, state: Mapping, version: int,
                        **kwargs) -> EngineWorkers:
    """Start ``n`` engine workers holding ``state`` as policy ``version``: ``local`` →
    ``ProcessEngineWorkers`` (spawned processes, shared-memory weights), ``ray`` →
    ``RayEngineWorkers`` (actors on the running or a local Ray). ``kwargs`` go to the backend.

    Raises:
        ValueError: unknown backend or ``n < 1``. EngineWorkerError: a worker failed to start.
    """
    if n < 1:
        raise ValueError(f"open_engine_workers needs n >= 1 workers, got {n}")
    if backend == "local":
        from agentrl.rollout.engine_procs import ProcessEngineWorkers

        return ProcessEngineWorkers(n, spec, state, version, **kwargs)
    if backend == "ray":
        from agentrl.rollout.ray_engines import RayEngineWorkers

        return RayEngineWorkers(n, spec, state, version, **kwargs)
    raise ValueError(f"unknown rollout.backend {backend!r} for engine workers; choose one of {ENGINE_BACKENDS}")
