"""The viewer explains an advantage with the estimator's own breakdown: on a store whose advantages
were computed as the trainer does (``store.table`` of the iteration's episodes, then
``compute_advantages`` with ``algorithm.kwargs``), every shown total equals the stored advantage;
other kwargs give a visible note; estimators without a breakdown say so; the group page sorts by
advantage; the sibling view and the text search show the right turns."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

pytest.importorskip("fastapi", reason="the viewer needs the view extra: pip install 'agentrl[view]'")
from fastapi.testclient import TestClient  # noqa: E402

from agentrl.credit import compute_advantages  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402
from agentrl.types import EpisodeStatus  # noqa: E402
from agentrl.view import ViewerOptions, create_app  # noqa: E402
from view_fixtures import elements, make_episode, make_turn  # noqa: E402

CASES = [("grpo", {"mode": "mean_norm", "stats_over": "trajectories"}), ("dr_grpo", {}),
         ("gigpo", {"gamma": 0.8, "step_advantage_w": 0.5}), ("hgpo", {"base_group": True, "history_length": 1}),
         ("g2po", {"success_reward": 1.0}), ("graphgpo", {"normalize_distance": True, "gamma": 0.5}),
         ("bipace", {"tau": 0.2})]


@pytest.fixture()
def trained(tmp_path):
    """Run ``r``: 2 groups × 4 episodes (1–4 turns, repeated anchors, a failed episode), hidden states."""
    rng = np.random.default_rng(7)
    path = tmp_path / "run" / "store.sqlite"
    eps = []
    for g in range(2):
        for k in range(4):
            n = int(rng.integers(1, 5))
            turns = []
            for t in range(n):
                tr = make_turn(t, f"s{int(rng.integers(0, 3))}", float(rng.choice([0.0, 1.0])), won=t == n - 1 and k % 2 == 0)
                tr.hidden = rng.normal(size=3).astype(np.float32)
                turns.append(tr)
            status = EpisodeStatus.ENV_ERROR if (g, k) == (1, 3) else EpisodeStatus.OK
            eps.append(make_episode(g, "agentrl/Toy-v0", f"t{g}", turns, status=status))
    with TurnStore(path) as store:
        store.add_episodes(eps, run_id="r")
    return path, [e.episode_id for e in eps]


def _train(path, ids, estimator, kwargs, iteration):
    """What agentrl train does for one iteration, and its config.yaml beside the store."""
    with TurnStore(path) as store:
        table = store.table("r", ids)
        store.set_advantages("r", table.turn_id, compute_advantages(table, estimator, **kwargs), iteration, estimator)
    (path.parent / "config.yaml").write_text(yaml.safe_dump({"run": {"name": "r"}, "algorithm": {
        "estimator": estimator, "kwargs": kwargs}}))


def _shown(client, episode, estimator, iteration):
    html = client.get(f"/episode?run=r&episode={episode}&estimator={estimator}&iteration={iteration}").text
    return html, [(float(b["data-total"]), float(b["data-stored"])) for b in elements(html, "bd-total")]


@pytest.mark.parametrize("estimator,kwargs", CASES)
def test_shown_total_equals_the_stored_advantage(trained, estimator, kwargs):
    path, ids = trained
    _train(path, ids, estimator, kwargs, iteration=2)
    with TurnStore(path, readonly=True) as store:
        stored = {a.turn_id: a.value for a in store.advantages("r", iteration=2, estimator=estimator)}
    c = TestClient(create_app(ViewerOptions(store=path)))
    n = 0
    for e in ids:
        html, shown = _shown(c, e, estimator, 2)
        advs = elements(html, "adv-main")
        assert len(shown) == len(advs) > 0
        for a, (total, kept) in zip(advs, shown):
            assert kept == stored[int(a["data-turn-id"])]
            assert abs(total - kept) <= 1e-12, (estimator, e, total, kept)
            n += 1
        assert "bd-mismatch" not in html and "algorithm.kwargs of" in html
        for term in elements(html, "term"):
            assert np.isfinite(float(term["data-contribution"]))
    assert n == len(stored)


def test_other_kwargs_show_a_note_not_a_silent_total(trained):
    path, ids = trained
    _train(path, ids, "gigpo", {"gamma": 0.5}, iteration=0)
    (path.parent / "config.yaml").write_text(yaml.safe_dump({"run": {"name": "r"}, "algorithm": {
        "estimator": "gigpo", "kwargs": {"gamma": 0.9, "step_advantage_w": 3.0}}}))
    c = TestClient(create_app(ViewerOptions(store=path)))
    html, shown = _shown(c, ids[0], "gigpo", 0)
    assert any(abs(t - s) > 1e-6 for t, s in shown)
    assert "bd-mismatch" in html and "differs from the stored advantage" in html and "gamma=0.9" in html
    (path.parent / "config.yaml").unlink()  # no config: the defaults, said so
    html = c.get(f"/episode?run=r&episode={ids[0]}&estimator=gigpo").text
    assert "the estimator&#39;s defaults (no config.yaml beside store.sqlite)" in html


def test_estimator_without_breakdown_says_so(trained):
    path, ids = trained
    with TurnStore(path) as store:
        table = store.table("r", ids)
        store.set_advantages("r", table.turn_id, np.zeros(len(table)), 0, "tree_grpo")
    html = TestClient(create_app(ViewerOptions(store=path))).get(f"/episode?run=r&episode={ids[0]}").text
    assert "no breakdown: estimator &#39;tree_grpo&#39; does not expose one" in html
    assert not elements(html, "bd-total")


def test_group_page_advantage_column_and_sort(trained):
    path, ids = trained
    _train(path, ids, "gigpo", {}, iteration=1)
    c = TestClient(create_app(ViewerOptions(store=path, page_size=3)))
    with TurnStore(path, readonly=True) as store:
        table = store.table("r", ids)
        adv = {a.turn_id: a.value for a in store.advantages("r", iteration=1)}
    mean = {}
    for e in ids[:4]:
        vs = [adv[int(t)] for t in table.turn_id[table.episode == e]]
        mean[e] = sum(vs) / len(vs)
    order = sorted(mean, key=lambda e: (-mean[e], e))
    html = c.get("/group?run=r&group=0&sort=advantage&desc=1").text
    assert [int(r["data-episode"]) for r in elements(html, "episode-row")] == order[:3]
    assert [float(a["data-value"]) for a in elements(html, "ep-adv")] == pytest.approx([mean[e] for e in order[:3]])
    html2 = c.get("/group?run=r&group=0&sort=advantage&desc=1&page=2").text
    assert [int(r["data-episode"]) for r in elements(html2, "episode-row")] == order[3:]
    asc = c.get("/group?run=r&group=0&sort=advantage").text
    assert [int(r["data-episode"]) for r in elements(asc, "episode-row")] == sorted(mean, key=lambda e: (mean[e], e))[:3]


def test_siblings_side_by_side(trained):
    path, ids = trained
    _train(path, ids, "gigpo", {}, iteration=1)
    html = TestClient(create_app(ViewerOptions(store=path))).get("/siblings?run=r&group=0").text
    assert [int(h["data-episode"]) for h in elements(html, "sib-col")] == ids[:4]
    with TurnStore(path, readonly=True) as store:
        adv = {a.turn_id: a.value for a in store.advantages("r", iteration=1)}
        n_turns = sum(len(store.turns(e, "r")) for e in ids[:4])
    cells = elements(html, "sib-adv")
    assert len(cells) == n_turns and all(float(x["data-value"]) == adv[int(x["data-turn-id"])] for x in cells)
    totals = [float(x["data-total"]) for x in elements(html, "sib-terms")]
    assert totals == pytest.approx([float(x["data-value"]) for x in cells], abs=1e-12)


def test_text_search_is_paged_and_bounded(trained, monkeypatch):
    from agentrl.view import search
    from agentrl.view.db import run_key

    path, ids = trained
    c = TestClient(create_app(ViewerOptions(store=path, page_size=2)))
    with TurnStore(path, readonly=True) as store:
        want = [t.turn_id for e in ids for t in store.turns(e, "r") if "SEE S1" in t.observation.upper()]
    got, url = [], "/search?run=r&q=see%20S1&in=observation"
    while url:
        html = c.get(url).text
        got += [int(h["data-turn-id"]) for h in elements(html, "hit")]
        nxt = re.search(r'rel="next" href="([^"]+)"', html)
        url = nxt.group(1).replace("&amp;", "&") if nxt else None
    assert got == want and len(want) > 2
    monkeypatch.setattr(search, "SCAN_TURNS", 3)  # a slice of 3 turns per request: still every hit, in order
    got, after = [], -1
    while after is not None:
        with TurnStore(path, readonly=True) as store:
            res = search.search_turns(store._db(), run_key(store._db(), "r"), "act 1", where="action", after=after, limit=50, scan=3)
        got += [h.turn_id for h in res.hits]
        after = res.next_after
    with TurnStore(path, readonly=True) as store:
        assert got == [t.turn_id for e in ids for t in store.turns(e, "r") if t.action == "act 1"]
    assert elements(c.get("/search?run=r&q=50%25_x").text, "hit") == []  # % and _ are literal
