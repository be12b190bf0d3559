"""One optimizer step of the policy loss over a minibatch, with micro-batches.

``update`` splits the minibatch into micro-batches of ``cfg.micro_batch`` rows, runs
forward + backward on each, and steps once. Every aggregation divides by denominators
counted over the whole minibatch (``LossScale``), so the accumulated gradient equals the
one of a single full-batch pass (1 × 4 rows == 4 × 1 rows up to float rounding). With
``cfg.micro_batch_tokens`` N > 0 the micro-batches are instead rows packed end to end into one
sequence of ≤ N tokens each, without padding (``agentrl.update.packing``; the same loss and
gradient to float rounding); with ``cfg.share_prefix`` too, rows of one task share a pack and
the prefix they share is laid down once (on sdpa models without gradient checkpointing).

Objective per minibatch (minimised):
``agg(w · policy_loss) + kl_coef · agg(KL(π‖π_ref)) − entropy_coef · agg(H(π))``, where
w = ``batch.is_weights`` (the rollout correction's detached importance weights,
``agentrl.update.correction``) or 1 when None; only the policy loss is weighted.

Data-parallel (``dp`` = an ``agentrl.distributed.DistContext`` of N ranks, model FSDP2-sharded): every
rank gets the same minibatch and trains its rows ``r, r + N, …``; the denominators (trained
tokens, turns) are all-reduced over the ranks, so each rank's loss is its share of the
1-process loss and the summed gradients equal the 1-process gradient in every aggregation
mode, with uneven rows and tokens per rank. Ranks run the same number of forward/backward
passes (a rank with fewer micro-batches runs zero-weight ones on two tokens: FSDP2's collectives
must match; packed micro-batches are dealt so that every rank has the same count and about the
same tokens, ``packing.rank_bins``, leaving none where the rows allow), the gradient norm is
taken over the whole (sharded) gradient, and the statistics are summed over ranks.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Protocol

import torch

from agentrl.config import UpdateConfig
from agentrl.update.audit import CreditAudit
from agentrl.update.batch import TrainBatch, minibatches, model_device
from agentrl.update.logprobs import forward_token_stats
from agentrl.update.losses import AGGREGATIONS, KL_ESTIMATORS, LOSSES, ClipSpec, LossScale, PolicyLossInputs
from agentrl.update.master_weights import HALF_DTYPES
from agentrl.update.packing import pack_rows, rank_bins, shared_prefix, shared_rank_bins, stub_row
from agentrl.update.shared_prefix import prefix_order
from agentrl.update.varlen_attention import attends_per_segment

__all__ = ["UpdateStats", "ReduceGroup", "make_optimizer", "update", "train_on_batch", "sft_update"]


class ReduceGroup(Protocol):
    """The ranks of a data-parallel update (``agentrl.distributed.DistContext`` implements it)."""

    rank: int
    world_size: int

    def all_reduce(self, values: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Element-wise ``sum`` | ``max`` of ``values`` over the ranks."""


@dataclass(frozen=True)
class UpdateStats:
    """Diagnostics of one optimizer step (token means are over the minibatch's trained tokens).

    Attributes:
        loss: the total objective that was minimised (aggregated as configured).
        pg_loss: the policy-loss part of ``loss``.
        kl: token mean of the KL estimate to the reference (0 when ``kl_coef`` is 0).
        clip_frac: fraction of trained tokens where the clipped branch was taken.
        approx_kl: token mean of ``(r − 1) − log r``, r = π/π_old (≥ 0; KL(π_old‖π)).
        entropy: token mean of the policy entropy (nats).
        grad_norm: total gradient 2-norm before clipping.
        tokens: number of trained tokens.
    """

    loss: float
    pg_loss: float
    kl: float
    clip_frac: float
    approx_kl: float
    entropy: float
    grad_norm: float
    tokens: int

    def as_metrics(self, prefix: str = "update/") -> dict[str, float]:
        """Flat ``{prefix + name: value}`` for ``agentrl.log.MetricsLogger``."""
        return {prefix + k: float(v) for k, v in self.__dict__.items()}


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float = 0.0,
                   betas: tuple[float, float] = (0.9, 0.999)) -> torch.optim.AdamW:
    """AdamW (arXiv 1711.05101) over the trainable parameters; weight decay applies to
    matrices only (ndim ≥ 2), not to biases and norm gains.

    Logs a warning when trained weights are bf16/fp16 (full fine-tuning in half precision:
    small updates round away; ``agentrl.update.master_weights`` has the float32 masters that
    ``update.master_weights`` keeps for the policy and the optimizer the critic uses).

    Raises:
        ValueError: the model has no trainable parameter.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters (all frozen?); unfreeze some or apply LoRA first")
    half = sum(p.numel() for p in params if p.dtype in HALF_DTYPES)
    if half:
        logging.getLogger(__name__).warning(
            "%d of the %d trained weights are half precision: AdamW steps them without a float32 copy, so an update "
            "below ~0.4 %% of a bf16 weight rounds away (at lr 1e-5 most entries never move); train LoRA adapters "
            "(float32), set update.master_weights: on, or policy.dtype: float32 for full fine-tuning", half,
            sum(p.numel() for p in params))
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=betas)


class _Sums:
    """Running sums over micro-batches (token-weighted metric sums)."""

    def __init__(self) -> None:
        self.loss = self.pg = self.kl = self.clip = self.akl = self.ent = 0.0

    def summed(self, dp: ReduceGroup) -> "_Sums":
        """The sums over every rank of ``dp``."""
        names = ("loss", "pg", "kl", "clip", "akl", "ent")
        total = dp.all_reduce(torch.tensor([getattr(self, n) for n in names], dtype=torch.float64))
        out = _Sums()
        for name, value in zip(names, total.tolist()):
            setattr(out, name, value)
        return out

    def stats(self, tokens: float, grad_norm: float) -> UpdateStats:
        return UpdateStats(loss=self.loss, pg_loss=self.pg, kl=self.kl / tokens, clip_frac=self.clip / tokens,
                           approx_kl=self.akl / tokens, entropy=self.ent / tokens, grad_norm=grad_norm,
                           tokens=int(tokens))


def _micro_step(model: torch.nn.Module, mb: TrainBatch, cfg: UpdateConfig, scale: LossScale,
                temperature: float, sums: _Sums, weight: float = 1.0) -> None:
    """Forward + backward of one micro-batch; adds its share of every metric to ``sums``.
    ``weight`` 0 runs the passes with a zero loss (a data-parallel rank out of rows)."""
    policy_loss, agg = LOSSES.get(cfg.loss), AGGREGATIONS.get(cfg.aggregation)
    out = forward_token_stats(model, mb.input_ids, mb.attention_mask, temperature=temperature,
                              with_entropy=True, entropy_grad=cfg.entropy_coef != 0, allowed_ids=mb.allowed_ids,
                              token_mask=mb.loss_mask > 0, grammar_mask=mb.grammar_mask,  # LM head only where a trained token is predicted
                              share_prefix=cfg.share_prefix, position_ids=mb.position_ids)
    m = mb.loss_mask
    x = PolicyLossInputs(out.logprobs, mb.old_logprobs, mb.advantages, m, mb.turn_ids)
    tl = policy_loss(x, ClipSpec(cfg.clip_low, cfg.clip_high, cfg.clip_c))
    token_loss = tl.loss if mb.is_weights is None else tl.loss * mb.is_weights  # rollout correction (detached w)
    scale = scale.for_tokens(mb.token_episode)  # per-token episode sizes (episode-mean-token-mean)
    pg = agg(token_loss, m, mb.turn_ids, scale)  # a weight-0 token still counts in the denominators
    total = pg
    if cfg.kl_coef > 0:
        kl = KL_ESTIMATORS.get(cfg.kl_estimator)(out.logprobs, mb.ref_logprobs)
        total = total + cfg.kl_coef * agg(kl, m, mb.turn_ids, scale)
        sums.kl += float((kl.detach() * m).sum())
    if cfg.entropy_coef != 0:
        total = total - cfg.entropy_coef * agg(out.entropy, m, mb.turn_ids, scale)
    if weight != 1.0:
        (total * weight).backward()
        return
    total.backward()
    log_r = (out.logprobs.detach() - mb.old_logprobs).clamp(-20.0, 20.0)  # token-level, whatever the loss
    sums.loss += float(total.detach())
    sums.pg += float(pg.detach())
    sums.clip += float((tl.clipped * m).sum())
    sums.akl += float(((torch.expm1(log_r) - log_r) * m).sum())
    sums.ent += float((out.entropy.detach() * m).sum())


def update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: TrainBatch, cfg: UpdateConfig, *,
           temperature: float = 1.0, micro_batch: int | None = None, dp: ReduceGroup | None = None,
           audit: CreditAudit | None = None) -> UpdateStats:
    """One optimizer step on ``batch`` (a minibatch), ``micro_batch`` rows per forward.

    Args:
        model: causal LM in train mode (HF or peft-wrapped); its trainable parameters are
            the ones ``optimizer`` holds.
        optimizer: e.g. from ``make_optimizer``.
        batch: the minibatch; ``batch.ref_logprobs`` is required when ``cfg.kl_coef > 0``;
            ``batch.is_weights`` (optional) weights each token's policy loss.
        cfg: ``agentrl.config.UpdateConfig`` (loss, clip, aggregation, kl/entropy coefs,
            grad_clip (0 = off), sum_norm_tokens for Dr.GRPO).
        temperature: the sampling temperature of the behaviour policy.
        micro_batch: rows per forward pass (default ``cfg.micro_batch``; unused when
            ``cfg.micro_batch_tokens`` packs the rows).
        dp: the data-parallel ranks (every rank passes the same ``batch``; see the module
            docstring); None = one process.
        audit: the credit audit of the phase (``agentrl.update.audit``): every micro-batch is
            checked as the loss will see it (after selection, sharding and packing), and every
            turn of the minibatch must be trained exactly once, before the optimizer steps.
    Returns:
        ``UpdateStats`` (data-parallel: of the whole minibatch, the same on every rank).
    Raises:
        KeyError: unknown loss / aggregation / KL estimator name (with suggestions).
        ValueError: KL requested without reference logprobs; Dr.GRPO aggregation without
            ``sum_norm_tokens``; the episode aggregation without ``batch.token_episode``; ``is_weights`` not shaped like the loss mask; non-finite loss.
        CreditAuditError: with ``audit``, a token that does not carry its own turn's advantage.
    """
    if cfg.kl_coef > 0 and batch.ref_logprobs is None:
        raise ValueError("update.kl_coef > 0 needs batch.ref_logprobs; set them with "
                         "batch.with_(ref_logprobs=batch_logprobs(ref_model, batch))")
    if batch.is_weights is not None and batch.is_weights.shape != batch.loss_mask.shape:
        raise ValueError(f"batch.is_weights has shape {tuple(batch.is_weights.shape)}, the loss mask "
                         f"{tuple(batch.loss_mask.shape)}; build them with apply_rollout_correction")
    if cfg.aggregation == "episode-mean-token-mean" and batch.token_episode is None:
        raise ValueError("aggregation 'episode-mean-token-mean' needs the episode of every turn; "
                         "build the batch with build_batch(..., episodes=<episode id per turn>)")
    if cfg.aggregation == "seq-mean-token-sum-norm" and cfg.sum_norm_tokens is None:
        raise ValueError("aggregation 'seq-mean-token-sum-norm' needs update.sum_norm_tokens (max response tokens)")
    model.train()
    share = cfg.share_prefix and cfg.micro_batch_tokens > 0 and attends_per_segment(model)  # prefix once per pack
    mine, chunks = _my_micro_batches(batch, cfg, micro_batch or cfg.micro_batch, dp, share)
    norm = cfg.sum_norm_tokens or 1
    scale = LossScale.of(batch.loss_mask, batch.turn_ids, norm) if dp is None else _global_scale(mine, norm, dp)
    scale = scale.with_episodes(batch.loss_mask, batch.token_episode)  # every rank holds the whole minibatch
    optimizer.zero_grad(set_to_none=True)
    sums = _Sums()
    device = model_device(model)
    passes = len(chunks) if dp is None else int(dp.all_reduce(torch.tensor([len(chunks)]), op="max").item())
    packed = cfg.micro_batch_tokens > 0
    if audit is not None:
        audit.begin_step()
    for k in range(passes):
        if k < len(chunks):
            mb = mine.select(chunks[k])
            if packed:
                mb = pack_rows(mb, shared_prefix(mb) if share else 0).batch
            if audit is not None:  # as the loss will see it
                audit.check(mb)
            _micro_step(model, mb.to(device), cfg, scale, temperature, sums)
        else:  # this rank is out of rows: small zero-weight passes keep FSDP2's collectives in step
            _micro_step(model, stub_row(batch).to(device), cfg, scale, temperature, _Sums(), weight=0.0)
    if audit is not None:  # every turn of the minibatch trained exactly once (over the ranks)
        audit.end_step(batch.turn_key, dp)
    if dp is not None:
        sums = sums.summed(dp)
    if not math.isfinite(sums.loss):
        optimizer.zero_grad(set_to_none=True)
        raise ValueError(f"non-finite loss {sums.loss}; check advantages, logprobs and the learning rate")
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    max_norm = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
    if dp is None:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm)) if params else 0.0
    else:
        grad_norm = _clip_sharded(params, max_norm)
    optimizer.step()
    return sums.stats(scale.tokens, grad_norm)


def _my_micro_batches(batch: TrainBatch, cfg: UpdateConfig, micro_batch: int, dp: ReduceGroup | None,
                      share: bool = False) -> tuple[TrainBatch, list[torch.Tensor]]:
    """This rank's rows of the minibatch (``mine``) and its micro-batches (int64 indices into
    ``mine``): ``micro_batch`` rows each, rank r holding rows ``r, r + N, …`` (sorted by
    prefix with ``share_prefix``); or, with ``cfg.micro_batch_tokens``, the token-budget
    micro-batches ``agentrl.update.packing.rank_bins`` (``shared_rank_bins`` with ``share``)
    deals to this rank."""
    if cfg.micro_batch_tokens > 0:
        world, rank = (1, 0) if dp is None else (dp.world_size, dp.rank)
        bins = (shared_rank_bins(batch, cfg.micro_batch_tokens, world) if share else
                rank_bins(batch.attention_mask.sum(1).tolist(), cfg.micro_batch_tokens, world))[rank]
        mine = batch.select([r for b in bins for r in b])
        bounds = torch.cumsum(torch.tensor([0] + [len(b) for b in bins]), 0).tolist()
        return mine, [torch.arange(bounds[i], bounds[i + 1]) for i in range(len(bins))]
    mine = batch if dp is None else batch.select(torch.arange(batch.num_rows)[dp.rank :: dp.world_size])  # may be empty
    if cfg.share_prefix and mine.num_rows > 1:  # rows of one task side by side: their micro-batches share more
        mine = mine.select(prefix_order(mine.input_ids, mine.attention_mask))
    return mine, minibatches(mine.num_rows, micro_batch) if mine.num_rows or dp is None else []


def _global_scale(mine: TrainBatch, norm_tokens: float, dp: ReduceGroup) -> LossScale:
    """``LossScale`` of the whole minibatch from each rank's rows: token and turn counts are
    summed over the ranks (a turn lives in one row, so ranks never share one)."""
    turns = torch.unique(mine.turn_ids[(mine.loss_mask > 0) & (mine.turn_ids >= 0)]).numel()
    local = torch.tensor([float(mine.loss_mask.sum().item()), float(turns)], dtype=torch.float64)
    tokens, n_turns = dp.all_reduce(local).tolist()
    return LossScale(tokens=max(tokens, 1.0), turns=max(n_turns, 1.0), norm_tokens=float(norm_tokens))


def _clip_sharded(params: list[torch.Tensor], max_norm: float) -> float:
    """Clip FSDP2-sharded gradients (``DTensor``) by the norm of the **whole** gradient, i.e.
    over every rank's shards; returns that norm (before clipping)."""
    if not params:
        return 0.0
    norm = torch.nn.utils.get_total_norm([p.grad for p in params])
    if hasattr(norm, "full_tensor"):  # a DTensor partial norm → the global value on every rank
        norm = norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return float(norm)


def train_on_batch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: TrainBatch,
                   cfg: UpdateConfig, *, temperature: float = 1.0, seed: int = 0,
                   dp: ReduceGroup | None = None) -> list[UpdateStats]:
    """``cfg.epochs`` passes over ``batch``, each split into shuffled minibatches of
    ``cfg.minibatch`` rows (0 = the whole batch, one step per epoch); one ``update`` per
    minibatch (``dp``: data-parallel, every rank passes the same batch and seed). The shuffle
    is seeded by ``seed + epoch``. Returns one ``UpdateStats`` per step."""
    stats = []
    for epoch in range(cfg.epochs):
        for rows in minibatches(batch.num_rows, cfg.minibatch, seed=seed + epoch):
            stats.append(update(model, optimizer, batch.select(rows), cfg, temperature=temperature, dp=dp))
    return stats


def sft_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: TrainBatch, *,
               micro_batch: int = 4, grad_clip: float = 1.0) -> float:
    """One supervised (behaviour-cloning) step: token-mean cross-entropy of the completion
    tokens (``batch.loss_mask``, the same mask as the RL loss), renormalised over
    ``batch.allowed_ids`` where present; ``micro_batch`` rows per forward, one optimizer step.

    Returns:
        the minibatch's mean cross-entropy (nats per completion token) before the step.
    Raises:
        ValueError: no completion token, or a non-finite loss.
    """
    tokens = float(batch.loss_mask.sum())
    if tokens == 0:
        raise ValueError("sft_update got a batch without completion tokens")
    model.train()
    optimizer.zero_grad(set_to_none=True)
    device, total = model_device(model), 0.0
    for rows in minibatches(batch.num_rows, micro_batch):
        mb = batch.select(rows).to(device)
        lp = forward_token_stats(model, mb.input_ids, mb.attention_mask, allowed_ids=mb.allowed_ids,
                                 token_mask=mb.loss_mask > 0, grammar_mask=mb.grammar_mask).logprobs
        loss = -(lp * mb.loss_mask).sum() / tokens
        loss.backward()
        total += float(loss.detach())
    if not math.isfinite(total):
        optimizer.zero_grad(set_to_none=True)
        raise ValueError(f"non-finite SFT loss {total}; lower sft.lr")
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    if params and grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    return total
