"""Credit-fidelity metrics (issue 38): how close an estimator's advantages are to the exact ones,
and per-batch diagnostics any learning run can report.

Against exact advantages (``agentrl.credit.exact``), over the rows of one batch:

* ``corr``: Pearson correlation of A_est and A_true on junction turns (NaN when either is constant);
* ``sign_acc``: share of junction turns with A_true ≠ 0 whose A_est has the same sign (A_est = 0
  counts as wrong);
* ``failed_credit``: share of the *correct* junction choices (an exit onward) taken inside failed
  episodes that get A_est > 0 — the exact advantage gives most of them A > 0; an estimator whose
  episode term sets the sign cannot;
* ``noise_share``: Var(A_est) on filler turns / Var(A_est) on junction turns (what the gradient
  spends on turns where nothing is decided).

Without exact values (any ``TurnTable``; ``studies/learning_diag.py`` reads them per iteration):

* ``informative_share``: share of rows in an anchor group — (task group, ``anchor_key``) — that
  holds episodes of at least two different returns and at least two different actions: a state
  reached by winning and losing continuations where the actions differ, the only kind of group
  in which a per-state baseline can say something the episode baseline cannot;
* ``sign_vs_grpo``: share of rows whose advantage sign differs from GRPO's on the same table.
"""

from __future__ import annotations

import numpy as np

from agentrl.credit import compute_advantages
from agentrl.types import TurnTable


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def _share(mask: np.ndarray) -> float:
    return float(np.mean(mask)) if mask.size else float("nan")


def fidelity(a_est: np.ndarray, a_true: np.ndarray, kind: np.ndarray, onward: np.ndarray,
             won: np.ndarray) -> dict[str, float]:
    """The four fidelity metrics of one batch (module docstring).

    Args:
        a_est, a_true: float64[N] estimated and exact advantages per row.
        kind: str[N] state label per row (``"junction"``, ``"filler"``, ...).
        onward: bool[N] the row's action is a correct exit (leads on, not into a dead end).
        won: bool[N] the row's episode won.
    Returns:
        ``corr``, ``sign_acc``, ``failed_credit``, ``noise_share`` (floats, NaN where undefined).
    """
    j, f = kind == "junction", kind == "filler"
    nz = j & (a_true != 0)
    fc = j & onward & ~won
    vj = float(np.var(a_est[j])) if j.any() else float("nan")
    return {
        "corr": _corr(a_est[j], a_true[j]),
        "sign_acc": _share(np.sign(a_est[nz]) == np.sign(a_true[nz])),
        "failed_credit": _share(a_est[fc] > 0),
        "noise_share": float(np.var(a_est[f])) / vj if f.any() and vj > 0 else float("nan"),
    }


def episode_returns(episode: np.ndarray, reward: np.ndarray) -> np.ndarray:
    """float64[N]: each row's episode return (sum of its episode's rewards, undiscounted), from
    int64[N] ``episode`` ids and float64[N] ``reward``."""
    ep = np.unique(np.asarray(episode, np.int64), return_inverse=True)[1].reshape(-1)
    return np.bincount(ep, weights=np.asarray(reward, np.float64))[ep]


def _distinct_per_group(key: np.ndarray, values: np.ndarray) -> np.ndarray:
    """int64[G]: how many distinct ``values`` each group code 0..G-1 of ``key`` holds."""
    pairs = np.unique(np.stack([key.astype(np.float64), np.asarray(values, np.float64)], 1), axis=0)
    return np.bincount(pairs[:, 0].astype(np.int64), minlength=int(key.max()) + 1)


def informative_rows(table: TurnTable) -> np.ndarray:
    """bool[N]: the row is trainable, ``episode_ok``, and its (group, anchor) group holds >= 2
    distinct episode returns and >= 2 distinct actions (over such rows)."""
    use = np.asarray(table.trainable, bool) & np.asarray(table.episode_ok, bool)
    out = np.zeros(len(table), bool)
    if not use.any():
        return out
    key = np.unique(np.stack([table.group[use], table.anchor_key[use]], 1), axis=0, return_inverse=True)[1].ravel()
    ret = episode_returns(table.episode, table.reward)[use]
    n_ret, n_act = _distinct_per_group(key, ret), _distinct_per_group(key, np.asarray(table.action_key)[use])
    out[use] = ((n_ret >= 2) & (n_act >= 2))[key]
    return out


def informative_share(table: TurnTable) -> float:
    """Share of the trainable, ``episode_ok`` rows in informative anchor groups
    (``informative_rows``); NaN when there is no such row."""
    use = np.asarray(table.trainable, bool) & np.asarray(table.episode_ok, bool)
    return _share(informative_rows(table)[use])


def sign_vs_grpo(table: TurnTable, adv: np.ndarray) -> float:
    """Share of trainable rows whose advantage sign differs from GRPO's (defaults) on ``table``."""
    use = np.asarray(table.trainable, bool) & np.asarray(table.episode_ok, bool)
    ref = compute_advantages(table, "grpo")
    return _share(np.sign(adv[use]) != np.sign(ref[use]))


def noise_share_by_mask(adv: np.ndarray, decisive: np.ndarray) -> float:
    """Var(adv) on rows not ``decisive`` / Var(adv) on ``decisive`` rows (NaN where undefined);
    for runs without a task graph, ``decisive`` marks rows whose anchor group is informative."""
    d = np.asarray(decisive, bool)
    if not d.any() or d.all():
        return float("nan")
    vd = float(np.var(adv[d]))
    return float(np.var(adv[~d])) / vd if vd > 0 else float("nan")


def mean_ci(x: np.ndarray) -> tuple[float, float, float]:
    """(mean, lo, hi): the mean of the finite entries of ``x`` with a normal 95 % interval
    (± 1.96 · sd / √n, sd with ddof 1); NaNs where fewer than 2 entries are finite."""
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2:
        m = float(x.mean()) if x.size else float("nan")
        return m, float("nan"), float("nan")
    h = 1.96 * float(x.std(ddof=1)) / np.sqrt(x.size)
    return float(x.mean()), float(x.mean()) - h, float(x.mean()) + h


class StateCounts:
    """3SPO's per-state success statistics over earlier batches, in memory (ALGORITHMS.md §16.3): what
    ``agentrl.store.state_success_stats`` reads from a run's store, for the benchmarks that keep no
    store. Per anchor text: ok episodes that visited it as a current state (once each) and how many
    of them succeeded (reward > 0 on the final turn); ``episodes``: ok episodes seen."""

    def __init__(self) -> None:
        self.n: dict[str, int] = {}
        self.s: dict[str, int] = {}
        self.episodes = 0

    def fit(self, table: TurnTable) -> None:
        """Count ``table``'s ok episodes (after the batch was scored: a snapshot per batch)."""
        order = np.lexsort((table.t, table.episode))
        ep, ok = table.episode[order], table.episode_ok[order]
        last = np.append(ep[1:] != ep[:-1], True)
        won = dict(zip(ep[last].tolist(), (table.reward[order][last] > 0).tolist()))
        okd = dict(zip(ep[last].tolist(), ok[last].tolist()))
        self.episodes += sum(okd.values())
        for e, a in set(zip(ep.tolist(), table.anchor_key[order].tolist())):
            if okd[e]:
                text = table.anchor_vocab[a]
                self.n[text] = self.n.get(text, 0) + 1
                self.s[text] = self.s.get(text, 0) + int(won[e])

    def column(self, table: TurnTable) -> np.ndarray:
        """int64[N, 5] ``TurnTable.state_stats`` of ``table`` from the counts so far."""
        n = np.array([self.n.get(v, 0) for v in table.anchor_vocab] or [0], dtype=np.int64)
        s = np.array([self.s.get(v, 0) for v in table.anchor_vocab] or [0], dtype=np.int64)
        a, nx = table.anchor_key, table.next_anchor_key
        return np.stack([n[a], s[a], n[nx], s[nx], np.full(len(table), self.episodes + 1)], axis=1).astype(np.int64)
