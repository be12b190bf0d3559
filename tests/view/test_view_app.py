"""The viewer's pages over HTTP (FastAPI TestClient, in-process): values shown = values stored."""

from __future__ import annotations

import json
import re
import sqlite3
from html import unescape

import pytest

pytest.importorskip("fastapi", reason="the viewer needs the view extra: pip install 'agentrl[view]'")
from fastapi.testclient import TestClient  # noqa: E402

from agentrl.cli import main  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402
from agentrl.view import ViewerOptions, create_app  # noqa: E402
from view_fixtures import GRPO, elements, make_episode, make_turn  # noqa: E402


def _client(path, **kw) -> TestClient:
    return TestClient(create_app(ViewerOptions(store=path, **kw)))


def test_every_page_answers(hand_store):
    c = _client(hand_store.path)
    for url in ("/", "/run?run=hand", "/iteration?run=hand&iteration=1", "/group?run=hand&group=1",
                "/episode?run=hand&episode=2", "/run?run=hand&env=agentrl/Other-v0&success=0&estimator=gigpo",
                "/run?run=hand&ipage=9", "/group?run=hand&group=0&policy_version=1"):
        r = c.get(url)
        assert r.status_code == 200, (url, r.text[-300:])


def test_run_page_charts_every_metric_and_lists_iterations(hand_store):
    html = _client(hand_store.path).get("/run?run=hand").text
    assert html.count('<svg class="chart"') == 2
    assert 'aria-label="rollout/success_rate"' in html and 'aria-label="update/approx_kl"' in html
    assert re.search(r'iteration=1">1</a></td>\s*<td class="num">0.25</td><td class="num">0.03</td>', html)
    assert "4 episodes in 2 groups, 8 turns" in html and "1 failed" in html


def test_iteration_page_shows_advantage_stats_and_its_groups(hand_store):
    html = _client(hand_store.path).get("/iteration?run=hand&iteration=0").text
    assert re.search(r"<td>grpo</td><td class=\"num\">4</td><td class=\"num\">0</td>", html)
    assert "group=0&" in html and "group=1&" not in html  # only group 0 has iteration-0 advantages


def test_episode_page_shows_the_stored_advantages(hand_store):
    c = _client(hand_store.path)
    with TurnStore(hand_store.path, readonly=True) as store:
        stored = {(a.turn_id, a.estimator, a.iteration): a.value for a in store.advantages("hand")}
    # default: the latest estimator (gigpo, iteration 1)
    main_advs = elements(c.get("/episode?run=hand&episode=0").text, "adv-main")
    assert [int(a["data-turn-id"]) for a in main_advs] == hand_store.turn_ids[0]
    for a in main_advs:
        assert (a["data-estimator"], a["data-iteration"]) == ("gigpo", "1")
        assert float(a["data-value"]) == stored[(int(a["data-turn-id"]), "gigpo", 1)]
    # chosen estimator / iteration
    grpo = elements(c.get("/episode?run=hand&episode=1&estimator=grpo&iteration=0").text, "adv-main")
    assert [float(a["data-value"]) for a in grpo] == GRPO[2:]
    # no grpo advantage on group 1's turns: none shown, not 0
    html = c.get("/episode?run=hand&episode=2&estimator=grpo").text
    assert elements(html, "adv-main") == [] and html.count('<span class="adv">none</span>') == 3


def test_anchor_group_lists_the_peer_and_its_advantage(hand_store):
    html = _client(hand_store.path).get("/episode?run=hand&episode=0&estimator=grpo").text
    peers = elements(html, "peer-adv")
    assert [(int(p["data-turn-id"]), float(p["data-value"])) for p in peers] == [(hand_store.turn_ids[1][0], GRPO[2])]
    assert "1 other turn of group 0 shared this state" in html and "0 other turns of group 0" in html


def test_tokens_ids_logprobs_mask_and_decoding(hand_store, word_tokenizer):
    plain = _client(hand_store.path).get("/episode?run=hand&episode=0").text
    toks = elements(plain, "tok")
    assert [t["data-id"] for t in toks] == ["4", "5", "4", "5"]
    assert toks[1]["title"] == "id 5 · logprob -1.2500 · mask 1"
    assert "prompt: 3 tokens (loss mask 0)" in plain and "1 2 3</pre>" in plain and "ids only" in plain
    decoded = _client(hand_store.path, tokenizer=str(word_tokenizer)).get("/episode?run=hand&episode=0").text
    assert elements(decoded, "tok")[0]["title"] == "id 4 · logprob -0.5000 · mask 1 · 'open'"
    assert '<pre class="prompt-text">look north door</pre>' in decoded


def test_tokenizer_found_through_the_run_config_beside_the_store(hand_store, word_tokenizer):
    model = hand_store.path.parent / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text(word_tokenizer.read_text())
    (hand_store.path.parent / "config.yaml").write_text(f"run:\n  name: hand\npolicy:\n  model: {model}\n")
    html = _client(hand_store.path).get("/episode?run=hand&episode=0").text
    assert f"decoded with {model}" in html and '<pre class="prompt-text">look north door</pre>' in html
    (hand_store.path.parent / "config.yaml").write_text(f"run:\n  name: other\npolicy:\n  model: {model}\n")
    assert "ids only" in _client(hand_store.path).get("/episode?run=hand&episode=0").text


def test_branched_group_draws_its_tree_and_the_fork_badge(hand_store):
    c = _client(hand_store.path)
    html = c.get("/group?run=hand&group=1").text
    assert 'class="tree"' in html and "e2:t0" in html and "e3:t0" in html
    tree = html[html.index('<ul class="tree">'):]
    assert tree.index("e2:t0") < tree.index("<ul>") < tree.index("e3:t0")  # e3 nested under the branch point
    assert 'class="tree"' not in c.get("/group?run=hand&group=0").text  # independent rollouts: no tree
    ep = c.get("/episode?run=hand&episode=2").text
    assert ep.count('<span class="badge fork"') == 1 and "env_error" in c.get("/episode?run=hand&episode=3").text


def test_turn_pages(hand_store):
    c = _client(hand_store.path, turns_per_page=2)
    html = c.get("/episode?run=hand&episode=2").text
    assert len(elements(html, "turn")) == 2
    nxt = re.search(r'rel="next" href="([^"]+)"', html).group(1).replace("&amp;", "&")
    html2 = c.get(nxt).text
    assert [int(t["data-turn-id"]) for t in elements(html2, "turn")] == hand_store.turn_ids[2][2:]
    prev = re.search(r'rel="prev" href="([^"]+)"', html2).group(1).replace("&amp;", "&")
    assert [int(t["data-turn-id"]) for t in elements(c.get(prev).text, "turn")] == hand_store.turn_ids[2][:2]


def test_bad_requests_name_the_problem(hand_store):
    c = _client(hand_store.path)
    r = c.get("/run?run=hnad")
    assert r.status_code == 404 and "hand" in r.text  # did you mean
    r = c.get("/episode?run=hand&episode=42")
    assert r.status_code == 404 and "episode 42 is not in this run" in r.text
    r = c.get("/run?run=hand&success=maybe")
    assert r.status_code == 400 and "success=&#39;maybe&#39; must be 1 or 0" in r.text
    assert c.get("/run?run=hand&after=x").status_code == 400
    # malformed, missing, out-of-range values and unknown paths: the viewer's error page, never JSON or a 500
    for url, status, says in [
            ("/episode?run=hand", 400, "episode is missing"), ("/episode?run=hand&episode=abc", 400, "is not an integer"),
            ("/group?run=hand&group=0&page=-1", 400, "must be ≥ 1"), ("/run?run=hand&ipage=0", 400, "must be ≥ 1"),
            ("/group?run=hand&group=0&sort=nope", 400, "must be one of"), ("/group?run=hand&group=x", 400, "integer"),
            ("/episode?run=hand&episode=99999999999999999999999", 400, "out of range"), ("/run", 400, "run is missing"),
            ("/iteration?run=hand&iteration=1.5", 400, "not an integer"), ("/search?run=hand&q=a&in=x", 400, "one of"),
            ("/siblings?run=hand&group=0&after=z", 400, "integer"), ("/nope", 404, "no page at /nope")]:
        r = c.get(url)
        assert r.status_code == status and says in r.text, (url, r.status_code, r.text[-300:])
        assert r.headers["content-type"].startswith("text/html") and "agentrl view</a>" in r.text, url


def test_pages_follow_a_store_that_is_still_being_written(hand_store):
    c = _client(hand_store.path)
    assert "4 episodes in 2 groups" in c.get("/run?run=hand").text
    with TurnStore(hand_store.path) as writer:  # a trainer keeps writing
        writer.add_episodes([make_episode(5, "agentrl/Toy-v0", "t5", [make_turn(0, "A", 1.0, won=True)])], run_id="hand")
        assert "5 episodes in 3 groups" in c.get("/run?run=hand").text
        raw = sqlite3.connect(hand_store.path, isolation_level=None)
        raw.execute("BEGIN IMMEDIATE")  # an uncommitted write: readers see the last commit, not blocked
        raw.execute("DELETE FROM metrics")
        r = c.get("/run?run=hand")
        assert r.status_code == 200 and r.text.count('<svg class="chart"') == 2
        raw.execute("ROLLBACK")
        raw.close()


def test_missing_store_and_cli_errors(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="no turn store"):
        create_app(ViewerOptions(store=tmp_path / "nope.sqlite"))
    assert main(["view", str(tmp_path / "nope.sqlite"), "--port", "0"]) == 2
    assert "no turn store" in capsys.readouterr().err
    assert main(["view", str(tmp_path / "nope.sqlite"), "--tokenizer", str(tmp_path)]) == 2
    assert "no tokenizer.json" in capsys.readouterr().err


def test_viewer_never_changes_stored_rows(hand_store):
    def dump():
        with sqlite3.connect(hand_store.path) as con:
            return json.dumps([con.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                               for t in ("runs", "episodes", "advantages", "metrics")], default=repr)
    before = dump()
    c = _client(hand_store.path)
    for url in ("/", "/run?run=hand", "/group?run=hand&group=1", "/episode?run=hand&episode=2"):
        c.get(url)
    assert dump() == before


def test_stored_text_is_escaped(tmp_path):
    path = tmp_path / "xss.sqlite"
    turn = make_turn(0, "A", 0.0)
    turn.observation, turn.action = "<script>alert(1)</script>", "<b>go</b>"
    with TurnStore(path) as store:
        store.add_episodes([make_episode(0, "e", "<i>task</i>", [turn])], run_id="<run>")
    c = _client(path)
    html = c.get("/episode", params={"run": "<run>", "episode": 0}).text
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>go</b>" not in html and "&lt;b&gt;go&lt;/b&gt;" in html
    assert "<i>task</i>" not in c.get("/run", params={"run": "<run>"}).text


def test_anchor_group_lists_are_capped_with_the_exact_count(tmp_path, monkeypatch):
    from agentrl.view import pages

    path = tmp_path / "same.sqlite"
    with TurnStore(path) as store:
        store.add_episodes([make_episode(0, "e", "t", [make_turn(0, "A", 0.0)]) for _ in range(4)], run_id="r")
    monkeypatch.setattr(pages, "PEER_CAP", 2)
    html = _client(path).get("/episode?run=r&episode=0").text
    assert "3 other turns of group 0 shared this state (first 2 listed)" in html
    peers = html[html.index('<table class="peers">'):]
    assert peers[:peers.index("</table>")].count("<tr><td") == 2


def test_port_0_prints_the_port_it_listens_on(hand_store):
    import subprocess
    import sys
    import time
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "agentrl", "view", str(hand_store.path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert m and int(m.group(1)) > 0, line
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/", timeout=5) as r:
                    assert r.status == 200 and "hand" in r.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.2)
        taken = main(["view", str(hand_store.path), "--port", m.group(1)])
        assert taken == 2
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_runs_page_lists_every_run_id(tmp_path):
    """Eval episodes stored under their own run id (e.g. ``toy/eval``) are listed like any run."""
    path = tmp_path / "runs.sqlite"
    names = ["toy", "toy/eval", "other", "x y"]
    with TurnStore(path) as store:
        for n in names:
            store.add_episodes([make_episode(0, "e", "t", [make_turn(0, "A", 1.0, won=True)])], run_id=n)
    c = _client(path, page_size=3)
    seen, url = [], "/"
    while url:
        html = c.get(url).text
        seen += [unescape(h) for h in re.findall(r'<td><a href="/run\?run=[^"]+">([^<]+)</a>', html)]
        nxt = re.search(r'rel="next" href="([^"]+)"', html)
        url = nxt.group(1).replace("&amp;", "&") if nxt else None
    assert seen == names
    assert c.get("/run", params={"run": "toy/eval"}).status_code == 200


def test_parent_badge_only_where_a_turn_does_not_continue_the_previous_one(hand_store):
    """Issue 23 item 12 (docs match the viewer): the episode page shows a parent only for a turn
    whose parent is not simply the previous turn — a branch point."""
    c = _client(hand_store.path)
    linear = c.get("/episode?run=hand&episode=2").text  # t=1, t=2 continue t=0, t=1
    assert 'class="badge parent"' not in linear
    branch = c.get("/episode?run=hand&episode=3").text  # t=0 branches off episode 2's first turn
    assert f'<span class="badge parent" title="this turn continues turn {hand_store.turn_ids[2][0]}' in branch


def test_episode_page_shows_the_judges_prompt_verdict_and_latency(tmp_path):
    """A judged episode (``reward.judge``) and a judge that failed: score, reply, latency,
    attempts, cache flag and the prompt as stored; the failure's error and status."""
    from agentrl.config.reward import JudgeConfig
    from agentrl.rollout.judge import Judge

    class Replies:
        name = "http://judge/v1"

        def complete(self, messages, schema, max_tokens):
            if "act 1" in messages[0]["content"]:
                raise RuntimeError("judge endpoint down")
            return '{"verdict": "pass"}'

    good = make_episode(0, "agentrl/Toy-v0", "t0", [make_turn(0, "a", 0.0), make_turn(2, "b", 1.0, won=True)])
    twin = make_episode(0, "agentrl/Toy-v0", "t0", [make_turn(0, "a", 0.0), make_turn(2, "b", 1.0, won=True)])
    bad = make_episode(1, "agentrl/Toy-v0", "t1", [make_turn(1, "c", 0.0)])
    Judge(JudgeConfig(retries=0), Replies()).apply([good, twin, bad])
    with TurnStore(tmp_path / "s.db") as store:
        store.add_episodes([good, twin, bad], run_id="judged")
        ids = [e.episode_id for e in store.episodes("judged")]
    c = _client(tmp_path / "s.db")
    html = unescape(c.get(f"/episode?run=judged&episode={ids[0]}").text)
    assert 'score <b class="judge-score">1</b>' in html and 'reply <code>{"verdict": "pass"}</code>' in html
    assert "(http://judge/v1)" in html and "1 attempt" in html and "Transcript:" in html
    assert "Action: act 2" in html and "cached" not in html.split('class="judge"')[1].split("</div>")[0]
    assert '<span class="badge">cached</span>' in unescape(c.get(f"/episode?run=judged&episode={ids[1]}").text)
    html = unescape(c.get(f"/episode?run=judged&episode={ids[2]}").text)
    assert "no verdict" in html and "judge endpoint down" in html and "[judge_error]" in html and "env_error" in html
