"""HiPER's HAE (ALGORITHMS.md §14.3) written as the spec reads: one Python loop per trajectory,
segment by segment, turn by turn. The tests compare it with ``agentrl.credit.hiper`` on random
tables; ``benchmarks/credit.py`` times it as the naive baseline."""

from __future__ import annotations

import math
from collections import defaultdict

MISSING = -1


def _episodes(tb) -> list[list[int]]:
    eps = defaultdict(list)
    for i in range(len(tb)):
        eps[int(tb.episode[i])].append(i)
    return [sorted(rs, key=lambda i: int(tb.t[i])) for rs in eps.values()]


def _shaped(tb, rows, keep_penalty, keep_penalty_mode, cons, requires_both, c_inv) -> list[float]:
    T = len(rows)
    out = []
    for pos, i in enumerate(rows):
        r = float(tb.reward[i])
        keep = not tb.switch[i]
        if keep and keep_penalty_mode == "fixed":
            r += keep_penalty
        elif keep and T > 1:
            r += keep_penalty / T
        if not tb.action_valid[i]:
            r -= c_inv
        if pos >= 1 and keep:
            g, g_prev = int(tb.subgoal_key[i]), int(tb.subgoal_key[rows[pos - 1]])
            both = g != MISSING and g_prev != MISSING
            if g != g_prev and (both or not requires_both):
                r += cons
        out.append(r)
    return out


def _whiten(values: dict[int, float], members: list[int]) -> dict[int, float]:
    vals = [values[i] for i in members]
    if not vals:
        return {}
    if all(v == vals[0] for v in vals):
        return {i: 0.0 for i in members}
    mu = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / len(vals))
    return {i: (values[i] - mu) / (sd + 1e-8) for i in members}


def hiper_parts(tb, gamma=1.0, lam_turn=1.0, lam_seg=0.95, keep_penalty=-0.3, keep_penalty_mode="normalized",
                keep_consistency_penalty=-0.3, keep_consistency_requires_both=True, c_inv=0.1,
                bootstrap_truncated=True, norm_adv=True, use_term=True, bootstrap="own") -> dict[str, list[float]]:
    """The six arrays of ``HAE`` as lists in the table's row order."""
    n = len(tb)
    a_lo, a_hi, a_te = {}, {}, {}
    out = {k: [0.0] * n for k in ("ret_low", "ret_high", "ret_term")}
    starts_with_subgoal, switch_rows, elig_rows = [], [], []
    for rows in _episodes(tb):
        r = _shaped(tb, rows, keep_penalty, keep_penalty_mode, keep_consistency_penalty,
                    keep_consistency_requires_both, c_inv)
        T = len(rows)
        starts = [p for p in range(T) if p == 0 or tb.switch[rows[p]]]
        segs = [(s, (starts[k + 1] - 1) if k + 1 < len(starts) else T - 1) for k, s in enumerate(starts)]
        vl = [float(tb.value_low[i]) for i in rows]
        vh = [float(tb.value_high[i]) for i in rows]
        nd = [0.0 if tb.terminated[i] else 1.0 for i in rows]
        own_low = [float(tb.bootstrap_value[rows[-1]]) if bootstrap == "next_state" else vl[-1]]
        boots = []
        for k, (s, e) in enumerate(segs):
            last = k + 1 == len(segs)
            if not last:
                boot = vh[segs[k + 1][0]]
            elif nd[e] == 1.0 and bootstrap_truncated:
                boot = float(tb.bootstrap_value[rows[-1]]) if bootstrap == "next_state" else vh[s]
            else:
                boot = 0.0
            boots.append(boot)
            adv_next = 0.0
            ret_te_next = nd[e] * boot
            for p in range(e, s - 1, -1):
                if p < e:
                    v_next = vl[p + 1]
                elif nd[p] == 1.0 and not last:
                    v_next = vh[segs[k + 1][0]]
                elif nd[p] == 1.0 and bootstrap_truncated:
                    v_next = own_low[0]
                else:
                    v_next = 0.0
                delta = r[p] + gamma * nd[p] * v_next - vl[p]
                adv_next = delta + gamma * lam_turn * nd[p] * (adv_next if p < e else 0.0)
                a_lo[rows[p]] = adv_next
                out["ret_low"][rows[p]] = adv_next + vl[p]
                ret_te_next = r[p] + gamma * ret_te_next
                out["ret_term"][rows[p]] = ret_te_next if use_term else 0.0
                if use_term:
                    a_te[rows[p]] = ret_te_next - float(tb.value_term[rows[p]])
        a_next = 0.0
        for k in range(len(segs) - 1, -1, -1):
            s, e = segs[k]
            d = e - s + 1
            g = sum(gamma ** j * r[s + j] for j in range(d))
            delta = g + gamma ** d * nd[e] * boots[k] - vh[s]
            a_next = delta + gamma ** d * lam_seg * nd[e] * a_next
            a_hi[rows[s]] = a_next
            out["ret_high"][rows[s]] = a_next + vh[s]
        for p, i in enumerate(rows):
            if tb.episode_ok[i] and tb.trainable[i]:
                elig_rows.append(i)
                if p in starts and int(tb.subgoal_key[i]) != MISSING:
                    starts_with_subgoal.append(i)
                if use_term and (tb.has_switch is None or tb.has_switch[i]):
                    switch_rows.append(i)
    parts = []
    for vals, members in ((a_lo, elig_rows), (a_hi, starts_with_subgoal), (a_te, switch_rows)):
        got = _whiten(vals, members) if norm_adv else {i: vals[i] for i in members}
        parts.append([got.get(i, 0.0) for i in range(n)])
    out.update(adv_low=parts[0], adv_high=parts[1], adv_term=parts[2])
    return out


def hiper(tb, **kw) -> list[float]:
    """The per-row advantage of D-14a: the sum of the three span advantages."""
    p = hiper_parts(tb, **kw)
    return [p["adv_low"][i] + p["adv_high"][i] + p["adv_term"][i] for i in range(len(tb))]
