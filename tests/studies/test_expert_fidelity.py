"""The expert-Q fidelity study (issue 49): its metrics on hand-computed rows, and one small cell
through the whole path (scripted batches in a turn store, expert values by replay, every
estimator read) that resumes from its cache."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from studies.expert_fidelity import LEFT_OUT, bootstrap, expert_metrics, make_cell
from studies.runner import Cell

pytest.importorskip("torch")


def test_metrics_on_hand_computed_rows():
    a_exp = np.array([0.0, -0.1, -0.2, 0.0, -0.05, 0.0])
    won = np.array([True, True, False, False, False, False])
    a_est = np.array([0.5, -0.5, -1.0, 0.2, 0.3, -0.4])
    m = expert_metrics(a_est, a_exp, won)
    assert m["sign_acc_hurting"] == pytest.approx(2 / 3)  # rows 1, 2 negative; row 4 positive
    assert m["failed_credit"] == pytest.approx(1 / 2)  # as-good rows in failed episodes: 3 (> 0), 5 (< 0)
    assert m["sign_agree"] == pytest.approx(2 / 6)  # rows 1, 2 share the sign; zeros of A^E are their own sign
    assert m["corr"] == pytest.approx(np.corrcoef(a_est, a_exp)[0, 1])
    # Spearman with ties averaged: A^E ranks [4, 1, 0, 4, 2, 4]
    r_exp, r_est = np.array([4, 1, 0, 4, 2, 4.0]), np.array([5, 1, 0, 3, 4, 2.0])
    assert m["spearman"] == pytest.approx(np.corrcoef(r_est, r_exp)[0, 1])
    flat = expert_metrics(np.zeros(6), a_exp, won)
    assert math.isnan(flat["corr"]) and flat["sign_acc_hurting"] == 0.0 and flat["failed_credit"] == 0.0


def test_bootstrap_intervals_resample_groups_and_contain_the_point():
    rng = np.random.default_rng(0)
    group = np.repeat(np.arange(12), 5)
    x = rng.normal(size=60)
    ci = bootstrap(group, lambda rows: {"mean": float(np.mean(x[rows]))}, n_boot=300)
    lo, hi = ci["mean"]
    assert lo < float(np.mean(x)) < hi and hi - lo < 1.0


def test_a_webshop_cell_end_to_end_and_resumed(tmp_path):
    pytest.importorskip("bm25s")
    from agentrl.credit import list_estimators
    from studies.expert_fidelity import _run

    base = make_cell("webshop", "noisy_walkthrough")
    cell = Cell(base.study, base.key, {**base.config, "groups": 3, "group": 4}, 0)
    row = _run(cell, tmp_path / "run")
    assert row["episodes"] == 12 and row["replay_mismatch"] == 0 and row["turns"] > 12
    assert set(row["estimators"]) == set(list_estimators()) - set(LEFT_OUT) - {"bipace"}  # scripted: no hidden states
    for m in row["estimators"].values():
        assert set(m["point"]) == set(m["ci"]) and np.isfinite(m["point"]["sign_agree"])
    assert row["a_exp"]["hurting"] + row["a_exp"]["as_good"] == row["turns"]
    cache = json.loads((tmp_path / "run" / "expert_cache.json").read_text())
    assert len(cache) == row["continuations"] > 0
    again = _run(cell, tmp_path / "run")  # resumes: the stored batches and the cached continuations
    assert again["seconds_expert"] >= 0 and again["estimators"] == row["estimators"]


def test_a_branch_is_scored_on_its_whole_root_to_leaf_path():
    from agentrl.types import Episode, Turn
    from studies.expert_batches import _paths

    def ep(eid, t0, acts, parent=None):
        turns = [Turn(run_id="r", episode_id=eid, group_id=0, t=t0 + i, observation=f"o{t0 + i}",
                      anchor_obs=f"{eid}:{t0 + i}", action=a, action_valid=True, reward=float(i), info={}) for i, a in enumerate(acts)]
        if parent is not None:
            turns[0].info["tree_parent"] = list(parent)
        return Episode(episode_id=eid, group_id=0, env_id="x", task_id="t", seed=3, turns=turns)

    root = ep(0, 0, ["a", "b", "c"])
    branch = ep(1, 2, ["x", "y"], parent=(0, 1))  # continues after the root's turn 1
    twig = ep(2, 3, ["z"], parent=(1, 2))  # continues after the branch's first turn (t = 2)
    paths = _paths([twig, branch, root])  # any order
    assert paths[0][0] == ["a", "b", "c"]
    assert paths[1] == (["a", "b", "x", "y"], [0.0, 1.0, 0.0, 1.0], ["0:0", "0:1", "1:2", "1:3"])
    assert paths[2][0] == ["a", "b", "x", "z"]


@pytest.mark.parametrize("sampler, estimator", [("hiper", "hiper"), ("tree", "tree_grpo"), ("rtpo", "rtpo")])
def test_the_own_sampler_cells_load_as_checked_configs(sampler, estimator):
    from agentrl.train.checks import load_checked_config
    from studies.expert_fidelity import grid

    cell = make_cell("textworld_cu1", "untrained", sampler=sampler)
    assert cell in grid() and cell.key == f"textworld_cu1-untrained-{sampler}-s0"
    cfg = load_checked_config(cell.config["config"], cell.config["overrides"])  # the binding rules hold
    assert cfg.algorithm.estimator == estimator
    assert (cfg.policy.action_format == "hiper") == (sampler == "hiper")
    assert cfg.rollout.sampler == {"hiper": "chain"}.get(sampler, sampler)
