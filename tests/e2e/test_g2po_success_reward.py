"""G2PO's ``success_reward`` must be the env's reward for a win (``agentrl.credit.success``).

With the reference default 10.0 on an env that pays 1.0, no episode reaches G2PO's SUCCESS node
and the winning turn's transition term is negative: the learning grid's G2PO cell unlearned
TextWorld cu1 that way (greedy 4.2 % → 0 %). The trainer now refuses such a batch, after
storing it, naming the fix; the unit cases pin the rule, the loop case runs it on the toy env.
"""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.credit import check_success_reward, compute_advantages
from agentrl.types import Episode, Turn, TurnTable


def _episode(eid: int, rewards: list[float | None], won: bool, group: int = 0) -> Episode:
    turns = [Turn(run_id="r", episode_id=eid, group_id=group, t=t, observation="o", anchor_obs=f"s{t}",
                  action="go", action_valid=True, reward=r, terminated=won and t == len(rewards) - 1,
                  prompt_ids=np.arange(3, dtype=np.int32), completion_ids=np.array([7], np.int32),
                  completion_logprobs=np.array([-0.5], np.float32), turn_id=eid * 10 + t,
                  info={"won": True} if won and t == len(rewards) - 1 else {})
             for t, r in enumerate(rewards)]
    return Episode(episode_id=eid, group_id=group, env_id="agentrl/Toy-v0", task_id="x", seed=0, turns=turns)


def test_a_win_paid_1_is_refused_under_the_default_and_accepted_when_set():
    eps = [_episode(0, [0.0, 1.0], True), _episode(1, [0.0, 0.0], False)]
    with pytest.raises(ValueError, match=r"won episodes return 1 but success_reward is 10.*success_reward=1 "):
        check_success_reward("g2po", {}, eps)
    check_success_reward("g2po", {"success_reward": 1.0}, eps)
    check_success_reward("grpo", {}, eps)  # no success_reward hyperparameter: nothing to check
    check_success_reward("g2po", {}, [_episode(2, [0.0, None], True), eps[1]])  # unscored: skipped
    check_success_reward("g2po", {}, [_episode(3, [0.0, 10.0], True)])  # the reference's ALFWorld reward
    from dataclasses import replace

    from agentrl.types import EpisodeStatus
    failed = replace(_episode(4, [0.0, 1.0], True), status=EpisodeStatus.ENV_ERROR)
    check_success_reward("g2po", {}, [failed])  # a failed episode takes part in no credit (P5): not checked


def test_the_winning_turn_is_credited_once_success_reward_matches():
    """Why the check exists: with 10.0 on a 1.0-reward win, the winning (last) turn's successor
    is valued as FAIL (0), so G2PO's transition term (component 2, §5.3) is negative there and
    positive on a failed episode's last turn; with 1.0 it is the other way round."""
    from agentrl.credit import explain_advantages

    eps = [_episode(0, [0.0, 1.0], True), _episode(1, [0.0, 0.0, 0.0], False), _episode(2, [0.0, 1.0], True),
           _episode(3, [0.0, 0.0, 0.0], False)]
    table = TurnTable.from_episodes(eps)
    win = np.flatnonzero((table.episode == 0) & (table.t == 1))[0]
    lost = np.flatnonzero((table.episode == 1) & (table.t == 2))[0]

    def transition(**kw):
        return np.asarray({t.name: t.value for t in explain_advantages(table, "g2po", **kw).terms}["transition"])

    wrong, right = transition(), transition(success_reward=1.0)
    assert wrong[win] < 0 < right[win] and right[lost] < 0 < wrong[lost]
    assert compute_advantages(table, "g2po", success_reward=1.0)[win] > compute_advantages(table, "g2po")[win]


def _cfg(tiny_dir, out_dir, kwargs):
    from agentrl.config import config_from_dict

    return config_from_dict({
        "run": {"name": "g2po", "out_dir": str(out_dir), "iterations": 1, "eval_every": 0, "save_every": 1, "seed": 3},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 16, "split": "train", "eval_split": "eval", "eval_panel_size": 2},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole", "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1},
        "algorithm": {"estimator": "g2po", "kwargs": kwargs},
        "update": {"lr": 1e-2, "micro_batch": 4, "epochs": 1},
        "log": {"console": False}})


def test_the_loop_refuses_the_default_on_the_toy_env_and_keeps_the_batch(tiny_dir, tmp_path):
    pytest.importorskip("torch")
    from agentrl.store import TurnStore
    from agentrl.train import train

    with pytest.raises(ValueError, match="algorithm.kwargs.success_reward=1 "):
        train(_cfg(tiny_dir, tmp_path / "a", {}), resume=False)
    with TurnStore(tmp_path / "a" / "g2po" / "store.sqlite", readonly=True) as store:
        eps = store.episodes()
    assert len(eps) == 8 and any(e.success for e in eps)  # stored before the refusal
    result = train(_cfg(tiny_dir, tmp_path / "b", {"success_reward": 1.0}), resume=False)
    assert result.state.iteration == 1
