"""Exact values and advantages of a policy on a ``TaskGraph`` (finite-horizon dynamic programming).

The "oracle arm" of docs/LEARNING.md ("Junction maze"): for a task whose state graph is known
(``agentrl.env.TaskGraph``, e.g. ``agentrl/JunctionMaze-v0``'s ``env.task_graph()``) and a
stationary policy over each state's admissible actions, the true values are computed by backward
induction over the turn index, and an episode's exact per-turn advantages
``A^pi(t, s_t, a_t) = Q^pi(t, s_t, a_t) - V^pi(t, s_t)`` are read off them. An estimator's
advantages can then be correlated with these (fidelity), or a policy trained on them.

The env truncates after ``horizon`` turns, so values depend on the turn index ``t`` (the number of
turns already taken): no-op actions (``look``, ``wait``) waste turns, and near the horizon the goal
may be out of reach. With ``H = horizon``:

- ``V[H, s] = 0`` for every state (no turn left), and ``V[t, s] = 0`` for terminal ``s``;
- ``Q[t, s, a] = r(s, a) + gamma * V[t + 1, next(s, a)]`` for ``t < H``;
- ``V[t, s] = sum_a pi(a | s) Q[t, s, a]``.

Pure NumPy (layer L3, no torch). The graph is only read (duck-typed), so this module imports
nothing of ``agentrl.env`` at run time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only: agentrl.credit stays free of gymnasium
    from agentrl.env.task_graph import TaskGraph

__all__ = ["ExactValues", "exact_values", "exact_advantages", "uniform_policy"]

_SUM_TOL = 1e-9


@dataclass(frozen=True)
class ExactValues:
    """Exact ``V^pi`` and ``Q^pi`` of one policy on one graph (module docstring).

    Attributes:
        states: index -> state id (``graph.states`` order; index 0 is the start state).
        index: state id -> index into ``states``.
        actions: per state index, the admissible actions in the graph's order (``()`` for
            terminal states); action ``i`` of state ``s`` is column ``i`` of ``Q[:, s, :]``.
        V: float64 array ``(horizon + 1, S)``: ``V[t, s]`` = expected (discounted) return from
            state ``s`` with ``t`` turns already taken; ``V[horizon, :] = 0``; terminal states 0.
        Q: float64 array ``(horizon, S, A_max)``: ``Q[t, s, i]`` = expected return of taking
            action ``actions[s][i]`` in state ``s`` at turn ``t`` then following the policy;
            NaN where ``i >= len(actions[s])`` (terminal states: all NaN).
        gamma: the discount used.
        horizon: the graph's horizon ``H``.
    """

    states: tuple[str, ...]
    index: Mapping[str, int]
    actions: tuple[tuple[str, ...], ...]
    V: np.ndarray
    Q: np.ndarray
    gamma: float
    horizon: int

    def v(self, t: int, state: str) -> float:
        """``V[t, state]``. Raises KeyError (unknown state) / IndexError (t outside 0..horizon)."""
        if not 0 <= t <= self.horizon:
            raise IndexError(f"turn {t} outside 0..{self.horizon}")
        return float(self.V[t, self.index[state]])

    def q(self, t: int, state: str, action: str) -> float:
        """``Q[t, state, action]``. Raises KeyError (unknown state), ValueError (action not
        admissible there), IndexError (t outside 0..horizon-1)."""
        if not 0 <= t < self.horizon:
            raise IndexError(f"turn {t} outside 0..{self.horizon - 1}")
        s = self.index[state]
        if action not in self.actions[s]:
            raise ValueError(f"action {action!r} is not admissible in state {state!r}: {list(self.actions[s])}")
        return float(self.Q[t, s, self.actions[s].index(action)])


def uniform_policy(graph: "TaskGraph") -> dict[str, np.ndarray]:
    """The uniform policy over each non-terminal state's admissible actions:
    state -> float64 array ``(len(graph.actions[state]),)`` of ``1 / n``."""
    return {s: np.full(len(acts), 1.0 / len(acts)) for s, acts in graph.actions.items()}


def _policy_matrix(graph: "TaskGraph", states: tuple[str, ...], policy: Mapping[str, np.ndarray],
                   a_max: int) -> np.ndarray:
    """The policy as float64 ``(S, A_max)`` (0 beyond a state's actions and for terminal states).

    Raises:
        ValueError: a non-terminal state without probabilities, a vector of the wrong length,
            a negative or non-finite entry, or entries not summing to 1 (within 1e-9).
    """
    pi = np.zeros((len(states), a_max), dtype=np.float64)
    for i, s in enumerate(states):
        acts = graph.actions.get(s)
        if not acts:
            continue
        if s not in policy:
            raise ValueError(f"policy gives no probabilities for state {s!r} (actions {list(acts)})")
        p = np.asarray(policy[s], dtype=np.float64)
        if p.shape != (len(acts),):
            raise ValueError(f"policy[{s!r}] has shape {p.shape}; state {s!r} has {len(acts)} actions {list(acts)}")
        if not np.all(np.isfinite(p)) or np.any(p < 0):
            raise ValueError(f"policy[{s!r}] = {p.tolist()} has negative or non-finite entries")
        if abs(float(p.sum()) - 1.0) > _SUM_TOL:
            raise ValueError(f"policy[{s!r}] sums to {float(p.sum())!r}, not 1")
        pi[i, : len(acts)] = p
    return pi


def exact_values(graph: "TaskGraph", policy: Mapping[str, np.ndarray], gamma: float = 1.0) -> ExactValues:
    """Exact finite-horizon values of ``policy`` on ``graph`` by backward induction.

    Args:
        graph: a valid ``TaskGraph`` (``graph.validate()`` is called).
        policy: non-terminal state -> probabilities over ``graph.actions[state]`` (array-like,
            float64, shape ``(len(actions),)``, non-negative, summing to 1 within 1e-9).
            Extra keys (e.g. terminal states) are ignored.
        gamma: discount per turn, in ``[0, 1]``.
    Returns:
        ``ExactValues`` (``V``: float64 ``(H + 1, S)``; ``Q``: float64 ``(H, S, A_max)``).
    Raises:
        ValueError: an invalid graph, a bad policy (see above) or gamma outside ``[0, 1]``.
    Cost: ``O(H * (S * A_max))`` time and memory.
    """
    if not (isinstance(gamma, (int, float)) and math.isfinite(gamma) and 0.0 <= gamma <= 1.0):
        raise ValueError(f"gamma must be in [0, 1], got {gamma!r}")
    graph.validate()
    states = graph.states
    index = {s: i for i, s in enumerate(states)}
    actions = tuple(tuple(graph.actions.get(s, ())) for s in states)
    a_max = max((len(a) for a in actions), default=1)
    pi = _policy_matrix(graph, states, policy, a_max)
    n_states, horizon = len(states), graph.horizon
    # transitions as arrays: next index (-1 where no action) and reward per (state, action column)
    nxt = np.full((n_states, a_max), -1, dtype=np.int64)
    rew = np.zeros((n_states, a_max), dtype=np.float64)
    for i, acts in enumerate(actions):
        for j, a in enumerate(acts):
            nxt[i, j] = index[graph.next_state[(states[i], a)]]
            rew[i, j] = float(graph.reward[(states[i], a)])
    valid = nxt >= 0
    V = np.zeros((horizon + 1, n_states), dtype=np.float64)
    Q = np.full((horizon, n_states, a_max), np.nan, dtype=np.float64)
    for t in range(horizon - 1, -1, -1):
        q = np.where(valid, rew + gamma * V[t + 1][np.where(valid, nxt, 0)], np.nan)
        Q[t] = q
        V[t] = np.sum(np.where(valid, pi * np.nan_to_num(q), 0.0), axis=1)  # terminal rows: 0
    return ExactValues(states, index, actions, V, Q, float(gamma), horizon)


def exact_advantages(graph: "TaskGraph", values: ExactValues, actions: Sequence[str]) -> np.ndarray:
    """Exact per-turn advantages of one episode played from ``graph.start``.

    Args:
        graph: the graph ``values`` was computed on.
        values: ``exact_values(graph, policy, gamma)``.
        actions: the episode's actions (each admissible where taken; at most ``horizon``).
    Returns:
        float64 ``(T,)`` with ``T = len(actions)``: ``A[t] = Q[t, s_t, a_t] - V[t, s_t]`` where
        ``s_t`` is the state before action ``t`` (``graph.replay``).
    Raises:
        ValueError: an action not admissible where taken, an action after a terminal state,
            more than ``horizon`` actions, or ``values`` of another graph (different states).
    """
    if values.horizon != graph.horizon or values.states != graph.states:
        raise ValueError("values were computed on another graph (states or horizon differ)")
    visited = graph.replay(actions)
    out = np.empty(len(actions), dtype=np.float64)
    for t, (s, a) in enumerate(zip(visited, actions)):
        i = values.index[s]
        out[t] = values.Q[t, i, values.actions[i].index(a)] - values.V[t, i]
    return out
