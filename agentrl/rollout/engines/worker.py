"""``EngineWorker``: the body of one rollout engine worker, run inside its process or actor.

An ``HFEngine`` (or, with ``EngineSpec.engine == "vllm"``, a ``VLLMEngine``) loaded from the
policy's folder in the policy dtype, its chat renderer and its own ``EnvPool``; it plays the
shard configs it is given (``agentrl.rollout.engines.interface``). No torch at import (the
engine module is imported lazily when the worker starts).
"""

from __future__ import annotations

import os

from typing import Callable, Mapping, Sequence

import numpy as np

from agentrl.rollout.collector import CollectConfig, CollectHooks, collect
from agentrl.rollout.engines.interface import EngineSpec
from agentrl.types import Episode

__all__ = ["EngineWorker", "build_engine", "worker_environment", "receiver_device"]

#: torchrun's variables, dropped in a worker (its engine is no rank of the trainer's group).
_LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                  "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def worker_environment(spec: EngineSpec) -> None:
    """Prepare a worker process's environment before anything starts CUDA: its
    ``CUDA_VISIBLE_DEVICES`` (``spec.visible_devices``; None keeps the parent's) and no
    torchrun variables.

    Raises:
        RuntimeError: CUDA was already initialised in this process (the device map would not apply).
    """
    import sys

    for var in _LAUNCHER_VARS:
        os.environ.pop(var, None)
    if spec.visible_devices is None:
        return
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("CUDA started in the engine worker before its CUDA_VISIBLE_DEVICES was set")
    os.environ["CUDA_VISIBLE_DEVICES"] = spec.visible_devices


def receiver_device(spec: EngineSpec, backend: str) -> str:
    """Where an engine receives weight buckets: its CUDA device under NCCL, else the CPU."""
    return spec.device if backend == "nccl" else "cpu"


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

        self.engine = build_engine(spec)
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
        key = (cc.env_id, repr(sorted(cc.env_kwargs.items())), cc.num_workers, cc.step_timeout_s, cc.reset_timeout_s,
               cc.max_observation_chars)
        if self._pool is None or self._pool_key != key or self._pool.n < n:
            from agentrl.env.pool import EnvPool

            self.close()
            self._pool = EnvPool(cc.env_id, n, **{**cc.pool_kwargs(), "num_workers": min(cc.num_workers or 1, n)})
            self._pool_key = key
        return collect(self.engine, self.renderer, cc, pool=self._pool, on_episode=on_episode, hooks=hooks)

    def close(self) -> None:
        """Close the env pool (the engine goes with the process)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def build_engine(spec: EngineSpec):
    """The worker's engine: ``HFEngine`` or ``VLLMEngine`` (``spec.engine``) from ``spec.model``
    in ``spec.dtype`` on ``spec.device``. A vLLM worker has its device to itself: sleep mode
    stays off unless ``policy.vllm.enable_sleep_mode`` asks for it.

    Raises:
        ValueError: an engine other than hf / vllm. ModuleNotFoundError: vllm not installed.
    """
    if spec.engine == "hf":
        from agentrl.llm.hf import HFEngine

        return HFEngine.from_pretrained(spec.model, dtype=spec.dtype, device=spec.device, num_threads=spec.num_threads,
                                        max_context=spec.max_context, prefix_cache_mb=spec.prefix_cache_mb,
                                        decode_attention=spec.decode_attention)
    if spec.engine != "vllm":
        raise ValueError(f"engine workers run policy.engine hf or vllm, got {spec.engine!r}")
    from dataclasses import replace

    from agentrl.config import VLLMSpec
    from agentrl.llm.vllm import VLLMEngine
    from agentrl.llm.vllm_setup import engine_kwargs

    vspec = spec.vllm or VLLMSpec()
    vspec = replace(vspec, enable_sleep_mode=bool(vspec.enable_sleep_mode))
    kw = engine_kwargs(vspec, device=spec.device, model_dir=spec.model)
    if spec.max_context is not None:
        kw["max_context"] = spec.max_context
    return VLLMEngine.from_pretrained(spec.model, dtype=spec.dtype, constrained=spec.constrained, **kw)
