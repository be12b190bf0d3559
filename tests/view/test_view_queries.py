"""Viewer queries on the hand-built store (tests/view/conftest.py): every number is known."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest

from agentrl.store import TurnStore
from agentrl.view import queries as q
from agentrl.view import turns as tq
from agentrl.view.totals import RunTotals
from agentrl.store.schema import VIEW_INDEXES
from agentrl.view.db import index_warnings, keyset_page, open_read, run_key
from view_fixtures import GRPO, make_episode, make_turn


def drop_view_indexes(path) -> None:
    """Make ``path`` look like a store written before the viewer's indexes joined the schema."""
    with closing(sqlite3.connect(path)) as raw:
        for name in VIEW_INDEXES:
            raw.execute(f"DROP INDEX {name}")


@pytest.fixture()
def conn(hand_store):
    c = open_read(hand_store.path)
    yield c
    c.close()


def _groups(conn, **kw):
    return q.groups(conn, run_key(conn, "hand"), q.Filters(**kw)).items


def test_group_rows_aggregate_their_episodes(conn):
    g0, g1 = _groups(conn)
    assert g0 == q.GroupRow(0, "agentrl/Toy-v0", "t0", n_episodes=2, n_success=1, mean_return=0.5, n_turns=4, n_failed=0)
    # the env_error episode is counted and flagged, but its return does not enter the mean (PITFALLS P5)
    assert g1 == q.GroupRow(1, "agentrl/Other-v0", "t1", n_episodes=2, n_success=0, mean_return=0.5, n_turns=4, n_failed=1)


@pytest.mark.parametrize("filters, groups, n_episodes", [
    ({"env": "agentrl/Other-v0"}, [1], [2]),
    ({"task": "t0"}, [0], [2]),
    ({"success": True}, [0], [1]),
    ({"success": False}, [0, 1], [1, 2]),
    ({"policy_version": 1}, [0], [1]),
    ({"estimator": "grpo"}, [0], [2]),
    ({"estimator": "gigpo"}, [0, 1], [2, 2]),
    ({"iteration": 0}, [0], [2]),
    ({"iteration": 1, "estimator": "gigpo"}, [0, 1], [2, 2]),
    ({"iteration": 0, "estimator": "gigpo"}, [], []),
    ({"estimator": "nope"}, [], []),
    ({"env": "agentrl/Toy-v0", "policy_version": 0}, [0], [1]),
])
def test_filters_select_the_right_episodes(conn, filters, groups, n_episodes):
    rows = _groups(conn, **filters)
    assert [g.group_id for g in rows] == groups
    assert [g.n_episodes for g in rows] == n_episodes


def test_episodes_of_a_group_and_unknown_episode(conn):
    key = run_key(conn, "hand")
    page = q.episodes(conn, key, q.Filters(), group_id=1)
    assert [(e.episode_id, e.status, e.error) for e in page.items] == [(2, "ok", ""), (3, "env_error", "worker died")]
    assert q.episode(conn, key, 0).success is True and q.episode(conn, key, 0).return_ == 1.0
    with pytest.raises(KeyError, match="episode 9 is not in this run"):
        q.episode(conn, key, 9)
    with pytest.raises(KeyError, match="run"):
        run_key(conn, "hnad")


@pytest.mark.parametrize("n, limit", [(23, 5), (10, 5), (1, 3), (0, 4), (7, 1)])
def test_keyset_pages_cover_every_row_once_both_ways(n, limit):
    rows = list(range(0, 3 * n, 3))  # sparse keys

    def fetch(op, params, m):
        sel = [r for r in rows if not op or (r > params[0] if op == "> ?" else r < params[0])]
        return (sel[::-1] if op == "< ?" else sel)[:m]

    pages, page = [], keyset_page(fetch, int, after=None, before=None, limit=limit)
    while True:
        pages.append(page.items)
        assert len(page.items) <= limit
        if page.next_after is None:
            break
        page = keyset_page(fetch, int, after=page.next_after, before=None, limit=limit)
    assert [r for p in pages for r in p] == rows
    back = [page.items]
    while page.prev_before is not None:
        page = keyset_page(fetch, int, after=None, before=page.prev_before, limit=limit)
        back.append(page.items)
    assert back[::-1] == pages


def test_keyset_rejects_a_bad_page_size():
    with pytest.raises(ValueError, match="page size"):
        keyset_page(lambda *a: [], int, after=None, before=None, limit=0)


def test_group_pages_walk_many_groups(tmp_path):
    path = tmp_path / "many.sqlite"
    with TurnStore(path) as store:
        store.add_episodes([make_episode(g, "e", f"t{g}", [make_turn(0, "A", float(g))]) for g in range(23)], run_id="r")
    with closing(open_read(path)) as conn:
        key, seen, after = run_key(conn, "r"), [], None
        while True:
            page = q.groups(conn, key, q.Filters(), after=after, limit=5)
            seen += [g.group_id for g in page.items]
            if page.next_after is None:
                break
            after = page.next_after
        assert seen == list(range(23))
        last = q.groups(conn, key, q.Filters(), before=20, limit=5)
        assert [g.group_id for g in last.items] == [15, 16, 17, 18, 19] and last.prev_before == 15


def test_advantage_keys_and_stats(conn):
    key = run_key(conn, "hand")
    assert q.advantage_keys(conn, key) == [(0, "grpo"), (1, "gigpo")]
    (s,) = q.advantage_stats(conn, key, 0)
    assert (s.estimator, s.n, s.mean, s.min, s.max) == ("grpo", 4, 0.0, -0.5, 0.5)
    assert s.std == pytest.approx((sum(v * v for v in GRPO) / 4) ** 0.5, rel=1e-12)
    assert q.advantage_stats(conn, key, 7) == []


def test_advantage_keys_lists_every_estimator_of_an_iteration(hand_store):
    with TurnStore(hand_store.path) as store:
        store.set_advantages("hand", hand_store.turn_ids[3], [1.0], 1, "bipace")
        store.set_advantages("hand", hand_store.turn_ids[3], [2.0], 5, "zeta")
    for indexed in (True, False):  # without the viewer's index (an older store): same answer (hints dropped)
        if not indexed:
            drop_view_indexes(hand_store.path)
        with closing(open_read(hand_store.path)) as conn:
            assert q.advantage_keys(conn, 1) == [(0, "grpo"), (1, "bipace"), (1, "gigpo"), (5, "zeta")]


def test_metric_series(conn):
    series = q.metric_series(conn, run_key(conn, "hand"))
    assert series == {"rollout/success_rate": ([0, 1], [0.5, 0.25]), "update/approx_kl": ([0, 1], [0.01, 0.03])}


def test_run_summaries(conn):
    (r,) = RunTotals().summaries(conn).items
    assert (r.run_id, r.n_episodes, r.n_groups, r.n_turns, r.n_failed, r.n_iterations) == ("hand", 4, 2, 8, 1, 2)
    assert r.success_rate == pytest.approx(1 / 3)  # 1 win among the 3 ok episodes


def _full(conn, key):
    return RunTotals().get(conn, key)


def test_run_totals_grow_incrementally_and_equal_a_full_count(hand_store):
    totals = RunTotals()
    with closing(open_read(hand_store.path)) as conn:
        first = totals.get(conn, 1)
        assert (first.n_episodes, first.n_groups, first.n_turns, first.n_failed, first.n_ok, first.n_ok_success) == (4, 2, 8, 1, 3, 1)
    with TurnStore(hand_store.path) as store:  # new episodes: one in an existing group, two in a new group
        store.add_episodes([make_episode(1, "e", "t1", [make_turn(0, "A", 1.0, won=True)]),
                            make_episode(7, "e", "t7", [make_turn(0, "A", 0.0), make_turn(1, "B", 0.0)]),
                            make_episode(7, "e", "t7", [make_turn(0, "A", 1.0, won=True)])], run_id="hand")
    with closing(open_read(hand_store.path)) as conn:
        grown = totals.get(conn, 1)
        assert grown == _full(conn, 1)
        assert (grown.n_episodes, grown.n_groups, grown.n_turns, grown.n_ok_success, grown.last_episode) == (7, 3, 12, 3, 6)
    for explicit in (50, 20):  # 20: an explicit id below the last one seen (50) is caught by the count check
        ep = make_episode(9, "e", "t9", [make_turn(0, "A", 0.0)])
        ep.episode_id = ep.turns[0].episode_id = explicit
        with TurnStore(hand_store.path) as store:
            store.add_episodes([ep], run_id="hand")
        with closing(open_read(hand_store.path)) as conn:
            assert totals.get(conn, 1) == _full(conn, 1)
    with closing(open_read(hand_store.path)) as conn:
        t = totals.get(conn, 1)
        assert (t.n_episodes, t.n_groups, t.last_episode) == (9, 4, 50)


def test_episode_turns_flag_the_segment_fork_across_pages(conn, hand_store):
    key = run_key(conn, "hand")
    page = tq.episode_turns(conn, key, 2)
    assert [(t.t, t.segment, t.new_segment) for t in page.items] == [(0, 0, False), (1, 0, False), (2, 1, True)]
    last = tq.episode_turns(conn, key, 2, after=1, limit=1)  # t=2 alone: its previous turn is on another page
    assert [(t.t, t.new_segment) for t in last.items] == [(2, True)] and last.next_after is None
    t0 = page.items[0]
    assert t0.prompt_ids.tolist() == [1, 2, 3] and t0.completion_logprobs.tolist() == [-0.5, -1.25]
    assert t0.turn_id == hand_store.turn_ids[2][0]


def test_turn_advantages_pick_and_default(conn, hand_store):
    key = run_key(conn, "hand")
    ids = hand_store.all_turn_ids()
    advs = tq.turn_advantages(conn, key, ids)
    assert [a.value for a in advs[ids[0]]] == [0.5, 0.1] and advs[ids[7]][0].estimator == "gigpo"
    assert tq.default_estimator(advs) == "gigpo"
    assert tq.default_estimator({ids[0]: advs[ids[0]][:1]}) == "grpo"
    assert tq.pick(advs[ids[1]], "grpo", None).value == -0.25
    assert tq.pick(advs[ids[1]], "gigpo", None).value == pytest.approx(-0.2)
    assert tq.pick(advs[ids[1]], "grpo", 1) is None and tq.pick(advs[ids[7]], "grpo", None) is None


def test_anchor_peers_share_the_exact_anchor(conn, hand_store):
    key = run_key(conn, "hand")
    turns, cut = tq.group_turns(conn, key, 0)
    assert not cut and [(g.episode_id, g.t) for g in turns] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    e0t0 = hand_store.turn_ids[0][0]
    assert [(g.episode_id, g.t) for g in tq.anchor_peers(turns, "A", e0t0)] == [(1, 0)]
    assert tq.anchor_peers(turns, "B", hand_store.turn_ids[0][1]) == []
    turns, cut = tq.group_turns(conn, key, 0, cap=3)
    assert cut and len(turns) == 3


def test_indexes_are_in_the_schema_and_used(conn, hand_store):
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert set(VIEW_INDEXES) <= names
    assert index_warnings(conn, hand_store.path) == []
    cond, params = q.Filters().sql(1)
    plan = " ".join(r[3] for r in conn.execute(
        f"EXPLAIN QUERY PLAN SELECT e.group_id, count(*) FROM episodes e INDEXED BY view_episodes_by_group "
        f"WHERE e.run_key = ? AND {cond} GROUP BY e.group_id ORDER BY e.group_id LIMIT 5", [1, *params]))
    assert "view_episodes_by_group" in plan and "TEMP B-TREE" not in plan


def test_pages_work_on_a_store_without_the_viewer_indexes(tmp_path):
    path = tmp_path / "old.sqlite"
    with TurnStore(path) as store:
        store.add_episodes([make_episode(0, "e", "t", [make_turn(0, "A", 0.0)])], run_id="r")
    drop_view_indexes(path)
    with closing(open_read(path)) as conn:  # no index: the fallback queries still answer
        (warning,) = index_warnings(conn, path)
        assert "agentrl store index" in warning
        assert [g.group_id for g in q.groups(conn, run_key(conn, "r"), q.Filters()).items] == [0]
        assert len(tq.group_turns(conn, run_key(conn, "r"), 0)[0]) == 1
        assert [g.group_id for g in q.groups(conn, run_key(conn, "r"), q.Filters(policy_version=0)).items] == [0]
