"""Issue 36: ``HFEngine.generate`` keeps one (B, V) row per decoding step, never the (B, T, V)
logits, and its stored logprobs are **bit-identical** (fp32) to the old whole-tensor path —
``generate(output_logits=True)``, stacked, log-softmaxed, renormalised per row — for free,
trie-constrained and grammar rows; greedy, sampled and per-row seeded; prefix KV cache on and
off; through ``_generate_split``; a peft-wrapped model and bf16 weights. The old path is the
reference in ``benchmarks/_rollmem_reference.py``, run on the very ``model.generate`` call the
engine makes (the same tokens, the same logits)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _rollmem_reference import captured_generate, old_completion_logprobs  # noqa: E402

from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.chat import ChatRenderer  # noqa: E402
from agentrl.llm.constrained import TokenTrie, completion_sequences  # noqa: E402
from agentrl.llm.hf import HFEngine  # noqa: E402
from agentrl.llm.step_logprobs import StepLogprobs  # noqa: E402
from agentrl.types import Message  # noqa: E402

ACTIONS = ["go east", "go west", "take key", "open door", "look", "inventory"]


def _prompts(r: ChatRenderer, n: int) -> list:
    """n chat prompts of different lengths (left padding is exercised)."""
    return [r.render_ids([Message("user", "pick a command " + "in the dark room " * i)]) for i in range(n)]


def _run(engine, prompts, sampling, *, allowed=None, grammars=None, top=0):
    """New completions and the old path's (logprobs, top ids, top logprobs) on the same call."""
    with captured_generate(engine.model) as calls:
        new = engine.generate(prompts, sampling, allowed=allowed, grammars=grammars, top_logprobs=top)
    return new, old_completion_logprobs(engine, prompts, sampling, calls, allowed=allowed, top_logprobs=top)


def _assert_identical(new, old, free_top: list[bool] | None = None):
    for b, (c, (lp, top_ids, top_lp)) in enumerate(zip(new, old)):
        assert c.logprobs.dtype == np.float32 and c.logprobs.size == c.token_ids.size > 0
        assert np.array_equal(c.logprobs, lp), (b, np.max(np.abs(c.logprobs - lp)))  # bit for bit
        if free_top is not None and free_top[b]:
            assert np.array_equal(c.top_ids, top_ids) and np.array_equal(c.top_logprobs, top_lp)


@pytest.fixture(scope="module")
def r(tiny_tokenizer):
    return ChatRenderer(tiny_tokenizer)


@pytest.fixture(scope="module")
def allowed(r):
    """Per row of a 6-row batch: rows 1 and 4 free, the others a different allowed set."""
    return [None if i in (1, 4) else completion_sequences(ACTIONS[i % 4:], "tag:action", r.encode, r.eos_token_id)
            for i in range(6)]


SAMPLINGS = {
    "sampled": SamplingParams(max_tokens=12, seed=5, temperature=1.3, top_p=0.9),
    "greedy": SamplingParams(max_tokens=12, greedy=True),
    "row_seeds": SamplingParams(max_tokens=12, temperature=0.8, row_seeds=(1, 2, 3, 4, 5, 6)),
}


@pytest.mark.parametrize("cache_mb", [0, 64])
@pytest.mark.parametrize("mode", sorted(SAMPLINGS))
def test_free_and_trie_rows_bit_identical(tiny_dir, r, allowed, mode, cache_mb):
    engine = HFEngine.from_pretrained(tiny_dir, prefix_cache_mb=cache_mb)
    prompts = _prompts(r, 6)
    for _ in range(2):  # with the cache on, the second call starts from cached prefixes
        new, old = _run(engine, prompts, SAMPLINGS[mode], allowed=allowed, top=3)
        _assert_identical(new, old, free_top=[a is None for a in allowed])
    if cache_mb:
        assert engine.prefix_cache.hits >= 1
    for c, a in zip(new, allowed):  # constrained rows end on an allowed completion
        if a is not None:
            assert any(np.array_equal(c.token_ids, s) for s in a)


def test_constrained_rows_top_logprobs_are_the_unconstrained_distribution(tiny_engine, r, allowed):
    """The old path's top-k of a constrained row came from logits the trie mask had already
    written −inf into (in place); the documented contract is the raw, unconstrained one."""
    prompts = _prompts(r, 6)
    outs = tiny_engine.generate(prompts, SAMPLINGS["sampled"], allowed=allowed, top_logprobs=3)
    for p, c, a in zip(prompts, outs, allowed):
        seq = torch.tensor([list(p) + c.token_ids.tolist()])
        with torch.no_grad():
            ref = tiny_engine.model(input_ids=seq).logits[0, len(p) - 1:-1].float().log_softmax(-1).topk(3)
        assert np.all(np.isfinite(c.top_logprobs))
        np.testing.assert_array_equal(c.top_ids, ref.indices.numpy())
        np.testing.assert_allclose(c.top_logprobs, ref.values.numpy(), atol=1e-4)


def test_grammar_rows_bit_identical(tiny_engine, r):
    pytest.importorskip("llguidance", reason="needs the grammar extra: pip install 'agentrl[grammar]'")
    from agentrl.llm.grammar import GrammarSpec, compiler_for

    g = compiler_for(r).compile(GrammarSpec.json_schema())
    prompts = _prompts(r, 4)
    grammars = [g, None, g, g]
    for sampling in (SamplingParams(max_tokens=20, seed=2, temperature=1.2), SamplingParams(max_tokens=20, greedy=True)):
        new, old = _run(tiny_engine, prompts, sampling, grammars=grammars, top=2)
        _assert_identical(new, old, free_top=[x is None for x in grammars])
        assert all(c.grammar_masks.shape[0] == c.token_ids.size for c, x in zip(new, grammars) if x is not None)


def test_split_batches_bit_identical(tiny_dir, r):
    engine = HFEngine.from_pretrained(tiny_dir, max_context=60, prefix_cache_mb=0)
    prompts = [list(range(100, 148)), list(range(300, 305)), list(range(200, 230))]  # 48 tokens leave room for 12
    sampling = SamplingParams(max_tokens=20, seed=4)
    with captured_generate(engine.model) as calls:
        new = engine.generate(prompts, sampling, top_logprobs=2)
    assert len(calls) > 1  # the long prompt ran in its own batch
    _assert_identical(new, old_completion_logprobs(engine, prompts, sampling, calls, top_logprobs=2), [True] * 3)


def test_peft_and_bf16_models_bit_identical(tiny_dir, r, allowed):
    peft = pytest.importorskip("peft")
    prompts = _prompts(r, 6)
    lora = HFEngine.from_pretrained(tiny_dir, prefix_cache_mb=0)
    lora.model = peft.get_peft_model(lora.model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                                 init_lora_weights=False))
    bf16 = HFEngine.from_pretrained(tiny_dir, dtype="bfloat16", prefix_cache_mb=0)
    for engine in (lora, bf16):
        new, old = _run(engine, prompts, SAMPLINGS["sampled"], allowed=allowed, top=2)
        _assert_identical(new, old, free_top=[a is None for a in allowed])


def test_hidden_state_equals_output_hidden_states(tiny_dir, r):
    """``Completion.hidden`` (BiPACE) now comes from a hook on the decoder; the old path asked
    ``generate`` for every layer's hidden states of every step."""
    engine = HFEngine.from_pretrained(tiny_dir)
    prompts = _prompts(r, 3)
    for _ in range(2):  # the second call prefills only the last prompt column (prefix cache)
        with captured_generate(engine.model, output_hidden_states=True) as calls:
            outs = engine.generate(prompts, SamplingParams(max_tokens=3, seed=0), return_hidden=True)
        ref = calls[0][1].hidden_states[0][-1][:, -1, :].float().numpy()  # the old extraction
        for b, c in enumerate(outs):
            assert c.hidden.dtype == np.float32 and np.array_equal(c.hidden, ref[b])
    assert engine.prefix_cache.hits >= 1


def test_step_logprobs_by_hand():
    """Two rows, V = 4, two steps fed by hand: row 0 free, row 1 on a trie {[2, 3], [1]}."""
    raw = [torch.tensor([[0.0, 1.0, 2.0, 3.0], [1.0, 0.5, -1.0, 2.0]]),
           torch.tensor([[3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 4.0, 1.0]])]
    steps = StepLogprobs([None, TokenTrie([[2, 3], [1]])], None, prompt_width=1, stops={3}, budgets=[2, 2], top_k=1)

    class Out:
        def __init__(self, x):
            self.logits = x[:, None, :]

    steps._keep_row(None, (), Out(raw[0]))
    steps(torch.tensor([[9], [9]]), raw[0].clone())
    steps._keep_row(None, (), Out(raw[1]))
    steps(torch.tensor([[9, 0], [9, 2]]), raw[1].clone())
    sampled, top = steps.finish(torch.tensor([[9, 0, 0], [9, 2, 3]]))

    def lsm(x, allowed, tok):
        x = np.asarray(x, np.float64)
        return x[tok] - np.log(np.exp(x[allowed]).sum())

    want = [[lsm([0, 1, 2, 3], [0, 1, 2, 3], 0), lsm([3, 0, 0, 0], [0, 1, 2, 3], 0)],
            [lsm([1, 0.5, -1, 2], [1, 2], 2), lsm([0, 0, 4, 1], [3], 3)]]  # row 1: over {1, 2}, then only {3}
    np.testing.assert_allclose(sampled.numpy(), np.asarray(want), atol=1e-6)
    np.testing.assert_array_equal(top[0][:, :, 0].numpy(), [[3, 0], [3, 2]])  # raw (unconstrained) argmax
    bad = StepLogprobs([TokenTrie([[2, 3]])], None, prompt_width=1, stops={3}, budgets=[2])
    bad._keep_row(None, (), Out(raw[0][:1]))
    bad(torch.tensor([[9]]), raw[0][:1])
    with pytest.raises(ValueError, match="not allowed by the trie"):
        bad.finish(torch.tensor([[9, 1]]))


@pytest.mark.slow
def test_smollm2_free_trie_and_grammar_rows_bit_identical(smollm2_engine, smollm2_tokenizer):
    pytest.importorskip("llguidance", reason="needs the grammar extra: pip install 'agentrl[grammar]'")
    from agentrl.llm.grammar import GrammarSpec, compiler_for

    r = ChatRenderer(smollm2_tokenizer)
    prompts = _prompts(r, 3)
    allowed = [None, completion_sequences(ACTIONS, "whole", r.encode, r.eos_token_id), None]
    grammars = [None, None, compiler_for(r).compile(GrammarSpec.json_schema())]
    sampling = SamplingParams(max_tokens=10, seed=1)
    with captured_generate(smollm2_engine.model) as calls:
        new = smollm2_engine.generate(prompts, sampling, allowed=allowed, grammars=grammars, top_logprobs=2)
    old = old_completion_logprobs(smollm2_engine, prompts, sampling, calls, allowed=allowed, top_logprobs=2)
    _assert_identical(new, old, free_top=[True, False, False])
