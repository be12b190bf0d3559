"""A training iteration on ``agentrl/Remote-v0``: the tiny random model plays TextWorld-CU1
served over OpenEnv by ``agentrl envs serve``, and one update runs on what it stored."""

from __future__ import annotations

import json

import pytest
from servers import cli_server

pytest.importorskip("torch")

from agentrl.config import config_from_dict  # noqa: E402
from agentrl.env import MissingExtraError, make  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402


def test_one_training_iteration_on_the_remote_env(tiny_dir, tmp_path):
    from agentrl.train import train

    try:
        make("agentrl/TextWorld-CU1-v0").close()
    except MissingExtraError as exc:
        pytest.skip(str(exc))
    with cli_server("agentrl/TextWorld-CU1-v0", "--slots", "4") as (_, url):
        cfg = config_from_dict({
            "run": {"name": "remote", "out_dir": str(tmp_path), "iterations": 1, "eval_every": 0, "save_every": 1,
                    "seed": 1},
            "env": {"id": "agentrl/Remote-v0", "kwargs": {"base_url": url}, "max_turns": 3, "split": ""},
            "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole",
                       "action_constraint": "admissible"},
            "rollout": {"groups_per_iteration": 2, "group_size": 2, "num_workers": 1},
            "algorithm": {"estimator": "grpo"},
            "update": {"lr": 1e-2, "micro_batch": 4, "epochs": 1},
            "log": {"console": False},
        })
        result = train(cfg, resume=False)
    assert result.state.iteration == 1 and result.state.policy_version == 1
    with TurnStore(result.store_path, readonly=True) as store:
        eps = store.episodes(result.run_id)
        assert len(eps) == 4 and all(e.status.value == "ok" for e in eps)
        table = store.table(run_id=result.run_id)
        assert len(table) > 0 and table.action_valid.all()  # constrained to the served admissible actions
    line = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert line["step"] == 1 and "rollout/success_rate" in line
