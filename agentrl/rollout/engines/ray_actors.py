"""``RayEngineWorkers``: rollout engine workers as Ray actors (``rollout.backend: ray``).

Each actor holds an ``EngineWorker`` body (engine + its own local ``EnvPool`` on the actor's
node). Weights: one ``ray.put`` of the host copy of the state dict per push; every actor
loads it from the object store (the reference is kept, so an actor restarted later starts
from the same weights and version). Collect is a streaming actor task
(``num_returns="streaming"``): each finished episode comes back as soon as it is done.
An actor that dies (``RayActorError``) or sends nothing for ``answer_timeout_s`` is killed
and restarted with the current weights, and the episodes of its shard not yet received
come back ``aborted`` — the same contract as ``ProcessEngineWorkers``.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Callable, Mapping, Sequence

from agentrl.rollout.collector import CollectConfig
from agentrl.rollout.engines.interface import EngineSpec, EngineWorkerError, WorkerScore, aborted_episodes, shard_config, shard_groups
from agentrl.rollout.engines.worker import EngineWorker
from agentrl.rollout.ray_backend import _require_ray, ensure_ray
from agentrl.types import Episode

_END = "__end__"


class _EngineActor:
    """Actor body around ``EngineWorker``; ``collect`` is a generator (streamed episodes)."""

    def __init__(self, spec: EngineSpec, state: Mapping, version: int) -> None:
        self.worker = EngineWorker(spec, state, version)

    def ready(self) -> int:
        return os.getpid()

    def load(self, state: Mapping, version: int) -> int:
        self.worker.load(state, version)
        return int(version)

    def score(self, prompt_ids: list[int], completion_ids: list[int]):
        return self.worker.score(prompt_ids, completion_ids)

    def collect(self, cc: CollectConfig):
        """Yield each episode as it finishes (the collect runs in a thread feeding a queue)."""
        q: queue.Queue = queue.Queue()

        def run() -> None:
            try:
                self.worker.collect(cc, on_episode=q.put)
            except BaseException as exc:  # re-raised in the actor task below
                q.put(exc)
            q.put(_END)

        threading.Thread(target=run, daemon=True).start()
        while (item := q.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self.worker.close()


class RayEngineWorkers:
    """``n`` engine actors (the ``EngineWorkers`` interface).

    Args:
        n: actors (≥ 1). spec: how each builds its engine.
        state: the trainer's inference weights (``{name: tensor}``). version: their version.
        num_cpus_per_worker: Ray CPUs each actor reserves.
        num_gpus_per_worker: Ray GPUs each actor reserves (0 on CPU; 1 places it on its own GPU).
        start_timeout_s / answer_timeout_s: see ``ProcessEngineWorkers``.
        ray_init: start a local Ray (``ensure_ray``) when none is running.
    Raises:
        ModuleNotFoundError: ray is not installed. EngineWorkerError: actors failed to start.
    """

    def __init__(self, n: int, spec: EngineSpec, state: Mapping, version: int, *, num_cpus_per_worker: float = 1.0,
                 num_gpus_per_worker: float = 0.0, start_timeout_s: float = 600.0, answer_timeout_s: float = 1800.0,
                 ray_init: bool = True) -> None:
        self._ray = _require_ray()
        if ray_init:
            ensure_ray()
        self.n, self.spec, self.restarts, self.policy_version = n, spec, 0, int(version)
        self.start_timeout_s, self.answer_timeout_s = start_timeout_s, answer_timeout_s
        self._cls = self._ray.remote(num_cpus=num_cpus_per_worker, num_gpus=num_gpus_per_worker)(_EngineActor)
        self._ref = self._ray.put(_host(state))
        self._actors: list = [self._cls.remote(spec, self._ref, self.policy_version) for _ in range(n)]
        self._pids: list[int | None] = [None] * n
        self._closed = False
        try:
            self._pids = self._ray.get([a.ready.remote() for a in self._actors], timeout=start_timeout_s)
        except Exception as exc:  # RayActorError (the constructor raised) or GetTimeoutError
            self.close()
            raise EngineWorkerError(f"engine actors failed to start: {type(exc).__name__}: {exc}") from None

    def _restart(self, i: int) -> None:
        """Kill actor ``i`` and start a fresh one from the current weights reference."""
        try:
            self._ray.kill(self._actors[i], no_restart=True)
        except Exception:
            pass
        self._actors[i] = self._cls.remote(self.spec, self._ref, self.policy_version)
        self._pids[i] = None
        self.restarts += 1

    def pids(self) -> list[int]:
        for i, a in enumerate(self._actors):
            if self._pids[i] is None:
                self._pids[i] = self._ray.get(a.ready.remote(), timeout=self.start_timeout_s)
        return list(self._pids)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        refs = [a.close.remote() for a in self._actors]
        try:
            self._ray.wait(refs, num_returns=len(refs), timeout=5.0)
        except Exception:
            pass
        for a in self._actors:
            try:
                self._ray.kill(a, no_restart=True)
            except Exception:
                pass

    def __enter__(self) -> "RayEngineWorkers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _get_all(self, refs: dict[int, object]) -> dict[int, object]:
        """{actor: result}; an actor that died is restarted and left out."""
        out = {}
        for i, ref in refs.items():
            try:
                out[i] = self._ray.get(ref, timeout=self.answer_timeout_s)
            except self._ray.exceptions.RayTaskError as exc:
                raise EngineWorkerError(f"engine actor {i} raised: {exc}") from None
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
                self._restart(i)
        return out

    def push_weights(self, state: Mapping, version: int) -> None:
        """One ``ray.put``; every actor loads it as ``version`` (a restarted one starts from it)."""
        self._ref, self.policy_version = self._ray.put(_host(state)), int(version)
        self._get_all({i: a.load.remote(self._ref, self.policy_version) for i, a in enumerate(self._actors)})

    def score(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[WorkerScore]:
        p, c = [int(x) for x in prompt_ids], [int(x) for x in completion_ids]
        answers = self._get_all({i: a.score.remote(p, c) for i, a in enumerate(self._actors)})
        answers.update({i: self._ray.get(self._actors[i].score.remote(p, c)) for i in range(self.n) if i not in answers})
        return [WorkerScore(i, *answers[i]) for i in range(self.n)]

    def collect(self, cc: CollectConfig, on_episode: Callable[[Episode], None] | None = None) -> list[Episode]:
        ray = self._ray
        shards = {i: shard_config(cc, g) for i, g in enumerate(shard_groups(cc.n_groups, self.n)) if g}
        got: dict[int, list[Episode]] = {i: [] for i in shards}
        gens = {self._actors[i].collect.options(num_returns="streaming").remote(scc): i for i, scc in shards.items()}
        last, errors = {i: time.monotonic() for i in shards}, []
        while gens:
            deadline = min(last[i] for i in gens.values()) + self.answer_timeout_s
            ready, _ = ray.wait(list(gens), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            dead = [g for g in gens if time.monotonic() >= last[gens[g]] + self.answer_timeout_s and g not in ready]
            for g in ready:
                i = gens[g]
                try:
                    ep = ray.get(next(g))
                except StopIteration:
                    del gens[g]
                    continue
                except ray.exceptions.RayTaskError as exc:
                    errors.append(f"engine actor {i} raised: {exc}")
                    del gens[g]
                    continue
                except ray.exceptions.RayActorError:
                    dead.append(g)
                    continue
                last[i] = time.monotonic()
                got[i].append(ep)
                if on_episode is not None:
                    on_episode(ep)
            for g in dead:
                i = gens.pop(g)
                self._restart(i)
                reason = (f"engine actor {i} died or went silent during collect; it was restarted with policy "
                          f"version {self.policy_version}")
                got[i] += aborted_episodes(shards[i], {e.episode_id for e in got[i]}, reason)
        if errors:
            raise EngineWorkerError("\n".join(errors))
        return sorted((e for eps in got.values() for e in eps), key=lambda e: e.episode_id)


def _host(state: Mapping) -> dict:
    """The state dict as host tensors (``agentrl.llm.weight_sync.to_host``; torch imported lazily)."""
    from agentrl.llm.weight_sync import to_host

    return to_host(state)
