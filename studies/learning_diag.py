"""Per-run credit diagnostics of a ``studies/learning.py`` cell (issue 22).

What the trainer already logs per iteration in ``metrics.jsonl`` is used as is:
``adv/zero_frac`` (fraction of training turns — ``episode_ok & trainable`` — whose advantage
is exactly 0) and ``adv/anchor_singleton_rate`` (fraction whose (group, anchor state) occurs
once). Added from the run's store, per iteration:

* ``flat_group_share``: share of training turns in task groups whose episodes all have the
  same return (no outcome contrast: the usual reason an advantage is 0);
* ``signs``: whether the advantage's sign follows the outcome (``outcome_signs``: share of the
  nonzero advantages of below-group-mean episodes that are positive, and of above-mean ones
  that are negative);
* ``anchor``: the env-state anchor groups, (group, ``anchor_key``) — share of training turns
  in a group of size >= 2 and the mean size of the distinct groups (every estimator; the
  groups GiGPO compares inside);
* ``informative_share``, ``sign_vs_grpo``, ``noise_share`` (issue 38, ``fidelity.py``): share of
  training turns in informative anchor groups (>= 2 distinct returns and >= 2 distinct actions),
  share whose advantage sign differs from GRPO's on the same table, and Var(A) outside
  informative groups / Var(A) inside them;
* ``terms``: for an estimator with a registered breakdown, the comparison groups of each of
  its terms (GRPO's episode group, GiGPO's step groups, HGPO's history windows, GraphGPO's
  node groups, ...), with the same two statistics over the turns the term covers.

Each statistic is averaged over iterations (``mean``) and kept per iteration (``per_iter``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from studies.fidelity import episode_returns, informative_rows, noise_share_by_mask, sign_vs_grpo


def zero_fraction(advantages: np.ndarray, use: np.ndarray) -> float:
    """Fraction of the rows in ``use`` (bool mask) whose advantage is exactly 0 (NaN if none)."""
    a = np.asarray(advantages, dtype=np.float64)[np.asarray(use, dtype=bool)]
    return float(np.mean(a == 0.0)) if a.size else float("nan")


def group_stats(codes: np.ndarray, use: np.ndarray) -> dict[str, float]:
    """Statistics of the groups ``codes`` puts the rows in (int codes, -1 = in no group).

    Over the rows in ``use`` that are in a group (size counts only those rows):
    ``share_ge2`` — fraction of them in a group of >= 2; ``mean_size`` — mean size of the
    distinct groups; ``groups`` / ``rows`` — how many groups and rows. ``coverage`` — fraction
    of the ``use`` rows that are in a group at all. NaN where there is nothing to count.
    """
    codes = np.asarray(codes, dtype=np.int64)
    use = np.asarray(use, dtype=bool)
    n_use = int(use.sum())
    c = codes[use & (codes >= 0)]
    if c.size == 0:
        nan = float("nan")
        return {"share_ge2": nan, "mean_size": nan, "groups": 0, "rows": 0, "coverage": 0.0 if n_use else nan}
    _, inverse, counts = np.unique(c, return_inverse=True, return_counts=True)
    return {"share_ge2": float(np.mean(counts[inverse] >= 2)), "mean_size": float(counts.mean()),
            "groups": int(counts.size), "rows": int(c.size), "coverage": c.size / n_use}


def _returns_vs_group(group: np.ndarray, episode: np.ndarray, reward: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: its episode's return (sum of the episode's rewards) and the mean return of the
    episodes of its task group, both (N,) float64."""
    group, episode = np.asarray(group, dtype=np.int64), np.asarray(episode, dtype=np.int64)
    ret = episode_returns(episode, reward)
    first = np.unique(episode, return_index=True)[1]  # one row per episode: its group and return
    gs, ginv = np.unique(group[first], return_inverse=True)
    gmean = np.bincount(ginv, weights=ret[first], minlength=gs.size) / np.bincount(ginv, minlength=gs.size)
    return ret, gmean[np.searchsorted(gs, group)]


def flat_group_share(group: np.ndarray, episode: np.ndarray, reward: np.ndarray, use: np.ndarray) -> float:
    """Fraction of the ``use`` rows whose task group has every episode with the same return
    (sum of its rewards): no outcome contrast there, so every episode-level term is 0."""
    use = np.asarray(use, dtype=bool)
    if not use.any():
        return float("nan")
    group = np.asarray(group, dtype=np.int64)
    ret, _ = _returns_vs_group(group, episode, reward)
    spread = {int(g): bool(np.any(ret[group == g] != ret[group == g][0])) for g in np.unique(group)}
    return float(np.mean([not spread[int(g)] for g in group[use]]))


def outcome_signs(group: np.ndarray, episode: np.ndarray, reward: np.ndarray, advantages: np.ndarray,
                  use: np.ndarray) -> dict[str, float]:
    """Does the advantage's sign follow the episode's outcome? Over the ``use`` rows with a
    nonzero advantage whose episode's return differs from its group's mean:
    ``below_positive`` — share of the rows of below-mean episodes (failures, on 0/1 rewards)
    with advantage > 0; ``above_negative`` — share of the rows of above-mean episodes with
    advantage < 0. Step-level terms can rightly do either (a good step in a failed episode),
    but a large ``below_positive`` reinforces failed episodes' actions. NaN when no row counts."""
    a = np.asarray(advantages, dtype=np.float64)
    ret, gmean = _returns_vs_group(group, episode, reward)
    keep = np.asarray(use, dtype=bool) & (a != 0)
    below, above = keep & (ret < gmean), keep & (ret > gmean)
    nan = float("nan")
    return {"below_positive": float(np.mean(a[below] > 0)) if below.any() else nan,
            "above_negative": float(np.mean(a[above] < 0)) if above.any() else nan}


def anchor_codes(group: np.ndarray, anchor_key: np.ndarray) -> np.ndarray:
    """One int64 code per distinct (group, anchor_key) pair (the env-state anchor groups)."""
    pairs = np.stack([np.asarray(group, dtype=np.int64), np.asarray(anchor_key, dtype=np.int64)], axis=1)
    return np.unique(pairs, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64)


def _mean_over(per_iter: list[dict], path: tuple[str, ...]) -> float:
    vals = []
    for d in per_iter:
        for k in path:
            d = d.get(k, {}) if isinstance(d, dict) else {}
        if isinstance(d, (int, float)) and np.isfinite(d):
            vals.append(float(d))
    return float(np.mean(vals)) if vals else float("nan")


def summarise(per_iter: list[dict]) -> dict:
    """Means over iterations of every numeric leaf of the per-iteration dicts (same nesting)."""
    def leaves(d, prefix=()):
        for k, v in d.items():
            if isinstance(v, dict):
                yield from leaves(v, prefix + (k,))
            elif isinstance(v, (int, float)):
                yield prefix + (k,)
    paths = sorted({p for d in per_iter for p in leaves(d)})
    out: dict = {}
    for p in paths:
        node = out
        for k in p[:-1]:
            node = node.setdefault(k, {})
        node[p[-1]] = _mean_over(per_iter, p)
    return out


def iteration_diagnostics(table, advantages: np.ndarray, estimator: str, kwargs: dict) -> dict:
    """Diagnostics of one iteration's ``TurnTable`` and the advantages it was trained on."""
    use = table.episode_ok & table.trainable
    out = {"zero_frac": zero_fraction(advantages, use), "flat_group_share": flat_group_share(table.group, table.episode,
                                                                                            table.reward, use),
           "anchor": group_stats(anchor_codes(table.group, table.anchor_key), use),
           "signs": outcome_signs(table.group, table.episode, table.reward, advantages, use)}
    informative = informative_rows(table)
    out["informative_share"] = float(np.mean(informative[use])) if use.any() else float("nan")
    out["sign_vs_grpo"] = sign_vs_grpo(table, advantages)
    out["noise_share"] = noise_share_by_mask(np.asarray(advantages)[use], informative[use])
    from agentrl.credit.registry import get_estimator

    if get_estimator(estimator).breakdown is not None:
        from agentrl.credit.breakdown import explain_advantages

        try:
            bd = explain_advantages(table, estimator, **kwargs)
        except (ValueError, LookupError) as e:  # a column the store does not keep (e.g. hidden)
            out["terms_error"] = str(e)
        else:
            out["terms"] = {t.name: group_stats(np.where(t.size > 0, t.group, -1), use) for t in bd.terms}
    return out


def run_diagnostics(run_dir: Path, run_id: str, estimator: str, kwargs: dict) -> dict:
    """Diagnostics of a finished run: ``logged`` (metrics.jsonl means and per-iteration
    values of ``adv/zero_frac``, ``adv/anchor_singleton_rate``, ``rollout/turns``) and
    ``store`` (``iteration_diagnostics`` of each iteration's turns, mean and per iteration)."""
    from agentrl.store import TurnStore

    rows = [json.loads(s) for s in (run_dir / "metrics.jsonl").read_text().splitlines() if s.strip()]
    rows = [r for r in rows if "adv/zero_frac" in r]
    logged = {k: [r.get(k) for r in rows] for k in ("adv/zero_frac", "adv/anchor_singleton_rate", "rollout/turns",
                                                   "rollout/success_rate", "adv/std")}
    per_iter = []
    with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
        recs = store.advantages(run_id, estimator=estimator)
        table = store.table(run_id)
        it_of = {r.turn_id: r.iteration for r in recs}
        val_of = {r.turn_id: r.value for r in recs}
        rows_it = np.array([it_of.get(int(t), -1) for t in table.turn_id], dtype=np.int64)
        adv = np.array([val_of.get(int(t), 0.0) for t in table.turn_id], dtype=np.float64)
        ep_it = {}
        for e, i in zip(table.episode, rows_it):  # an episode's iteration: that of any of its stored advantages
            if i >= 0:
                ep_it[int(e)] = int(i)
        ep_rows = np.array([ep_it.get(int(e), -1) for e in table.episode], dtype=np.int64)
        for it in sorted(set(ep_rows.tolist()) - {-1}):
            idx = np.flatnonzero(ep_rows == it)
            d = iteration_diagnostics(table.take(idx), adv[idx], estimator, kwargs)
            per_iter.append({"iteration": it, **d})
    means = {k: (float(np.nanmean([v for v in vs if v is not None])) if any(v is not None for v in vs) else None)
             for k, vs in logged.items()}
    return {"logged": {"mean": means, "per_iter": logged},
            "store": {"mean": summarise([{k: v for k, v in d.items() if k != "iteration"} for d in per_iter]),
                      "per_iter": per_iter}}
