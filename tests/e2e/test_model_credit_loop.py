"""OPRL and StepOPSD through the real trainer (issue 50): the step scorers the estimators declare are
built from ``algorithm.scorers``, fill their columns before the estimator, keep them in the store
beside the advantages (so the viewer's breakdown reproduces every stored advantage), log their
metrics, are saved into every checkpoint and restored on resume; StepOPSD's ``lambda_mix`` follows
``algorithm.schedule``; every advantage is finite."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.config import ConfigError


def _cfg(tiny_dir, out, estimator: str, iterations: int, dtype: str = "float32", **algorithm):
    from agentrl.train.checks import checked_config_from_dict

    return checked_config_from_dict({
        "run": {"name": estimator, "out_dir": str(out), "iterations": iterations, "eval_every": 0, "save_every": 1,
                "seed": 3},
        "env": {"id": "agentrl/JunctionMaze-v0", "max_turns": 6, "split": "train", "kwargs": {"k": 1}},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "dtype": dtype, "action_format": "whole", "action_constraint": "admissible",
                   "lora": {"rank": 4, "alpha": 8.0}},
        "rollout": {"groups_per_iteration": 3, "group_size": 4, "num_workers": 1},
        "algorithm": {"estimator": estimator, **algorithm},
        "update": {"lr": 1e-3, "micro_batch": 6, "epochs": 1},
        "log": {"console": False},
    })


def _explained(result) -> tuple[int, int]:
    """(turns explained, mismatches) over every group of the run, by the viewer's breakdown."""
    import sqlite3

    from agentrl.store import TurnStore
    from agentrl.view.explain import explain_group

    with TurnStore(result.store_path, readonly=True) as store:
        stored = {a.turn_id: a.value for a in store.advantages(result.run_id)}
    conn = sqlite3.connect(result.store_path)
    try:
        key = conn.execute("SELECT run_key FROM runs WHERE run_id = ?", (result.run_id,)).fetchone()[0]
        groups = [r[0] for r in conn.execute("SELECT DISTINCT group_id FROM episodes WHERE run_key = ?", (key,))]
        explained = bad = 0
        for g in groups:
            ids = [r[0] for r in conn.execute("SELECT turn_id FROM turns WHERE run_key = ? AND group_id = ?", (key, g))]
            ex = explain_group(conn, result.store_path, result.run_id, key, g, result.run_id, {i: stored[i] for i in ids})
            assert ex.note is None, ex.note
            explained += len(ex.turns)
            bad += ex.n_mismatch
    finally:
        conn.close()
    return explained, bad


def _metrics(result) -> dict[str, list[float]]:
    from agentrl.store import TurnStore

    with TurnStore(result.store_path, readonly=True) as store:
        out: dict[str, list[float]] = {}
        for m in store.metrics(result.run_id):
            out.setdefault(m.name, []).append(m.value)
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_oprl_trains_its_prm_keeps_its_scores_and_resumes(tiny_dir, tmp_path, dtype):
    from agentrl.store import TurnStore
    from agentrl.train import train

    result = train(_cfg(tiny_dir, tmp_path, "oprl", 2, dtype), resume=False)
    m = _metrics(result)
    assert len(m["prm/pairs"]) == 2 and all(np.isfinite(v) for v in m["prm/logratio_abs_mean"])
    assert m["prm/pairs"][0] > 0 and m["prm/steps"][0] == 1 and m["prm/loss_after"][0] < m["prm/loss"][0]
    assert m["prm/logratio_abs_mean"][0] > 0  # scored after the step: the PRM moved
    with TurnStore(result.store_path, readonly=True) as store:
        adv = np.array([a.value for a in store.advantages(result.run_id)])
    assert adv.size and np.isfinite(adv).all()
    explained, bad = _explained(result)
    assert explained == adv.size and bad == 0
    folder = result.run_dir / "checkpoints" / (result.run_dir / "checkpoints" / "latest").read_text()
    assert (folder / "prm.pt").is_file()
    import torch

    steps = torch.load(folder / "prm.pt", weights_only=False)["steps"]
    assert steps == sum(1 for p in m["prm/pairs"] if p > 0)
    again = train(_cfg(tiny_dir, tmp_path, "oprl", 3, dtype), resume=True)
    assert again.state.iteration == 3 and _metrics(again)["prm/steps"][-1] >= steps


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_stepopsd_follows_its_schedule_and_explains(tiny_dir, tmp_path, monkeypatch, dtype):
    from agentrl.train import plan, train

    seen = []
    real = plan.build_batch

    def spy(*args, **kwargs):
        seen.append(args[3])  # what the update trains: per-token advantages with granularity token
        return real(*args, **kwargs)

    monkeypatch.setattr(plan, "build_batch", spy)

    result = train(_cfg(tiny_dir, tmp_path, "stepopsd", 2, dtype, kwargs={"lambda_mix": 1.0, "alpha_clip": 0.5,
                                                                   "granularity": "token"},
                        schedule={"lambda_mix": {"to": 0.0, "iterations": 2}},
                        scorers={"hindsight": {"teacher_refresh": 1}}), resume=False)
    m = _metrics(result)
    assert m["hindsight/lambda"] == [1.0, 0.5] and m["hindsight/rows_scored"][0] > 0
    assert m["audit/tokens"][0] > 0  # the token layout trained, every token checked by the credit audit
    rows = [a for batch in seen for a in batch]
    assert rows and any(np.unique(np.asarray(a)).size > 1 for a in rows)  # the action's tokens got their own
    explained, bad = _explained(result)
    assert explained > 0 and bad == 0
    folder = result.run_dir / "checkpoints" / (result.run_dir / "checkpoints" / "latest").read_text()
    assert (folder / "hindsight_teacher.pt").is_file()


def test_scorer_options_and_schedules_are_checked(tiny_dir, tmp_path):
    cfg = _cfg(tiny_dir, tmp_path, "oprl", 1)
    assert cfg.algorithm.scorers == {"prm": {"prm_lr": None, "prm_grad_clip": 10.0, "prm_weight_decay": 0.0,
                                             "traj_aggregate": "sum", "success_threshold": 0.0,
                                             "score_after_update": True, "reference": "trainer", "micro_batch": None}}
    with pytest.raises(ConfigError, match=r"unknown config key 'algorithm.scorers.prm.lr'; did you mean.*prm_lr"):
        _cfg(tiny_dir, tmp_path, "oprl", 1, scorers={"prm": {"lr": 0}})
    with pytest.raises(ConfigError, match="prm_lr must be >= 0"):
        _cfg(tiny_dir, tmp_path, "oprl", 1, scorers={"prm": {"prm_lr": -1.0}})
    with pytest.raises(ConfigError, match="declares no step scorer 'hindsight'"):
        _cfg(tiny_dir, tmp_path, "oprl", 1, scorers={"hindsight": {}})
    with pytest.raises(ConfigError, match="no numeric keyword 'gamma'"):
        _cfg(tiny_dir, tmp_path, "stepopsd", 1, schedule={"gamma": {"to": 0, "iterations": 5}})
    with pytest.raises(ConfigError, match="iterations: expected an int >= 1"):
        _cfg(tiny_dir, tmp_path, "stepopsd", 1, schedule={"lambda_mix": {"to": 0, "iterations": 0}})
    with pytest.raises(ConfigError, match="exactly the keys"):
        _cfg(tiny_dir, tmp_path, "stepopsd", 1, schedule={"lambda_mix": {"to": 0}})


def test_oprl_refuses_a_fully_fine_tuned_policy(tiny_dir, tmp_path):
    import dataclasses

    from agentrl.train import train

    cfg = _cfg(tiny_dir, tmp_path, "oprl", 1)
    cfg = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, lora=None))
    with pytest.raises(ConfigError, match="fully fine-tuned"):
        train(cfg, resume=False)
