"""Rollout (off-policy) correction: the decoupled PPO objective with truncated or masked
importance weights between the engine that sampled and the trainer.

Three policies meet in an update phase:

- π_behav, the behaviour policy: the logprobs the engine stored with each sampled token
  (``Turn.completion_logprobs``). It differs from the trainer when rollouts run a few policy
  versions behind (``rollout.max_staleness`` ≥ 1) and when the engine computes differently
  (vLLM in bf16 vs the HF trainer: ~0.04 mean |Δ logprob| in bf16).
- π_old, the trainer's own logprobs of the batch with the weights at the start of the
  update phase, recomputed without gradients (``apply_rollout_correction``).
- π_θ, the policy being trained.

The decoupled objective (Hilton et al. 2021, arXiv 2110.00641) clips the proximal ratio
π_θ/π_old as PPO does and corrects the remaining gap with a detached importance weight::

    loss_t = w_t · ppo_loss(π_θ/π_old, A_t),   w = f(ρ),   ρ = π_old(y) / π_behav(y)

``update.rollout_correction`` picks f (registered in ``CORRECTIONS``; C = ``correction_high``,
α = ``correction_low``):

- ``none``: π_old := π_behav and no weight (the classic PPO objective); the trainer's
  logprobs are still recomputed once, to measure the KL (``correction/kl``).
- ``tis``: truncated IS, w = min(ρ, C) (Yao et al. 2025, "Your efficient RL framework
  secretly brings you off-policy RL training").
- ``mis``: masked IS, w = ρ if ρ ≤ C else 0 (Liu et al. 2025, "When speed kills stability").
- ``icepop``: two-sided mask, w = ρ if α ≤ ρ ≤ C else 0 (Ring-1T / IcePop, arXiv 2510.18855).

``update.correction_level``: ``token`` takes one ρ per token; ``sequence`` one ρ per turn
(completion), ρ_turn = exp(Σ_t log ρ_t over the turn's loss-mask tokens, found by
``turn_ids``, so packed rows work), and its weight goes on every token of the turn.

Weights are constants (no gradient flows through them). A token (or turn) masked to weight
0 still counts in the loss denominators (``LossScale``): masking removes its contribution
and does not rescale the others, so a heavily masked batch takes a proportionally smaller
step. (verl's current rollout correction, 10/2025, instead drops rejected tokens from the
denominators through its ``modified_response_mask``.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from agentrl.config import UpdateConfig
from agentrl.registry import Registry
from agentrl.update.batch import TrainBatch
from agentrl.update.row_shards import GatherGroup, sharded_batch_logprobs

__all__ = ["Correction", "CORRECTIONS", "register_correction", "correction_weights", "apply_rollout_correction"]

_MAX_LOG_RATIO = 20.0  # exp(±20) keeps ρ finite on wildly mismatched tokens and long turns

# (ρ (B, T) float32, low, high) → (weights, capped, masked), all (B, T); capped / masked bool
CorrectionFn = Callable[[torch.Tensor, float, float], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
CORRECTIONS: Registry[CorrectionFn] = Registry("rollout correction")
LEVELS = ("token", "sequence")


def register_correction(name: str) -> Callable[[CorrectionFn], CorrectionFn]:
    """Decorator: register ``(rho, low, high) -> (weights, capped, masked)`` under ``name``."""
    return CORRECTIONS.decorator(name)


@register_correction("none")
def _none(rho: torch.Tensor, low: float, high: float):
    no = torch.zeros_like(rho, dtype=torch.bool)
    return torch.ones_like(rho), no, no


@register_correction("tis")
def _tis(rho: torch.Tensor, low: float, high: float):
    capped = rho > high
    return rho.clamp(max=high), capped, torch.zeros_like(capped)


@register_correction("mis")
def _mis(rho: torch.Tensor, low: float, high: float):
    masked = rho > high
    return torch.where(masked, torch.zeros_like(rho), rho), torch.zeros_like(masked), masked


@register_correction("icepop")
def _icepop(rho: torch.Tensor, low: float, high: float):
    masked = (rho < low) | (rho > high)
    return torch.where(masked, torch.zeros_like(rho), rho), torch.zeros_like(masked), masked


@dataclass(frozen=True)
class Correction:
    """Importance weights of one update phase and their diagnostics.

    Attributes:
        weights: (B, T) float32 detached weight of every token's policy loss, 0 off the mask.
        kl: token mean over loss-mask tokens of k3 = (ρ − 1) − log ρ with the *token* ρ: on
            tokens sampled from π_behav it estimates KL(π_behav‖π_old) (≥ 0; 0 = no mismatch).
        capped_frac: fraction of loss-mask tokens whose weight was truncated to C (``tis``).
        masked_frac: fraction of loss-mask tokens masked to weight 0 (``mis``, ``icepop``).
        mean_weight: mean weight over loss-mask tokens.
        tokens: number of loss-mask tokens.
        logprob_corr: Pearson correlation of the trainer's and the sampler's logprobs over the
            loss-mask tokens (NaN with fewer than 2 tokens or a constant side): how well the
            recorded logprobs (an engine's, the proxy's) agree with the trainer's recompute
            (LEGO-RL, arXiv 2608.17393, reports > 0.99 through its proxy).
        logprob_mae: mean |log π_old − log π_behav| over the same tokens, in nats.
    At sequence level the fractions still count tokens (every token of a capped or masked
    turn counts).
    """

    weights: torch.Tensor
    kl: float
    capped_frac: float
    masked_frac: float
    mean_weight: float
    tokens: int
    logprob_corr: float = float("nan")
    logprob_mae: float = float("nan")

    def as_metrics(self, prefix: str = "correction/") -> dict[str, float]:
        """``{prefix + name: value}`` of the scalar diagnostics (for ``agentrl.log``)."""
        names = ("kl", "capped_frac", "masked_frac", "mean_weight", "logprob_corr", "logprob_mae")
        return {prefix + n: float(getattr(self, n)) for n in names}


def _per_turn_sum(values: torch.Tensor, on: torch.Tensor, turn_ids: torch.Tensor) -> torch.Tensor:
    """Each ``on`` token gets the sum of ``values`` over the ``on`` tokens of its turn; (B, T)."""
    idx = torch.where(on, turn_ids, torch.zeros_like(turn_ids))
    n = int(turn_ids.max().item()) + 1 if bool(on.any()) else 1
    sums = values.new_zeros(n).index_add(0, idx.reshape(-1), torch.where(on, values, 0.0).reshape(-1))
    return torch.where(on, sums[idx], torch.zeros_like(values))


def correction_weights(train_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, loss_mask: torch.Tensor,
                       turn_ids: torch.Tensor, mode: str = "tis", level: str = "token", low: float = 0.5,
                       high: float = 2.0) -> Correction:
    """Importance weights w = f(ρ), ρ = π_old / π_behav, and their diagnostics.

    Args:
        train_logprobs: (B, T) float32 trainer logprobs log π_old of the sampled tokens.
        behaviour_logprobs: (B, T) float32 engine logprobs log π_behav of the same tokens.
        loss_mask: (B, T) float32, 1 on trained tokens; weights and statistics only there.
        turn_ids: (B, T) int64 turn of each trained token (−1 elsewhere), for ``sequence``.
        mode: a ``CORRECTIONS`` name: none | tis | mis | icepop.
        level: ``token`` (ρ per token) or ``sequence`` (one ρ per turn, the product of its
            tokens' ρ, on all the turn's tokens).
        low, high: α (icepop only) and C (the cap / upper mask bound).
    Returns:
        ``Correction`` (weights detached, 0 off the mask).
    Raises:
        KeyError: unknown mode (with suggestions); ValueError: unknown level or shape mismatch.
    """
    fn = CORRECTIONS.get(mode)
    if level not in LEVELS:
        raise ValueError(f"unknown correction level {level!r}; choose one of {', '.join(LEVELS)}")
    if not (train_logprobs.shape == behaviour_logprobs.shape == loss_mask.shape == turn_ids.shape):
        raise ValueError(f"correction_weights needs equal (B, T) shapes, got {tuple(train_logprobs.shape)}, "
                         f"{tuple(behaviour_logprobs.shape)}, {tuple(loss_mask.shape)}, {tuple(turn_ids.shape)}")
    on = loss_mask > 0
    zero = torch.zeros_like(train_logprobs, dtype=torch.float32)
    log_rho = torch.where(on, (train_logprobs.detach().float() - behaviour_logprobs.float()), zero)
    log_rho = log_rho.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)  # (B, T), 0 off the mask
    level_log_rho = log_rho
    if level == "sequence":
        on = on & (turn_ids >= 0)
        level_log_rho = _per_turn_sum(log_rho, on, turn_ids).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    weights, capped, masked = fn(torch.exp(level_log_rho), low, high)
    weights = torch.where(on, weights, zero).detach()
    n = max(int(on.sum().item()), 1)
    k3 = torch.where(on, torch.expm1(log_rho) - log_rho, zero)  # token k3 of KL(π_behav‖π_old)
    corr, mae = _agreement(train_logprobs.detach().double()[on], behaviour_logprobs.double()[on])
    return Correction(weights=weights, kl=float(k3.sum()) / n, capped_frac=float((capped & on).sum()) / n,
                      masked_frac=float((masked & on).sum()) / n, mean_weight=float(weights.sum()) / n,
                      tokens=int(on.sum().item()), logprob_corr=corr, logprob_mae=mae)


def _agreement(train: torch.Tensor, behaviour: torch.Tensor) -> tuple[float, float]:
    """(Pearson correlation, mean absolute difference) of two float64[K] logprob vectors."""
    if train.numel() == 0:
        return float("nan"), float("nan")
    mae = float((train - behaviour).abs().mean())
    if train.numel() < 2:
        return float("nan"), mae
    a, b = train - train.mean(), behaviour - behaviour.mean()
    den = float(a.norm() * b.norm())
    return (float((a * b).sum()) / den if den > 0 else float("nan")), mae


def apply_rollout_correction(model: torch.nn.Module, batch: TrainBatch, cfg: UpdateConfig, *,
                             temperature: float = 1.0, dp: GatherGroup | None = None
                             ) -> tuple[TrainBatch, Correction]:
    """Prepare an update phase's batch for ``cfg.rollout_correction`` (see the module doc).

    Recomputes the trainer's logprobs of ``batch`` with ``model``'s current weights (no
    gradient, ``cfg.micro_batch`` rows per forward — or rows packed by ``cfg.micro_batch_tokens``
    — LM head only at loss-mask tokens, like the update's own forward) and returns the batch with ``old_logprobs`` = those (π_old)
    and ``is_weights`` = the correction weights against the stored behaviour logprobs
    (``batch.old_logprobs``), with the ``Correction``. Call it once per update phase, before
    the first optimizer step, so every epoch and minibatch uses the same π_old.

    ``none`` keeps the batch (π_old = the behaviour logprobs, no weights) but still runs the
    recompute and returns its ``Correction`` (weights 1), so ``correction/kl`` — how far the
    sampler is from the trainer — is logged whatever the mode. ``auto`` (an ``UpdateConfig``
    built by hand, not resolved by ``agentrl.config.validate_config``) acts as ``none``.

    Args:
        model: the policy. Data-parallel (FSDP2-sharded): call it on every rank with the
            same batch (the forward passes' collectives must match); every rank then holds
            the same corrected batch (tests/distributed/test_dp_update.py).
        dp: the ranks (``agentrl.update.row_shards.GatherGroup``, e.g. a ``DistContext``):
            each computes π_old for its share of the rows and the shares are all-gathered
            (``sharded_batch_logprobs``); None recomputes every row here.
        batch: as built by ``build_batch`` (``old_logprobs`` = behaviour logprobs).
        cfg: ``UpdateConfig`` (rollout_correction, correction_level, correction_low/high,
            micro_batch).
        temperature: the sampling temperature the update uses (the same as ``update``'s).
    Returns:
        ``(batch, Correction)``: for ``none`` the same batch object; otherwise the corrected batch.
    """
    mode = "none" if cfg.rollout_correction == "auto" else cfg.rollout_correction
    train_lp = sharded_batch_logprobs(model, batch, dp, micro_batch=cfg.micro_batch, temperature=temperature,
                                      loss_only=True, micro_batch_tokens=cfg.micro_batch_tokens,
                                      share_prefix=cfg.share_prefix) * batch.loss_mask  # (B, T), 0 off the mask like old_logprobs
    corr = correction_weights(train_lp, batch.old_logprobs, batch.loss_mask, batch.turn_ids,
                              mode=mode, level=cfg.correction_level,
                              low=cfg.correction_low, high=cfg.correction_high)
    if mode == "none":
        return batch, corr
    return dataclasses.replace(batch, old_logprobs=train_lp, is_weights=corr.weights), corr
