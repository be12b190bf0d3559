"""Vectorised building blocks shared by the estimators (ALGORITHMS.md §0.5, §1).

Everything here works on whole columns with ``np.bincount`` / ``np.unique``; no per-row
Python loops. Recursions along an episode (discounted returns, GAE) loop over turn
*levels* ``t`` (at most the longest episode), each level being one vectorised step.

Conventions used by all estimators:

* ``canonical(table)`` sorts the rows by (episode, t) (then by original position) and
  the estimator works on the sorted table; sums are therefore taken in a fixed order and
  results are bit-identical under any permutation of the input rows (§0.6 D4).
* ``eligible = episode_ok & trainable``: only eligible rows enter a group statistic, and
  non-eligible rows get advantage 0 (PITFALLS P5, P6). Episode rewards and discounted
  returns still use every row of an episode (rewards of ok episodes are real data).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from agentrl.types import TurnTable

EPS = 1e-6
MODES = ("mean_std_norm", "mean_norm")
STATS_OVER = ("steps", "trajectories", "episodes")  # "episodes" = "trajectories"


def check_choice(param: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming ``param`` and the allowed values unless ``value`` is one."""
    if value not in allowed:
        raise ValueError(f"{param}={value!r} is not one of {list(allowed)}")


def canonical(table: TurnTable, unique_steps: bool = True, keep_hidden: bool = False) -> tuple[TurnTable, np.ndarray]:
    """Rows sorted by (episode, t); returns ``(sorted_table, order)``.

    ``sorted_table = table.take(order)`` (without the (N, H) ``hidden`` copy unless
    ``keep_hidden``); scatter a result back with ``out[order] = res``.
    Raises:
        ValueError: ``unique_steps`` and two rows share (episode, t).
    """
    ep, t = table.episode, table.t
    if len(table) and ep.min() >= 0 and t.min() >= 0 and int(ep.max()) * (int(t.max()) + 1) < 2**62:
        order = np.argsort(ep * (int(t.max()) + 1) + t, kind="stable")
    else:
        order = np.lexsort((np.arange(len(table)), t, ep))
    if table.hidden is not None and not keep_hidden:
        table = dataclasses.replace(table, hidden=None)
    st = table.take(order)
    if unique_steps and len(st) > 1:
        dup = (st.episode[1:] == st.episode[:-1]) & (st.t[1:] == st.t[:-1])
        if dup.any():
            i = int(np.flatnonzero(dup)[0])
            raise ValueError(
                f"TurnTable has two rows with episode={st.episode[i]} and t={st.t[i]}; "
                "each (episode, t) must be unique (tree rollouts: give each branch its own episode id)"
            )
    return st, order


def uncanon(order: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Inverse of ``canonical``'s permutation: float64[N] in the caller's row order."""
    out = np.empty(order.size, dtype=np.float64)
    out[order] = values
    return out


def eligible(table: TurnTable) -> np.ndarray:
    """bool[N]: rows that may enter group statistics (``episode_ok & trainable``)."""
    return table.episode_ok & table.trainable


def dense(*cols: np.ndarray) -> tuple[np.ndarray, int]:
    """Intern the row-wise tuple of integer columns to dense codes.

    Non-negative columns are packed into one int64 key by mixed radix (other columns are
    first densified with ``np.unique``), then one ``np.unique`` gives the codes.

    Returns:
        (int64[N] codes in 0..n-1 ordered like the sorted tuples, n). Equal tuples get
        equal codes.
    """
    key = np.zeros(np.asarray(cols[0]).shape[0], dtype=np.int64)
    radix_total = 1
    for c in cols:
        c = np.asarray(c, dtype=np.int64)
        if c.size and (c.min() < 0 or c.max() >= 2**31):
            c = np.unique(c, return_inverse=True)[1].reshape(-1)
        radix = int(c.max()) + 1 if c.size else 1
        if radix_total * radix >= 2**62:
            key = np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)
            radix_total = int(key.max()) + 1 if key.size else 1
        key = key * radix + c
        radix_total *= radix
    uniq, codes = np.unique(key, return_inverse=True)
    return codes.reshape(-1).astype(np.int64), int(uniq.size)


def next_row(st: TurnTable) -> np.ndarray:
    """int64[N]: index of the next turn of the same episode in a canonical table, -1 at
    an episode's last turn."""
    n = len(st)
    nxt = np.full(n, -1, dtype=np.int64)
    if n > 1:
        same = st.episode[1:] == st.episode[:-1]
        nxt[:-1][same] = np.arange(1, n)[same]
    return nxt


def first_of_episode(st: TurnTable) -> np.ndarray:
    """bool[N]: the first (lowest-t) row of each episode in a canonical table."""
    first = np.ones(len(st), dtype=bool)
    first[1:] = st.episode[1:] != st.episode[:-1]
    return first


def first_eligible_of_episode(st: TurnTable, elig: np.ndarray) -> np.ndarray:
    """bool[N]: the first (lowest-t) row of each episode among the ``elig`` rows of a canonical
    table (an episode without an eligible row has none)."""
    out = np.zeros(len(st), dtype=bool)
    idx = np.flatnonzero(elig)
    if idx.size:
        ep = st.episode[idx]
        keep = np.ones(idx.size, dtype=bool)
        keep[1:] = ep[1:] != ep[:-1]
        out[idx[keep]] = True
    return out


def episode_sum(st: TurnTable, values: np.ndarray) -> np.ndarray:
    """float64[N]: per row, the sum of ``values`` over its episode (EpReward for rewards)."""
    code, n = dense(st.episode)
    return np.bincount(code, weights=values, minlength=n)[code]


def backward_recursion(x: np.ndarray, coef: np.ndarray, nxt: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Solve ``y_i = x_i + coef_i * y_{nxt(i)}`` (``y = x`` where ``nxt = -1``).

    Args:
        x, coef: float64[N]. nxt: int64[N] successor row or -1. level: int64[N] with
        ``level[nxt[i]] > level[i]`` (the turn index ``t``).
    Returns:
        float64[N].
    """
    y = np.zeros(x.size, dtype=np.float64)
    order = np.argsort(-level, kind="stable")
    bounds = np.flatnonzero(np.diff(level[order])) + 1
    for idx in np.split(order, bounds):
        j = nxt[idx]
        y[idx] = x[idx] + coef[idx] * np.where(j >= 0, y[np.maximum(j, 0)], 0.0)
    return y


def discounted_returns(st: TurnTable, gamma: float, c_inv: float) -> np.ndarray:
    """ALGORITHMS.md §1.3: ``R_t = r_t + γ R_{t+1}`` per episode (no bootstrap), then
    ``R_t -= c_inv`` on rows with an invalid action. float64[N], canonical table."""
    coef = np.full(len(st), float(gamma))
    ret = backward_recursion(st.reward, coef, next_row(st), st.t)
    return ret - c_inv * (~st.action_valid)


def outcome_score(st: TurnTable, c_inv: float) -> np.ndarray:
    """ALGORITHMS.md §1.1: ``EpReward(episode) − c_inv · invalid`` per row, float64[N]."""
    return episode_sum(st, st.reward) - c_inv * (~st.action_valid)


def segment_stats(
    values: np.ndarray, seg: np.ndarray, contrib: np.ndarray, *, ddof: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-segment count, mean, std (``ddof``) and exact-tie flag over rows with ``contrib``.

    Args:
        values: float64[N]. seg: int64[N] codes ≥ 0. contrib: bool[N].
    Returns:
        (int64[S] count, float64[S] mean, float64[S] std, bool[S] tie) with
        S = ``seg.max() + 1``. ``tie`` marks segments with ≥ 2 members that are all
        identical; there the mean is that exact value and the std is 0 (§0.5 N4).
    """
    n = int(seg.max()) + 1 if seg.size else 0
    s, v = seg[contrib], values[contrib]
    cnt = np.bincount(s, minlength=n)
    mean = np.bincount(s, weights=v, minlength=n) / np.maximum(cnt, 1)
    ss = np.bincount(s, weights=(v - mean[s]) ** 2, minlength=n)
    std = np.sqrt(ss / np.maximum(cnt - ddof, 1))
    ref = np.zeros(n)
    ref[s] = v
    tie = (cnt >= 2) & (np.bincount(s, weights=(v != ref[s]).astype(np.float64), minlength=n) == 0)
    return cnt, np.where(tie, ref, mean), np.where(tie, 0.0, std), tie


def group_norm(
    values: np.ndarray,
    seg: np.ndarray,
    contrib: np.ndarray,
    apply: np.ndarray,
    *,
    mode: str,
    keep_singleton: bool,
    ddof: int = 1,
    eps: float = EPS,
) -> np.ndarray:
    """The group normaliser GN of ALGORITHMS.md §1.4 over segments ``seg``.

    Statistics use the rows with ``contrib``; rows with ``apply`` are normalised with
    their own value. Per segment with m contributing values:
    m ≥ 2 not all identical → ``(v − mean)/(std + eps)`` (``mean_std_norm``, std with
    ``ddof``) or ``v − mean`` (``mean_norm``); m ≥ 2 all identical → mean = that value,
    std = 0 (tied rows give exactly 0, N4); m = 1 → mean 0, std 1 if ``keep_singleton``
    else 0; m = 0 → 0.

    Args:
        values: float64[N]. seg: int64[N] segment codes (≥ 0). contrib, apply: bool[N].
    Returns:
        float64[N], 0 outside ``apply``.
    """
    cnt, mean, std, tie = segment_stats(values, seg, contrib, ddof=ddof)
    single = cnt == 1
    mean = np.where(single, 0.0, mean)
    std = np.where(single, 1.0, std)
    valid = (cnt >= 2) | (single & keep_singleton)
    x = values - mean[seg]
    if mode == "mean_std_norm":
        x = x / (std[seg] + eps)
    return np.where(apply & valid[seg], x, 0.0)


def episode_term(
    st: TurnTable, score: np.ndarray, elig: np.ndarray, *, mode: str, stats_over: str, eps: float
) -> np.ndarray:
    """EPI of ALGORITHMS.md §1.5 on a canonical table: GN of ``score`` inside each group
    (episode-level singleton rule). ``stats_over="steps"``: every eligible row
    contributes; ``"trajectories"``: one row per episode, its first *eligible* one (t = 0
    unless that turn is not trainable, e.g. a proxy call aborted or superseded by a retry:
    the episode still counts once, never drops out of its group's statistics)."""
    check_choice("stats_over", stats_over, STATS_OVER)
    contrib = elig if stats_over == "steps" else first_eligible_of_episode(st, elig)
    seg, _ = dense(st.group)
    return group_norm(score, seg, contrib, elig, mode=mode, keep_singleton=True, eps=eps)


def step_group_norm(
    values: np.ndarray, seg: np.ndarray, elig: np.ndarray, *, mode: str, eps: float, ddof: int = 1
) -> np.ndarray:
    """GN with the step-level singleton rule (singleton → 0), statistics over eligible rows."""
    return group_norm(values, seg, elig, elig, mode=mode, keep_singleton=False, ddof=ddof, eps=eps)
