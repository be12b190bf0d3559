"""Constrained decoding on a real TextWorld game (CU1, 2 cached games): every sampled action
is admissible and accepted by the game; stored logprobs equal the masked recompute."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("textworld") is None,
                                reason="textworld extra not installed (pip install 'agentrl[textworld]')")


def test_constrained_tiny_policy_only_plays_admissible_textworld_commands(tiny_engine, tiny_tokenizer,
                                                                         update_logprob_gap):
    pytest.importorskip("torch")
    from agentrl.llm.base import SamplingParams
    from agentrl.llm.chat import ChatRenderer
    from agentrl.rollout.agent_loop import LoopConfig
    from agentrl.rollout.collector import CollectConfig, collect

    r = ChatRenderer(tiny_tokenizer)
    cfg = CollectConfig(env_id="agentrl/TextWorld-CU1-v0", n_groups=2, group_size=2, seed=0, num_workers=1,
                        progress=False, env_kwargs={"n_tasks": 2, "max_turns": 5},
                        loop=LoopConfig(context="window", max_turns=5, action_format="tag:action",
                                        action_constraint="admissible"),
                        sampling=SamplingParams(max_tokens=96, seed=2))
    eps = collect(tiny_engine, r, cfg)
    turns = [t for e in eps for t in e.turns]
    assert len(turns) >= 8 and all(e.status.value == "ok" for e in eps)  # an episode may end early (won)
    for t in turns:
        assert t.info["finish_reason"] == "stop"
        assert t.action in t.info["allowed_actions"] and t.action_valid
    assert update_logprob_gap(tiny_engine.model, turns, r, tiny_engine.pad_token_id) <= 1e-4
