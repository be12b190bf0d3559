"""Issue 37: padding-free packed micro-batches (``update.micro_batch_tokens``).

The packed update — rows end to end in one sequence, ``position_ids`` restarting per row, no
attention mask (transformers' block-diagonal causal mask from the restarts on the sdpa path) —
equals the padded update (``micro_batch`` rows, right padded) within 1e-6 in fp32: the loss,
every gradient entry and every parameter after one SGD step, in every loss aggregation mode,
with GSPO, the KL and entropy terms, importance weights, constrained decoding, chained turns
and LoRA. The token-budget bins and their deal over ranks are checked on their own.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from update_fixtures import PAD, VOCAB, grouped_batch, random_turns, sgd, tiny_model

from agentrl.config import ConfigError, LoraSpec, UpdateConfig
from agentrl.update import apply_rollout_correction, batch_logprobs, build_batch, prepare_policy, update
from agentrl.update.logprobs import forward_token_stats
from agentrl.update.lora import apply_lora
from agentrl.update.packing import pack_rows, rank_bins, shared_prefix, shared_rank_bins, stub_row, token_bins
from agentrl.update.shared_prefix import prefix_order

TOL = 1e-6
BASE = UpdateConfig(lr=0.1, grad_clip=0.0, micro_batch=2, sum_norm_tokens=8, rollout_correction="none")
CASES = {
    "token-mean": dict(aggregation="token-mean"),
    "seq-mean-token-mean": dict(aggregation="seq-mean-token-mean"),
    "seq-mean-token-sum-norm": dict(aggregation="seq-mean-token-sum-norm"),
    "episode-mean-token-mean": dict(aggregation="episode-mean-token-mean"),
    "gspo": dict(loss="gspo", aggregation="seq-mean-token-mean", clip_low=3e-4, clip_high=4e-4),
    "kl+entropy+clip": dict(aggregation="token-mean", kl_coef=0.1, entropy_coef=0.01, clip_c=3.0, grad_clip=0.05),
    "tis-sequence": dict(aggregation="seq-mean-token-mean", rollout_correction="tis", correction_level="sequence"),
}
#: packed with the rows' shared prefix laid down once (share_prefix): the padded side keeps
#: share_prefix off, so this compares against the plain padded forward
SHARED = {"token-mean", "episode-mean-token-mean", "tis-sequence"}


def _batch(pack: bool = False, allowed: bool = False):
    prompts, comps, _, adv = random_turns(11, (3, 1, 2, 1, 2))
    rng = np.random.default_rng(0)
    allow = None
    if allowed:  # every other turn constrained: the sampled id and 3 others at each position
        allow = [None if i % 2 else [np.unique(np.r_[tok, rng.integers(2, VOCAB, 3)]) for tok in c]
                 for i, c in enumerate(comps)]
    b = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], adv, pad_id=PAD, pack=pack,
                    episodes=[0, 0, 0, 1, 2, 2, 3, 4, 4], allowed=allow)
    lp = batch_logprobs(tiny_model(0), b)
    noise = 0.3 * torch.randn(lp.shape, generator=torch.Generator().manual_seed(0))
    ref = batch_logprobs(tiny_model(1), b)
    return b.with_(old_logprobs=(lp + noise) * b.loss_mask, ref_logprobs=ref)


def _step(cfg: UpdateConfig, batch, lora: bool = False):
    model = tiny_model(0)
    if lora:
        model = apply_lora(model, LoraSpec(rank=4, alpha=8.0))
    model = prepare_policy(model, cfg)  # gradient checkpointing where asked
    opt = sgd(model, cfg.lr)
    batch, _ = apply_rollout_correction(model, batch, cfg)
    stats = update(model, opt, batch, cfg)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    params = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return stats, grads, params, batch


def _assert_equal_steps(a, b):
    (sa, ga, pa, _), (sb, gb, pb, _) = a, b
    assert sa.tokens == sb.tokens
    for f in ("loss", "pg_loss", "kl", "clip_frac", "approx_kl", "entropy", "grad_norm"):
        assert abs(getattr(sa, f) - getattr(sb, f)) <= TOL, (f, getattr(sa, f), getattr(sb, f))
    assert ga.keys() == gb.keys() and pa.keys() == pb.keys() and ga
    gap = max(float((ga[n] - gb[n]).abs().max()) for n in ga)
    assert gap <= TOL, gap
    assert max(float((pa[n] - pb[n]).abs().max()) for n in pa) <= TOL
    assert max(float(ga[n].abs().max()) for n in ga) > 1e-3  # the step did something


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("budget", [40, 1000])  # several packed micro-batches; all rows in one
def test_packed_update_equals_padded(name, budget):
    torch.set_num_threads(1)
    padded = dataclasses.replace(BASE, **CASES[name])
    packed = dataclasses.replace(padded, micro_batch_tokens=budget)
    batch = _batch()
    _assert_equal_steps(_step(padded, batch), _step(packed, batch))


@pytest.mark.parametrize("name", sorted(SHARED))
@pytest.mark.parametrize("budget", [60, 1000])
def test_shared_prefix_packs_equal_padded(name, budget):
    """Turns of one task in one pack, their common prefix laid down once (3 groups of
    episodes that share their first prompt): the same step as the padded update."""
    torch.set_num_threads(1)
    padded = dataclasses.replace(BASE, **CASES[name])
    packed = dataclasses.replace(padded, micro_batch_tokens=budget, share_prefix=True)
    batch = grouped_batch()
    _assert_equal_steps(_step(padded, batch), _step(packed, batch))


def test_shared_prefix_pack_layout():
    """The first row whole, the others from the shared prefix on, positions continuing; the
    packed forward scores every trained token as the padded one does."""
    torch.set_num_threads(1)
    batch, model = grouped_batch(), tiny_model(0)
    rows = [0, 3, 5]  # first turns of task 0's episodes (identical prompts, different completions)
    mb = batch.select(rows)
    p = shared_prefix(mb)
    assert p == 11  # 12 shared prompt tokens, ending before the first completion token's predecessor
    pk = pack_rows(mb, p)
    lengths = mb.attention_mask.sum(1)
    assert pk.batch.input_ids.shape[1] == int(lengths.sum()) - 2 * p
    assert pk.batch.position_ids[0, int(lengths[0])] == p  # the second row's suffix starts at position p
    b = pk.batch
    got = forward_token_stats(model, b.input_ids, b.attention_mask, token_mask=b.loss_mask > 0,
                              position_ids=b.position_ids).logprobs.detach()
    ref = forward_token_stats(model, mb.input_ids, mb.attention_mask, token_mask=mb.loss_mask > 0).logprobs.detach()
    assert float((pk.unpack(got) * mb.loss_mask - ref).abs().max()) <= TOL
    with pytest.raises(ValueError, match="shared prefix"):
        pack_rows(mb, int(lengths.min()))


@pytest.mark.parametrize("variant", ["lora", "chained-turns", "constrained", "checkpointing"])
def test_packed_update_equals_padded_variants(variant):
    """``checkpointing`` keeps transformers' block-diagonal mask (no per-row attention switch)."""
    torch.set_num_threads(1)
    padded = dataclasses.replace(BASE, aggregation="seq-mean-token-mean", entropy_coef=0.01,
                                 gradient_checkpointing=variant == "checkpointing")
    packed = dataclasses.replace(padded, micro_batch_tokens=48)
    batch = _batch(pack=variant == "chained-turns", allowed=variant == "constrained")
    lora = variant == "lora"
    _assert_equal_steps(_step(padded, batch, lora), _step(packed, batch, lora))


def test_packed_recompute_of_pi_old_equals_padded():
    torch.set_num_threads(1)
    batch = _batch()
    cfg = dataclasses.replace(BASE, rollout_correction="tis")
    *_, a = _step(cfg, batch)
    *_, b = _step(dataclasses.replace(cfg, micro_batch_tokens=40), batch)
    assert float((a.old_logprobs - b.old_logprobs).abs().max()) <= TOL
    assert float((a.is_weights - b.is_weights).abs().max()) <= TOL and bool((a.old_logprobs != 0).any())


def test_pack_rows_keeps_rows_apart():
    """Each packed token's logprob equals the padded one; without the position restarts (one
    causal sequence) the later rows would see the earlier ones and differ."""
    torch.set_num_threads(1)
    batch, model = _batch(), tiny_model(0)
    pk = pack_rows(batch)
    assert pk.batch.input_ids.shape == (1, int(batch.attention_mask.sum()))
    assert int(pk.batch.loss_mask.sum()) == batch.num_tokens
    ref = forward_token_stats(model, batch.input_ids, batch.attention_mask, token_mask=batch.loss_mask > 0).logprobs
    b = pk.batch
    got = forward_token_stats(model, b.input_ids, b.attention_mask, token_mask=b.loss_mask > 0,
                              position_ids=b.position_ids).logprobs
    assert float((pk.unpack(got) - ref).abs().max().detach()) <= TOL
    leaky = forward_token_stats(model, b.input_ids, b.attention_mask, token_mask=b.loss_mask > 0).logprobs
    assert float((pk.unpack(leaky) - ref).abs().max().detach()) > 1e-2
    # turn bookkeeping follows the tokens: value positions point at the same prompt tokens
    assert torch.equal(b.input_ids[0, b.turn_value_pos], batch.input_ids[batch.turn_row, batch.turn_value_pos])


def test_packed_forward_attends_per_row_and_restores_the_model(monkeypatch):
    """The sdpa model runs ``segment_attention`` on each row's slice during a packed forward
    (one call per layer, the rows' bounds), the block-diagonal mask path gives the same
    logprobs, and the model is back on sdpa afterwards."""
    import agentrl.update.varlen_attention as va

    torch.set_num_threads(1)
    batch, model = _batch(), tiny_model(0)
    b = pack_rows(batch).batch
    seen = []
    real = va._segments
    monkeypatch.setattr(va, "_segments", lambda p, q: seen.append(real(p, q)) or seen[-1])
    kw = dict(token_mask=b.loss_mask > 0, position_ids=b.position_ids)
    per_row = forward_token_stats(model, b.input_ids, b.attention_mask, **kw).logprobs.detach()
    lengths = batch.attention_mask.sum(1)
    ends = torch.cumsum(lengths, 0).tolist()
    assert seen == [[(a, b, 0) for a, b in zip([0, *ends], ends)]] * model.config.num_hidden_layers
    assert model.config._attn_implementation == "sdpa"
    monkeypatch.setattr(va, "_SWITCHED", ())  # transformers' dense block-diagonal mask instead
    masked = forward_token_stats(model, b.input_ids, b.attention_mask, **kw).logprobs.detach()
    assert float((per_row - masked).abs().max()) <= TOL and len(seen) == model.config.num_hidden_layers


def test_token_bins_first_fit_decreasing():
    lengths = [10, 15, 21, 10, 6, 13, 50]
    bins = token_bins(lengths, 40)
    assert sorted(r for b in bins for r in b) == list(range(len(lengths)))
    assert all(sum(lengths[r] for r in b) <= 40 for b in bins if len(b) > 1)
    assert [6] in bins  # the 50-token row alone, over the budget
    assert len(bins) == 3  # the other 75 tokens in 2 bins (39 + 36)
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        token_bins(lengths, 0)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_rank_bins_equal_passes_and_balanced_tokens(world):
    rng = np.random.default_rng(world)
    lengths = rng.integers(20, 400, size=37).tolist()
    per_rank = rank_bins(lengths, 1024, world)
    rows = sorted(r for bins in per_rank for b in bins for r in b)
    assert rows == list(range(37))
    assert len({len(bins) for bins in per_rank}) == 1  # no rank is left a zero-weight pass
    tokens = [sum(lengths[r] for b in bins for r in b) for bins in per_rank]
    assert max(tokens) - min(tokens) <= max(lengths)  # about equal
    few = rank_bins([5, 7], 100, 3)  # fewer rows than ranks: one rank has nothing (a stub pass)
    assert sorted(len(b) for b in few) == [0, 1, 1]


@pytest.mark.parametrize("world", [1, 2])
def test_shared_rank_bins_are_prefix_runs_within_budget(world):
    batch = grouped_batch()
    per_rank = shared_rank_bins(batch, 60, world)
    bins = [b for bins in per_rank for b in bins]
    assert sorted(r for b in bins for r in b) == list(range(batch.num_rows))
    assert len({len(b) for b in per_rank}) == 1
    order = prefix_order(batch.input_ids, batch.attention_mask).tolist()
    shared = 0
    for b in bins:
        ks = sorted(order.index(r) for r in b)
        assert ks == list(range(ks[0], ks[0] + len(b)))  # a run of the prefix order
        mb = batch.select(b)
        p = shared_prefix(mb)
        assert len(b) == 1 or pack_rows(mb, p).batch.input_ids.shape[1] <= 60
        shared += p * (len(b) - 1)
    assert shared > 0


def test_stub_row_is_two_tokens_of_the_shortest_row():
    batch = _batch()
    stub = stub_row(batch)
    shortest = int(batch.attention_mask.sum(1).argmin())
    assert stub.input_ids.shape == (1, 2) and torch.equal(stub.input_ids[0], batch.input_ids[shortest, :2])


def test_micro_batch_tokens_must_not_be_negative():
    with pytest.raises(ConfigError, match="micro_batch_tokens"):
        UpdateConfig(micro_batch_tokens=-1)
