"""One optimizer step: micro-batch × gradient-accumulation equivalence, KL/entropy terms,
statistics, packing, LoRA."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from agentrl.config import LoraSpec, UpdateConfig
from agentrl.update import (
    apply_lora, batch_logprobs, build_batch, forward_token_stats, make_optimizer, prepare_policy,
    reference_logprobs, train_on_batch, update,
)
from update_fixtures import PAD, assert_same_step, random_turns, sgd, tiny_model

CFG = UpdateConfig(lr=1e-3, grad_clip=0.0, micro_batch=4, sum_norm_tokens=8)


def _batch(model, seed: int = 0, episodes=(1, 1, 1, 1), pack: bool = False, noise: float = 0.3):
    """Turns with behaviour logprobs = current logprobs + noise (so some ratios clip)."""
    prompts, comps, _, adv = random_turns(seed, episodes)
    b = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], adv, pad_id=PAD, pack=pack)
    lp = batch_logprobs(model, b)
    g = torch.Generator().manual_seed(seed)
    return b.with_(old_logprobs=(lp + noise * torch.randn(lp.shape, generator=g)) * b.loss_mask)


def _step(cfg: UpdateConfig, micro_batch: int, batch_fn=_batch, ref: bool = False):
    """One ``update`` with plain SGD (``update_fixtures.sgd``), so the steps of two paths differ by
    float noise only. With AdamW (lr·g/(|g| + eps)) a gradient entry near eps = 1e-8 amplifies its
    rounding: 1 × 4 vs 4 × 1 micro-batches ended 8e-6 apart against a 1e-5 tolerance (both CPU
    kinds), and a sign flip would be a whole 2·lr."""
    model = prepare_policy(tiny_model(0), cfg)
    batch = batch_fn(model)
    if ref:
        batch = batch.with_(ref_logprobs=batch_logprobs(model, batch))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    stats = update(model, sgd(model), batch, cfg, micro_batch=micro_batch)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return stats, grads, params, before


def _assert_same(a, b, tol: float = 1e-5) -> None:
    sa, ga, pa, before = a
    sb, gb, pb, _ = b
    assert ga.keys() == gb.keys() and len(ga) > 0
    for n in ga:
        assert torch.allclose(ga[n], gb[n], atol=tol, rtol=1e-4), f"grad {n}: {(ga[n] - gb[n]).abs().max()}"
    assert_same_step(pa, pb, before)  # SGD: every entry within 0.1 % of its tensor's step
    for f in ("loss", "pg_loss", "kl", "clip_frac", "approx_kl", "entropy", "grad_norm"):
        assert abs(getattr(sa, f) - getattr(sb, f)) < tol * max(1.0, abs(getattr(sa, f))), f
    assert sa.tokens == sb.tokens


@pytest.mark.parametrize("changes", [
    dict(aggregation="token-mean"),
    dict(aggregation="seq-mean-token-mean"),
    dict(aggregation="seq-mean-token-sum-norm"),
    dict(aggregation="token-mean", kl_coef=0.1, kl_estimator="k1", entropy_coef=0.01, clip_c=3.0, grad_clip=0.5),
    dict(loss="gspo", aggregation="seq-mean-token-mean", clip_low=3e-4, clip_high=4e-4),
])
def test_one_by_four_equals_four_by_one(changes: dict) -> None:
    """Gradients, stepped parameters and statistics do not depend on the micro-batch size."""
    cfg = dataclasses.replace(CFG, **changes)
    ref = cfg.kl_coef > 0
    full = _step(cfg, micro_batch=4, ref=ref)
    assert full[0].clip_frac > 0  # the noise makes some tokens clip: both branches are exercised
    _assert_same(full, _step(cfg, micro_batch=1, ref=ref))
    _assert_same(full, _step(cfg, micro_batch=3, ref=ref))


def _episode_batch(model, pack: bool = False, noise: float = 0.3):
    """Turns of 3 episodes (3, 1 and 2 turns) with their episode ids, ratios off 1 (noise > 0)."""
    prompts, comps, _, adv = random_turns(3, (3, 1, 2))
    b = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], adv, pad_id=PAD, pack=pack,
                    episodes=[7, 7, 7, 2, 5, 5])
    lp = batch_logprobs(model, b)
    return b.with_(old_logprobs=(lp + noise * torch.randn(lp.shape, generator=torch.Generator().manual_seed(3))) * b.loss_mask)


def test_episode_aggregation_is_micro_batch_and_packing_invariant() -> None:
    """episode-mean-token-mean: 1 × 6 rows == 6 × 1 rows == packed rows (episode sizes are
    counted over the minibatch), and a batch without episode ids is refused."""
    cfg = dataclasses.replace(CFG, aggregation="episode-mean-token-mean")
    full = _step(cfg, micro_batch=6, batch_fn=_episode_batch)
    _assert_same(full, _step(cfg, micro_batch=1, batch_fn=_episode_batch))
    flat = _step(cfg, micro_batch=2, batch_fn=lambda m: _episode_batch(m, noise=0.0))
    _assert_same(flat, _step(cfg, micro_batch=1, batch_fn=lambda m: _episode_batch(m, pack=True, noise=0.0)))
    assert _episode_batch(tiny_model(0)).token_episode.max().item() == 2  # dense ids 7→0, 2→1, 5→2
    with pytest.raises(ValueError, match="needs the episode of every turn"):
        _step(cfg, micro_batch=1)


def test_gradient_checkpointing_gives_the_same_step() -> None:
    _assert_same(_step(CFG, 2), _step(dataclasses.replace(CFG, gradient_checkpointing=True), 2), tol=1e-6)


def test_packed_update_equals_unpacked() -> None:
    cfg = dataclasses.replace(CFG, aggregation="seq-mean-token-mean")
    packed = _step(cfg, 4, batch_fn=lambda m: _batch(m, 5, (3, 2), pack=True, noise=0.0))
    flat = _step(cfg, 4, batch_fn=lambda m: _batch(m, 5, (3, 2), pack=False, noise=0.0))
    _assert_same(packed, flat)


def test_on_policy_statistics() -> None:
    model = tiny_model(0)
    batch = _batch(model, noise=0.0)
    m = batch.loss_mask
    ent = forward_token_stats(model, batch.input_ids, batch.attention_mask, with_entropy=True).entropy
    stats = update(model, make_optimizer(model, 1e-3), batch, CFG)
    assert stats.clip_frac == 0 and stats.approx_kl < 1e-6 and stats.kl == 0
    want_pg = -float((batch.advantages * m).sum() / m.sum())  # ratio 1 → loss −A, token mean
    assert abs(stats.pg_loss - want_pg) < 1e-5 and abs(stats.loss - want_pg) < 1e-5
    assert abs(stats.entropy - float((ent * m).sum() / m.sum())) < 1e-5
    assert stats.tokens == int(m.sum()) and stats.grad_norm > 0
    assert set(stats.as_metrics()) >= {"update/loss", "update/clip_frac", "update/grad_norm"}


def test_k3_kl_to_identical_reference_has_zero_gradient() -> None:
    """At π = π_ref, k3 and its gradient are 0 (k1's gradient is not)."""
    base = _step(CFG, 4)
    k3 = _step(dataclasses.replace(CFG, kl_coef=1.0, kl_estimator="k3"), 4, ref=True)
    _assert_same(base, k3, tol=1e-6)
    k1 = _step(dataclasses.replace(CFG, kl_coef=1.0, kl_estimator="k1"), 4, ref=True)
    assert abs(k1[0].kl) < 1e-6
    assert any(not torch.allclose(base[1][n], k1[1][n], atol=1e-4) for n in base[1])


def test_positive_advantage_raises_logprobs() -> None:
    model = tiny_model(0)
    batch = _batch(model, noise=0.0)
    m = batch.loss_mask
    sign = torch.sign(batch.advantages)
    before = batch_logprobs(model, batch)
    opt = make_optimizer(model, 1e-2)
    for _ in range(3):
        update(model, opt, batch.with_(old_logprobs=batch_logprobs(model, batch) * m), CFG)
    delta = ((batch_logprobs(model, batch) - before) * sign * m).sum() / m.sum()
    assert delta > 0.05


def test_kl_without_reference_and_unknown_names_fail() -> None:
    model = tiny_model(0)
    batch = _batch(model)
    opt = make_optimizer(model, 1e-3)
    with pytest.raises(ValueError, match="ref_logprobs"):
        update(model, opt, batch, dataclasses.replace(CFG, kl_coef=0.1))
    with pytest.raises(KeyError, match="did you mean 'gspo'"):
        update(model, opt, batch, dataclasses.replace(CFG, loss="gpso"))
    with pytest.raises(ValueError, match="sum_norm_tokens"):
        update(model, opt, batch, dataclasses.replace(CFG, aggregation="seq-mean-token-sum-norm", sum_norm_tokens=None))


def test_train_on_batch_steps_epochs_times_minibatches() -> None:
    model = tiny_model(0)
    batch = _batch(model, episodes=(1, 1, 1, 1, 1))
    stats = train_on_batch(model, make_optimizer(model, 1e-3), batch, dataclasses.replace(CFG, epochs=2, minibatch=2))
    assert len(stats) == 6 and sum(s.tokens for s in stats) == 2 * batch.num_tokens


def test_lora_top_layers_and_reference_is_the_base_model() -> None:
    base = tiny_model(0)
    lora = LoraSpec(rank=4, alpha=8, target_modules=("q_proj", "v_proj"), top_n_layers=1)
    model = prepare_policy(tiny_model(0), dataclasses.replace(CFG, gradient_checkpointing=True), lora)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".layers.1." in n and "lora_" in n for n in trainable)
    batch = _batch(model, noise=0.0)
    want = batch_logprobs(base, batch)
    assert torch.allclose(reference_logprobs(model, batch), want, atol=1e-6)
    opt = make_optimizer(model, 5e-2)
    for _ in range(2):
        update(model, opt, batch.with_(ref_logprobs=want), dataclasses.replace(CFG, kl_coef=0.1))
    assert not torch.allclose(batch_logprobs(model, batch), want, atol=1e-4)  # the policy moved
    assert torch.allclose(reference_logprobs(model, batch), want, atol=1e-6)  # the reference did not
    with pytest.raises(ValueError, match="top_n_layers=5"):
        apply_lora(tiny_model(0), LoraSpec(top_n_layers=5))
