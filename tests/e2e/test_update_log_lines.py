"""Issue 23 item 5: the update phase says what it does in the log — how many turns and optimizer
steps — and a skipped update says why (here: every advantage 0, no contrast inside any group)."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

pytest.importorskip("torch")

from agentrl.config import config_from_dict  # noqa: E402
from agentrl.train.plan import skipped_update_reason  # noqa: E402
from agentrl.types import TurnTable  # noqa: E402


def _cfg(tiny_dir, out, seed: int, max_turns: int, estimator: str, iterations: int):
    return config_from_dict({
        "run": {"name": f"log{seed}", "out_dir": str(out), "iterations": iterations, "eval_every": 0, "save_every": 1,
                "seed": seed},
        "env": {"id": "agentrl/Toy-v0", "max_turns": max_turns},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole", "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1},
        "algorithm": {"estimator": estimator},
        "update": {"lr": 1e-2, "micro_batch": 8},
        "log": {"console": False, "tensorboard": True},
    })


@pytest.mark.parametrize("seed, max_turns, estimator, iterations, want", [
    (4, 6, "grpo", 1, r"iteration 1: no update, every advantage is 0: no contrast inside any of the 2 group\(s\)"),
    (3, 8, "gigpo", 2, r"iteration 2: update on \d+ turn\(s\) in 1 optimizer step\(s\)"),
])
def test_update_phase_log_line(tiny_dir, tmp_path, caplog, seed, max_turns, estimator, iterations, want):
    from agentrl.train import train

    with caplog.at_level(logging.INFO, logger="agentrl"):
        result = train(_cfg(tiny_dir, tmp_path, seed, max_turns, estimator, iterations), resume=False)
    messages = [r.getMessage() for r in caplog.records]
    assert any(re.search(want, m) for m in messages), messages
    assert (result.state.optimizer_steps == 0) == ("no update" in want)
    # each iteration's sample table (a few episodes' turns) went to TensorBoard's text plugin
    assert len(list((result.run_dir / "tb").glob("*.samples"))) == 1


def test_skipped_update_reasons():
    assert skipped_update_reason(None, None) == "no episode was collected"
    base = dict(group=[0, 0], episode=[0, 1], t=[0, 0], reward=[1.0, 1.0], terminated=[True, True],
                truncated=[False, False], action_valid=[True, True], anchor_key=[0, 0], next_anchor_key=[0, 0],
                action_key=[0, 0], parent=[-1, -1], turn_id=[0, 1])
    failed = TurnTable(**base, episode_ok=[False, False], trainable=[True, True])
    assert skipped_update_reason(failed, np.zeros(2)).startswith("every episode failed (2 episode(s)")
    textonly = TurnTable(**base, episode_ok=[True, True], trainable=[False, False])
    assert skipped_update_reason(textonly, np.zeros(2)) == "no finished turn carries token ids to train on"


def test_failed_episodes_say_why_in_the_skipped_update_line():
    from agentrl.train.plan import failure_summary
    from agentrl.types import Episode, EpisodeStatus

    eps = [Episode(episode_id=i, group_id=0, env_id="x", task_id="t", seed=0) for i in range(4)]
    for e in eps[:3]:
        e.status, e.error = EpisodeStatus.ABORTED, "first prompt (9000 tokens) fills the context (2048)"
    eps[2].error = "other"
    assert failure_summary(eps) == ("aborted 3 of 4; most common reason (2): first prompt (9000 tokens) fills the "
                                    "context (2048)")
    assert failure_summary(eps[3:]) == ""
    assert skipped_update_reason(None, None, eps[:3]).startswith("no episode has a turn (aborted 3 of 3;")


def test_a_system_prompt_longer_than_the_context_is_named_in_the_log(tiny_dir, tmp_path, caplog):
    """Every episode aborts at its first prompt: the run says so and why, instead of 'no episode
    was collected' (adversarial pass of issue 48) — and since issue 53 it stops there (no update
    of nothing, no checkpoint of an unchanged policy), the failed episodes kept in the store."""
    from dataclasses import replace

    from agentrl.store import TurnStore
    from agentrl.train import train
    from agentrl.train.plan import RolloutFailedError

    cfg = _cfg(tiny_dir, tmp_path, 1, 6, "grpo", 1)
    cfg = replace(cfg, policy=replace(cfg.policy, system_prompt="word " * 4000))
    with caplog.at_level(logging.INFO, logger="agentrl"), pytest.raises(RolloutFailedError) as err:
        train(cfg, resume=False)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("every episode of iteration 1 failed, so nothing can be trained: ")
    assert re.search(r"8 of 8 episode\(s\) failed \(aborted 8; causes: none named\); first error \(episode 0\): "
                     r"first prompt \(\d+ tokens\) fills the context \(\d+\); shorten policy.system_prompt", msg), msg
    assert any("8 of 8 episode(s) failed" in r.getMessage() for r in caplog.records)  # the per-iteration line
    run_dir = tmp_path / cfg.run.name
    assert not (run_dir / "checkpoints").exists() or not any((run_dir / "checkpoints").iterdir())
    with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
        assert [e.status.value for e in store.episodes(cfg.run.name)] == ["aborted"] * 8
