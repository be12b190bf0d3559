"""Branching an episode: env state at a tree node, agent context at a tree node (no torch).

A branch continues an episode from one of its turns. Two things must be restored there:

* **The env state.** An env may offer a fast ``snapshot()`` / ``restore(snapshot)`` pair
  (``snapshot_env`` / ``restore_env``; e.g. ``agentrl/Toy-v0``). Every env, in process
  or behind an ``EnvPool``, gets the universal fallback ``replay_prefix``: reset with the
  episode's seed (and reset options) and step the recorded action prefix, checking that every replayed
  observation equals the recorded one. A mismatch means the env is not deterministic
  under a fixed seed; the branch then fails with ``EpisodeStatus.ENV_ERROR``
  (stored and shown, never scored 0; PITFALLS P5).
* **The agent context.** ``snapshot_driver`` copies an ``EpisodeDriver`` between turns
  (its prompt ids, chat history or window, admissible actions); ``fork_driver`` starts a
  new episode from such a copy whose turns continue at ``t0``. A branch's first prompt is
  therefore the exact token ids the parent's context would have produced (token-faithful:
  shared prefixes are generated once and never re-rendered).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from agentrl.env.pool import EnvPool, EnvResult
from agentrl.llm.base import Completion
from agentrl.rollout.agent_loop import EpisodeDriver
from agentrl.types import Episode


@dataclass(frozen=True)
class EnvTrace:
    """What an env went through up to a node: enough to rebuild its state by replay.

    Attributes:
        seed: the reset seed (int).
        actions: the action texts sent to ``step``, in order (length k).
        observations: the raw observations: ``observations[0]`` after reset,
            ``observations[i + 1]`` after ``actions[i]`` (length k + 1).
        options: the reset options (e.g. ``{"agentrl.member": [j, G]}``), None for none.
    Raises:
        ValueError: lengths do not match.
    """

    seed: int
    actions: tuple[str, ...]
    observations: tuple[str, ...]
    options: dict | None = None

    def __post_init__(self) -> None:
        if len(self.observations) != len(self.actions) + 1:
            raise ValueError(f"EnvTrace needs one observation per action plus the reset one: got "
                             f"{len(self.actions)} actions and {len(self.observations)} observations")

    def prefix(self, k: int) -> "EnvTrace":
        """The trace after the first ``k`` actions (0 ≤ k ≤ len(actions))."""
        return EnvTrace(self.seed, self.actions[:k], self.observations[: k + 1], self.options)


class ReplayMismatch(RuntimeError):
    """A replayed observation differs from the recorded one: the env is not deterministic."""


def _mismatch(k: int, got: str, want: str) -> str:
    what = "reset" if k == 0 else f"step {k} (action {k - 1})"
    return (f"env is not deterministic: replayed observation after {what} differs from the recorded one "
            f"(got {got[:80]!r}, recorded {want[:80]!r}); branching needs a deterministic env under a fixed seed")


def replay_prefix(pool: EnvPool, traces: dict[int, EnvTrace]) -> dict[int, EnvResult]:
    """Rebuild the env state of each trace in its pool slot by reset + replay (parallel).

    Args:
        pool: an open ``EnvPool``.
        traces: ``{slot: EnvTrace}``; all slots replay in lock step (one ``step`` call per
            depth for the slots still replaying).
    Returns:
        ``{slot: EnvResult}``: the last result of the replay (the reset result for an empty
        prefix), or a result with ``error`` set when the env failed or a replayed
        observation differs from the recorded one (the env is not deterministic).
    """
    options = [tr.options for tr in traces.values()]
    results = pool.reset(list(traces), [tr.seed for tr in traces.values()], options if any(options) else None)
    live = {}
    for slot, res in results.items():
        want = traces[slot].observations[0]
        if res.error is None and res.obs != want:
            results[slot] = EnvResult("", 0.0, False, False, {}, error=_mismatch(0, res.obs, want))
        elif res.error is None:
            live[slot] = traces[slot]
    depth = 0
    while live := {s: tr for s, tr in live.items() if len(tr.actions) > depth}:
        step = pool.step({s: tr.actions[depth] for s, tr in live.items()})
        for slot, res in step.items():
            want = live[slot].observations[depth + 1]
            if res.error is None and res.obs != want:
                res = EnvResult("", 0.0, False, False, {}, error=_mismatch(depth + 1, res.obs, want))
            results[slot] = res
            if res.error is not None:
                live.pop(slot)
        depth += 1
    return results


def replay_env(env: Any, trace: EnvTrace) -> tuple[str, dict]:
    """In-process fallback of ``replay_prefix`` for one gymnasium env.

    Returns:
        ``(observation, info)`` of the last replayed step (of the reset for an empty prefix).
    Raises:
        ReplayMismatch: a replayed observation differs from the recorded one.
    """
    kwargs = {} if trace.options is None else {"options": trace.options}
    obs, info = env.reset(seed=trace.seed, **kwargs)
    if obs != trace.observations[0]:
        raise ReplayMismatch(_mismatch(0, obs, trace.observations[0]))
    for k, action in enumerate(trace.actions):
        obs, _, _, _, info = env.step(action)
        if obs != trace.observations[k + 1]:
            raise ReplayMismatch(_mismatch(k + 1, obs, trace.observations[k + 1]))
    return obs, info


def supports_snapshot(env: Any) -> bool:
    """True when the (unwrapped) env offers ``snapshot()`` and ``restore(snapshot)``."""
    inner = getattr(env, "unwrapped", env)
    return callable(getattr(inner, "snapshot", None)) and callable(getattr(inner, "restore", None))


def snapshot_env(env: Any) -> object:
    """The env's own state snapshot (opaque, small). Raises TypeError when unsupported
    (use ``replay_env`` / ``replay_prefix`` instead)."""
    if not supports_snapshot(env):
        raise TypeError(f"{type(getattr(env, 'unwrapped', env)).__name__} has no snapshot()/restore(); "
                        "branch by prefix replay (agentrl.rollout.branching.replay_prefix)")
    return env.unwrapped.snapshot()


def restore_env(env: Any, snapshot: object) -> None:
    """Put the env back into a ``snapshot_env`` state. Raises TypeError when unsupported."""
    if not supports_snapshot(env):
        raise TypeError(f"{type(getattr(env, 'unwrapped', env)).__name__} has no snapshot()/restore()")
    env.unwrapped.restore(snapshot)


# --------------------------------------------------------------------------- agent context


class _OffsetDriver(EpisodeDriver):
    """An ``EpisodeDriver`` whose episode starts at turn ``t0`` (a branch of another episode)."""

    t0: int = 0

    def act(self, completion: Completion) -> str:
        text = super().act(completion)
        self._pending.t += self.t0  # the turn index inside the whole tree path, not the branch
        return text


def _copy_context(ctx: Any) -> Any:
    new = copy.copy(ctx)
    for name, value in vars(new).items():
        if isinstance(value, (list, dict)):
            setattr(new, name, copy.copy(value))
    return new


def snapshot_driver(driver: EpisodeDriver) -> EpisodeDriver:
    """A frozen copy of ``driver`` between turns (after ``start`` or ``observe``): its next
    prompt ids, context history and admissible actions. Costs O(history), no tokenization.

    Raises:
        RuntimeError: a turn is pending (``act`` without ``observe``).
    """
    if driver._pending is not None:
        raise RuntimeError("snapshot_driver: a turn is pending; snapshot after observe()")
    snap = copy.copy(driver)
    snap.context = _copy_context(driver.context)
    return snap


def fork_driver(snapshot: EpisodeDriver, episode: Episode, t0: int) -> EpisodeDriver:
    """A live driver for ``episode`` continuing from ``snapshot``; its first turn has index
    ``t0`` and prompt ids ``snapshot.prompt()`` (exactly the parent's next prompt)."""
    drv = _OffsetDriver.__new__(_OffsetDriver)
    drv.__dict__.update(copy.copy(snapshot).__dict__)
    drv.context = _copy_context(snapshot.context)
    drv.episode, drv.t0, drv.done = episode, int(t0), False
    return drv

