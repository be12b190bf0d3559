"""Relaunching `agentrl train` on an existing run (issue 20 item 8, issue 23 item 4): a resume only
with the run's own config (schedule/logging keys may differ), refused with the differing keys
otherwise (before any model loads), ``--resume`` to force it; config.yaml is never rewritten and
every launch is recorded; the resume says from which checkpoint, a finished run that it is complete."""

from __future__ import annotations

import json
import logging

import pytest
import yaml

torch = pytest.importorskip("torch")

from agentrl.cli import main  # noqa: E402
from agentrl.config import ConfigError, config_from_dict  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402


def _raw(tiny_dir, out_dir, name="r", iterations=1):
    return {
        "run": {"name": name, "out_dir": str(out_dir), "iterations": iterations, "eval_every": 0, "save_every": 1},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 4, "split": "train", "eval_split": "eval", "eval_panel_size": 2},
        "policy": {"model": str(tiny_dir), "max_tokens": 6, "action_format": "whole", "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 1, "group_size": 2, "num_workers": 1},
        "algorithm": {"estimator": "grpo"},
        "update": {"lr": 1e-3, "micro_batch": 2},
        "log": {"console": False},
    }


def _first_run(tiny_dir, tmp_path):
    from agentrl.train import train

    cfg_file = tmp_path / "toy.yaml"
    cfg_file.write_text(yaml.safe_dump(_raw(tiny_dir, tmp_path / "runs")))
    assert main(["train", str(cfg_file), "--no-resume"]) == 0
    run_dir = tmp_path / "runs" / "r"
    return cfg_file, run_dir, (run_dir / "config.yaml").read_bytes(), train


def test_another_config_is_refused_with_the_diff_and_nothing_changes(tiny_dir, tmp_path, capsys, monkeypatch):
    cfg_file, run_dir, original, _ = _first_run(tiny_dir, tmp_path)
    capsys.readouterr()
    with TurnStore(run_dir / "store.sqlite", readonly=True) as st:
        n_before = len(st.episodes("r"))
    import agentrl.train.loop as loop

    monkeypatch.setattr(loop, "load_policy", lambda *a, **k: (_ for _ in ()).throw(AssertionError("model loaded")))
    # the case: an ALFWorld config on a Toy run; and a changed rollout size
    rc = main(["train", str(cfg_file), "env.id=agentrl/ALFWorld-v0", "env.eval_split=eval_seen", "env.split=train",
               "rollout.group_size=4"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "env.id: 'agentrl/Toy-v0' -> 'agentrl/ALFWorld-v0'" in lines[0] and "rollout.group_size: 2 -> 4" in lines[0]
    assert "--resume" in lines[0] and "--no-resume" in lines[0]
    assert (run_dir / "config.yaml").read_bytes() == original
    assert not list(run_dir.parent.glob("r.prev-*"))
    with TurnStore(run_dir / "store.sqlite", readonly=True) as st:
        assert len(st.episodes("r")) == n_before
    assert len((run_dir / "launches.jsonl").read_text().splitlines()) == 1  # the refused launch ran nothing


def test_more_iterations_resume_and_every_launch_is_recorded(tiny_dir, tmp_path, capsys, caplog):
    cfg_file, run_dir, original, _ = _first_run(tiny_dir, tmp_path)
    with caplog.at_level(logging.INFO, logger="agentrl"):
        assert main(["train", str(cfg_file), "run.iterations=2", "log.jsonl=false"]) == 0
    assert any("resuming r from checkpoint" in r.getMessage() and "1 iteration(s) done of 2" in r.getMessage()
               for r in caplog.records)
    assert (run_dir / "config.yaml").read_bytes() == original  # the run's own config, never rewritten
    launches = [json.loads(x) for x in (run_dir / "launches.jsonl").read_text().splitlines()]
    assert [x["launch"] for x in launches] == [1, 2]
    assert launches[0]["resumed_from"] is None and launches[0]["overrides"] == []
    assert launches[1]["overrides"] == ["run.iterations=2", "log.jsonl=false"]
    assert launches[1]["config_file"] == str(cfg_file) and launches[1]["resumed_from"].startswith("checkpoints/")
    assert launches[1]["changed"] == {"log.jsonl": [True, False], "run.iterations": [1, 2]}
    assert yaml.safe_load((run_dir / launches[1]["config"]).read_text())["run"]["iterations"] == 2
    # the finished run says so and trains nothing
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="agentrl"):
        assert main(["train", str(cfg_file), "run.iterations=2"]) == 0
    assert any("run r is complete: 2 of 2 iteration(s) done" in r.getMessage() for r in caplog.records)


def test_force_resume_continues_with_the_changes_logged(tiny_dir, tmp_path, caplog):
    cfg_file, run_dir, original, train = _first_run(tiny_dir, tmp_path)
    cfg = config_from_dict(_raw(tiny_dir, tmp_path / "runs", iterations=2), ["update.lr=2e-3"])
    with pytest.raises(ConfigError, match=r"update.lr: 0.001 -> 0.002"):
        train(cfg)
    with caplog.at_level(logging.WARNING, logger="agentrl"):
        result = train(cfg, force_resume=True)
    assert result.state.iteration == 2
    assert any("forced by --resume" in r.getMessage() and "update.lr" in r.getMessage() for r in caplog.records)
    last = json.loads((run_dir / "launches.jsonl").read_text().splitlines()[-1])
    assert last["forced"] and last["changed"]["update.lr"] == [0.001, 0.002]
    assert (run_dir / "config.yaml").read_bytes() == original
    assert not list(run_dir.parent.glob("r.prev-*"))
