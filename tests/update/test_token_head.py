"""Issue 36: ``forward_token_stats`` runs the LM head only on each row's own completion
positions, in chunks recomputed one at a time in backward (``agentrl.update.token_head``).
Its logprobs, entropies and gradients equal the old union-of-columns path
(``benchmarks/_rollmem_reference.old_forward_token_stats``) for every option — temperature,
trie ``allowed_ids``, grammar ``BatchMasks``, no ``token_mask``, ``share_prefix`` (shared prefix
and duplicate rows), gradient checkpointing, ``entropy_grad`` on and off, LoRA, chunks of a
few tokens — in fp32 (≤ 1e-6 values, ≤ 1e-5 relative gradients) and bf16 (looser: see
``test_bf16_equals_union_path``); positions outside ``token_mask`` are 0."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from _rollmem_reference import old_forward_token_stats  # noqa: E402

from agentrl.config import LoraSpec, UpdateConfig  # noqa: E402
from agentrl.llm.grammar import TokenMasks  # noqa: E402
from agentrl.update import build_batch, prepare_policy  # noqa: E402
from agentrl.update.logprobs import forward_token_stats  # noqa: E402
from agentrl.update.token_head import OutputHead, TokenPairs  # noqa: E402
from update_fixtures import PAD, VOCAB, episode_turns, tiny_model  # noqa: E402

WORDS = (VOCAB + 31) // 32


def _turns(seed: int = 0):
    """Turns of two append-only episodes (long prompts of different lengths, short
    completions; the turns of one episode share their prefix) plus a duplicate of turn 1."""
    rng = np.random.default_rng(seed)
    prompts, comps = [], []
    for first in (30, 22):
        p, c = episode_turns(rng, 3, first_prompt=first, obs=4, max_completion=4)
        prompts += p
        comps += c
    return prompts + [prompts[1]], comps + [comps[1]]


def _allowed(comps, rng):
    """Per turn (turns 0 and 4) the allowed ids of each position: the sampled id and 2 others."""
    return [None if i not in (0, 4) else [np.unique(np.r_[t, rng.integers(2, VOCAB, 2)]) for t in c]
            for i, c in enumerate(comps)]


def _grammar(comps, rng):
    """Per turn (turns 2 and 5) bitmasks allowing the sampled id and ~half the vocabulary."""
    out = []
    for i, c in enumerate(comps):
        if i not in (2, 5):
            out.append(None)
            continue
        bits = rng.integers(-2**31, 2**31, size=(c.size, WORDS), dtype=np.int64)
        bits[np.arange(c.size), c // 32] |= 1 << (c % 32).astype(np.int64)
        out.append(TokenMasks(np.arange(c.size, dtype=np.int32), bits.astype(np.uint32).view(np.int32)))
    return out


def _batch(kind: str, seed: int = 0):
    prompts, comps = _turns(seed)
    rng = np.random.default_rng(seed + 1)
    kw = {"allowed": _allowed(comps, rng)} if kind == "allowed" else {}
    if kind == "grammar":
        kw = {"grammar": _grammar(comps, rng)}
    return build_batch(prompts, comps, [np.zeros(c.size) for c in comps], np.ones(len(comps)), pad_id=PAD, **kw)


CASES = {
    "plain": {},
    "temperature": {"temperature": 0.7},
    "allowed": {},
    "grammar": {},
    "no-token-mask": {"token_mask": None},
    "share-prefix": {"share_prefix": True},
    "entropy-detached": {"entropy_grad": False},
    "checkpointing": {"checkpointing": True, "share_prefix": True},
    "lora": {"lora": True, "share_prefix": True},
}


def _stats(fn, model, b, kw, weights):
    model.zero_grad(set_to_none=True)
    mask = kw.get("token_mask", b.loss_mask > 0)
    out = fn(model, b.input_ids, b.attention_mask, temperature=kw.get("temperature", 1.0), with_entropy=True,
             entropy_grad=kw.get("entropy_grad", True), allowed_ids=b.allowed_ids, grammar_mask=b.grammar_mask,
             token_mask=mask, share_prefix=kw.get("share_prefix", False), **kw.get("extra", {}))
    m = b.loss_mask
    (((out.logprobs + 0.3 * out.entropy) * m * weights).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out, grads


def _model(kw, dtype=torch.float32):
    model = tiny_model(3).to(dtype)
    if kw.get("checkpointing") or kw.get("lora"):
        cfg = UpdateConfig(gradient_checkpointing=bool(kw.get("checkpointing")))
        model = prepare_policy(model, cfg, LoraSpec(rank=4, alpha=8.0) if kw.get("lora") else None)
    return model


def _compare(case: str, dtype, lp_tol: float, grad_rtol: float, chunk: int | None):
    kw = dict(CASES[case])
    b = _batch(case)
    model = _model(kw, dtype)
    weights = torch.linspace(0.5, 2.0, b.loss_mask.numel()).reshape(b.loss_mask.shape)
    old, g_old = _stats(old_forward_token_stats, model, b, kw, weights)
    new, g_new = _stats(forward_token_stats, model, b, {**kw, "extra": {"chunk": chunk}}, weights)
    m = b.loss_mask > 0 if kw.get("token_mask", 1) is not None else b.attention_mask > 0
    m[:, 0] = False
    assert new.logprobs.dtype == new.entropy.dtype == torch.float32 and new.logprobs.shape == b.input_ids.shape
    assert float((new.logprobs[m] - old.logprobs[m]).detach().abs().max()) <= lp_tol
    assert float((new.entropy[m] - old.entropy[m]).detach().abs().max()) <= lp_tol
    if kw.get("token_mask", 1) is not None:  # outside the rows' own positions: exactly 0
        assert not new.logprobs[~m].any() and not new.entropy[~m].any()
    _assert_grads_close(g_new, g_old, grad_rtol)


def _assert_grads_close(got: dict, want: dict, rtol: float) -> None:
    """Every parameter's gradient within ``rtol`` × its largest entry."""
    assert got.keys() == want.keys() and want
    for name, g in want.items():
        assert float((got[name] - g).abs().max()) <= rtol * (float(g.abs().max()) or 1.0), name


@pytest.mark.parametrize("case", sorted(CASES))
def test_fp32_equals_union_path(case):
    _compare(case, torch.float32, lp_tol=1e-6, grad_rtol=1e-5, chunk=5)  # chunks of 5 tokens: ~8 per batch


@pytest.mark.parametrize("case", ["plain", "allowed", "share-prefix"])
def test_bf16_equals_union_path(case):
    """bf16. Logprobs: the head's (N, H) @ (H, V) and the union path's (B·K, H) @ (H, V) products
    may round their float32 accumulators to bf16 in blocks of other shapes, so a logit can land
    one bf16 step (2⁻⁸ relative: ~0.03 at |logit| ~ 8) away: within 0.05 (equal here). Gradients:
    each chunk's share of a weight's gradient is rounded to bf16 before the chunks are summed
    into the bf16 ``.grad`` (one product in the old path), a few bf16 steps over ~8 chunks:
    within 3 % of the largest entry (measured ≤ 1.2 %)."""
    _compare(case, torch.bfloat16, lp_tol=0.05, grad_rtol=0.03, chunk=5)


def test_chunk_sizes_agree_and_bad_chunk_raises():
    b = _batch("plain")
    model = tiny_model(3)
    weights = torch.ones(b.loss_mask.shape)
    ref, g_ref = _stats(forward_token_stats, model, b, {"extra": {"chunk": None}}, weights)
    for chunk in (1, 7):
        out, g = _stats(forward_token_stats, model, b, {"extra": {"chunk": chunk}}, weights)
        assert float((out.logprobs - ref.logprobs).detach().abs().max()) <= 1e-6
        _assert_grads_close(g, g_ref, 1e-5)
    with pytest.raises(ValueError, match="chunk must be >= 1"):
        forward_token_stats(model, b.input_ids, b.attention_mask, token_mask=b.loss_mask > 0, chunk=0)


def test_token_pairs_by_hand():
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)  # column 0 is never a pair
    p = TokenPairs.of(ids, mask)
    assert p.rows.tolist() == [0, 0, 1] and p.cols.tolist() == [2, 3, 1] and p.ids.tolist() == [7, 8, 10]
    out = p.scatter(torch.tensor([-1.0, -2.0, -3.0]), ids.shape)
    assert out.tolist() == [[0, 0, -1, -2], [0, -3, 0, 0]]
    empty = TokenPairs.of(ids, torch.zeros_like(mask))
    assert empty.dummy and not empty.scatter(torch.tensor([-4.0]), ids.shape).any()


def test_no_kept_token_still_reaches_the_graph():
    """A micro-batch with no trained token (a data-parallel rank's zero-weight pass) returns
    zeros that backward can still run through."""
    b = _batch("plain")
    model = tiny_model(3)
    out = forward_token_stats(model, b.input_ids, b.attention_mask, token_mask=torch.zeros_like(b.loss_mask) > 0)
    assert not out.logprobs.any() and out.logprobs.requires_grad
    out.logprobs.sum().backward()
    assert all(float(p.grad.abs().max()) == 0.0 for p in model.parameters() if p.grad is not None)


def _head_model(kind: str):
    from transformers import GraniteConfig, GraniteForCausalLM, Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8, pad_token_id=PAD)
    if kind == "gemma2-softcap":
        return Gemma2ForCausalLM(Gemma2Config(**common, final_logit_softcapping=2.0)).float().train()
    return GraniteForCausalLM(GraniteConfig(**common, logits_scaling=4.0)).float().train()


@pytest.mark.parametrize("kind", ["gemma2-softcap", "granite-scaling"])
def test_logit_post_processing_follows_the_model(kind):
    model = _head_model(kind)
    b = _batch("plain")
    weights = torch.ones(b.loss_mask.shape)
    old, g_old = _stats(old_forward_token_stats, model, b, {}, weights)
    new, g_new = _stats(forward_token_stats, model, b, {"extra": {"chunk": 4}}, weights)
    m = b.loss_mask > 0
    assert float((new.logprobs[m] - old.logprobs[m]).detach().abs().max()) <= 1e-6
    _assert_grads_close(g_new, g_old, 1e-5)
    model.config.logits_soft_cap = 3.0  # a post-processing the head does not know
    with pytest.raises(ValueError, match="not supported"):
        OutputHead(model)
