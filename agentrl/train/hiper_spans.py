"""HiPER's span advantages in the update and the critic (ALGORITHMS.md §14.2–14.3, decision D-14a;
arXiv 2602.16165).

The estimator ``hiper`` gives one advantage per row (the sum over its spans) for logging, the store
and the choice of trained rows; the update trains each span with its own advantage. The agent loop
(``action_format: hiper``) records each turn's token spans in ``Turn.info["hiper_spans"]``;
``span_token_advantages`` turns ``agentrl.credit.hiper.hiper_hae``'s three advantages into per-token
arrays and a token mask (the union of the spans) for ``agentrl.update.batch.build_batch``:
action span ← A^lo, subgoal span of a segment-start row ← A^hi, switch span ← A^te (with
``use_term``). Overlaps (only when there is no ``<action>`` tag, so the action span is the whole
response) go to the later span in that order. A turn without recorded spans trains every completion
token with its per-row advantage. ``critic_targets`` gives the three heads' targets and masks.
"""

from __future__ import annotations

import numpy as np

from agentrl.credit.hiper import HAE, hiper_hae, segment_start_rows
from agentrl.types import Turn, TurnTable

__all__ = ["ESTIMATOR", "span_token_advantages", "critic_targets", "low_value_offsets"]

ESTIMATOR = "hiper"


def _span(turn: Turn, name: str) -> tuple[int, int] | None:
    sp = (turn.info.get("hiper_spans") or {}).get(name)
    return None if sp is None else (int(sp[0]), int(sp[1]))


def span_token_advantages(table: TurnTable, rows: np.ndarray, turns: list[Turn], kwargs: dict,
                          ) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """Per-token advantages and token masks of the trained ``rows``.

    Args:
        table: the iteration's TurnTable (HiPER's columns filled).
        rows: int64[R] trained table rows; ``turns``: their ``Turn`` objects, in the same order.
        kwargs: the estimator's hyperparameters (``cfg.algorithm.kwargs``), as given to ``hiper``.
    Returns:
        (R float64[C_i] advantages, R bool[C_i] masks or None = every token), for ``build_batch``.
    """
    h = hiper_hae(table, **kwargs)
    start = segment_start_rows(table)
    use_term = bool(kwargs.get("use_term", True))
    advs, masks = [], []
    for row, turn in zip(np.asarray(rows, dtype=np.int64), turns):
        c = turn.completion_ids.size
        if "hiper_spans" not in turn.info:
            advs.append(np.full(c, h.adv_low[row] + h.adv_high[row] + h.adv_term[row]))
            masks.append(None)
            continue
        adv, mask = np.zeros(c), np.zeros(c, dtype=bool)
        parts = [("action", h.adv_low[row], True), ("subgoal", h.adv_high[row], bool(start[row])),
                 ("switch", h.adv_term[row], use_term)]
        for name, value, on in parts:
            sp = _span(turn, name)
            if on and sp is not None:
                adv[sp[0]:sp[1]], mask[sp[0]:sp[1]] = value, True
        advs.append(adv)
        masks.append(mask)
    return advs, masks


def critic_targets(table: TurnTable, kwargs: dict) -> tuple[np.ndarray, np.ndarray]:
    """The three heads' targets, columns (low, high, term): float64[N, 3], and where each head has
    one: bool[N, 3] (high: segment-start rows; term: every row with ``use_term``, none without)."""
    h: HAE = hiper_hae(table, **kwargs)
    start = segment_start_rows(table)
    use_term = bool(kwargs.get("use_term", True))
    n = len(table)
    mask = np.stack([np.ones(n, bool), start, np.full(n, use_term)], axis=1)
    return np.stack([h.ret_low, h.ret_high, h.ret_term], axis=1), mask


def low_value_offsets(turns: list[Turn]) -> np.ndarray:
    """int64[N]: per turn, the completion index j whose value the low head gives (§14.2): the first
    token after the subgoal span, else after the switch span, else 0 (the first response token).
    The critic reads it from the hidden state before token j (the last prompt token for j = 0)."""
    out = np.zeros(len(turns), dtype=np.int64)
    for i, turn in enumerate(turns):
        sp = _span(turn, "subgoal") or _span(turn, "switch")
        if sp is not None:
            out[i] = sp[1]
    return out
