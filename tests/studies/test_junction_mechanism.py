"""``studies/junction_mechanism.py``: voiced / unvoiced exits, no-ops, entropy and updates per iteration of a
study cell, on hand-built episodes of a maze whose junction 1 is voiced and junction 2 is not, through a
real turn store (iteration tags) and a run folder under tmp_path; ``collect`` keeps a cell whose folder
is gone; ``TurnStore.episode_iterations``."""

from __future__ import annotations

import json

import pytest

import agentrl  # noqa: F401
from agentrl.store import TurnStore
from agentrl.types import Episode, EpisodeStatus, Turn
from agentrl_envs.junction.maze import EXITS, Maze
from studies.junction_mechanism import (
    STUDY, _carried, arm_of, cell_mechanism, collect, episode_counts, out_path, per_iteration, plot, shares, summary, table)

MAZE = Maze.parse("k2x2c24h12-ss11-wn19")  # r1.1 -> r1.2 -> j1 (voiced) -> r2.1 -> r2.2 -> j2 (no voice)
WALK = MAZE.walkthrough()
G = MAZE.graph(24)
WRONG1 = next(a for a in G.actions["j1"] if a.startswith("go ") and a != WALK[2])
WRONG2 = next(a for a in G.actions["j2"] if a.startswith("go ") and a != WALK[5])


def _episode(actions: list[str], status=EpisodeStatus.OK, eid: int = -1) -> Episode:
    turns, s = [], G.start
    for t, a in enumerate(actions):
        nxt = G.next_state[(s, a)]
        turns.append(Turn(run_id="", episode_id=eid, group_id=0, t=t, observation=G.observation[s], anchor_obs=G.observation[s],
                          action=a, action_valid=True, reward=G.reward[(s, a)], terminated=G.kind[nxt] in ("goal", "dead"),
                          info={"won": G.kind[nxt] == "goal"}))
        s = nxt
    return Episode(episode_id=eid, group_id=0, env_id="agentrl/JunctionMaze-v0", task_id=MAZE.task_id, seed=0,
                   status=status, turns=turns)


def test_the_fixture_maze_is_voiced_at_1_only():
    assert MAZE.hinted(1) and not MAZE.hinted(2)
    assert "A voice says" in G.observation["j1"] and "A voice says" not in G.observation["j2"]


def test_episode_counts_by_hand():
    assert WALK == ["go south", "go south", "go north", "go west", "go north", "go east"]
    assert (WRONG1, WRONG2) == ("go east", "go north")
    zero = {f"exit_{d}": 0 for d in EXITS} | {f"credit_{d}": 0.0 for d in EXITS}
    ep = _episode(WALK[:2] + ["look", "wait", WALK[2]] + WALK[3:5] + [WRONG2])  # right at j1 (voiced), wrong at j2
    for i, t in enumerate(ep.turns):
        t.turn_id = 10 + i
    adv = dict(zip(range(10, 18), [0.1, 0.1, -0.5, -0.5, 1.0, 0.2, 0.2, -2.0]))
    c = episode_counts(ep, 24, adv)
    assert c == pytest.approx({**zero, "voiced_exits": 1, "voiced_right_exits": 1, "unvoiced_exits": 1,
                               "unvoiced_right_exits": 0, "noop_turns": 2, "turns": 8, "exit_north": 2,
                               "credit_abs": 4.6, "credit_abs_exits": 3.0, "credit_right": 1.0, "credit_wrong": -2.0,
                               "credit_north": -1.0})
    sh = shares(c)
    assert sh["voiced_right"] == 1.0 and sh["unvoiced_right"] == 0.0 and sh["noop_share"] == 0.25
    assert sh["top_exit"] == ["north", 1.0]
    assert sh["exit_credit_share"] == pytest.approx(3 / 4.6) and sh["right_credit"] == pytest.approx(1.0)
    assert sh["top_credit"] == ["north", pytest.approx(-1 / 3)]  # the only direction taken: its net -1 over 3
    c = episode_counts(_episode(WALK[:2] + ["look", WRONG1]), 24)  # a look at j1 is no exit; dies at j1; no advantages
    assert c == {**zero, "voiced_exits": 1, "voiced_right_exits": 0, "unvoiced_exits": 0, "unvoiced_right_exits": 0,
                 "noop_turns": 1, "turns": 4, "exit_east": 1, "credit_abs": 0.0, "credit_abs_exits": 0.0,
                 "credit_right": 0.0, "credit_wrong": 0.0}
    assert shares(c)["top_exit"] == ["east", 1.0] and shares(c)["right_credit"] is None
    bad = _episode(WALK)
    bad.task_id = "nonsense"
    with pytest.raises(ValueError, match="bad junction-maze task_id"):
        episode_counts(bad, 24)


def _batches() -> list[tuple[int, list[Episode]]]:
    return [(1, [_episode(WALK), _episode(WALK[:2] + [WRONG1]), _episode(WALK, status=EpisodeStatus.ENV_ERROR)]),
            (2, [_episode(["wait"] * 3 + WALK[:2] + [WRONG1])]),
            (3, [_episode(WALK[:5] + [WRONG2]), _episode(WALK)])]


def test_per_iteration_and_summary_by_hand():
    eps, its, eid = [], {}, 0
    for it, batch in _batches():
        for ep in batch:
            ep.episode_id, eid = eid, eid + 1
            its[ep.episode_id] = it
            eps.append(ep)
    eps.append(_episode(WALK, eid=99))  # untagged (an eval episode): left out
    metrics = [{"step": 1, "update/entropy": 0.5, "update/steps": 1.0}, {"step": 2}, {"step": 3, "update/entropy": 0.1,
                                                                                      "update/steps": 1.0}]
    per = per_iteration(eps, its, metrics, 24)
    assert [r["iteration"] for r in per] == [1, 2, 3]
    # iteration 1: the env-error episode is left out; voiced 2 exits (1 right), unvoiced 1 (right), 9 turns
    assert (per[0]["voiced_right"], per[0]["unvoiced_right"], per[0]["turns"]) == (0.5, 1.0, 9)
    assert per[0]["noop_share"] == 0.0 and per[0]["entropy"] == 0.5 and per[0]["updated"]
    assert per[1]["voiced_right"] == 0.0 and per[1]["unvoiced_right"] is None and per[1]["noop_share"] == 0.5
    assert per[1]["entropy"] is None and not per[1]["updated"]
    assert (per[2]["voiced_right"], per[2]["unvoiced_right"]) == (1.0, 0.5)
    s = summary(per, parts=3)
    assert [x["iterations"] for x in s] == [[1, 1], [2, 2], [3, 3]]
    s = summary(per, parts=1)[0]  # pooled counts, not a mean of shares: voiced 5 exits, 3 right
    assert s["voiced_right"] == pytest.approx(3 / 5) and s["unvoiced_right"] == pytest.approx(2 / 3)
    assert s["noop_share"] == pytest.approx(3 / 27) and s["entropy"] == pytest.approx(0.3)
    assert (s["updated"], s["of"]) == (2, 3)


def _run_folder(root, key: str) -> None:
    run_dir = root / "runs" / STUDY / key
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("env:\n  max_turns: 24\n")
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "update/steps": 1.0, "update/entropy": 0.2})
                                                   + "\n" for i in (1, 2, 3)))
    with TurnStore(run_dir / "store.sqlite") as store:
        batches = _batches()
        for it, batch in batches:
            store.add_episodes(batch, run_id=key, iteration=it)
        store.add_episodes([_episode(WALK)], run_id=key)  # untagged
        won, lost = batches[0][1][:2]  # iteration 1: +1 on every turn of the win, -1 on the loss's
        ids = [t.turn_id for t in won.turns + lost.turns]
        store.set_advantages(key, ids, [1.0] * 6 + [-1.0] * 3, 1, "grpo")
        store.set_advantages(key, ids[:6], [100.0] * 6, 2, "grpo")  # another iteration's record: passed over
        assert len(store.episode_iterations(key)) == 6
        assert sorted(set(store.episode_iterations(key).values())) == [1, 2, 3]
    (root / "results" / STUDY).mkdir(parents=True, exist_ok=True)
    (root / "results" / STUDY / f"{key}.json").write_text("{}")


def test_cell_mechanism_and_collect_through_a_store(tmp_path):
    _run_folder(tmp_path, "k5-x2-h12-4x8-grpo-s1")
    m = cell_mechanism(tmp_path / "runs" / STUDY / "k5-x2-h12-4x8-grpo-s1")
    assert [r["iteration"] for r in m["per_iter"]] == [1, 2, 3]
    assert m["per_iter"][0]["voiced_exits"] == 2 and m["per_iter"][2]["unvoiced_exits"] == 2
    first = m["per_iter"][0]  # exits: won north (right, j1), east (right, j2); lost east (wrong, j1)
    assert (first["credit_abs"], first["credit_abs_exits"], first["credit_right"], first["credit_wrong"]) == (9, 3, 2, -1)
    assert (first["credit_north"], first["credit_east"], first["right_credit"]) == (1.0, 0.0, 1.0)
    assert m["per_iter"][1]["credit_abs"] == 0.0
    assert collect(tmp_path) == json.loads(out_path(tmp_path).read_text())
    # a second cell; then the first one's run folder goes: its entry stays
    _run_folder(tmp_path, "k5-x2-h12-4x8-oracle-s1")
    import shutil
    shutil.rmtree(tmp_path / "runs" / STUDY / "k5-x2-h12-4x8-grpo-s1")
    got = collect(tmp_path)
    assert sorted(got) == ["k5-x2-h12-4x8-grpo-s1", "k5-x2-h12-4x8-oracle-s1"]
    assert got["k5-x2-h12-4x8-grpo-s1"] == m
    lines = table(got).splitlines()
    assert len(lines) == 1 + 2 * 3 and "k5-x2-h12-4x8-oracle-s1" in lines[-1]
    png = plot(got, tmp_path / "m.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_arm_of_and_carried():
    assert arm_of("k5-x2-h12-4x8-g2po-s3") == ("k5-x2-h12-4x8", "g2po")
    out = _carried([None, 0.5, None, 0.25])
    assert out[1:] == [0.5, 0.5, 0.25] and out[0] != out[0]  # NaN before the first value
