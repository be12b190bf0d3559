"""What an estimator declares at registration beyond its signature: what must happen before it
runs and what it returns (DESIGN.md, extension points; issue 47).

The trainer, the update and the agent loop serve these declarations and never compare
``algorithm.estimator`` with a name:

- ``critic`` (``CriticHeads``): a turn-level critic fills value columns before the estimator runs
  and learns towards the estimator's own targets after the policy update (turn-PPO: one head,
  ``value``; HiPER: three heads). Served by the ``critic`` step scorer (``agentrl.train.critic``).
- ``store_query``: the name of a store-side query that fills columns from the run's earlier
  iterations (3SPO: ``"state_stats"``; ``agentrl.store.queries``).
- ``scorers``: names of step scorers (``agentrl.train.scorers.register_scorer``): torch passes after
  the rollout that fill ``TurnTable.scores`` columns the estimator reads (OPRL's PRM, StepOPSD's
  teacher, or your own). ``critic`` adds ``"critic"`` here by itself.
- ``action_format``: the agent loop's ``policy.action_format`` whose parsed tags the estimator's
  columns (or spans) come from (HiPER: ``"hiper"``); any other format is refused at config time.
- ``spans`` (``SpanAdvantages``): the estimator returns one advantage per named token span of a
  turn rather than per row; the update trains each span with its own advantage and only those
  tokens. The per-row output (the spans' sum) still goes to the store, the logs and the choice
  of trained rows.

NumPy and ``agentrl.types`` only (layer L3, no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from agentrl.types import Turn, TurnTable

#: ``(table, kwargs) -> (returns float64[N, H], mask bool[N, H] or None)``: the critic's targets.
CriticTargets = Callable[[TurnTable, Mapping], "tuple[np.ndarray, np.ndarray | None]"]
#: ``(turns) -> int64[N]``: per turn, the completion index whose preceding hidden state the first
#: head reads (0 = the last prompt token); the other heads read at the last prompt token.
ReadOffsets = Callable[[list[Turn]], np.ndarray]
#: ``(table, rows int64[R], turns, kwargs) -> (R float64[C_i] per-token advantages,
#: R bool[C_i] token masks or None = every completion token)``.
TokenAdvantages = Callable[[TurnTable, np.ndarray, list[Turn], Mapping], "tuple[list, list]"]


@dataclass(frozen=True)
class CriticHeads:
    """A turn-level critic the estimator needs (a separate copy of the policy's model with
    zero-initialised value heads; ``agentrl.train.critic``).

    Attributes:
        columns: the ``TurnTable`` value column each head fills, in head order: ``("value",)``
            (turn-PPO) or ``("value_low", "value_high", "value_term")`` (HiPER). 1 or 3 heads.
        targets: ``(table, kwargs) -> (returns float64[N, H], mask bool[N, H] | None)``: what each
            head learns towards after the policy update, from the table with its values filled
            and the estimator's resolved hyperparameters; ``mask`` marks the rows each head learns
            on (None: every row, every head).
        read_offsets: optional ``(turns) -> int64[N]``: where the first head reads (see
            ``ReadOffsets``); None: every head at the last prompt token.
    Raises:
        ValueError: not 1 or 3 columns.
    """

    columns: tuple[str, ...]
    targets: CriticTargets
    read_offsets: ReadOffsets | None = None

    def __post_init__(self) -> None:
        if len(self.columns) not in (1, 3):
            raise ValueError(f"CriticHeads: a critic has 1 or 3 heads, got columns {self.columns}")

    @property
    def heads(self) -> int:
        """The number of value heads (1 or 3)."""
        return len(self.columns)


@dataclass(frozen=True)
class SpanAdvantages:
    """The estimator's advantages per named token span of a turn (HiPER: action, subgoal and
    switch spans, ALGORITHMS.md §14.2, decision D-14a).

    Attributes:
        names: the span names, e.g. ``("action", "subgoal", "switch")``.
        token_advantages: ``(table, rows, turns, kwargs) -> (advantages, masks)`` for the trained
            ``rows`` (see ``TokenAdvantages``); tokens outside every span (mask False) do not train.
    """

    names: tuple[str, ...]
    token_advantages: TokenAdvantages


@dataclass(frozen=True)
class Declarations:
    """Everything an estimator declares besides its signature (see the module docstring).

    Attributes:
        critic: the critic it needs, or None.
        store_query: the store query that fills its columns, or None.
        scorers: the step scorers whose columns it reads (``"critic"`` included when ``critic``).
        action_format: the ``policy.action_format`` it needs, or None (any).
        spans: per-span output, or None (one advantage per row).
    """

    critic: CriticHeads | None = None
    store_query: str | None = None
    scorers: tuple[str, ...] = ()
    action_format: str | None = None
    spans: SpanAdvantages | None = None

    @classmethod
    def of(cls, critic: CriticHeads | None, store_query: str | None, scorers: tuple[str, ...] | list[str],
           action_format: str | None, spans: SpanAdvantages | None, name: str) -> "Declarations":
        """Check and build the declarations of estimator ``name``.

        Raises:
            TypeError: a field of the wrong kind (names the estimator and the field).
        """
        if critic is not None and not isinstance(critic, CriticHeads):
            raise TypeError(f"estimator {name!r}: critic= takes a CriticHeads, got {type(critic).__name__}")
        if spans is not None and not isinstance(spans, SpanAdvantages):
            raise TypeError(f"estimator {name!r}: spans= takes a SpanAdvantages, got {type(spans).__name__}")
        for key, value in (("store_query", store_query), ("action_format", action_format)):
            if value is not None and not (isinstance(value, str) and value):
                raise TypeError(f"estimator {name!r}: {key}= takes a non-empty name, got {value!r}")
        if scorers is None:
            raise TypeError(f"estimator {name!r}: scorers= takes a tuple of scorer names (() for none), got None")
        if isinstance(scorers, str):
            raise TypeError(f"estimator {name!r}: scorers= takes a tuple of scorer names, got the string {scorers!r}; "
                            f"write scorers=({scorers!r},)")
        names = tuple(scorers)
        if not all(isinstance(s, str) and s for s in names):
            raise TypeError(f"estimator {name!r}: scorers= takes scorer names, got {list(names)!r}")
        if critic is not None and "critic" not in names:
            names = ("critic", *names)
        return cls(critic, store_query, names, action_format, spans)
