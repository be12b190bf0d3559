"""Why a turn has its advantage: the estimator's own breakdown, run on the group's stored rows.

The shipped estimators with a breakdown (``agentrl.credit.breakdown_estimators``) compare rows
only inside their task group, so the viewer rebuilds the group's ``TurnTable`` from the store
(``agentrl.store.table.build_table``: exactly what the trainer's ``TurnStore.table`` gave for
those episodes), runs ``agentrl.credit.explain_advantages`` with the run's
``algorithm.kwargs`` from the ``config.yaml`` beside the store (the estimator's defaults when
there is none for this run or it names another estimator) and compares each turn's total with
the stored advantage. A total that differs (other kwargs, a store edited since) is shown with
a note, never hidden. Nothing here re-implements an estimator.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: A total within this (relative to max(1, |stored|)) of the stored advantage matches it.
MATCH_TOL = 1e-9
#: Other members of a term's comparison group listed per turn (the count shown is exact).
MEMBER_CAP = 12
#: Groups with more turns than this are not explained (the page says so).
EXPLAIN_TURN_CAP = 20000


@dataclass(frozen=True, slots=True)
class Member:
    """Another turn of the same comparison group: ids and ``t``."""

    episode_id: int
    t: int
    turn_id: int


@dataclass(frozen=True, slots=True)
class TermView:
    """One term of one turn's advantage as shown.

    Attributes:
        name, doc, formula: from ``agentrl.credit.Term``.
        x: the normalised quantity; value: the term; weight: its weight; contribution: weight · value.
        size: members of the comparison group that entered its statistics; mean/std: the
            statistics used (``None``: the term was not normalised for this turn).
        members: other turns of the comparison group (at most ``MEMBER_CAP``); n_members: their count.
    """

    name: str
    doc: str
    formula: str
    x: float
    size: int
    mean: float | None
    std: float | None
    value: float
    weight: float
    contribution: float
    members: list[Member]
    n_members: int


@dataclass(frozen=True, slots=True)
class TurnExplanation:
    """The terms of one turn, extra per-row quantities, their total and the stored advantage."""

    terms: list[TermView]
    extras: list[tuple[str, float]]
    total: float
    stored: float | None

    @property
    def matches(self) -> bool:
        """The total equals the stored advantage within ``MATCH_TOL`` (False when none is stored)."""
        return self.stored is not None and abs(self.total - self.stored) <= MATCH_TOL * max(1.0, abs(self.stored))


@dataclass(frozen=True, slots=True)
class GroupExplanation:
    """The breakdown of one group's advantages under one estimator.

    Attributes:
        estimator: the estimator (``None``: no advantage stored).
        kwargs: the hyperparameters it was run with (only the ones set; defaults otherwise).
        source: where ``kwargs`` came from, in words.
        note: why there is no breakdown (``None`` when there is one).
        turns: ``turn_id → TurnExplanation``.
        n_mismatch: turns whose total differs from their stored advantage.
    """

    estimator: str | None
    kwargs: dict
    source: str
    note: str | None
    turns: dict[int, TurnExplanation] = field(default_factory=dict)
    n_mismatch: int = 0


def run_kwargs(store_path: Path, run_id: str, estimator: str) -> tuple[dict, str]:
    """``(algorithm.kwargs, source)`` of ``run_id`` from the ``config.yaml`` beside the store when
    it is this run's and trains ``estimator``; else ``({}, why the defaults are used)``."""
    cfg_file = Path(store_path).parent / "config.yaml"
    if not cfg_file.is_file():
        return {}, f"the estimator's defaults (no config.yaml beside {Path(store_path).name})"
    import yaml

    try:
        raw = yaml.safe_load(cfg_file.read_text(encoding="utf-8")) or {}
        name = (raw.get("run") or {}).get("name")
        algo = raw.get("algorithm") or {}
    except (yaml.YAMLError, OSError, AttributeError):
        return {}, f"the estimator's defaults ({cfg_file} is not readable YAML)"
    if name != run_id:
        return {}, f"the estimator's defaults ({cfg_file} is run {name!r}'s)"
    if algo.get("estimator") != estimator:
        return {}, f"the estimator's defaults ({cfg_file} trains {algo.get('estimator')!r})"
    kwargs = algo.get("kwargs") or {}
    return (dict(kwargs), f"algorithm.kwargs of {cfg_file}") if isinstance(kwargs, dict) else (
        {}, f"the estimator's defaults (algorithm.kwargs of {cfg_file} is not a mapping)")


def group_table(conn: sqlite3.Connection, key: int, run_id: str, group_id: int):
    """The ``TurnTable`` of the group's episodes (rows by episode, t), or ``None`` when the group
    has more than ``EXPLAIN_TURN_CAP`` turns."""
    from agentrl.store.records import EpisodeRecord
    from agentrl.store.table import build_table
    from agentrl.types import EpisodeStatus

    rows = conn.execute("SELECT episode_id, group_id, env_id, task_id, seed, status, error, n_turns, return_, success, "
                        "created_at FROM episodes WHERE run_key = ? AND group_id = ? ORDER BY episode_id",
                        (key, group_id)).fetchall()
    if sum(r[7] for r in rows) > EXPLAIN_TURN_CAP:
        return None
    recs = [EpisodeRecord(run_id, r[0], r[1], r[2], r[3], r[4], EpisodeStatus(r[5]), r[6], r[7], r[8], bool(r[9]),
                          r[10]) for r in rows]
    if not recs:
        from agentrl.types import TurnTable

        return TurnTable.from_episodes([])
    return build_table(conn, key, recs, "AND episode_id IN (SELECT episode_id FROM episodes WHERE run_key = ? "
                                        "AND group_id = ?)", (key, group_id))


def _advantage_iteration(conn: sqlite3.Connection, key: int, table, estimator: str, what: str) -> int:
    """The (1-based) iteration at which ``estimator``'s advantages of ``table``'s turns were stored.
    Raises ValueError (naming ``what`` needed it) when none is stored."""
    import json

    row = conn.execute("SELECT min(iteration) FROM advantages WHERE run_key = ? AND estimator = ? AND turn_id IN "
                       "(SELECT value FROM json_each(?))", (key, estimator, json.dumps(table.turn_id.tolist()))).fetchone()
    if row is None or row[0] is None:
        raise ValueError(f"no advantage of these turns is stored, so the iteration of their {what} is unknown")
    return int(row[0])


def _with_state_stats(conn: sqlite3.Connection, key: int, table, estimator: str):
    """``table`` with 3SPO's ``state_stats`` read from the store at the iteration its advantages were
    stored at (``agentrl.store.state_stats``). Raises ValueError when none is stored."""
    import dataclasses

    from agentrl.store.state_stats import query_state_stats, state_stats_column

    it = _advantage_iteration(conn, key, table, estimator, "state statistics")
    return dataclasses.replace(table, state_stats=state_stats_column(table, query_state_stats(conn, key, it,
                                                                                             table.anchor_vocab)))


def _with_scores(conn: sqlite3.Connection, key: int, table, estimator: str, names: list[str]):
    """``table`` with the step scorers' columns ``names`` (OPRL's ``prm_logratio``, StepOPSD's ``gap``)
    as the trainer stored them beside the advantages (``agentrl.store.scores``). Raises ValueError when
    the store holds none for these turns."""
    import dataclasses

    from agentrl.store.scores import read_scores

    it = _advantage_iteration(conn, key, table, estimator, "scorer columns")
    try:
        stored = [r[0] for r in conn.execute("SELECT DISTINCT name FROM turn_scores WHERE run_key = ? AND "
                                             "iteration = ?", (key, it))]
    except sqlite3.OperationalError:  # a store written before the table existed
        stored = []
    got = read_scores(conn, key, table.turn_id, it, sorted(set(stored) | set(names)))  # optional columns too
    missing = [n for n in names if n not in got]
    if missing:
        raise ValueError(f"the store holds no {missing} for these turns (written by a trainer that did not keep the "
                         "step scorers' columns)")
    return dataclasses.replace(table, scores={**table.scores, **got})


def _scheduled(store_path: Path, kwargs: dict, conn: sqlite3.Connection, key: int, table, estimator: str) -> dict:
    """``kwargs`` at the iteration of the stored advantages under the run's ``algorithm.schedule``
    (e.g. StepOPSD's decaying ``lambda_mix``); unchanged without one."""
    import yaml

    from agentrl.config.schedule import scheduled_kwargs

    cfg_file = Path(store_path).parent / "config.yaml"
    try:
        schedule = ((yaml.safe_load(cfg_file.read_text(encoding="utf-8")) or {}).get("algorithm") or {}).get("schedule")
    except (yaml.YAMLError, OSError, AttributeError):
        return kwargs
    if not isinstance(schedule, dict) or not schedule or any(k not in kwargs for k in schedule):
        return kwargs
    it = _advantage_iteration(conn, key, table, estimator, "scheduled hyperparameters")
    return scheduled_kwargs(kwargs, schedule, it - 1)  # stored 1-based; the trainer scheduled at it - 1


def _num(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def explain_group(conn: sqlite3.Connection, store_path: Path, run_id: str, key: int, group_id: int,
                  estimator: str | None, stored: dict[int, float]) -> GroupExplanation:
    """The breakdown of ``estimator`` on group ``group_id``'s stored turns.

    Args:
        stored: ``turn_id → stored advantage`` of the turns to compare with (the shown ones).
    Returns:
        A ``GroupExplanation``; ``note`` says why there is none (no advantage, an estimator
        without a breakdown or not registered here, a group too large, a table the estimator
        refuses).
    """
    from agentrl.credit import explain_advantages, get_estimator

    if estimator is None:
        return GroupExplanation(None, {}, "", "no advantage stored for these turns")
    try:
        spec = get_estimator(estimator)
    except KeyError:
        return GroupExplanation(estimator, {}, "", f"estimator {estimator!r} is not registered in this process "
                                                   "(a plugin's?): no breakdown")
    if spec.breakdown is None:
        return GroupExplanation(estimator, {}, "", f"no breakdown: estimator {estimator!r} does not expose one")
    kwargs, source = run_kwargs(store_path, run_id, estimator)
    table = group_table(conn, key, run_id, group_id)
    if table is None:
        return GroupExplanation(estimator, kwargs, source, f"no breakdown: the group has more than {EXPLAIN_TURN_CAP} "
                                                           "turns")
    try:
        if "state_stats" in spec.requires:  # 3SPO: the earlier iterations' statistics, as the trainer read them
            table = _with_state_stats(conn, key, table, estimator)
        scored = [c for c in spec.requires if c not in table.scores and not hasattr(table, c)]
        if scored:  # a step scorer's columns (OPRL, StepOPSD), as the trainer stored them
            table = _with_scores(conn, key, table, estimator, scored)
        if kwargs:
            kwargs = _scheduled(store_path, kwargs, conn, key, table, estimator)
        b = explain_advantages(table, estimator, **kwargs)
    except (ValueError, TypeError, KeyError, LookupError, RuntimeError) as exc:
        return GroupExplanation(estimator, kwargs, source, f"no breakdown: {exc}")
    total = b.total()
    episode = table.episode
    row_of = {int(tid): i for i, tid in enumerate(table.turn_id)}
    turns: dict[int, TurnExplanation] = {}
    for tid, value in stored.items():
        i = row_of.get(int(tid))
        if i is None:
            continue
        terms = []
        for term in b.terms:
            g = int(term.group[i])
            same = np.flatnonzero(term.group == g) if g >= 0 else np.zeros(0, dtype=np.int64)
            same = same[same != i]
            members = [Member(int(episode[j]), int(table.t[j]), int(table.turn_id[j])) for j in same[:MEMBER_CAP]]
            terms.append(TermView(term.name, term.doc, term.formula, float(term.x[i]), int(term.size[i]),
                                  _num(term.mean[i]), _num(term.std[i]), float(term.value[i]), float(term.weight[i]),
                                  float(term.contribution[i]), members, int(same.size)))
        turns[int(tid)] = TurnExplanation(terms, [(k, float(v[i])) for k, v in b.extras.items()], float(total[i]),
                                          None if value is None else float(value))
    n_bad = sum(1 for e in turns.values() if e.stored is not None and not e.matches)
    return GroupExplanation(estimator, kwargs, source, None, turns, n_bad)
