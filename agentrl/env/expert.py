"""Expert Q-values of the turns an episode took: Q^E(s_t, a_t), V^E(s_t), A^E = Q^E − V^E.

The training-free check of step credit of QVal (arXiv 2606.32034): an estimator's per-turn
advantages are scored against the advantages of an *expert* policy that takes over from each
visited state. For turn t of a stored episode (env seed, reset options, actions a_0 … a_{T−1}):

- **restore** s_t: ``reset(seed=seed, options=options)`` and replay a_0 … a_{t−1} (the env must be
  deterministic given both; every replayed reward and anchor is compared with the stored one and
  the mismatches counted — a non-deterministic env shows there, never silently);
- **V^E(s_t)**: the expert plays on from s_t (``env.expert_plan()``, re-asked whenever its plan is
  used up and the episode has not ended, at most ``max_expert_steps`` steps); its discounted return
  Σ_k γ^k r_{t+k} with γ = ``gamma`` (so wasted steps cost);
- **Q^E(s_t, a_t)** = r_t + γ·V^E(s_{t+1}) — a_t, then the expert from where a_t led (0 after a
  terminating turn; after the episode's last, *truncated* turn the expert plays on past the cut);
- **A^E(s_t, a_t)** = Q^E − V^E.

So an episode of T turns costs up to T + 1 restores (``reset`` + t replayed steps) and T + 1 expert
continuations; states shared by a group's episodes (the same seed and action prefix, at least s_0)
are computed once per ``ExpertCache`` (a JSON file: the study resumes across sessions).

**What an env must provide** (the contract, ``docs/estimators.md``):

- ``expert_plan(self) -> list[str]``: the expert's actions from the *current* state (the rest of
  its plan; ``[]`` when it has none — the continuation then ends, scored as far as it got);
- constructor kwargs under which it works, in ``metadata["agentrl.expert_kwargs"]`` (e.g.
  TextWorld's ``{"expert": True}``, which requests ``policy_commands`` from the engine);
- determinism: the same ``reset(seed, options)`` and actions give the same rewards and anchors;
- a turn limit the caller can raise (``max_turns``): the expert's continuation must not be cut by
  the limit the episode was played under (the caller builds the env with
  ``max_turns = episode turns + max_expert_steps + 1``, as ``studies/expert_fidelity.py`` does).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from agentrl.env.contract import INFO_ANCHOR, INFO_WON

#: class ``metadata`` key: constructor kwargs under which ``expert_plan()`` works.
META_EXPERT_KWARGS = "agentrl.expert_kwargs"
#: the env method the expert check calls: ``expert_plan() -> list[str]`` from the current state.
EXPERT_HOOK = "expert_plan"


class ExpertUnavailableError(TypeError):
    """The env has no ``expert_plan()`` method (module docstring: what it must provide)."""


@dataclass(frozen=True)
class Continuation:
    """The expert's play from one state: ``value`` (discounted return, float), ``steps`` (int),
    ``won`` (the env reported ``won``), ``ended`` (terminated or truncated inside the cap)."""

    value: float
    steps: int
    won: bool
    ended: bool


@dataclass(frozen=True)
class ExpertValues:
    """One episode's expert values (module docstring).

    Attributes:
        v: float64[T + 1] V^E(s_t) for t = 0 … T (s_T: after the last turn; 0 when it terminated).
        q: float64[T] Q^E(s_t, a_t) = r_t + γ·V^E(s_{t+1}).
        a: float64[T] A^E = q − v[:-1].
        steps: int64[T + 1] expert steps played from each state.
        won: bool[T + 1] the expert's continuation from s_t won.
        replay_mismatch: turns whose replayed reward or anchor differs from the stored one.
        computed: continuations computed by this call (the rest came from the cache).
        seconds: wall time of this call.
    """

    v: np.ndarray
    q: np.ndarray
    a: np.ndarray
    steps: np.ndarray
    won: np.ndarray
    replay_mismatch: int
    computed: int
    seconds: float


@dataclass
class ExpertCache:
    """Continuations by state key (``state_key``), optionally persisted as JSON at ``path``
    (written by ``save``; read at construction), so a study resumes without re-playing."""

    path: Path | None = None
    entries: dict[str, Continuation] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.path is not None and Path(self.path).is_file():
            raw = json.loads(Path(self.path).read_text(encoding="utf-8"))
            self.entries.update({k: Continuation(**v) for k, v in raw.items()})

    def save(self) -> None:
        """Write the entries to ``path`` atomically (no-op without a path)."""
        if self.path is None:
            return
        p = Path(self.path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({k: vars(c) for k, c in self.entries.items()}), encoding="utf-8")
        os.replace(tmp, p)


def state_key(env_key: str, seed: int | None, options: Mapping | None, prefix: Sequence[str], gamma: float,
              max_expert_steps: int) -> str:
    """Hex SHA-256 naming the state reached by ``prefix`` from ``reset(seed, options)`` of the
    env ``env_key`` (id and kwargs, the caller's string), with the continuation's settings."""
    blob = json.dumps([env_key, seed, dict(options or {}), list(prefix), gamma, max_expert_steps], sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def play_expert(env, gamma: float, max_expert_steps: int) -> Continuation:
    """Let ``env``'s expert play from its current state (re-planning when a plan is used up) for at
    most ``max_expert_steps`` steps; the discounted return Σ γ^k r_k.

    Raises:
        ExpertUnavailableError: the env has no ``expert_plan`` method.
    """
    hook = getattr(getattr(env, "unwrapped", env), EXPERT_HOOK, None)
    if hook is None:
        raise ExpertUnavailableError(f"{type(getattr(env, 'unwrapped', env)).__name__} has no {EXPERT_HOOK}() "
                                     f"method: the expert check needs the expert's actions from the current state "
                                     f"(agentrl.env.expert, docs/estimators.md)")
    value, steps, won, plan = 0.0, 0, False, []
    while steps < max_expert_steps:
        if not plan:
            plan = list(hook())
            if not plan:
                return Continuation(value, steps, won, False)
        _, r, term, trunc, info = env.step(plan.pop(0))
        value += gamma ** steps * float(r)
        steps += 1
        won = won or bool(info.get(INFO_WON, False))
        if term or trunc:
            return Continuation(value, steps, won, True)
    return Continuation(value, steps, won, False)


def expert_values(env, actions: Sequence[str], *, seed: int | None,
                  options: Mapping | None = None, rewards: Sequence[float] | None = None,
                  anchors: Sequence[str] | None = None, terminated: bool = False, gamma: float = 0.95,
                  max_expert_steps: int = 50, cache: ExpertCache | None = None,
                  env_key: str = "") -> ExpertValues:
    """Expert values of one episode's turns (module docstring).

    Args:
        env: an env able to give ``expert_plan()`` (reset once per restored state; the caller
            builds it with the env's ``expert_kwargs`` and a raised ``max_turns``, and closes it).
        actions: the T actions the episode took, as sent to ``step``.
        seed, options: what the episode's ``reset`` got.
        rewards: float[T] stored rewards, compared with the replay (None: not checked).
        anchors: the T stored anchors of s_0 … s_{T−1}, compared likewise (None: not checked).
        terminated: the episode's last turn terminated it (then V^E(s_T) = 0).
        gamma: discount in (0, 1].
        max_expert_steps: cap on each continuation's steps.
        cache: shared ``ExpertCache`` (states shared by episodes are computed once).
        env_key: names the env and its kwargs in the cache key.
    Returns:
        ``ExpertValues``.
    Raises:
        ValueError: gamma outside (0, 1], max_expert_steps < 1, rewards/anchors of the wrong length.
        ExpertUnavailableError: the env has no ``expert_plan``.
    """
    if not 0.0 < gamma <= 1.0 or max_expert_steps < 1:
        raise ValueError(f"gamma must be in (0, 1] and max_expert_steps >= 1, got {gamma}, {max_expert_steps}")
    T = len(actions)
    for name, seq in (("rewards", rewards), ("anchors", anchors)):
        if seq is not None and len(seq) != T:
            raise ValueError(f"{name} has {len(seq)} entries for {T} actions")
    t0, cache = time.perf_counter(), cache if cache is not None else ExpertCache()
    replayed = np.zeros(T)
    mismatch, computed = 0, 0

    def restore(t: int) -> None:
        """Reset and replay a_0 … a_{t−1}; the whole episode's replay (t = T) is the determinism
        check and gives the rewards Q uses."""
        nonlocal mismatch
        obs, info = env.reset(seed=seed, options=dict(options) if options else None)
        for k in range(t):
            if t == T and anchors is not None and str(info.get(INFO_ANCHOR, obs)) != str(anchors[k]):
                mismatch += 1
            obs, r, _, _, info = env.step(actions[k])
            if t == T:
                replayed[k] = float(r)
                mismatch += rewards is not None and float(r) != float(rewards[k])

    def continuation(t: int) -> Continuation:
        """The expert's play from s_t (the env is at s_t), from the cache when it holds it."""
        nonlocal computed
        key = state_key(env_key, seed, options, actions[:t], gamma, max_expert_steps)
        if key not in cache.entries:
            cache.entries[key] = play_expert(env, gamma, max_expert_steps)
            computed += 1
        return cache.entries[key]

    restore(T)  # always: the check; the expert plays on from s_T unless the last turn terminated
    conts = {T: Continuation(0.0, 0, False, True) if terminated else continuation(T)}
    for t in range(T - 1, -1, -1):
        key = state_key(env_key, seed, options, actions[:t], gamma, max_expert_steps)
        if key not in cache.entries:  # a state no episode reached before: restore it
            restore(t)
        conts[t] = continuation(t)
    conts_list = [conts[t] for t in range(T + 1)]
    v = np.array([c.value for c in conts_list], np.float64)
    q = replayed + gamma * v[1:]
    return ExpertValues(v, q, q - v[:-1], np.array([c.steps for c in conts_list], np.int64),
                        np.array([c.won for c in conts_list], bool), mismatch, computed, time.perf_counter() - t0)
