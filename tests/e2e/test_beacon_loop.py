"""End-to-end: BEACON (ALGORITHMS.md §15) through the whole training loop with the tiny random
model — on the junction maze, whose milestones travel env ``info`` → agent loop → ``Turn.info`` →
store → ``TurnTable.milestone``, and on the toy env, which publishes none (all-False column:
GRPO's mean-only episode term, §15.3)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.config import config_from_dict  # noqa: E402
from agentrl.credit import compute_advantages  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402


def _cfg(tiny_dir, out_dir, env: dict, name: str):
    return config_from_dict({
        "run": {"name": name, "out_dir": str(out_dir), "iterations": 1, "eval_every": 0, "save_every": 1, "seed": 3},
        "env": {"split": "train", "eval_split": "eval", "eval_panel_size": 3, **env},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole",
                   "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1},
        "algorithm": {"estimator": "beacon"},
        "update": {"lr": 1e-2, "micro_batch": 4, "epochs": 1},
        "log": {"console": False},
    })


@pytest.mark.parametrize("env", [{"id": "agentrl/JunctionMaze-v0", "max_turns": 6, "kwargs": {"k": 2}},
                                 {"id": "agentrl/Toy-v0", "max_turns": 8}], ids=["junction", "toy"])
def test_beacon_trains_one_iteration(tiny_dir, tmp_path, env):
    from agentrl.train import train

    result = train(_cfg(tiny_dir, tmp_path, env, "beacon"), resume=False)
    assert result.state.iteration == 1 and result.state.policy_version == 1
    with TurnStore(result.store_path, readonly=True) as store:
        table = store.table(run_id=result.run_id)
        stored = store.advantages(result.run_id, estimator="beacon")
    assert len(stored) == len(table) and table.milestone is not None
    adv = compute_advantages(table, "beacon")
    by_turn = {r.turn_id: r.value for r in stored}
    np.testing.assert_allclose([by_turn[int(t)] for t in table.turn_id], adv, atol=1e-9)  # the loop's own values
    if env["id"] == "agentrl/JunctionMaze-v0":
        assert table.n_milestones.tolist() == [2] * len(table)
        # a milestone is a junction left by its right exit: never more than k per episode
        per_episode = np.bincount(np.unique(table.episode, return_inverse=True)[1], weights=table.milestone)
        assert per_episode.max() <= 2
    else:
        assert not table.milestone.any() and table.n_milestones is None
