"""``TaskGraph``: the explicit, deterministic state graph of one task of a small text env.

An env whose task is a finite deterministic MDP (``agentrl/JunctionMaze-v0``) exposes it as a
``TaskGraph`` so that exact values and advantages can be computed by dynamic programming
(``agentrl.credit.exact``) and compared with what an estimator reports — the "oracle arm" of
docs/LEARNING.md ("Junction maze").

States are string ids. A state is either *terminal* (the episode ends on entering it) or has
one or more admissible actions (strings, in the env's order); each ``(state, action)`` pair has
exactly one next state and one reward. ``horizon`` is the env's turn limit: after ``horizon``
turns without entering a terminal state the env truncates. Actions outside the graph (the
env's invalid actions) are not modelled here.

Pure Python; no NumPy or torch needed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["TaskGraph"]

#: the ``kind`` labels the envs of this repository use (free-form: any str is accepted).
KINDS = ("start", "filler", "junction", "goal", "dead")


@dataclass(frozen=True)
class TaskGraph:
    """A deterministic finite task graph (module docstring).

    Attributes:
        start: id of the state a reset puts the env in.
        actions: non-terminal state -> its admissible actions (tuple of str, in the env's
            order, no duplicates). Terminal states have no entry.
        next_state: ``(state, action)`` -> the state the action leads to (deterministic).
        reward: ``(state, action)`` -> the reward of that step (finite float).
        terminal: states where the episode ends (``terminated=True``) on entering them.
        observation: state -> the observation text the policy sees in that state (the env's
            ``anchor_obs``; a pure function of the state).
        kind: state -> a free-form label; the envs here use ``"start"``, ``"filler"``,
            ``"junction"``, ``"goal"`` (a winning terminal) and ``"dead"`` (a losing terminal).
        horizon: turns after which the env truncates (>= 1).

    Build one, then call ``validate()``; the other methods assume a valid graph.
    """

    start: str
    actions: Mapping[str, tuple[str, ...]]
    next_state: Mapping[tuple[str, str], str]
    reward: Mapping[tuple[str, str], float]
    terminal: frozenset[str]
    observation: Mapping[str, str]
    kind: Mapping[str, str]
    horizon: int

    def validate(self) -> "TaskGraph":
        """Check the graph is complete and consistent; returns ``self``.

        Raises:
            ValueError: naming the first problem found: a horizon < 1; an unknown start;
                a state both terminal and with actions; a non-terminal state without actions
                or with duplicate actions; a ``(state, action)`` without next state or reward,
                or a transition/reward for a pair that is not admissible; a transition target
                that is not a known state; a non-finite reward; a state without observation
                or kind.
        """
        if not isinstance(self.horizon, int) or self.horizon < 1:
            raise ValueError(f"TaskGraph.horizon must be an int >= 1, got {self.horizon!r}")
        known = set(self.actions) | set(self.terminal)
        if self.start not in known:
            raise ValueError(f"TaskGraph.start {self.start!r} is neither a state with actions nor terminal")
        both = sorted(set(self.actions) & set(self.terminal))
        if both:
            raise ValueError(f"TaskGraph states {both[:3]} are terminal but have actions")
        for s, acts in self.actions.items():
            if not acts:
                raise ValueError(f"TaskGraph non-terminal state {s!r} has no action")
            if len(set(acts)) != len(acts):
                raise ValueError(f"TaskGraph state {s!r} lists an action twice: {list(acts)}")
            for a in acts:
                if (s, a) not in self.next_state:
                    raise ValueError(f"TaskGraph has no next state for ({s!r}, {a!r})")
                if (s, a) not in self.reward:
                    raise ValueError(f"TaskGraph has no reward for ({s!r}, {a!r})")
                target = self.next_state[(s, a)]
                if target not in known:
                    raise ValueError(f"TaskGraph transition ({s!r}, {a!r}) -> {target!r}: no such state "
                                     "(neither terminal nor with actions)")
                if not math.isfinite(float(self.reward[(s, a)])):
                    raise ValueError(f"TaskGraph reward of ({s!r}, {a!r}) is not finite: {self.reward[(s, a)]!r}")
        for table, name in ((self.next_state, "next_state"), (self.reward, "reward")):
            extra = [k for k in table if k[0] not in self.actions or k[1] not in self.actions[k[0]]]
            if extra:
                raise ValueError(f"TaskGraph.{name} has pairs that are not admissible, e.g. {extra[:3]}")
        for table, name in ((self.observation, "observation"), (self.kind, "kind")):
            missing = sorted(known - set(table))
            if missing:
                raise ValueError(f"TaskGraph.{name} lacks states {missing[:3]}")
        return self

    @property
    def states(self) -> tuple[str, ...]:
        """Every state: those reachable from ``start`` in breadth-first order (actions in the
        env's order), then any unreachable ones sorted. Deterministic for a given graph."""
        order, seen, frontier = [self.start], {self.start}, [self.start]
        while frontier:
            nxt = []
            for s in frontier:
                for a in self.actions.get(s, ()):
                    t = self.next_state[(s, a)]
                    if t not in seen:
                        seen.add(t)
                        order.append(t)
                        nxt.append(t)
            frontier = nxt
        rest = sorted((set(self.actions) | set(self.terminal)) - seen)
        return tuple(order + rest)

    def replay(self, actions: Sequence[str]) -> list[str]:
        """The states visited *before* each action of an episode played from ``start``.

        Args:
            actions: the episode's actions, each admissible where it is taken.
        Returns:
            list of ``len(actions)`` state ids: element ``t`` is the state in which action
            ``t`` was taken (element 0 is ``start``).
        Raises:
            ValueError: an action that is not admissible in its state, an action after a
                terminal state was entered, or more than ``horizon`` actions.
        """
        if len(actions) > self.horizon:
            raise ValueError(f"{len(actions)} actions exceed the horizon of {self.horizon} turns")
        out, s = [], self.start
        for t, a in enumerate(actions):
            if s in self.terminal:
                raise ValueError(f"action {t} ({a!r}) comes after the episode ended in terminal state {s!r}")
            if a not in self.actions[s]:
                raise ValueError(f"action {t} ({a!r}) is not admissible in state {s!r}; "
                                 f"admissible: {list(self.actions[s])}")
            out.append(s)
            s = self.next_state[(s, a)]
        return out
