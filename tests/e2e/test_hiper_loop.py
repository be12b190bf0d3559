"""End-to-end: HiPER (ALGORITHMS.md §14) through the whole training loop with the tiny random model
on the toy env: ``<switch>``/``<subgoal>``/``<action>`` tags → ``Turn.info`` → store → TurnTable
columns, the three-head critic's values → ``hiper`` → span advantages in the update (the span union
as the loss mask) → the critic's three-head step.

The random model writes no tags on its own, so its decoding is constrained to the tagged forms of
the admissible actions (``policy.action_constraint: admissible`` with ``policy.hiper_subgoals``): the
model samples switch, subgoal and action among them with its own logprobs, renormalised over the
allowed ids at sampling and in the update alike.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.config import ConfigError  # noqa: E402
from agentrl.credit import compute_advantages  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402
from agentrl.train.checks import checked_config_from_dict  # noqa: E402


def _raw(tiny_dir, out_dir) -> dict:
    return {
        "run": {"name": "hiper", "out_dir": str(out_dir), "iterations": 1, "eval_every": 0, "save_every": 1, "seed": 3},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 4, "split": "train", "eval_split": "eval", "eval_panel_size": 3},
        "policy": {"model": str(tiny_dir), "max_tokens": 96, "action_format": "hiper", "action_constraint": "admissible",
                   "hiper_subgoals": ["open it", "find key"]},
        "rollout": {"groups_per_iteration": 1, "group_size": 4, "num_workers": 1},
        "algorithm": {"estimator": "hiper", "kwargs": {"norm_adv": False}},
        "update": {"lr": 1e-2, "micro_batch": 4, "epochs": 1},
        "log": {"console": False},
    }


def test_hiper_trains_one_iteration_with_span_advantages_and_three_heads(tiny_dir, tmp_path, monkeypatch):
    from agentrl.train import train

    import agentrl.train.plan as plan

    from agentrl.train.critic import load_critic, make_critic

    built = []
    real = plan.build_batch
    monkeypatch.setattr(plan, "build_batch", lambda *a, **kw: built.append(kw) or real(*a, **kw))
    cfg = checked_config_from_dict(_raw(tiny_dir, tmp_path))  # make_critic below reads the filled kwargs
    result = train(cfg, resume=False)
    fresh = make_critic(cfg)  # the checkpoint holds the three-head critic, which a resume restores
    assert fresh.model.heads == 3 and fresh.model.head.weight.abs().sum() == 0
    folder = result.run_dir / "checkpoints" / (result.run_dir / "checkpoints" / "latest").read_text()
    assert load_critic(folder, fresh) and fresh.model.head.weight.abs().sum() > 0
    assert result.state.iteration == 1 and result.state.policy_version == 1
    line = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert line["critic/loss"] >= 0 and line["update/steps"] >= 1
    with TurnStore(result.store_path, readonly=True) as store:
        table = store.table(run_id=result.run_id)
        stored = store.advantages(result.run_id, estimator="hiper")
        episodes = store.load_episodes(result.run_id)
    assert len(stored) == len(table) > 4
    assert table.switch is not None and table.has_switch.all() and (table.subgoal_key >= 0).all()
    turns = [t for e in episodes for t in e.turns]
    assert all(t.info["subgoal"] in ("open it", "find key") and "allowed_digest" in t.info for t in turns)
    assert len({t.info["switch"] for t in turns}) == 2  # KEEP and SWITCH both sampled: segments form
    spans = [t.info["hiper_spans"] for e in episodes for t in e.turns]
    assert all(s["switch"][1] <= s["subgoal"][0] and s["subgoal"][1] <= s["action"][0] for s in spans)
    values = np.array([r.value for r in stored])
    assert np.isfinite(values).all() and (values != 0).any()
    # the update trained the span union only: per-token advantages and a token mask per turn
    (kw,) = built
    masks = kw["token_mask"]
    assert masks and all(m is not None and m.any() and not m.all() for m in masks)  # EOS is in no span


def test_hiper_needs_the_hiper_action_format(tiny_dir, tmp_path):
    raw = _raw(tiny_dir, tmp_path)
    raw["policy"]["action_format"] = "tag:action"
    with pytest.raises(ConfigError, match="set policy.action_format: hiper"):
        checked_config_from_dict(raw)
