"""Budget-aware closing of grammar-constrained completions (``agentrl.llm.grammar_close``),
tiny random model: a completion whose unbounded string would run past ``max_tokens`` is
closed by the shortest way to finish, ends with EOS and parses; the forced tokens have
logprob 0 under one-id masks that ``turn_grammar_masks`` rebuilds from
``info["grammar_close_at"]``, so the update's recompute still matches (gap < 1e-4)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("llguidance", reason="needs the grammar extra: pip install 'agentrl[grammar]'")

from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.grammar import INFO_CLOSE, GrammarSpec, grammar_info, grammar_masks  # noqa: E402
from agentrl.llm.grammar_close import MARGIN, closing_path  # noqa: E402
from agentrl.llm.tool_text import tool_call_blocks  # noqa: E402
from agentrl.types import Message, Turn  # noqa: E402

S = {"type": "string"}
LONG = {"type": "object", "properties": {"title": S, "tags": {"type": "array", "items": S}, "n": {"type": "integer"},
                                         "sub": {"type": "object", "properties": {"note": S}, "required": ["note"]}},
        "required": ["title", "tags", "n", "sub"], "additionalProperties": False}


def _bits(buf):
    return np.unpackbits(np.ascontiguousarray(buf).view(np.uint8), bitorder="little").astype(bool)


@pytest.mark.parametrize("spec", [GrammarSpec.json_schema(LONG), GrammarSpec.json_schema(),
                                  GrammarSpec.tool_call([("log", LONG), ("noop", None)])], ids=["schema", "object", "tool"])
def test_closing_path_finishes_and_leaves_the_matcher_alone(compiler, renderer, spec):
    g = compiler.compile(spec)
    m = g.matcher()
    prefix = renderer.tokenizer.encode('<tool_call>\n{"name": "log", "arguments": {"title": "abc' if spec.kind ==
                                       "tool_call" else '{"title": "abc', add_special_tokens=False)
    if spec.schema == '{"type":"object"}':
        prefix = []
    for tok in prefix:
        assert m.consume_token(tok)
    before = np.empty(g.width, np.int32)
    g.fill(m, before)
    path = closing_path(g, m)
    after = np.empty(g.width, np.int32)
    g.fill(m, after)
    np.testing.assert_array_equal(before, after)  # walked on a copy
    assert path is not None and path[-1] == renderer.eos_token_id
    text = renderer.completion_text(np.asarray(prefix + path))
    value = json.loads(tool_call_blocks(text)[0].body)["arguments"] if spec.kind == "tool_call" else json.loads(text)
    if spec.schema != '{"type":"object"}':
        assert value["title"].startswith("abc") and value["tags"] == [] and value["sub"] == {"note": ""}
    else:
        assert value == {}
    # every id of the path is allowed where it stands, and it is the shortest the ranking finds
    masks = g.masks(prefix + path)
    assert masks.index.size == len(prefix) + len(path)


def test_budget_closes_unbounded_strings_and_the_update_matches(tiny_engine, renderer, compiler, update_logprob_gap):
    spec = GrammarSpec.json_schema(LONG)
    g = compiler.compile(spec)
    shortest = len(closing_path(g, g.matcher()))
    budget = shortest + MARGIN + 12  # a few free tokens, then the random model's strings must be cut
    prompt = renderer.render_ids([Message("user", "json please")])
    outs = tiny_engine.generate([prompt] * 6, SamplingParams(temperature=1.0, max_tokens=budget, seed=4),
                                grammars=[g] * 6)
    turns = []
    for i, c in enumerate(outs):
        value = json.loads(renderer.completion_text(c.token_ids))
        assert c.finish_reason == "stop" and c.token_ids.size <= budget and set(value) == set(LONG["required"])
        if c.grammar_close_at is not None:
            k = c.grammar_close_at
            assert np.all(c.logprobs[k:] == 0.0)  # one allowed id per forced step: log 1
            assert all(_bits(row).sum() == 1 for row in c.grammar_masks[k:])
        info = grammar_info(spec, c)
        assert info.get(INFO_CLOSE) == c.grammar_close_at
        turns.append(Turn(run_id="r", episode_id=i, group_id=0, t=0, observation="", anchor_obs="", action="",
                          action_valid=True, reward=0.0, prompt_ids=prompt, completion_ids=c.token_ids,
                          completion_logprobs=c.logprobs, turn_id=i, info=info))
    closed = [t for t, c in zip(turns, outs) if c.grammar_close_at is not None]
    assert len(closed) >= 3  # the random model rarely closes a string itself
    assert any(np.any(c.logprobs[:c.grammar_close_at] < -1e-3) for c in outs if c.grammar_close_at)  # sampled before
    assert update_logprob_gap(tiny_engine.model, turns, renderer, renderer.tokenizer.pad_token_id) < 1e-4
    # without the stored close position the rebuilt masks are the grammar's, not what was sampled
    closed[0].info.pop(INFO_CLOSE)
    with pytest.raises(ValueError, match="differ from those it was sampled under"):
        grammar_masks([closed[0]], renderer)


def test_a_budget_below_the_shortest_completion_still_truncates(tiny_engine, renderer, compiler):
    g = compiler.compile(GrammarSpec.json_schema(LONG))
    shortest = len(closing_path(g, g.matcher()))
    prompt = renderer.render_ids([Message("user", "json please")])
    c = tiny_engine.generate([prompt], SamplingParams(temperature=1.0, max_tokens=shortest - 2, seed=1), grammars=[g])[0]
    assert c.finish_reason == "length" and c.grammar_close_at == 0 and c.token_ids.size == shortest - 2
    full = tiny_engine.generate([prompt], SamplingParams(temperature=1.0, max_tokens=shortest, seed=1), grammars=[g])[0]
    assert full.finish_reason == "stop" and full.grammar_close_at == 0 and json.loads(renderer.completion_text(full.token_ids))
