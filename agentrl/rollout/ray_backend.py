"""``RayEnvPool``: env workers as Ray actors, with exactly the ``EnvPool`` API.

``rollout.backend: ray`` scales the env side out over a Ray cluster (or a local
``ray.init``) while the collector stays unchanged: ``collect(..., pool=RayEnvPool(...))``.
Slot ``i`` lives in actor ``i % num_workers`` (the same assignment as ``EnvPool``), each
actor steps its slots one after the other, actors run in parallel. Every env call is one
actor task; Ray runs an actor's tasks in submission order, so the per-answer deadline of
``EnvPool`` carries over: an actor whose next answer does not come within
``step_timeout_s`` (``reset_timeout_s`` for resets) of its previous one is killed
(``ray.kill``) and restarted, and so is an actor that died. The slot's answer is then an
``EnvResult`` with ``error`` set (the caller marks the episode ``ENV_ERROR``, never scores
it 0, PITFALLS P5) and every slot of that actor needs ``reset()`` again. An env that raises
is rebuilt inside its actor (shared code with ``agentrl.env.pool``).

Same seeds → the same observations as the local ``EnvPool`` (envs are seeded by
``reset(seed=...)`` only), hence the same episodes and the same ``TurnTable``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Mapping, Sequence

import gymnasium

from agentrl.env.guards import DEFAULT_MAX_OBSERVATION_CHARS
from agentrl.env.pool import EnvPool, EnvPoolError, EnvResult, _call_env, _error_result, _make_env
from agentrl.env.registry import validate_id
from agentrl.env.slots import SlotBook

#: ``rollout.backend`` values understood by ``make_env_pool``.
BACKENDS = ("local", "ray")


def _require_ray():
    try:
        import ray
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "rollout.backend 'ray' needs the ray extra: pip install 'agentrl[ray]' (or use rollout.backend: local)"
        ) from None
    return ray


class _EnvActor:
    """Actor body: builds its envs at construction, then serves one reset/step per task."""

    def __init__(self, spec, env_kwargs: dict, slots: list[int],
                 max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS) -> None:
        self.spec, self.env_kwargs, self.max_observation_chars = spec, env_kwargs, max_observation_chars
        self.envs: dict[int, Any] = {s: _make_env(spec, env_kwargs) for s in slots}

    def ready(self) -> bool:
        return True

    def call(self, cmd: str, item: tuple) -> EnvResult:
        return _call_env(self.envs, item[0], cmd, item, self.spec, self.env_kwargs, self.max_observation_chars)

    def close(self) -> None:
        for env in self.envs.values():
            try:
                if env is not None:
                    env.close()
            except Exception:
                pass


def ensure_ray(num_cpus: int | None = None, **init_kwargs) -> None:
    """Start a local Ray instance unless one is already initialised (or ``RAY_ADDRESS`` is set).

    Workers get this process's ``sys.path`` (``PYTHONPATH``) so that env entry points
    importable here (``envs.*``, test envs) import in the actors too.

    Args:
        num_cpus: CPUs Ray may use (default: all); tests pass 2.
    Raises:
        ModuleNotFoundError: ray is not installed (names the extra).
    """
    ray = _require_ray()
    if ray.is_initialized():
        return
    import sys

    path = os.pathsep.join(p for p in sys.path if p)
    runtime_env = {"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}}
    if "address" not in init_kwargs and not os.environ.get("RAY_ADDRESS"):
        init_kwargs = {**init_kwargs, "address": "local"}  # a fresh local Ray, not one `ray start` left running
    elif init_kwargs.get("address") != "local":
        num_cpus = None  # joining a cluster: Ray refuses num_cpus there (the cluster's nodes set it)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env,
             configure_logging=False, **init_kwargs)


class RayEnvPool:
    """``n`` env slots of one env id in ``num_workers`` Ray actors (``EnvPool``'s API).

    Args:
        env_id: registered id (validated at once: unknown ids raise ``KeyError`` with suggestions).
        n: number of slots (≥ 1).
        env_kwargs: constructor kwargs for every env.
        num_workers: actors (default ``min(n, os.cpu_count())``).
        step_timeout_s / reset_timeout_s: seconds one env step / reset may take (also the
            deadline for the actors to start).
        num_cpus_per_worker: Ray CPU resource each actor reserves (fractions allowed).
        ray_init: start a local Ray (``ensure_ray``) when none is running.
        max_observation_chars: as ``EnvPool``'s (the longest observation, characters).
    Raises:
        KeyError: unknown env id. ValueError: bad n / num_workers / timeouts.
        ModuleNotFoundError: ray is not installed.
        EnvPoolError: an env failed to construct in an actor, or the actors did not start in time.
    """

    def __init__(self, env_id: str, n: int, *, env_kwargs: dict | None = None, num_workers: int | None = None,
                 step_timeout_s: float = 30.0, reset_timeout_s: float = 120.0, num_cpus_per_worker: float = 1.0,
                 ray_init: bool = True, max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS) -> None:
        validate_id(env_id)
        if n < 1:
            raise ValueError(f"RayEnvPool needs n >= 1 slots, got n={n}")
        if max_observation_chars < 1:
            raise ValueError(f"max_observation_chars must be >= 1 characters, got {max_observation_chars}")
        self.max_observation_chars = int(max_observation_chars)
        if step_timeout_s <= 0 or reset_timeout_s <= 0:
            raise ValueError("step_timeout_s and reset_timeout_s must be > 0 seconds")
        num_workers = min(n, os.cpu_count() or 1) if num_workers is None else num_workers
        if not 1 <= num_workers <= n:
            raise ValueError(f"num_workers must be in [1, n={n}], got {num_workers}")
        self._ray = _require_ray()
        if ray_init:
            ensure_ray()
        self.env_id, self.n = env_id, n
        self.step_timeout_s, self.reset_timeout_s = step_timeout_s, reset_timeout_s
        self._spec = gymnasium.spec(env_id)
        self._kwargs = dict(env_kwargs or {})
        self._cls = self._ray.remote(num_cpus=num_cpus_per_worker)(_EnvActor)
        self._slots = [list(range(i, n, num_workers)) for i in range(num_workers)]
        self._actors: list[Any] = [None] * num_workers
        self._book = SlotBook(n, "RayEnvPool", _error_result)  # which slots lost their episode, and why
        self.restarts = 0  # number of actor restarts so far (a health metric)
        for i in range(num_workers):
            self._actors[i] = self._cls.remote(self._spec, self._kwargs, self._slots[i], self.max_observation_chars)
        self._await_ready()

    # ---------------------------------------------------------------- lifecycle
    def _await_ready(self) -> None:
        refs = [a.ready.remote() for a in self._actors]
        try:
            self._ray.get(refs, timeout=self.reset_timeout_s)
        except Exception as exc:  # RayActorError (env constructor raised) or GetTimeoutError
            self.close()
            raise EnvPoolError(f"RayEnvPool({self.env_id!r}) actors failed to start: {type(exc).__name__}: {exc}") from None

    def _restart(self, w: int, reason: str) -> None:
        """Kill actor ``w`` and start a fresh one; all its slots need reset."""
        try:
            self._ray.kill(self._actors[w], no_restart=True)
        except Exception:
            pass
        for s in self._slots[w]:
            self._book.lost(s, f"its worker was restarted ({reason}); call reset() on this slot")
        self._actors[w] = self._cls.remote(self._spec, self._kwargs, self._slots[w], self.max_observation_chars)
        self.restarts += 1

    def close(self) -> None:
        """Close the envs and kill the actors (idempotent); Ray itself keeps running."""
        if self._book.closed:
            return
        self._book.closed = True
        refs = []
        for a in self._actors:
            if a is not None:
                refs.append(a.close.remote())
        try:
            self._ray.wait(refs, num_returns=len(refs), timeout=2.0)
        except Exception:
            pass
        for a in self._actors:
            if a is not None:
                try:
                    self._ray.kill(a, no_restart=True)
                except Exception:
                    pass

    def __enter__(self) -> "RayEnvPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- calls
    def reset(self, slots: Sequence[int], seeds: Sequence[int],
              options: Sequence[dict | None] | None = None) -> dict[int, EnvResult]:
        """Reset ``slots`` with ``seeds`` (and per-slot ``options``), in parallel (see ``EnvPool.reset``).

        Returns {slot: EnvResult}; ``error`` set on failure.
        Raises: ValueError on mismatched lengths, bad or duplicate slots.
        """
        items = self._book.reset_items(slots, seeds, options)
        return self._book.after_reset(self._dispatch("reset", items, self.reset_timeout_s))

    def step(self, actions: Mapping[int, str]) -> dict[int, EnvResult]:
        """Step the given slots with their action texts, in parallel (see ``EnvPool.step``).

        Raises: RuntimeError for a slot never reset; TypeError for a non-str action; ValueError for a bad slot.
        """
        items, early = self._book.step_items(actions)
        return self._book.after_step({**early, **self._dispatch("step", items, self.step_timeout_s)})

    def _dispatch(self, cmd: str, items: list[tuple], timeout: float) -> dict[int, EnvResult]:
        """One actor task per item; collect answers, restart an actor that died or whose next
        answer is later than ``timeout`` seconds after its previous one."""
        ray, nw = self._ray, len(self._actors)
        results: dict[int, EnvResult] = {}
        pending: dict[int, list[tuple[int, Any]]] = {}  # worker -> [(slot, ref)] in run order
        for it in items:
            w = it[0] % nw
            pending.setdefault(w, []).append((it[0], self._actors[w].call.remote(cmd, it)))
        last = {w: time.monotonic() for w in pending}
        while pending:
            deadline = min(last[w] + timeout for w in pending)
            heads = {pending[w][0][1]: w for w in pending}
            ready, _ = ray.wait(list(heads), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            for ref in ready:
                w = heads[ref]
                slot = pending[w][0][0]
                try:
                    results[slot] = ray.get(ref)
                except Exception as exc:  # RayActorError: the actor process died
                    self._fail(w, [s for s, _ in pending.pop(w)], f"worker actor died ({type(exc).__name__})",
                               results, time.monotonic() - last[w])
                    continue
                last[w] = time.monotonic()
                pending[w].pop(0)
                if not pending[w]:
                    del pending[w]
            now = time.monotonic()
            for w in [w for w in pending if now >= last[w] + timeout]:
                self._fail(w, [s for s, _ in pending.pop(w)], f"env call timed out after {timeout:g}s",
                           results, now - last[w])
        return results

    def _fail(self, w: int, slots: list[int], reason: str, results: dict, waited: float) -> None:
        """Error results for ``slots`` (the first was running), and for siblings of actor ``w``
        that already answered this call (the restart drops their envs); restart the actor."""
        results[slots[0]] = _error_result(f"slot {slots[0]}: {reason}", waited)
        for s in slots[1:]:
            results[s] = _error_result(f"slot {s}: not run; its worker was restarted because slot "
                                       f"{slots[0]} failed ({reason})")
        for s in self._slots[w]:
            if s in results and results[s].error is None:
                results[s] = _error_result(f"slot {s}: its worker was restarted ({reason}) after "
                                           "this slot answered; its episode is lost")
        self._restart(w, reason)


def make_env_pool(backend: str, env_id: str, n: int, **kwargs) -> EnvPool | RayEnvPool:
    """The env pool of ``rollout.backend``: ``"local"`` → ``EnvPool``, ``"ray"`` → ``RayEnvPool``.

    ``kwargs`` go to the pool (``env_kwargs``, ``num_workers``, timeouts, ``max_observation_chars``).
    Raises:
        ValueError: unknown backend (names the choices).
    """
    if backend == "local":
        return EnvPool(env_id, n, **kwargs)
    if backend == "ray":
        return RayEnvPool(env_id, n, **kwargs)
    raise ValueError(f"unknown rollout.backend {backend!r}; choose one of {BACKENDS}")
