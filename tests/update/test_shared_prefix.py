"""Shared-prefix forward (``agentrl.update.shared_prefix``, ``update.share_prefix``): rows that
start with the same tokens (turns of one task) give the same logprobs, gradients and optimizer
step as the plain forward, with full fine-tuning and with LoRA on the top layer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from agentrl.config import LoraSpec, UpdateConfig
from agentrl.update import build_batch, forward_token_stats, prepare_policy, update
from agentrl.update.shared_prefix import common_prefix, duplicate_rows, prefix_logits, prefix_order
from update_fixtures import PAD, VOCAB, assert_same_step, sgd, tiny_model

CFG = UpdateConfig(lr=1e-3, grad_clip=0.0, micro_batch=4, share_prefix=False)


def _window_turns(seed: int = 0, rows: int = 5, shared: int = 14):
    """Window-style turns: one task prefix of ``shared`` tokens, then per row its own recent
    history / observation (3–9 tokens) and a completion of 1–5 tokens."""
    rng = np.random.default_rng(seed)
    head = rng.integers(2, VOCAB, size=shared).astype(np.int32)
    prompts = [np.concatenate([head, rng.integers(2, VOCAB, size=int(rng.integers(3, 10))).astype(np.int32)])
               for _ in range(rows)]
    comps = [rng.integers(2, VOCAB, size=int(rng.integers(1, 6))).astype(np.int32) for _ in range(rows)]
    return prompts, comps, rng.normal(size=rows)


def _two_tasks(seed: int = 0):
    """Turns of two tasks, interleaved (as a shuffled minibatch holds them)."""
    a, b = _window_turns(seed, rows=4, shared=14), _window_turns(seed + 1, rows=4, shared=10)
    pick = [0, 1, 0, 1, 1, 0, 1, 0]
    it = [iter(zip(*a)), iter(zip(*b))]
    rows = [next(it[k]) for k in pick]
    return [r[0] for r in rows], [r[1] for r in rows], np.array([r[2] for r in rows])


def _batch(model, seed: int = 0, turns=_window_turns):
    prompts, comps, adv = turns(seed)
    b = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], adv, pad_id=PAD)
    with torch.no_grad():
        lp = forward_token_stats(model, b.input_ids, b.attention_mask, token_mask=b.loss_mask > 0).logprobs
    noise = 0.3 * torch.randn(lp.shape, generator=torch.Generator().manual_seed(seed))
    return b.with_(old_logprobs=(lp + noise) * b.loss_mask)


def test_common_prefix_by_hand() -> None:
    ids = torch.tensor([[5, 6, 7, 8, 0], [5, 6, 7, 9, 9], [5, 6, 7, 8, 4]])
    attn = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert common_prefix(ids, attn) == 3
    assert common_prefix(ids[:1], attn[:1]) == 0  # one row: nothing to share
    assert common_prefix(ids[[0, 2]], attn[[0, 2]]) == 4  # the pad column is not shared
    with pytest.raises(ValueError, match="before every kept position"):
        prefix_logits(tiny_model(0), ids, attn, torch.tensor([2, 3]), 3)


@pytest.mark.parametrize("lora", [None, LoraSpec(rank=4, alpha=8.0, top_n_layers=1)], ids=["full", "lora-top1"])
def test_logprobs_and_gradients_equal_the_plain_forward(lora) -> None:
    model = prepare_policy(tiny_model(0), CFG, lora)
    if lora is not None:  # LoRA B starts at 0: move it so the adapters change the forward
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.2, generator=torch.Generator().manual_seed(1))
    b = _batch(model)
    assert common_prefix(b.input_ids, b.attention_mask) >= 14
    out = {}
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        lp = forward_token_stats(model, b.input_ids, b.attention_mask, token_mask=b.loss_mask > 0,
                                 share_prefix=share).logprobs
        (lp * b.loss_mask * b.advantages[:, None]).sum().backward()
        out[share] = lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    (lp0, g0), (lp1, g1) = out[False], out[True]
    m = b.loss_mask.bool()
    assert float((lp0[m] - lp1[m]).abs().max()) < 1e-5 and float(lp0[m].abs().min()) > 0
    assert g0.keys() == g1.keys() and len(g0) > 0
    for n in g0:
        assert torch.allclose(g0[n], g1[n], atol=1e-5, rtol=1e-4), f"{n}: {(g0[n] - g1[n]).abs().max()}"
    if lora is None:  # the prefix's own layers (embedding, bottom layer) get their gradient too
        assert float(g1["model.embed_tokens.weight"].abs().sum()) > 0


def test_prefix_order_puts_each_task_together() -> None:
    b = _batch(tiny_model(0), turns=_two_tasks)
    order = prefix_order(b.input_ids, b.attention_mask)
    assert sorted(order.tolist()) == list(range(8))
    first = b.input_ids[order, 0].tolist()
    assert first[:4] == [first[0]] * 4 and first[4:] == [first[4]] * 4 and first[0] != first[4]
    assert common_prefix(b.input_ids[order[:4]], b.attention_mask[order[:4]]) >= 10


def _sgd_update(cfg: UpdateConfig, turns):
    """One ``update`` with plain SGD (``update_fixtures.sgd``): the two paths' steps then differ by
    float noise only. AdamW's first step, lr·g/(|g| + eps), amplifies the rounding of a gradient
    entry near eps = 1e-8 to a good part of lr: its steps were 1.5e-6 apart on an AVX2 CPU
    (tolerance 1e-6), and a flipped sign would be 2·lr."""
    model = prepare_policy(tiny_model(0), cfg)
    batch = _batch(model, turns=turns)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    stats = update(model, sgd(model), batch, cfg)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return stats, grads, {n: p.detach().clone() for n, p in model.named_parameters()}, before


def _assert_same_update(s0, g0, p0, s1, g1, p1, before) -> None:
    for f in ("loss", "pg_loss", "clip_frac", "approx_kl", "entropy", "grad_norm"):
        assert abs(getattr(s0, f) - getattr(s1, f)) < 1e-5 * max(1.0, abs(getattr(s0, f))), f
    assert g0.keys() == g1.keys() == p0.keys()  # every weight got its gradient on both paths
    for n in g0:
        assert torch.allclose(g0[n], g1[n], atol=1e-6, rtol=1e-4), f"{n}: {(g0[n] - g1[n]).abs().max()}"
    assert_same_step(p0, p1, before)  # SGD: every entry within 0.1 % of its tensor's step


@pytest.mark.parametrize("changes", [dict(), dict(kl_coef=0.0, entropy_coef=0.01, micro_batch=2),
                                     dict(gradient_checkpointing=True), dict(micro_batch=4, two_tasks=True)])
def test_update_step_equals_the_plain_step(changes) -> None:
    turns = _two_tasks if changes.pop("two_tasks", False) else _window_turns
    plain, shared = (_sgd_update(dataclasses.replace(CFG, share_prefix=share, **changes), turns)
                     for share in (False, True))
    (s0, g0, p0, before), (s1, g1, p1, _) = plain, shared
    assert s0.clip_frac > 0 and s0.tokens == s1.tokens
    _assert_same_update(s0, g0, p0, s1, g1, p1, before)


def test_duplicate_rows_by_hand() -> None:
    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 8, 9], [5, 6, 7, 3], [4, 6, 7, 0], [5, 6, 8, 9]])
    attn = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    first, inverse = duplicate_rows(ids, attn)  # row 2 equals row 0 once its pad column is ignored
    assert first.tolist() == [0, 1, 3] and inverse.tolist() == [0, 1, 0, 2, 1]
    allowed = torch.full((5, 4, 2), -1)
    allowed[2, 1] = torch.tensor([6, 9])  # row 2 was constrained differently: no longer a copy of row 0
    first, inverse = duplicate_rows(ids, attn, allowed)
    assert first.tolist() == [0, 1, 2, 3] and inverse.tolist() == [0, 1, 2, 3, 1]
    assert duplicate_rows(ids[:2], attn[:2]) is None and duplicate_rows(ids[:1], attn[:1]) is None


def _with_copies(seed: int = 0):
    """Window turns where rows 0 and 3 and rows 1, 4 and 6 are the same turn (an identical
    first prompt and completion in several episodes), each with its own advantage."""
    prompts, comps, adv = _window_turns(seed, rows=4)
    pick = [0, 1, 2, 0, 1, 3, 1]
    return [prompts[k] for k in pick], [comps[k] for k in pick], np.random.default_rng(seed + 7).normal(size=7)


def test_identical_rows_run_once_with_the_plain_forwards_logprobs_and_gradients() -> None:
    model = prepare_policy(tiny_model(0), CFG, LoraSpec(rank=4, alpha=8.0, top_n_layers=1))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2, generator=torch.Generator().manual_seed(1))
    b = _batch(model, turns=_with_copies)
    rows_seen = []
    hook = model.get_base_model().model.embed_tokens.register_forward_hook(
        lambda mod, args, out: rows_seen.append(args[0].shape[0]))
    out = {}
    for share in (False, True):
        rows_seen.clear()
        model.zero_grad(set_to_none=True)
        stats = forward_token_stats(model, b.input_ids, b.attention_mask, token_mask=b.loss_mask > 0,
                                    share_prefix=share, with_entropy=True)
        (stats.logprobs * b.loss_mask * b.advantages[:, None]).sum().backward()
        out[share] = stats, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, list(rows_seen)
    hook.remove()
    (s0, g0, r0), (s1, g1, r1) = out[False], out[True]
    assert r0 == [7] and r1 == [1, 4]  # plain: 7 rows; shared: the prefix once, then the 4 distinct rows
    m = b.loss_mask.bool()
    assert float((s0.logprobs[m] - s1.logprobs[m]).detach().abs().max()) < 1e-5
    assert float((s0.entropy[m] - s1.entropy[m]).abs().max()) < 1e-5
    for n in g0:  # every copy's advantage reaches the gradient of the one forward
        assert torch.allclose(g0[n], g1[n], atol=1e-6, rtol=1e-4), f"{n}: {(g0[n] - g1[n]).abs().max()}"


def test_update_step_with_identical_rows_equals_the_plain_step() -> None:
    plain, shared = (_sgd_update(dataclasses.replace(CFG, share_prefix=share, micro_batch=7), _with_copies)
                     for share in (False, True))
    (s0, g0, p0, before), (s1, g1, p1, _) = plain, shared
    _assert_same_update(s0, g0, p0, s1, g1, p1, before)
