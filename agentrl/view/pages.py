"""Page models of the viewer: one function per page, from a read connection to a dataclass
the Jinja2 template renders (no SQL in templates, no HTML here). The group pages (episodes
with advantages, siblings side by side) are in ``group_pages``."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path

from agentrl.store.schema import recorded_tokenizer
from agentrl.view import queries as q
from agentrl.view import turns as tq
from agentrl.view.charts import line_chart, order_metrics
from agentrl.view.db import Page, run_key
from agentrl.view.explain import GroupExplanation, TurnExplanation, explain_group
from agentrl.view.search import SearchResult, search_turns
from agentrl.view.tokens import Decoder, TokenSpan, completion_spans, advantage_colour, load_decoder, run_tokenizer
from agentrl.view.totals import RunSummary, RunTotals
from agentrl.view.tree import Branch, build_forest, is_branched

#: Anchor-group peers listed per turn (the count shown is exact).
PEER_CAP = 50


@dataclass(frozen=True, slots=True)
class Chart:
    """One metric's name and its inline SVG."""

    name: str
    svg: str


@dataclass(frozen=True, slots=True)
class IterationRow:
    """One iteration and its value of each metric of ``RunPage.metric_names`` (``None``: not logged)."""

    iteration: int
    values: list[float | None]


@dataclass(frozen=True, slots=True)
class RunPage:
    """A run: metric charts, a page of iterations, a page of groups (filtered)."""

    run: RunSummary
    charts: list[Chart]
    metric_names: list[str]
    iterations: list[IterationRow]
    iter_page: int
    iter_pages: int
    estimators: list[str]
    groups: Page[q.GroupRow]
    filters: q.Filters


@dataclass(frozen=True, slots=True)
class IterationPage:
    """One iteration: its metric values, advantage statistics per estimator, its groups."""

    run_id: str
    iteration: int
    metrics: list[tuple[str, float]]
    stats: list[q.AdvantageStats]
    groups: Page[q.GroupRow]
    filters: q.Filters


@dataclass(frozen=True, slots=True)
class Peer:
    """A turn of the same group with the same anchor state, its advantage (or ``None``) and colour."""

    turn: tq.GroupTurn
    advantage: float | None
    colour: str


@dataclass(frozen=True, slots=True)
class TurnCard:
    """Everything shown for one turn on the episode page."""

    turn: tq.TurnRow
    advantages: list[tq.AdvantageValue]
    picked: tq.AdvantageValue | None
    colour: str
    spans: list[TokenSpan]
    prompt_text: str | None
    completion_text: str | None
    peers: list[Peer]
    n_peers: int
    why: TurnExplanation | None


@dataclass(frozen=True, slots=True)
class EpisodePage:
    """One episode: summary, a page of turn cards, the colour scale and the group's tree."""

    run_id: str
    episode: q.EpisodeRow
    cards: list[TurnCard]
    turns: Page[tq.TurnRow]
    estimator: str | None
    iteration: int | None
    scale: float
    tokenizer: str | None
    forest: list[Branch] | None
    cut: bool
    explanation: GroupExplanation


def run_page(conn: sqlite3.Connection, totals: RunTotals, run_id: str, filters: q.Filters, *, after: int | None,
             before: int | None, iter_page: int, page_size: int) -> RunPage:
    """The run page (totals from the viewer's ``RunTotals``). Raises ``KeyError`` for an unknown run."""
    key = run_key(conn, run_id)
    run = totals.summaries(conn, after=key - 1, limit=1).items[0]
    series = q.metric_series(conn, key)
    names = order_metrics(list(series))
    adv_keys = q.advantage_keys(conn, key)
    its = sorted({x for xs, _ in series.values() for x in xs} | {it for it, _ in adv_keys})
    pages = max(1, -(-len(its) // page_size))
    iter_page = min(max(iter_page, 1), pages)
    lookup = {n: dict(zip(*series[n])) for n in names}
    rows = [IterationRow(it, [lookup[n].get(it) for n in names])
            for it in its[(iter_page - 1) * page_size: iter_page * page_size]]
    return RunPage(run, [Chart(n, line_chart(n, *series[n])) for n in names], names, rows, iter_page, pages,
                   sorted({e for _, e in adv_keys}), q.groups(conn, key, filters, after=after, before=before,
                                                               limit=page_size), filters)


def iteration_page(conn: sqlite3.Connection, run_id: str, iteration: int, filters: q.Filters, *,
                   after: int | None, before: int | None, page_size: int) -> IterationPage:
    """The page of one iteration (groups restricted to those with advantages at it)."""
    key = run_key(conn, run_id)
    metrics = [(n, float(v)) for n, v in conn.execute(
        "SELECT name, value FROM metrics WHERE run_key = ? AND iteration = ? ORDER BY name", (key, iteration))]
    filters = replace(filters, iteration=iteration)
    return IterationPage(run_id, iteration, metrics, q.advantage_stats(conn, key, iteration),
                         q.groups(conn, key, filters, after=after, before=before, limit=page_size), filters)


def episode_page(conn: sqlite3.Connection, store: Path, run_id: str, episode_id: int, filters: q.Filters, *,
                 after: int | None, before: int | None, page_size: int, tokenizer: str | None) -> EpisodePage:
    """The page of one episode. Raises ``KeyError`` for an unknown run or episode."""
    key = run_key(conn, run_id)
    ep = q.episode(conn, key, episode_id)
    page = tq.episode_turns(conn, key, episode_id, after=after, before=before, limit=page_size)
    group, cut = tq.group_turns(conn, key, ep.group_id)
    on_page = {t.turn_id for t in page.items}
    all_peers = {t.turn_id: tq.anchor_peers(group, t.anchor_obs, t.turn_id) for t in page.items}
    peers = {tid: ps[:PEER_CAP] for tid, ps in all_peers.items()}
    wanted = on_page | {p.turn_id for ps in peers.values() for p in ps}
    advs = tq.turn_advantages(conn, key, sorted(wanted))
    est = filters.estimator or tq.default_estimator({t: advs[t] for t in on_page}) or tq.default_estimator(advs)
    picked = {t: tq.pick(v, est, filters.iteration) for t, v in advs.items()}
    scale = max((abs(p.value) for p in picked.values() if p is not None), default=0.0)
    tok = tokenizer or run_tokenizer(store, run_id, recorded_tokenizer(conn, run_id))
    decoder: Decoder | None = load_decoder(tok) if tok else None
    expl = explain_group(conn, store, run_id, key, ep.group_id, est,
                         {t: p.value for t in on_page if (p := picked[t]) is not None})
    cards = []
    for t in page.items:
        p = picked[t.turn_id]
        val = None if p is None else p.value
        cards.append(TurnCard(
            t, advs[t.turn_id], p, advantage_colour(val, scale),
            completion_spans(t.completion_ids, t.completion_logprobs, val, scale, decoder),
            decoder.text(t.prompt_ids) if decoder else None, decoder.text(t.completion_ids) if decoder else None,
            [_peer(g, picked[g.turn_id], scale) for g in peers[t.turn_id]], len(all_peers[t.turn_id]),
            expl.turns.get(t.turn_id)))
    forest = build_forest(group) if is_branched(group) else None
    return EpisodePage(run_id, ep, cards, Page(page.items, page.next_after, page.prev_before), est,
                       filters.iteration, scale, tok, forest, cut, expl)


def _peer(turn: tq.GroupTurn, adv: tq.AdvantageValue | None, scale: float) -> Peer:
    value = None if adv is None else adv.value
    return Peer(turn, value, advantage_colour(value, scale))


@dataclass(frozen=True, slots=True)
class SearchPage:
    """A text search over a run's turns (``search.search_turns``); ``result`` is ``None`` before a query."""

    run_id: str
    text: str
    where: str
    after: int | None
    result: SearchResult | None


def search_page(conn: sqlite3.Connection, run_id: str, text: str, *, where: str, after: int | None,
                page_size: int) -> SearchPage:
    """The search page of a run. Raises ``KeyError`` for an unknown run."""
    key = run_key(conn, run_id)
    if not text:
        return SearchPage(run_id, text, where, after, None)
    return SearchPage(run_id, text, where, after,
                      search_turns(conn, key, text, where=where, after=-1 if after is None else after, limit=page_size))
