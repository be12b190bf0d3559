"""Constrained decoding on ``VLLMEngine`` (``generate(allowed=...)``, the V1 logits processor
``agentrl.llm.vllm_allowed``) against the HF engine on the same tiny fp32 weights: only
allowed completions are sampled; logprobs equal the update's renormalised recomputation
(≤ 1e-4) at T = 1 and under temperature / top-p, also when branching steps are re-scored;
greedy picks what HF picks; unconstrained calls stay raw; errors name the fix."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.vllm

torch = pytest.importorskip("torch")

import agentrl.llm.vllm as vllm_mod  # noqa: E402
from agentrl.llm.base import FINISH_STOP, SamplingParams  # noqa: E402
from agentrl.llm.constrained import TokenTrie, completion_sequences  # noqa: E402

# 3-6 actions per prompt, several sharing prefixes ("go ...", "take ...").
ACTION_SETS = [
    ["go east", "go west", "go north", "take key", "take lamp", "look"],
    ["open door", "open chest", "inventory"],
    ["go east", "go east quickly", "examine key", "take key"],
    ["look", "take lamp", "take lamp from table", "go west", "drop lamp"],
]


@pytest.fixture(scope="module")
def renderer(tiny32_dir):
    from transformers import AutoTokenizer

    from agentrl.llm.chat import ChatRenderer

    return ChatRenderer(AutoTokenizer.from_pretrained(tiny32_dir))


@pytest.fixture(scope="module")
def vllm_constrained(tiny32_dir):
    """``VLLMEngine`` built for constrained decoding on the tiny model (fp32, context 512)."""
    from agentrl.llm.vllm import VLLMEngine

    return VLLMEngine.from_pretrained(tiny32_dir, dtype="float32", max_context=512, constrained=True)


@pytest.fixture(scope="module")
def setup(renderer):
    from agentrl.types import Message

    prompts = [renderer.render_ids([Message("user", f"room {i}: pick a command")]) for i in range(len(ACTION_SETS))]
    seqs = [completion_sequences(a, "tag:action", renderer.encode, renderer.eos_token_id) for a in ACTION_SETS]
    return prompts, seqs


def _update_logprobs(hf_engine, prompts, completions, seqs) -> np.ndarray:
    """The update's recomputation: ``build_batch(allowed=TokenTrie.walk)`` + masked
    ``forward_token_stats`` on the HF model; returns the stored-minus-recomputed gaps."""
    from agentrl.update.batch import build_batch
    from agentrl.update.logprobs import forward_token_stats

    allowed = [TokenTrie(s).walk(c.token_ids) for s, c in zip(seqs, completions)]
    batch = build_batch(prompts, [c.token_ids for c in completions], [c.logprobs for c in completions],
                        np.ones(len(prompts)), pad_id=hf_engine.pad_token_id, allowed=allowed)
    with torch.no_grad():
        st = forward_token_stats(hf_engine.model, batch.input_ids, batch.attention_mask,
                                 allowed_ids=batch.allowed_ids)
    m = batch.loss_mask.bool()
    return (st.logprobs[m] - batch.old_logprobs[m]).abs().numpy()


def _sample_many(engine, prompts, seqs, n_seeds, **sp):
    """n_seeds sampled completions per prompt (prompt i repeated), with their prompts and sequences."""
    ps, ss, outs = [], [], []
    for seed in range(n_seeds):
        outs += engine.generate(prompts, SamplingParams(max_tokens=40, seed=seed, **sp), allowed=seqs)
        ps += prompts
        ss += seqs
    return ps, ss, outs


def test_every_completion_is_an_allowed_sequence(vllm_constrained, setup):
    prompts, seqs = setup
    ps, ss, outs = _sample_many(vllm_constrained, prompts, seqs, 8)  # 32 completions
    for s, c in zip(ss, outs):
        assert c.finish_reason == FINISH_STOP and c.logprob_mode == "raw"
        assert any(np.array_equal(c.token_ids, x) for x in s), "completion is not an allowed sequence"
        assert c.logprobs.dtype == np.float32 and np.all(c.logprobs <= 0) and np.all(np.isfinite(c.logprobs))
    distinct = {c.token_ids.tobytes() for c in outs[::4]}  # prompt 0 over 8 seeds
    assert len(distinct) >= 2  # it samples, not a fixed pick


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_logprobs_equal_the_updates_renormalised_recomputation(vllm_constrained, hf_tiny, setup, temperature, top_p):
    prompts, seqs = setup
    ps, ss, outs = _sample_many(vllm_constrained, prompts, seqs, 2, temperature=temperature, top_p=top_p)
    for s, c in zip(ss, outs):
        assert any(np.array_equal(c.token_ids, x) for x in s)
    assert _update_logprobs(hf_tiny, ps, outs, ss).max() <= 1e-4


def test_rescored_branching_steps_give_the_same_logprobs(vllm_constrained, hf_tiny, setup, monkeypatch):
    """With room for few returned ids (MAX_LOGPROB_IDS), uncovered branching steps are
    re-scored by one-token requests: the same renormalised logprobs, the same samples."""
    prompts, seqs = setup
    sp = SamplingParams(max_tokens=40, seed=4)
    full = vllm_constrained.generate(prompts, sp, allowed=seqs)
    for cap in (1, 3):  # 1: no branching node fits, every branching step is re-scored; 3: some fit
        monkeypatch.setattr(vllm_mod, "MAX_LOGPROB_IDS", cap)
        outs = vllm_constrained.generate(prompts, sp, allowed=seqs)
        for a, b in zip(full, outs):
            np.testing.assert_array_equal(a.token_ids, b.token_ids)
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
        assert _update_logprobs(hf_tiny, prompts, outs, seqs).max() <= 1e-4


def test_greedy_picks_what_hf_picks(vllm_constrained, hf_tiny, setup):
    prompts, seqs = setup
    sp = SamplingParams(max_tokens=40, greedy=True)
    for a, b in zip(vllm_constrained.generate(prompts, sp, allowed=seqs), hf_tiny.generate(prompts, sp, allowed=seqs)):
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_unconstrained_calls_and_rows_stay_raw(vllm_constrained, vllm_tiny, hf_tiny, setup):
    prompts, seqs = setup
    sp = SamplingParams(max_tokens=12, seed=9)
    plain = vllm_tiny.generate(prompts[:2], sp)  # an engine built without the processor
    free = vllm_constrained.generate(prompts[:2], sp)
    mixed = vllm_constrained.generate(prompts[:2], sp, allowed=[None, seqs[1]])
    for a, b in zip(plain, free):
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-6)
    np.testing.assert_array_equal(mixed[0].token_ids, free[0].token_ids)  # per-request seeds: batch-mates don't matter
    np.testing.assert_allclose(mixed[0].logprobs, free[0].logprobs, atol=1e-6)
    assert np.abs(hf_tiny.score(prompts[0], free[0].token_ids) - free[0].logprobs).max() <= 1e-4
    assert any(np.array_equal(mixed[1].token_ids, x) for x in seqs[1])


def test_single_sequence_and_truncation(vllm_constrained, hf_tiny, setup):
    prompts, seqs = setup
    one = [seqs[0][0]]  # one allowed completion: every step forced, logprob 0
    c = vllm_constrained.generate(prompts[:1], SamplingParams(max_tokens=40, seed=1), allowed=[one])[0]
    np.testing.assert_array_equal(c.token_ids, one[0])
    assert np.all(c.logprobs == 0)
    short = vllm_constrained.generate(prompts[:1], SamplingParams(max_tokens=2, seed=1), allowed=[seqs[0]])[0]
    assert short.finish_reason == "length" and short.token_ids.size == 2
    assert any(np.array_equal(short.token_ids, x[:2]) for x in seqs[0])
    assert _update_logprobs(hf_tiny, prompts[:1], [short], seqs[:1]).max() <= 1e-4


def test_errors_name_the_fix(vllm_constrained, vllm_tiny, setup):
    from agentrl.llm.vllm_allowed import EXTRA_KEY, FQCN, allowed_of

    prompts, seqs = setup
    sp = SamplingParams(max_tokens=8, seed=0)
    assert vllm_constrained.constrained and not vllm_tiny.constrained
    assert (FQCN, EXTRA_KEY) == (vllm_mod._ALLOWED_FQCN, vllm_mod._ALLOWED_KEY)
    with pytest.raises(ValueError, match="constrained=True"):
        vllm_tiny.generate(prompts[:1], sp, allowed=[seqs[0]])
    vllm_tiny.generate(prompts[:1], sp, allowed=[None])  # all-None is unconstrained: fine
    with pytest.raises(ValueError, match="one \\(or None\\) per prompt"):
        vllm_constrained.generate(prompts[:2], sp, allowed=[seqs[0]])
    with pytest.raises(ValueError, match="at least one sequence"):
        vllm_constrained.generate(prompts[:1], sp, allowed=[[]])
    with pytest.raises(ValueError, match="empty sequence"):
        vllm_constrained.generate(prompts[:1], sp, allowed=[[[]]])
    with pytest.raises(ValueError, match="HF engine"):
        vllm_constrained.generate(prompts[:1], sp, return_hidden=True, allowed=[seqs[0]])
    from vllm import SamplingParams as VSP

    assert allowed_of(VSP(max_tokens=1)) is None
    with pytest.raises(ValueError, match=EXTRA_KEY):
        allowed_of(VSP(max_tokens=1, extra_args={EXTRA_KEY: [[1, "x"]]}))


def test_collector_and_update_with_the_constrained_vllm_engine(vllm_constrained, hf_tiny, renderer,
                                                              update_logprob_gap):
    """Through the collector on Toy-v0: every action admissible, the stored constraint
    rebuilds the update's masks and the recomputed logprobs match (≤ 1e-4)."""
    from agentrl.rollout.agent_loop import LoopConfig
    from agentrl.rollout.collector import CollectConfig, collect

    cfg = CollectConfig(env_id="agentrl/Toy-v0", n_groups=2, group_size=2, seed=1, num_workers=1, progress=False,
                        env_kwargs=dict(max_turns=3),
                        loop=LoopConfig(context="chat", max_turns=3, action_format="tag:action",
                                        action_constraint="admissible"),
                        sampling=SamplingParams(max_tokens=32, seed=7))
    turns = [t for e in collect(vllm_constrained, renderer, cfg) for t in e.turns]
    assert len(turns) >= 6
    for t in turns:
        assert t.action in t.info["allowed_actions"] and t.action_valid
    assert update_logprob_gap(hf_tiny.model, turns, renderer, hf_tiny.pad_token_id) <= 1e-4


def test_policy_builds_the_vllm_engine_for_the_constraint(tiny32_dir, monkeypatch):
    from agentrl.config import PolicyConfig
    from agentrl.llm.policy import load_policy

    seen = []
    monkeypatch.setattr(vllm_mod.VLLMEngine, "from_pretrained",
                        classmethod(lambda cls, path, **kw: seen.append(kw) or object()))
    for constraint in ("admissible", "none"):
        load_policy(PolicyConfig(model=str(tiny32_dir), engine="vllm", action_format="whole",
                                 action_constraint=constraint))
    assert [kw["constrained"] for kw in seen] == [True, False]
