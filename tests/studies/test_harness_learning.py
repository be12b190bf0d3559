"""``studies/harness_learning.py``: a cell's row from a hand-built run folder (a real turn store with the
held-out evaluations, ``metrics.jsonl``, ``launches.jsonl``), the paired difference by hand, per-iteration
seconds across a restart, the rule's grid, and the shipped configs it trains."""

from __future__ import annotations

import json

import pytest

import agentrl  # noqa: F401
from agentrl.store import TurnStore
from agentrl.types import Episode, EpisodeStatus, Turn
from studies.harness_learning import (GAIN_TO_GO_ON, PILOT, SEEDS_AFTER_PILOT, STUDY, cell_row, config_for, grid,
                                      make_cell, paired, per_iteration, pooled, summary)
from studies.runner import result_path

RUN = "harness_agents_textworld-s0"


def _episode(task: str, won: bool, status=EpisodeStatus.OK) -> Episode:
    turn = Turn(run_id="", episode_id=-1, group_id=0, t=0, observation="room", anchor_obs="room", action="go east",
                action_valid=True, reward=float(won), terminated=won, info={"won": won})
    return Episode(episode_id=-1, group_id=0, env_id="agentrl/Toy-v0", task_id=task, seed=0, status=status, turns=[turn])


def _run_folder(tmp_path):
    run_dir = tmp_path / "runs" / "harness_learning" / RUN
    run_dir.mkdir(parents=True)
    store = TurnStore(run_dir / "store.sqlite")
    store.add_episodes([_episode(t, w) for t, w in zip("abcd", (0, 0, 1, 0))], run_id=f"{RUN}/eval-before")
    store.add_episodes([_episode(t, False) for t in "abcd"], run_id=f"{RUN}/eval-iter2")  # an earlier launch's
    store.add_episodes([_episode("a", True), _episode("b", False), _episode("c", False), _episode("d", True),
                        _episode("e", True, EpisodeStatus.ENV_ERROR)], run_id=f"{RUN}/eval-iter2-2")
    store.add_episodes([_episode("x", True)], run_id=f"{RUN}/eval-iter2-extra")  # not a repeat: ignored
    store.close()
    metrics = [{"step": 0, "time": 100.0, "eval/greedy_success": 0.25},
               {"step": 1, "time": 160.0, "rollout/success_rate": 0.25, "proxy/logprob_corr": 0.9995,
                "proxy/logprob_mae": 0.004, "proxy/forks": 3.0, "rollout/turns": 40.0, "time/rollout_s": 50.0},
               {"step": 2, "time": 1000.0, "rollout/success_rate": 0.5, "proxy/forks": 0.0, "rollout/turns": 36.0}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    launches = [{"launch": 1, "started": "1970-01-01T00:01:30+0000"}, {"launch": 2, "started": "1970-01-01T00:15:00+0000"}]
    (run_dir / "launches.jsonl").write_text("".join(json.dumps(x) + "\n" for x in launches))
    return run_dir


def test_cell_row_by_hand(tmp_path):
    row = cell_row(_run_folder(tmp_path), PILOT, 0, 2)
    assert row["before"] == {"run_id": f"{RUN}/eval-before", "success": 0.25, "n": 4, "failed": 0,
                             "outcomes": {"a": 0.0, "b": 0.0, "c": 1.0, "d": 0.0}}
    # the latest repeat of the evaluation after; its failed episode is counted, not scored
    assert row["after"]["run_id"] == f"{RUN}/eval-iter2-2"
    assert (row["after"]["success"], row["after"]["n"], row["after"]["failed"]) == (0.5, 4, 1)
    p = row["paired"]
    assert (p["diff"], p["n"], p["gained"], p["lost"]) == (0.25, 4, 2, 1)  # a, d newly won; c lost
    assert -1.0 <= p["interval"][0] < p["diff"] < p["interval"][1] <= 1.0
    it1, it2 = row["per_iter"]
    assert it1 == {"iteration": 1, "success": 0.25, "logprob_corr": 0.9995, "logprob_mae": 0.004, "forks": 3.0,
                   "turns": 40.0, "excluded": None, "rollout_s": 50.0, "update_s": None, "seconds": 60.0}
    assert it2["logprob_corr"] is None and it2["seconds"] is None  # launch 2 started (t = 900 s) between 160 and 1000
    assert (row["launches"], row["iteration_seconds_median"]) == (2, 60.0)


def test_cell_row_refuses_a_missing_evaluation(tmp_path):
    with pytest.raises(RuntimeError, match="evaluation after training is not in the store"):
        cell_row(_run_folder(tmp_path), PILOT, 0, 3)  # no eval-iter3


def test_paired_interval_and_empty():
    p = paired({"outcomes": {"a": 0.0, "b": 0.0}}, {"outcomes": {"a": 1.0, "b": 1.0, "c": 1.0}})
    assert (p["diff"], p["interval"], p["n"], p["gained"], p["lost"]) == (1.0, [1.0, 1.0], 2, 2, 0)
    assert paired({"outcomes": {"a": 1.0}}, {"outcomes": {"b": 1.0}})["n"] == 0


def test_per_iteration_keeps_a_replayed_iterations_last_record():
    rows = per_iteration([{"step": 0, "time": 0.0}, {"step": 1, "time": 5.0, "rollout/success_rate": 0.0},
                          {"step": 1, "time": 9.0, "rollout/success_rate": 0.5}])
    assert [(r["iteration"], r["success"], r["seconds"]) for r in rows] == [(1, 0.5, 9.0)]


def _write_pilot(root, gained: int, lost: int) -> None:
    path = result_path(root, make_cell(PILOT, 0))
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {"paired": {"diff": (gained - lost) / 16, "interval": [0.0, 0.2], "n": 16, "gained": gained, "lost": lost},
           "before": {"success": 0.0}, "after": {"success": (gained - lost) / 16},
           "per_iter": [{"success": 0.25, "logprob_corr": 0.9991, "forks": 0.0, "turns": 80.0}]}
    path.write_text(json.dumps({"row": row}))


def test_the_rule_adds_seeds_only_after_a_gain(tmp_path):
    assert [c.key for c in grid(tmp_path)] == [f"{PILOT}-s0"]
    _write_pilot(tmp_path, GAIN_TO_GO_ON, 1)  # net +1: below the rule's +2
    assert len(grid(tmp_path)) == 1
    _write_pilot(tmp_path, GAIN_TO_GO_ON + 1, 1)
    assert [c.seed for c in grid(tmp_path)] == [0, *SEEDS_AFTER_PILOT]
    assert "| 0.0% → 12.5% (n 16) | +12.5 [+0.0, +20.0] | 3 / 1 | 25 % | 0.9991 | 0 / 80 |" in summary(tmp_path)


def test_cells_train_the_shipped_configs(tmp_path):
    with pytest.raises(ValueError, match="no examples/nope.yaml"):
        make_cell("nope", 0)
    cfg = config_for(PILOT, 3, tmp_path, "cell")
    assert (cfg.run.seed, cfg.run.name, cfg.run.save_every, cfg.run.eval_before) == (3, "cell", 1, True)
    assert cfg.run.eval_every == cfg.run.iterations == 8 and cfg.rollout.harness.force_tool_call
    assert STUDY.name == "harness_learning"


def _row(before: dict, after: dict) -> dict:
    return {"before": {"outcomes": before}, "after": {"outcomes": after}}


def test_pooled_over_seeds_by_hand():
    rows = [_row({"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 0.0}),  # d = 1, 0
            _row({"a": 1.0, "b": 0.0, "c": 0.0}, {"a": 0.0, "b": 1.0, "c": 1.0, "z": 1.0})]  # d = -1, 1, 1; z unpaired
    q = pooled(rows)
    assert (q["diff"], q["n"], q["seeds"], q["gained"], q["lost"]) == (0.4, 5, 2, 3, 1)
    assert -1.0 <= q["interval"][0] < 0.4 < q["interval"][1] <= 1.0
    # games are resampled within seeds: a seed whose games all moved the same way contributes no spread,
    # so the interval is the point (a bootstrap over the 5 pooled pairs would spread over [0, 1])
    same = dict.fromkeys("abc", 1.0)
    q = pooled([_row({"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 1.0}), _row(same, same)])
    assert (q["diff"], q["interval"]) == (0.4, [0.4, 0.4])
    assert pooled([_row({"a": 1.0}, {"b": 1.0})])["n"] == 0


def test_summary_prints_the_pooled_reading(tmp_path):
    for seed, after in ((0, 1.0), (1, 0.0)):
        path = result_path(tmp_path, make_cell(PILOT, seed))
        path.parent.mkdir(parents=True, exist_ok=True)
        row = {"config": PILOT, **_row({"a": 0.0, "b": 0.0}, {"a": after, "b": 1.0}),
               "paired": {"diff": 0.5, "interval": [0.0, 1.0], "n": 2, "gained": 1, "lost": 0},
               "per_iter": [{"success": 0.5, "logprob_corr": 0.999, "forks": 0.0, "turns": 10.0}]}
        row["before"]["success"], row["after"]["success"] = 0.0, (after + 1.0) / 2
        path.write_text(json.dumps({"row": row}))
    out = summary(tmp_path)
    assert f"{PILOT}, pooled over 4 (seed, game) pairs of 2 seeds: after − before +75.0 points" in out
    assert out.endswith("3 won / 0 lost")
