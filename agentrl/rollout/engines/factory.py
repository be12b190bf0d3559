"""``open_engine_workers``: start a run's engine workers on the configured backend.

Its own module so that the backends (``procs``, ``ray_actors``) import only the interface they
implement (``agentrl.rollout.engines.interface``) and nothing imports back.
"""

from __future__ import annotations

from typing import Mapping

from agentrl.rollout.engines.interface import ENGINE_BACKENDS, EngineSpec, EngineWorkers

__all__ = ["open_engine_workers"]


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
        from agentrl.rollout.engines.procs import ProcessEngineWorkers

        return ProcessEngineWorkers(n, spec, state, version, **kwargs)
    if backend == "ray":
        from agentrl.rollout.engines.ray_actors import RayEngineWorkers

        return RayEngineWorkers(n, spec, state, version, **kwargs)
    raise ValueError(f"unknown rollout.backend {backend!r} for engine workers; choose one of {ENGINE_BACKENDS}")
