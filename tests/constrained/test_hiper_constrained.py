"""Constrained decoding in HiPER's tag format (``policy.action_format: hiper`` with
``policy.action_constraint: admissible`` and ``policy.hiper_subgoals``): each admissible action is
allowed as every ``<switch>KEEP|SWITCH</switch><subgoal>g</subgoal><action>a</action>``; the tiny
random model samples among them, the agent loop parses its tags, the stored constraint rebuilds the
update's masks and the constrained logprobs recompute within 1e-4 (as for the other formats)."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.config import ConfigError, PolicyConfig
from agentrl.llm.base import SamplingParams
from agentrl.llm.constrained import (HIPER_SWITCHES, completion_sequences, rendered_completions,
                                     turn_allowed_ids)
from agentrl.rollout.agent_loop import LoopConfig
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.rollout.parsing import parse_hiper

SUBGOALS = ("open the door", "find the key")


def test_rendered_completions_enumerate_switch_and_subgoal_in_order():
    got = rendered_completions("go north", "hiper", SUBGOALS)
    assert got == ["<switch>KEEP</switch><subgoal>open the door</subgoal><action>go north</action>",
                   "<switch>KEEP</switch><subgoal>find the key</subgoal><action>go north</action>",
                   "<switch>SWITCH</switch><subgoal>open the door</subgoal><action>go north</action>",
                   "<switch>SWITCH</switch><subgoal>find the key</subgoal><action>go north</action>"]
    assert HIPER_SWITCHES == ("KEEP", "SWITCH")
    assert rendered_completions("go north", "tag:action", SUBGOALS) == ["<action>go north</action>"]
    assert rendered_completions("go north", "whole") == ["go north"]
    for tags in got:  # what the agent loop then reads
        parsed = parse_hiper(tags)
        assert parsed.subgoal in SUBGOALS and parsed.switch == ("<switch>SWITCH" in tags)


@pytest.mark.parametrize("subgoals", [(), ("ok", "  ")])
def test_hiper_constraint_without_subgoals_is_refused_naming_the_fix(subgoals):
    with pytest.raises(ValueError, match="policy.hiper_subgoals"):
        rendered_completions("look", "hiper", subgoals)
    with pytest.raises(ValueError, match="policy.hiper_subgoals"):
        LoopConfig(action_format="hiper", action_constraint="admissible", hiper_subgoals=subgoals)
    with pytest.raises(ConfigError, match="policy.hiper_subgoals"):
        PolicyConfig(action_format="hiper", action_constraint="admissible", hiper_subgoals=subgoals)
    LoopConfig(action_format="hiper", action_constraint="none")  # free decoding needs no subgoal list
    PolicyConfig(action_format="hiper", action_constraint="admissible", hiper_subgoals=SUBGOALS)


def test_completion_sequences_expand_each_action(tiny_tokenizer):
    from agentrl.llm.chat import ChatRenderer

    r = ChatRenderer(tiny_tokenizer)
    seqs = completion_sequences(["look", "go north"], "hiper", r.encode, r.eos_token_id, SUBGOALS)
    assert len(seqs) == 2 * 2 * len(SUBGOALS) and all(s[-1] == r.eos_token_id for s in seqs)
    assert r.completion_text(seqs[5][:-1]) == rendered_completions("go north", "hiper", SUBGOALS)[1]


def test_tiny_model_samples_tagged_admissible_completions_and_the_update_recomputes_them(tiny_engine, tiny_tokenizer):
    torch = pytest.importorskip("torch")
    from agentrl.llm.chat import ChatRenderer
    from agentrl.update.batch import build_batch
    from agentrl.update.logprobs import forward_token_stats

    r = ChatRenderer(tiny_tokenizer)
    loop = LoopConfig(context="window", window_k=0, max_turns=4, action_format="hiper", action_constraint="admissible",
                      hiper_subgoals=SUBGOALS)
    cfg = CollectConfig(env_id="agentrl/Toy-v0", n_groups=2, group_size=2, seed=3, num_workers=1, progress=False,
                        env_kwargs={"max_turns": 4}, loop=loop, sampling=SamplingParams(max_tokens=64, seed=5))
    eps = collect(tiny_engine, r, cfg)
    turns = [t for e in eps for t in e.turns]
    assert len(turns) >= 8
    switches = set()
    for t in turns:
        text = r.completion_text(t.completion_ids)
        assert text in rendered_completions(t.action, "hiper", SUBGOALS)  # one of the allowed tagged forms
        assert t.action in t.info["allowed_actions"] and t.action_valid
        assert t.info["subgoal"] in SUBGOALS and t.info["hiper_subgoals"] == list(SUBGOALS)
        assert t.info["switch_span"] and t.info["switch"] == text.startswith("<switch>SWITCH")
        switches.add(t.info["switch"])
    assert switches == {True, False}  # the random model picks both; the choice is the policy's
    allowed = [turn_allowed_ids(t, r.encode, r.eos_token_id) for t in turns]
    batch = build_batch([t.prompt_ids for t in turns], [t.completion_ids for t in turns],
                        [t.completion_logprobs for t in turns], np.ones(len(turns)), pad_id=tiny_engine.pad_token_id,
                        allowed=allowed)
    with torch.no_grad():
        st = forward_token_stats(tiny_engine.model, batch.input_ids, batch.attention_mask,
                                 allowed_ids=batch.allowed_ids)
    m = batch.loss_mask.bool()
    assert torch.max(torch.abs(st.logprobs[m] - batch.old_logprobs[m])) <= 1e-4
    # the fixed tag text has one allowed id per position: logprob 0; only the choices cost
    forced = [np.flatnonzero([len(ids) == 1 for ids in per_turn]) for per_turn in allowed]
    for t, pos in zip(turns, forced):
        assert pos.size > 0 and np.all(np.abs(np.asarray(t.completion_logprobs)[pos]) < 1e-6)
