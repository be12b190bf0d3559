"""What an advantage is made of: an estimator's optional breakdown into named terms.

An estimator registered with ``register_estimator(..., breakdown=fn)`` also says, per row,
which terms its advantage adds up and the statistics of the comparison group each term was
normalised in (its size, mean and std). ``fn(table, **kwargs)`` takes the estimator's own
keyword hyperparameters (all of them, defaults filled in) and returns a ``Breakdown``; it
is built from the *same* intermediate arrays the estimator sums (one code path per estimator,
no second implementation), so ``Breakdown.total()`` reproduces ``compute_advantages`` to
rounding (tests/credit/test_credit_breakdown.py: within 1e-12 on the ALGORITHMS.md §12
batch and random tables). ``explain_advantages`` validates and runs it like
``compute_advantages``; the viewer shows it per turn (docs/viewer.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from agentrl.credit import _segments as S
from agentrl.credit.registry import (get_estimator, is_branching, prepare_table, tree_estimators,
                                     validate_estimator_kwargs)
from agentrl.types import TurnTable

#: ``Term.formula`` of the two normalisers (x = the normalised quantity).
FORMULAS = {"mean_std_norm": "(x − mean)/(std + eps)", "mean_norm": "x − mean"}


@dataclass(frozen=True)
class Term:
    """One additive term of an advantage: row i contributes ``weight[i] · value[i]``.

    Attributes:
        name: short name, e.g. ``"episode"``, ``"step"``, ``"history k=2"``.
        doc: one line saying what the term is (with its ALGORITHMS.md section).
        value: float64[N] the term as the estimator computed it (0 where it gives nothing).
        weight: float64[N] its weight per row (ω, or HGPO's ``w_k / (Σ w + eps)``).
        x: float64[N] the quantity normalised (outcome score, step return, Q(C, a)).
        group: int64[N] code of the row's comparison group (rows with equal codes were
            compared with each other), -1 where the row is in none.
        size: int64[N] members of that group that entered its statistics (0: none).
        mean, std: float64[N] the statistics the normaliser used, after the singleton rule
            (an episode-level singleton uses mean 0, std 1); NaN where the term was not
            normalised for this row (singleton step group, not eligible).
        formula: how ``value`` follows from ``x``, ``mean``, ``std`` (``FORMULAS``).
    """

    name: str
    doc: str
    value: np.ndarray
    weight: np.ndarray
    x: np.ndarray
    group: np.ndarray
    size: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    formula: str

    @property
    def contribution(self) -> np.ndarray:
        """float64[N] ``weight · value``."""
        return self.weight * self.value


@dataclass(frozen=True)
class Breakdown:
    """An estimator's advantage per row as a sum of ``terms`` (rows in the table's order).

    Attributes:
        estimator: registry name.
        terms: the terms, in the order the estimator adds them.
        extras: named float64[N] per-row quantities behind the terms (e.g. ``"return R"``,
            GraphGPO's ``"d(next)"``), for display only.
        eps: the ``eps`` of the normalisers.
    """

    estimator: str
    terms: tuple[Term, ...]
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)
    eps: float = S.EPS

    def total(self) -> np.ndarray:
        """float64[N] Σ ``weight · value`` over the terms, in order (0 without terms)."""
        n = self.terms[0].value.size if self.terms else 0
        out = np.zeros(n) if not self.terms else self.terms[0].contribution.copy()
        for term in self.terms[1:]:
            out = out + term.contribution
        return out


def _scatter(order: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` of a canonical table back in the caller's row order (dtype kept)."""
    out = np.empty_like(values)
    out[order] = values
    return out


def gn_term(name: str, doc: str, value: np.ndarray, x: np.ndarray, seg: np.ndarray, contrib: np.ndarray,
            apply: np.ndarray, *, mode: str, keep_singleton: bool, ddof: int = 1,
            weight: float | np.ndarray = 1.0) -> Term:
    """A ``Term`` for a group-normaliser output ``value`` (``S.group_norm`` of ``x`` over
    ``seg`` with statistics from ``contrib`` rows, applied to ``apply`` rows), canonical order.

    The statistics are ``S.segment_stats`` with ``S.group_norm``'s singleton rule; ``value``
    itself is the estimator's own array, untouched.
    """
    cnt, mean, std, _ = S.segment_stats(x, seg, contrib, ddof=ddof)
    single = cnt == 1
    mean = np.where(single, 0.0, mean)
    std = np.where(single, 1.0, std)
    valid = (cnt >= 2) | (single & keep_singleton)
    used = apply & valid[seg]
    nan = np.full(x.size, np.nan)
    return Term(name, doc, value, np.broadcast_to(np.asarray(weight, dtype=np.float64), x.shape).copy(), x,
                np.where(apply | contrib, seg, -1).astype(np.int64), np.where(apply | contrib, cnt[seg], 0),
                np.where(used, mean[seg], nan), np.where(used, std[seg], nan), FORMULAS[mode])


def episode_gn_term(st: TurnTable, score: np.ndarray, value: np.ndarray, elig: np.ndarray, *, mode: str,
                    stats_over: str, weight: float | np.ndarray = 1.0) -> Term:
    """The ``Term`` of ``S.episode_term`` (§1.5; its ``value`` passed in), canonical order."""
    contrib = elig if stats_over == "steps" else S.first_eligible_of_episode(st, elig)
    who = "every eligible step" if stats_over == "steps" else "each episode once (its first eligible turn)"
    return gn_term("episode", f"episode term (§1.5): outcome score normalised in the task group, {who} counts",
                   value, score, S.dense(st.group)[0], contrib, elig, mode=mode, keep_singleton=True, weight=weight)


def make_breakdown(estimator: str, order: np.ndarray, terms: list[Term], extras: Mapping[str, np.ndarray] | None = None,
                   eps: float = S.EPS) -> Breakdown:
    """A ``Breakdown`` in the caller's row order from ``terms``/``extras`` of the canonical
    table ``table.take(order)``."""
    back = [Term(t.name, t.doc, *(_scatter(order, a) for a in (t.value, t.weight, t.x, t.group, t.size, t.mean, t.std)),
                 t.formula) for t in terms]
    return Breakdown(estimator, tuple(back), {k: _scatter(order, np.asarray(v, dtype=np.float64))
                                              for k, v in (extras or {}).items()}, eps)


def has_breakdown(name: str) -> bool:
    """True when estimator ``name`` registered a breakdown. Raises ``KeyError`` for an unknown name."""
    return get_estimator(name).breakdown is not None


def explain_advantages(table: TurnTable, name: str, *, group_by_version: bool = False, **kwargs: Any) -> Breakdown:
    """Run estimator ``name``'s breakdown on ``table`` (checked as ``compute_advantages``).

    Args:
        table: the turns (N rows).
        name: registered estimator name.
        group_by_version: as ``compute_advantages``; the terms' ``group`` codes then name
            (group, episode version) comparison groups.
        **kwargs: its hyperparameters (validated; defaults filled in before the call).
    Returns:
        The ``Breakdown``; ``total()`` equals ``compute_advantages(table, name,
        group_by_version=group_by_version, **kwargs)`` to rounding.
    Raises:
        LookupError: the estimator has no breakdown.
        KeyError / TypeError / ValueError: as ``compute_advantages``.
        RuntimeError: a term of the wrong shape or dtype.
    """
    full = validate_estimator_kwargs(name, kwargs)
    spec = get_estimator(name)
    if spec.breakdown is None:
        raise LookupError(f"estimator {name!r} has no breakdown of its advantage; estimators with one: "
                          f"{', '.join(breakdown_estimators())}")
    table = prepare_table(table, name, group_by_version)
    table.require(spec.requires)
    if not spec.accepts_trees and is_branching(table):
        raise ValueError(f"estimator {name!r} scores chains, but the table branches (tree rollouts); "
                         f"use one that accepts trees: {', '.join(tree_estimators())}")
    out = spec.breakdown(table, **full)
    for t in out.terms:
        for arr in (t.value, t.weight, t.x, t.mean, t.std):
            if arr.shape != (len(table),) or arr.dtype != np.float64:
                raise RuntimeError(f"estimator {name!r}: breakdown term {t.name!r} has {arr.dtype}{arr.shape}; "
                                   f"expected float64({len(table)},)")
    return out


def breakdown_estimators() -> list[str]:
    """Sorted names of the registered estimators that have a breakdown."""
    from agentrl.credit.registry import list_estimators

    return [n for n in list_estimators() if get_estimator(n).breakdown is not None]
