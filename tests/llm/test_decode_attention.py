"""Grouped decode attention: the same outputs as transformers' sdpa (masked, causal, folded
groups), longer queries handed to sdpa untouched, and the engine's tokens and logprobs
unchanged on padded, cached and constrained batches."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.decode_attention import MAX_QUERY, NAME, grouped_attention, set_decode_attention  # noqa: E402
from agentrl.llm.hf import HFEngine  # noqa: E402


def _sdpa(*args, **kw):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(*args, **kw)


def _qkv(b=3, groups=3, h_kv=2, q=1, length=11, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(b, groups * h_kv, q, d, generator=g)
    key, value = (torch.randn(b, h_kv, length, d, generator=g) for _ in range(2))
    return SimpleNamespace(num_key_value_groups=groups, is_causal=True), query, key, value


@pytest.mark.parametrize("q", [1, 2, MAX_QUERY])
def test_matches_sdpa_with_a_padding_mask(q):
    module, query, key, value = _qkv(q=q)
    length = key.shape[2]
    mask = torch.ones(3, 1, q, length, dtype=torch.bool).tril(length - q)  # causal over the cache + new tokens
    mask[1, :, :, :4] = False  # row 1 left-padded by 4, row 2 by 7
    mask[2, :, :, :7] = False
    got, _ = grouped_attention(module, query, key, value, mask, scaling=0.3)
    want, _ = _sdpa(module, query, key, value, mask, scaling=0.3)
    assert got.shape == want.shape == (3, q, 6, 8)
    assert torch.allclose(got, want, atol=1e-6)
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))  # a float mask reads the same
    assert torch.allclose(grouped_attention(module, query, key, value, additive, scaling=0.3)[0], want, atol=1e-6)


def test_one_query_without_a_mask_attends_to_every_key():
    module, query, key, value = _qkv(q=1)
    got, _ = grouped_attention(module, query, key, value, None)
    assert torch.allclose(got, _sdpa(module, query, key, value, None)[0], atol=1e-6)
    head = torch.softmax(query[:, 4:5] @ key[:, 1:2].transpose(-1, -2) / 8 ** 0.5, -1) @ value[:, 1:2]
    assert torch.allclose(got[:, 0, 4], head[:, 0, 0], atol=1e-6)  # query head 4 reads key/value head 4 // 3 = 1


def test_longer_queries_and_ungrouped_heads_go_to_sdpa_unchanged():
    for q in (2, MAX_QUERY + 3):  # no mask and q > 1: transformers' upper-left causal prefill, sdpa's
        module, query, key, value = _qkv(q=q, length=MAX_QUERY + 3)
        assert torch.equal(grouped_attention(module, query, key, value, None)[0],
                           _sdpa(module, query, key, value, None)[0])
    module, query, key, value = _qkv(q=1)
    mask = torch.ones(3, 1, 1, key.shape[2], dtype=torch.bool)
    half = [t.to(torch.bfloat16) for t in (query, key, value)]  # bf16: sdpa's float32 scores, unchanged
    assert torch.equal(grouped_attention(module, *half, mask)[0], _sdpa(module, *half, mask)[0])
    plain = SimpleNamespace(num_key_value_groups=1, is_causal=True)
    _, q1, k1, v1 = _qkv(groups=1, q=1)
    assert torch.equal(grouped_attention(plain, q1, k1, v1, None)[0], _sdpa(plain, q1, k1, v1, None)[0])


def test_engine_tokens_and_logprobs_match_sdpa(tiny_dir, tiny_tokenizer):
    """Padded rows of different lengths, from the prefix cache on the second round, and
    admissible-command rows: grouped and sdpa decode sample the same tokens."""
    torch.set_num_threads(1)
    grouped = HFEngine.from_pretrained(tiny_dir, num_threads=1)
    stock = HFEngine.from_pretrained(tiny_dir, num_threads=1, decode_attention="sdpa")
    assert grouped.attention == NAME and grouped.model.config._attn_implementation == NAME
    assert stock.attention == "sdpa"
    assert grouped.model.config.num_key_value_heads < grouped.model.config.num_attention_heads  # grouped heads
    enc = lambda s: tiny_tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    prompts = [enc("You are in a hall. " * k + "What now?") for k in (1, 3, 6)]
    allowed = [None, [enc("go north") + [grouped.eos_token_id], enc("open door") + [grouped.eos_token_id]], None]
    sp = SamplingParams(max_tokens=10, temperature=1.1, seed=7)
    for _ in range(2):  # the second round starts from the prefix cache
        for x, y in zip(grouped.generate(prompts, sp, allowed=allowed), stock.generate(prompts, sp, allowed=allowed)):
            assert np.array_equal(x.token_ids, y.token_ids)
            assert np.max(np.abs(x.logprobs - y.logprobs)) <= 1e-5
    assert grouped.prefix_cache.hits >= 1


def test_short_padded_prompts_without_a_prefix_cache_stay_finite(tiny_dir):
    """A left-padded batch at most MAX_QUERY tokens wide runs its prefill here: the pad columns'
    queries attend to nothing. softmax over all −inf is NaN, and those NaN keys/values spread to
    every later step of the padded row; sdpa gives 0 there. Greedy tokens and logprobs equal sdpa's."""
    torch.set_num_threads(1)
    grouped = HFEngine.from_pretrained(tiny_dir, num_threads=1, prefix_cache_mb=0)
    stock = HFEngine.from_pretrained(tiny_dir, num_threads=1, prefix_cache_mb=0, decode_attention="sdpa")
    prompts = [[100, 200, 300], [5, 6, 7, 8]]  # 4 columns wide, the first row padded once
    sp = SamplingParams(max_tokens=6, greedy=True)
    for x, y in zip(grouped.generate(prompts, sp), stock.generate(prompts, sp)):
        assert np.isfinite(x.logprobs).all()
        assert np.array_equal(x.token_ids, y.token_ids) and np.max(np.abs(x.logprobs - y.logprobs)) <= 1e-5
    module, query, key, value = _qkv(q=2)
    mask = torch.ones(3, 1, 2, key.shape[2], dtype=torch.bool)
    mask[0, :, 0] = False  # row 0's first query attends to nothing
    got, want = grouped_attention(module, query, key, value, mask)[0], _sdpa(module, query, key, value, mask)[0]
    assert torch.isfinite(got).all() and float((got - want).abs().max()) <= 1e-6


def test_set_decode_attention_modes_and_errors(tiny_dir):
    eng = HFEngine.from_pretrained(tiny_dir, num_threads=1)
    assert set_decode_attention(eng.model, "sdpa") == "sdpa" == eng.model.config._attn_implementation
    assert set_decode_attention(eng.model, "grouped") == NAME
    eng.model.config._attn_implementation = "eager"  # an explicit implementation is left alone
    assert set_decode_attention(eng.model, "grouped") == "eager"
    with pytest.raises(ValueError, match="decode_attention must be one of"):
        set_decode_attention(eng.model, "flash")
