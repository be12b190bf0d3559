"""Grammar-constrained generation on the HF engine (tiny random model): every completion
follows its grammar (forced tool call / JSON schema), its stored logprobs are the
renormalised constrained ones, and the update's recompute from the rebuilt masks matches them
(PPO ratio 1 on unchanged weights)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("llguidance", reason="needs the grammar extra: pip install 'agentrl[grammar]'")

from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.grammar import (INFO_DIGEST, GrammarCompiler, GrammarSpec, grammar_info,  # noqa: E402
                                 grammar_masks, lark_text)
from agentrl.llm.tool_text import tool_call_blocks  # noqa: E402
from agentrl.types import Message, Turn  # noqa: E402

ARGS = {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "city": {"type": "string", "maxLength": 4},
                                         "ok": {"type": "boolean"}},
        "required": ["unit", "city", "ok"], "additionalProperties": False}


def _sample(engine, renderer, compiler, spec, n=4, seed=3, temperature=1.0):
    prompt = renderer.render_ids([Message("user", "weather?")])
    g = compiler.compile(spec)
    outs = engine.generate([prompt] * n, SamplingParams(temperature=temperature, max_tokens=60, seed=seed),
                           grammars=[g] * n)
    turns = [Turn(run_id="r", episode_id=i, group_id=0, t=0, observation="", anchor_obs="", action="", action_valid=True, reward=0.0,
                  prompt_ids=prompt, completion_ids=c.token_ids, completion_logprobs=c.logprobs, turn_id=i,
                  info=grammar_info(spec, c))
             for i, c in enumerate(outs)]
    return outs, turns


def test_spec_round_trip_and_errors():
    spec = GrammarSpec.tool_call([("get_weather", ARGS), ("noop", None)])
    assert GrammarSpec.from_info(json.loads(json.dumps(spec.to_info()))) == spec
    assert GrammarSpec.json_schema().schema == '{"type":"object"}'
    text = lark_text(spec, special_tags=False)
    assert text.startswith('start: "<tool_call>" "\\n" call "\\n" "</tool_call>"') and "c0 | c1" in text
    with pytest.raises(ValueError, match="tool name"):
        GrammarSpec.tool_call([("bad name", None)])
    with pytest.raises(ValueError, match="at least one tool"):
        GrammarSpec.tool_call([])


def test_forced_tool_call_parses_and_matches_the_update(tiny_engine, renderer, compiler, update_logprob_gap):
    spec = GrammarSpec.tool_call([("get_weather", ARGS)])
    outs, turns = _sample(tiny_engine, renderer, compiler, spec)
    for c in outs:
        assert c.finish_reason == "stop" and c.token_ids[-1] == renderer.eos_token_id
        blocks = tool_call_blocks(renderer.completion_text(c.token_ids))
        assert len(blocks) == 1
        call = json.loads(blocks[0].body)
        assert call["name"] == "get_weather" and call["arguments"]["unit"] in ("c", "f")
        assert len(call["arguments"]["city"]) <= 4 and isinstance(call["arguments"]["ok"], bool)
        assert c.grammar_masks.shape == (c.token_ids.size, (2048 + 31) // 32)
    # the stored logprobs are the renormalised ones: at a free step they differ from the plain softmax
    plain = tiny_engine.score(turns[0].prompt_ids, turns[0].completion_ids)
    assert np.max(np.abs(plain - outs[0].logprobs)) > 0.1
    assert np.all(outs[0].logprobs <= 1e-6) and np.any(np.abs(outs[0].logprobs) < 1e-6)  # forced steps: log 1 = 0
    gap = update_logprob_gap(tiny_engine.model, turns, renderer, renderer.tokenizer.pad_token_id)
    assert gap < 1e-4


def test_json_schema_output_and_ppo_ratio_is_one(tiny_engine, renderer, compiler):
    from agentrl.update.batch import build_batch
    from agentrl.update.logprobs import batch_logprobs

    spec = GrammarSpec.json_schema(ARGS)
    outs, turns = _sample(tiny_engine, renderer, compiler, spec, n=3, seed=11)
    for c in outs:
        value = json.loads(renderer.completion_text(c.token_ids))
        assert set(value) == {"unit", "city", "ok"}
    masks = grammar_masks(turns, renderer)
    assert all(m is not None and m.index.size == t.completion_ids.size for m, t in zip(masks, turns))
    batch = build_batch([t.prompt_ids for t in turns], [t.completion_ids for t in turns],
                        [t.completion_logprobs for t in turns], np.ones(3), pad_id=0, grammar=masks)
    assert batch.grammar_mask.bits.dtype == torch.int32 and batch.grammar_mask.bits.shape[0] < batch.num_tokens
    new = batch_logprobs(tiny_engine.model, batch, micro_batch=2, loss_only=True)
    m = batch.loss_mask.bool()
    ratio = torch.exp(new[m] - batch.old_logprobs[m])
    assert float(torch.max(torch.abs(ratio - 1))) < 1e-4


def test_rebuild_refuses_a_completion_off_the_grammar(tiny_engine, renderer, compiler):
    spec = GrammarSpec.json_schema(ARGS)
    _, turns = _sample(tiny_engine, renderer, compiler, spec, n=1)
    t = turns[0]
    bad = t.completion_ids.copy()
    bad[0] = renderer.eos_token_id  # JSON cannot start with EOS
    t.completion_ids = bad
    with pytest.raises(ValueError, match="not allowed by the stored json_schema grammar"):
        grammar_masks([t], renderer)


def test_digest_catches_a_different_mask(tiny_engine, renderer, compiler):
    _, turns = _sample(tiny_engine, renderer, compiler, GrammarSpec.json_schema(ARGS), n=1)
    turns[0].info[INFO_DIGEST] = "0" * 16
    with pytest.raises(ValueError, match="differ from those it was sampled under"):
        grammar_masks(turns, renderer)


def test_unconstrained_rows_are_untouched(tiny_engine, renderer, compiler):
    prompt = renderer.render_ids([Message("user", "hi")])
    s = SamplingParams(greedy=True, max_tokens=8)
    free = tiny_engine.generate([prompt], s)[0]
    mixed = tiny_engine.generate([prompt, prompt], s, grammars=[None, compiler.compile(GrammarSpec.json_schema())])
    np.testing.assert_array_equal(mixed[0].token_ids, free.token_ids)
    assert mixed[0].grammar_masks is None and mixed[1].grammar_masks is not None
    assert renderer.completion_text(mixed[1].token_ids).startswith("{")


def test_compiler_rejects_a_bad_schema(renderer):
    comp = GrammarCompiler(renderer.tokenizer, renderer.eos_token_id)
    with pytest.raises(ValueError, match="grammar cannot be built"):
        comp.compile(GrammarSpec.json_schema({"type": "object", "properties": {"x": {"type": "nonsense"}}}))


@pytest.mark.slow
def test_smollm2_forced_tool_and_json_always_parse_and_match(smollm2_engine, smollm2_tokenizer, update_logprob_gap):
    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.grammar import compiler_for

    r = ChatRenderer(smollm2_tokenizer)
    comp = compiler_for(r)
    weather = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"], "additionalProperties": False}
    person = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    cases = [("What is the weather in Paris?", GrammarSpec.tool_call([("get_weather", weather)])),
             ("Weather in Tokyo, please.", GrammarSpec.tool_call([("get_weather", weather), ("noop", None)])),
             ("Describe a person as JSON.", GrammarSpec.json_schema(person)),
             ("Give me a JSON object about a dog.", GrammarSpec.json_schema())]
    prompts = [r.render_ids([Message("user", q)]) for q, _ in cases]
    outs = smollm2_engine.generate(prompts, SamplingParams(temperature=1.0, max_tokens=96, seed=0),
                                   grammars=[comp.compile(s) for _, s in cases])
    turns = []
    for (q, spec), p, c in zip(cases, prompts, outs):
        text = r.completion_text(c.token_ids)
        assert c.finish_reason == "stop", text
        body = json.loads(tool_call_blocks(text)[0].body)["arguments"] if spec.kind == "tool_call" else json.loads(text)
        assert isinstance(body, dict)
        turns.append(Turn(run_id="r", episode_id=len(turns), group_id=0, t=0, observation=q, anchor_obs=q, action=text,
                          action_valid=True, reward=0.0, prompt_ids=p, completion_ids=c.token_ids,
                          completion_logprobs=c.logprobs, turn_id=len(turns),
                          info=grammar_info(spec, c)))
    assert update_logprob_gap(smollm2_engine.model, turns, r, smollm2_tokenizer.eos_token_id) < 1e-4
