"""Rollout (off-policy) correction: hand-computed weights of tis / mis / icepop at token and
sequence level, the weighted update step, a perturbed engine corrected, config validation."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from agentrl.config import ConfigError, UpdateConfig, config_from_dict
from agentrl.update import (
    CORRECTIONS, apply_rollout_correction, batch_logprobs, build_batch, correction_weights, forward_token_stats,
    make_optimizer, update,
)
from agentrl.update.losses import ClipSpec, LossScale, PolicyLossInputs, ppo_clip, token_mean
from update_fixtures import PAD, random_turns, tiny_model

torch.set_num_threads(1)
CFG = UpdateConfig(lr=1e-3, grad_clip=0.0, micro_batch=2)

# one row: a prompt token, 5 trained tokens with known ρ, then an untrained token and padding
RHO = [0.25, 0.8, 1.0, 1.5, 3.0]


def _token_fixture():
    behav = torch.tensor([[0.0, -1.0, -2.0, -0.5, -1.5, -3.0, -0.7, 0.0]])
    log_rho = torch.tensor([[0.0, *map(math.log, RHO), 5.0, -4.0]])  # off-mask differences must not count
    mask = torch.tensor([[0.0, 1, 1, 1, 1, 1, 0, 0]])
    tid = torch.tensor([[-1, 0, 0, 0, 0, 0, -1, -1]])
    return behav + log_rho, behav, mask, tid


def _k3(rhos: list[float]) -> float:
    return sum(r - 1 - math.log(r) for r in rhos) / len(rhos)


@pytest.mark.parametrize("mode, low, want, capped, masked", [
    ("none", 0.5, [1, 1, 1, 1, 1], 0, 0),
    ("tis", 0.5, [0.25, 0.8, 1.0, 1.5, 2.0], 1 / 5, 0),
    ("mis", 0.5, [0.25, 0.8, 1.0, 1.5, 0.0], 0, 1 / 5),
    ("icepop", 0.5, [0.0, 0.8, 1.0, 1.5, 0.0], 0, 2 / 5),
    ("icepop", 0.9, [0.0, 0.0, 1.0, 1.5, 0.0], 0, 3 / 5),
])
def test_token_level_weights_by_hand(mode: str, low: float, want: list, capped: float, masked: float) -> None:
    train, behav, mask, tid = _token_fixture()
    c = correction_weights(train, behav, mask, tid, mode=mode, level="token", low=low, high=2.0)
    assert c.weights.dtype == torch.float32 and c.weights.shape == mask.shape
    assert torch.allclose(c.weights, torch.tensor([[0.0, *want, 0.0, 0.0]]), atol=1e-6)
    assert c.capped_frac == pytest.approx(capped) and c.masked_frac == pytest.approx(masked)
    assert c.mean_weight == pytest.approx(sum(want) / 5, abs=1e-6) and c.tokens == 5
    assert c.kl == pytest.approx(_k3(RHO), abs=1e-6)  # the token k3 whatever the mode
    assert set(c.as_metrics()) == {"correction/kl", "correction/capped_frac", "correction/masked_frac",
                                   "correction/mean_weight", "correction/logprob_corr", "correction/logprob_mae"}
    # agreement over the 5 trained tokens only: numpy's Pearson r and mean |log ρ| of the same values
    t, b = (train[0, 1:6].double().numpy(), behav[0, 1:6].double().numpy())
    assert c.logprob_corr == pytest.approx(float(np.corrcoef(t, b)[0, 1]), abs=1e-12)
    assert c.logprob_mae == pytest.approx(sum(abs(math.log(r)) for r in RHO) / 5, abs=1e-6)


def test_logprob_agreement_edges() -> None:
    b = torch.tensor([[-1.0, -2.0, -0.5]])
    mask, tid = torch.ones(1, 3), torch.zeros(1, 3, dtype=torch.long)
    same = correction_weights(b.clone(), b, mask, tid, mode="none")
    assert same.logprob_corr == pytest.approx(1.0) and same.logprob_mae == 0.0
    one = correction_weights(b, b, torch.tensor([[0.0, 1.0, 0.0]]), tid, mode="none")
    assert math.isnan(one.logprob_corr) and one.logprob_mae == 0.0
    none = correction_weights(b, b, torch.zeros(1, 3), tid, mode="none")
    assert math.isnan(none.logprob_corr) and math.isnan(none.logprob_mae)


def test_sequence_level_uses_one_product_per_turn() -> None:
    """Row 0 packs turns 0 (ρ 0.5·0.8 = 0.4) and 1 (2·1.5 = 3); row 1 holds turn 2
    (1.2·1·1.25 = 1.5); padding in between counts nowhere."""
    rho = [[1.0, 0.5, 0.8, 1.0, 2.0, 1.5, 1.0], [1.0, 1.2, 1.0, 1.25, 1.0, 1.0, 1.0]]
    mask = torch.tensor([[0.0, 1, 1, 0, 1, 1, 0], [0.0, 1, 1, 1, 0, 0, 0]])
    tid = torch.tensor([[-1, 0, 0, -1, 1, 1, -1], [-1, 2, 2, 2, -1, -1, -1]])
    behav = -torch.rand(2, 7, generator=torch.Generator().manual_seed(0))
    train = behav + torch.tensor(rho).log() + (1 - mask) * 3.0  # large off-mask gaps are ignored
    cases = {"none": ([1.0] * 7, 0, 0), "tis": ([0.4, 0.4, 2.0, 2.0, 1.5, 1.5, 1.5], 2 / 7, 0),
             "mis": ([0.4, 0.4, 0.0, 0.0, 1.5, 1.5, 1.5], 0, 2 / 7),
             "icepop": ([0.0, 0.0, 0.0, 0.0, 1.5, 1.5, 1.5], 0, 4 / 7)}
    token_rhos = [0.5, 0.8, 2.0, 1.5, 1.2, 1.0, 1.25]
    for mode, (want, capped, masked) in cases.items():
        c = correction_weights(train, behav, mask, tid, mode=mode, level="sequence", low=0.5, high=2.0)
        assert torch.allclose(c.weights[mask > 0], torch.tensor(want), atol=1e-5), mode
        assert bool((c.weights[mask == 0] == 0).all())
        assert c.capped_frac == pytest.approx(capped) and c.masked_frac == pytest.approx(masked), mode
        assert c.kl == pytest.approx(_k3(token_rhos), abs=1e-6) and c.tokens == 7


def test_weights_are_detached_finite_and_names_checked() -> None:
    train, behav, mask, tid = _token_fixture()
    train = (train + torch.tensor([[0, 0, 0, 0, 0, 200.0, 0, 0]])).requires_grad_(True)  # ρ = e^200 → capped at C
    for level in ("token", "sequence"):
        c = correction_weights(train, behav, mask, tid, mode="tis", level=level)
        assert not c.weights.requires_grad and bool(torch.isfinite(c.weights).all()) and math.isfinite(c.kl)
    assert CORRECTIONS.names() == ["icepop", "mis", "none", "tis"]
    with pytest.raises(KeyError, match="did you mean 'tis'"):
        correction_weights(train, behav, mask, tid, mode="tiss")
    with pytest.raises(ValueError, match="correction level 'turn'"):
        correction_weights(train, behav, mask, tid, level="turn")
    with pytest.raises(ValueError, match="equal"):
        correction_weights(train, behav[:, :3], mask, tid)
    empty = correction_weights(train, behav, torch.zeros_like(mask), tid, mode="mis")  # no trained token
    assert empty.tokens == 0 and empty.kl == 0 and empty.masked_frac == 0 and bool((empty.weights == 0).all())


# --------------------------------------------------------------------------- the weighted step


def _batch(model, seed: int = 0, noise: float = 0.3, pack: bool = True):
    prompts, comps, _, adv = random_turns(seed, (2, 1, 2))
    b = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], adv, pad_id=PAD, pack=pack)
    lp = batch_logprobs(model, b)
    g = torch.Generator().manual_seed(seed + 1)
    return b.with_(old_logprobs=(lp + noise * torch.randn(lp.shape, generator=g)) * b.loss_mask)


def _grads(batch, cfg: UpdateConfig = CFG):
    model = tiny_model(0)
    stats = update(model, make_optimizer(model, cfg.lr), batch, cfg)
    return stats, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, \
        {n: p.detach().clone() for n, p in model.named_parameters()}


def test_none_and_unit_weights_are_bit_identical_to_no_weights() -> None:
    model = tiny_model(0)
    batch = _batch(model)
    assert CFG.rollout_correction == "auto"  # a hand-built UpdateConfig: auto acts as none
    same, corr = apply_rollout_correction(model, batch, CFG)
    assert same is batch and batch.is_weights is None  # π_old stays the behaviour logprobs, no weights
    # ... but the KL is measured: the noisy behaviour logprobs are off the trainer's
    assert corr.kl > 0.01 and corr.mean_weight == 1.0 and corr.capped_frac == corr.masked_frac == 0.0
    _, explicit = apply_rollout_correction(model, batch, dataclasses.replace(CFG, rollout_correction="none"))
    _, tis = apply_rollout_correction(model, batch, dataclasses.replace(CFG, rollout_correction="tis"))
    assert explicit.kl == corr.kl == tis.kl  # the same measurement whatever the mode
    base = _grads(batch)
    for other in (_grads(same), _grads(batch.with_(is_weights=batch.loss_mask.clone()))):
        assert base[0] == other[0]
        for n in base[1]:
            assert torch.equal(base[1][n], other[1][n]) and torch.equal(base[2][n], other[2][n]), n


def test_weighted_step_matches_a_hand_built_loss() -> None:
    """update's gradient with is_weights = w equals that of Σ w·ppo_clip / (all trained
    tokens), built by hand in one full-batch pass."""
    model = tiny_model(0)
    batch = _batch(model)
    w = torch.rand(batch.loss_mask.shape, generator=torch.Generator().manual_seed(3)) * 2 * batch.loss_mask
    got = _grads(batch.with_(is_weights=w))[1]
    ref_model = tiny_model(0)
    out = forward_token_stats(ref_model, batch.input_ids, batch.attention_mask)
    m = batch.loss_mask
    tl = ppo_clip(PolicyLossInputs(out.logprobs, batch.old_logprobs, batch.advantages, m, batch.turn_ids), ClipSpec())
    token_mean(tl.loss * w, m, batch.turn_ids, LossScale.of(m, batch.turn_ids, 1)).backward()
    for n, p in ref_model.named_parameters():
        if p.grad is not None:
            assert torch.allclose(got[n], p.grad, atol=1e-6, rtol=1e-4), n


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean"])
def test_a_zero_weight_row_drops_out_of_the_numerator_only(aggregation: str) -> None:
    """Weight 0 on row 0 == advantages 0 on row 0 (its loss is 0, its tokens still count in
    the denominators), and differs from removing the row."""
    cfg = dataclasses.replace(CFG, aggregation=aggregation)
    model = tiny_model(0)
    batch = _batch(model, pack=False)
    keep = torch.ones(batch.num_rows, 1)
    keep[0] = 0.0
    weighted = _grads(batch.with_(is_weights=batch.loss_mask * keep), cfg)
    zero_adv = _grads(batch.with_(advantages=batch.advantages * keep), cfg)
    dropped = _grads(batch.select(torch.arange(1, batch.num_rows)), cfg)
    for n in weighted[1]:
        assert torch.allclose(weighted[1][n], zero_adv[1][n], atol=1e-7, rtol=1e-5), n
    assert any(not torch.allclose(weighted[1][n], dropped[1][n], atol=1e-6) for n in weighted[1])
    assert weighted[0].tokens == batch.num_tokens


def test_is_weights_travel_with_select_and_to_and_are_shape_checked() -> None:
    model = tiny_model(0)
    batch = _batch(model, pack=False)
    w = torch.rand(batch.loss_mask.shape) * batch.loss_mask
    sub = batch.with_(is_weights=w).select([2, 0]).to("cpu")
    length = sub.input_ids.shape[1]
    assert torch.equal(sub.is_weights, w[[2, 0], :length])
    assert batch.select([1]).is_weights is None
    with pytest.raises(ValueError, match="is_weights has shape"):
        update(model, make_optimizer(model, 1e-3), batch.with_(is_weights=w[:, :2]), CFG)


# --------------------------------------------------------------------------- a perturbed engine


def _perturbed(model, scale: float = 0.1):
    """A copy of ``model`` with Gaussian weight noise: an engine that computes differently."""
    engine = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in engine.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return engine


@pytest.mark.parametrize("mode, level", [("tis", "token"), ("mis", "token"), ("icepop", "token"),
                                         ("tis", "sequence"), ("icepop", "sequence")])
def test_a_perturbed_engines_logprobs_are_corrected(mode: str, level: str) -> None:
    trainer = tiny_model(0)
    batch = _batch(trainer, noise=0.0)
    behav = batch_logprobs(_perturbed(trainer), batch) * batch.loss_mask
    batch = batch.with_(old_logprobs=behav)  # as the engine sampled them
    cfg = dataclasses.replace(CFG, rollout_correction=mode, correction_level=level, correction_low=0.8)
    fixed, corr = apply_rollout_correction(trainer, batch, cfg)
    assert trainer.training and all(p.grad is None for p in trainer.parameters())  # no side effects
    mine = batch_logprobs(trainer, batch, micro_batch=cfg.micro_batch, loss_only=True) * batch.loss_mask
    assert torch.equal(fixed.old_logprobs, mine)  # π_old = the trainer's own logprobs
    assert torch.allclose(fixed.old_logprobs, batch_logprobs(trainer, batch) * batch.loss_mask, atol=1e-6)
    assert torch.equal(fixed.advantages, batch.advantages) and torch.equal(fixed.input_ids, batch.input_ids)
    want = correction_weights(mine, behav, batch.loss_mask, batch.turn_ids, mode=mode, level=level, low=0.8)
    assert torch.equal(fixed.is_weights, want.weights) and corr.kl == want.kl
    if level == "token":  # the clipped / masked exp(trainer − behaviour), written out
        rho = torch.exp(mine - behav)
        by_hand = {"tis": rho.clamp(max=2.0), "mis": torch.where(rho > 2.0, 0.0, rho),
                   "icepop": torch.where((rho < 0.8) | (rho > 2.0), 0.0, rho)}[mode] * batch.loss_mask
        assert torch.allclose(fixed.is_weights, by_hand, atol=1e-6)
    assert corr.kl > 0.01 and (corr.capped_frac > 0 or corr.masked_frac > 0)  # the engine is really off
    corrected = _grads(fixed, cfg)[0]
    assert corrected.clip_frac == 0 and corrected.approx_kl < 1e-10  # step 0: ratio π_θ/π_old == 1
    raw = _grads(batch, CFG)[0]
    assert raw.clip_frac > 0 and raw.approx_kl > 0.01  # without correction the ratio is off


# --------------------------------------------------------------------------- config


def test_config_fields_and_validation() -> None:
    cfg = config_from_dict({"env": {"id": "x"}, "update": {"rollout_correction": "icepop",
                            "correction_level": "sequence", "correction_high": 5, "correction_low": 0.5}})
    assert cfg.update.rollout_correction == "icepop" and cfg.update.correction_level == "sequence"
    assert cfg.update.correction_high == 5.0 and isinstance(cfg.update.correction_high, float)
    d = UpdateConfig()
    assert (d.rollout_correction, d.correction_level, d.correction_high, d.correction_low) == ("auto", "token", 2.0, 0.5)
    bad = [(["update.rollout_correction=tiss"], r"update\.rollout_correction: 'tiss' is not allowed.*did you mean 'tis'"),
           (["update.correction_level=turn"], r"update\.correction_level: 'turn' is not allowed"),
           (["update.correction_high=1.0"], r"update\.correction_high must be > 1"),
           (["update.correction_low=0"], r"update\.correction_low must be in \(0, 1\)"),
           (["update.correction_low=1.5"], r"update\.correction_low must be in \(0, 1\)")]
    for overrides, match in bad:
        with pytest.raises(ConfigError, match=match):
            config_from_dict({"env": {"id": "x"}}, overrides)


def test_bf16_sampler_and_trainer_agree_after_the_correction(tiny_dir) -> None:
    """bf16 KV-cache sampling vs the bf16 trainer's full forward (issue 19 item 2): the stored
    logprobs differ (the first update's ratio is off with ``none``); with ``tis`` the trainer
    recomputes π_old, so the first step's ratio is exactly 1 (approx_kl 0, nothing clipped). On
    the tiny model the bf16 gap is small (approx_kl ~2e-7); SmolLM2's is 0.040 mean |Δ|
    (benchmarks/parity.py)."""
    from agentrl.llm.base import SamplingParams
    from agentrl.llm.hf import HFEngine
    from agentrl.update import build_batch, make_optimizer, update

    eng = HFEngine.from_pretrained(tiny_dir, dtype="bfloat16")
    prompts = [[5, 17, 99, 3, 250, 41], [7, 300, 12, 8, 9], [40, 41, 42], [100, 200, 300, 400]]
    comps = eng.generate(prompts, SamplingParams(max_tokens=12, temperature=1.0, seed=0))
    batch = build_batch([np.asarray(p) for p in prompts], [c.token_ids for c in comps], [c.logprobs for c in comps],
                        np.array([1.0, -1.0, 0.5, -0.5]), pad_id=eng.pad_token_id)
    snapshot = copy.deepcopy(eng.model.state_dict())
    stats = {}
    for mode in ("none", "tis"):
        eng.model.load_state_dict(snapshot)
        cfg = UpdateConfig(rollout_correction=mode, lr=1e-6)
        fixed, corr = apply_rollout_correction(eng.model, batch, cfg)
        stats[mode] = update(eng.model, make_optimizer(eng.model, cfg.lr), fixed, cfg)
        if mode == "tis":
            assert corr.kl > 0  # the behaviour (KV-cache) logprobs really differ from the recompute
    assert stats["none"].approx_kl > 0.0  # π_old = the sampler's logprobs: the ratio starts off 1
    assert stats["tis"].approx_kl == 0.0 and stats["tis"].clip_frac == 0.0  # recomputed π_old: exactly 1


def test_the_recompute_with_share_prefix_runs_the_updates_micro_batches() -> None:
    """``update.share_prefix`` in one process: π_old is recomputed the way the update's forward
    runs (rows in prefix order, identical rows once, a micro-batch's common prefix once) — the
    same logprobs as the plain recompute to float rounding, with fewer decoder rows — and the
    first step's ratio is 1 to float rounding."""
    from agentrl.update.row_shards import sharded_batch_logprobs

    model = tiny_model(0)
    prompts, comps, _, adv = random_turns(3, (3, 2, 3))
    b = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], adv, pad_id=PAD, pack=False)
    b = b.select(torch.tensor([0, 5, 1, 0, 2, 6, 3, 5, 4, 7]))  # rows repeated (a group's members in one state)
    tokens = []  # token positions each decoder call runs (rows × width, padding included)
    hook = model.get_decoder().register_forward_pre_hook(
        lambda mod, args, kw: tokens.append(int((kw.get("input_ids") if kw.get("input_ids") is not None
                                                 else kw["inputs_embeds"][..., 0]).numel())), with_kwargs=True)
    try:
        plain = sharded_batch_logprobs(model, b, None, micro_batch=4, loss_only=True)
        n_plain, tokens[:] = sum(tokens), []
        shared = sharded_batch_logprobs(model, b, None, micro_batch=4, loss_only=True, share_prefix=True)
        n_shared = sum(tokens)
    finally:
        hook.remove()
    mask = b.loss_mask > 0
    assert torch.allclose(shared[mask], plain[mask], atol=2e-5) and torch.all(shared[~mask] == 0)
    assert n_shared < 0.8 * n_plain, (n_shared, n_plain)  # duplicates once, shared prefixes once
    cfg = dataclasses.replace(CFG, share_prefix=True, micro_batch=4, rollout_correction="tis")
    corrected, corr = apply_rollout_correction(model, b.with_(old_logprobs=shared * b.loss_mask), cfg)
    assert torch.equal(corrected.old_logprobs, shared * b.loss_mask)
    assert abs(corr.mean_weight - 1.0) < 1e-6 and corr.kl < 1e-9
