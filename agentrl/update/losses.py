"""Policy losses, loss aggregations and KL estimators — pure torch functions, registered.

A **policy loss** maps per-token inputs to a per-token loss (B, T); an **aggregation**
reduces a (B, T) quantity over the loss mask to a scalar, using denominators counted over
the whole optimizer minibatch (``LossScale``) so that splitting the minibatch into
micro-batches and summing the parts gives exactly the full-batch value. Extend with::

    @register_loss("my_loss")
    def my_loss(x: PolicyLossInputs, clip: ClipSpec) -> TokenLoss: ...

Sign convention: losses are minimised; advantage > 0 pushes the token's logprob up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

from agentrl.registry import Registry

__all__ = [
    "PolicyLossInputs", "ClipSpec", "TokenLoss", "LossScale", "LOSSES", "AGGREGATIONS", "KL_ESTIMATORS",
    "register_loss", "register_aggregation", "ppo_clip", "gspo", "token_mean", "seq_mean_token_mean",
    "seq_mean_token_sum_norm", "episode_mean_token_mean", "kl_k1", "kl_k2", "kl_k3", "turn_mean",
]

_MAX_LOG_RATIO = 20.0  # exp(±20) keeps ratios finite on masked or wildly off-policy tokens


@dataclass(frozen=True)
class PolicyLossInputs:
    """Per-token inputs of a policy loss, all (B, T) and aligned with ``input_ids``.

    Attributes:
        logprobs: float32 current-policy logprobs (with gradient).
        old_logprobs: float32 behaviour-policy logprobs.
        advantages: float32 advantage of each completion token.
        loss_mask: float32, 1 on trained tokens.
        turn_ids: int64 turn index of each trained token, −1 elsewhere.
    """

    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    loss_mask: torch.Tensor
    turn_ids: torch.Tensor


@dataclass(frozen=True)
class ClipSpec:
    """Ratio clipping: r ∈ [1 − low, 1 + high]; ``dual_c`` (> 1) caps the loss of
    negative-advantage tokens at ``−A·dual_c`` (dual-clip PPO, arXiv 1912.09729)."""

    low: float = 0.2
    high: float = 0.2
    dual_c: float | None = None


@dataclass(frozen=True)
class TokenLoss:
    """Output of a policy loss: (B, T) float32 ``loss`` (0 off the mask), ``clipped``
    (1.0 where the clipped branch was taken), ``ratio`` π/π_old (detached)."""

    loss: torch.Tensor
    clipped: torch.Tensor
    ratio: torch.Tensor


@dataclass(frozen=True)
class LossScale:
    """Denominators counted over the whole optimizer minibatch (not the micro-batch).

    Attributes:
        tokens: number of trained tokens (Σ loss_mask).
        turns: number of turns (sequences) with at least one trained token.
        norm_tokens: Dr.GRPO's constant (the maximum response length, in tokens).
        episodes: number of episodes with at least one trained token (1 when unknown).
        episode_counts: optional (E,) float64, trained tokens of episode index e in the
            minibatch (``TrainBatch.token_episode`` indices); None when the batch has no
            episode index.
        episode_tokens: optional (B, T) float32 of the *current micro-batch*: the minibatch
            token count of each trained token's episode, 0 elsewhere (``for_tokens``).
    """

    tokens: float
    turns: float
    norm_tokens: float
    episodes: float = 1.0
    episode_counts: torch.Tensor | None = None
    episode_tokens: torch.Tensor | None = None

    @staticmethod
    def of(loss_mask: torch.Tensor, turn_ids: torch.Tensor, norm_tokens: float) -> "LossScale":
        """Count tokens and turns of a (B, T) mask / turn-id pair (the full minibatch)."""
        turns = torch.unique(turn_ids[(loss_mask > 0) & (turn_ids >= 0)]).numel()
        return LossScale(tokens=max(float(loss_mask.sum().item()), 1.0), turns=max(float(turns), 1.0),
                         norm_tokens=float(norm_tokens))

    def with_episodes(self, loss_mask: torch.Tensor, token_episode: torch.Tensor | None) -> "LossScale":
        """Copy with the episode counts of the full minibatch: ``token_episode`` (B, T) int64
        episode index of each token (−1 off completions) or None (unknown: unchanged)."""
        if token_episode is None:
            return self
        on = (loss_mask > 0) & (token_episode >= 0)
        idx = token_episode[on]
        counts = torch.bincount(idx, minlength=int(token_episode.max().item()) + 1 if idx.numel() else 1)
        return replace(self, episodes=max(float((counts > 0).sum().item()), 1.0), episode_counts=counts.double())

    def for_tokens(self, token_episode: torch.Tensor | None) -> "LossScale":
        """Copy whose ``episode_tokens`` (B, T) belong to a micro-batch with ``token_episode``."""
        if self.episode_counts is None or token_episode is None:
            return self
        on = token_episode >= 0
        counts = self.episode_counts.to(token_episode.device)[token_episode.clamp(min=0)]
        return replace(self, episode_tokens=torch.where(on, counts, torch.zeros_like(counts)).float())


PolicyLossFn = Callable[[PolicyLossInputs, ClipSpec], TokenLoss]
AggregationFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, LossScale], torch.Tensor]
KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

LOSSES: Registry[PolicyLossFn] = Registry("policy loss")
AGGREGATIONS: Registry[AggregationFn] = Registry("loss aggregation")
KL_ESTIMATORS: Registry[KLFn] = Registry("KL estimator")


def register_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator: register a policy loss ``(PolicyLossInputs, ClipSpec) -> TokenLoss``."""
    return LOSSES.decorator(name)


def register_aggregation(name: str) -> Callable[[AggregationFn], AggregationFn]:
    """Decorator: register ``(values (B,T), loss_mask, turn_ids, LossScale) -> scalar``."""
    return AGGREGATIONS.decorator(name)


def _clipped_objective(ratio: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip: ClipSpec) -> TokenLoss:
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - clip.low, 1.0 + clip.high)
    loss = torch.maximum(pg1, pg2)
    clipped = (pg2 > pg1).float()
    if clip.dual_c is not None:
        cap = -adv * clip.dual_c
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(dual, cap, loss)
        clipped = torch.where(dual, torch.ones_like(clipped), clipped)
    on = mask > 0
    return TokenLoss(loss=torch.where(on, loss, torch.zeros_like(loss)),
                     clipped=clipped * mask, ratio=ratio.detach())


@register_loss("ppo_clip")
def ppo_clip(x: PolicyLossInputs, clip: ClipSpec) -> TokenLoss:
    """Token-level PPO clipped surrogate (arXiv 1707.06347) with asymmetric clipping.

    ``r = exp(logπ − logπ_old)``; ``loss = max(−A·r, −A·clip(r, 1 − low, 1 + high))``;
    with ``dual_c``: ``loss = min(loss, −A·dual_c)`` where A < 0. All tensors (B, T).
    """
    log_ratio = (x.logprobs - x.old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return _clipped_objective(torch.exp(log_ratio), x.advantages, x.loss_mask, clip)


def _turn_sums(values: torch.Tensor, loss_mask: torch.Tensor, turn_ids: torch.Tensor):
    """Masked per-turn sums and token counts: (n,), (n,), plus the (B, T) gather index and
    the (B, T) bool mask of trained tokens."""
    on = (loss_mask > 0) & (turn_ids >= 0)
    idx = torch.where(on, turn_ids, torch.zeros_like(turn_ids))
    n = int(turn_ids.max().item()) + 1 if bool(on.any()) else 1
    w = loss_mask * on
    sums = values.new_zeros(n).index_add(0, idx.reshape(-1), (values * w).reshape(-1))
    counts = values.new_zeros(n).index_add(0, idx.reshape(-1), w.to(values.dtype).reshape(-1))
    return sums, counts, idx, on


def turn_mean(values: torch.Tensor, loss_mask: torch.Tensor, turn_ids: torch.Tensor) -> torch.Tensor:
    """Each trained token gets its turn's masked mean of ``values``: (B, T) → (B, T), 0 off
    the mask. Turns are identified by ``turn_ids``, so packed rows work."""
    sums, counts, idx, on = _turn_sums(values, loss_mask, turn_ids)
    means = sums / counts.clamp(min=1.0)
    return torch.where(on, means[idx], torch.zeros_like(values))


@register_loss("gspo")
def gspo(x: PolicyLossInputs, clip: ClipSpec) -> TokenLoss:
    """GSPO (arXiv 2507.18071, token form GSPO-token): one ratio per sequence (turn),
    ``s = exp(mean_t(logπ − logπ_old))``, clipped like PPO (the paper uses tiny ranges,
    e.g. low 3e-4, high 4e-4). Each token carries ``sg[s]·π/sg[π]``: the value of the
    sequence ratio, the gradient of its own logprob."""
    log_ratio = (x.logprobs - x.old_logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    seq_log_ratio = turn_mean(log_ratio.detach(), x.loss_mask, x.turn_ids)  # (B, T)
    token_log_ratio = seq_log_ratio + x.logprobs - x.logprobs.detach()
    return _clipped_objective(torch.exp(token_log_ratio), x.advantages, x.loss_mask, clip)


@register_aggregation("token-mean")
def token_mean(values: torch.Tensor, loss_mask: torch.Tensor, turn_ids: torch.Tensor, scale: LossScale) -> torch.Tensor:
    """Σ_tokens v·m / (number of trained tokens in the minibatch) — every token weighs the
    same (DAPO, arXiv 2503.14476)."""
    return (values * loss_mask).sum() / scale.tokens


@register_aggregation("seq-mean-token-mean")
def seq_mean_token_mean(values: torch.Tensor, loss_mask: torch.Tensor, turn_ids: torch.Tensor, scale: LossScale) -> torch.Tensor:
    """Mean over turns of each turn's token mean: Σ_turns (Σ_t v·m / n_turn) / (number of
    turns in the minibatch) — the original GRPO weighting (arXiv 2402.03300)."""
    sums, counts, _, _ = _turn_sums(values, loss_mask, turn_ids)
    return (sums / counts.clamp(min=1.0)).sum() / scale.turns


@register_aggregation("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(values: torch.Tensor, loss_mask: torch.Tensor, turn_ids: torch.Tensor, scale: LossScale) -> torch.Tensor:
    """Dr.GRPO (arXiv 2503.20783): each turn's token *sum* divided by a constant
    (``norm_tokens``, the maximum response length) instead of its length, averaged over the
    turns of the minibatch: Σ_tokens v·m / (turns · norm_tokens)."""
    return (values * loss_mask).sum() / (scale.turns * scale.norm_tokens)


@register_aggregation("episode-mean-token-mean")
def episode_mean_token_mean(values: torch.Tensor, loss_mask: torch.Tensor, turn_ids: torch.Tensor,
                            scale: LossScale) -> torch.Tensor:
    """Mean over episodes of each episode's token mean: Σ_episodes (Σ_{its tokens} v·m / n_e) /
    (episodes in the minibatch) — every episode weighs the same however many turns and tokens
    it has (verl's seq-mean-token-mean when one row holds a whole trajectory).

    Raises:
        ValueError: the batch carries no episode index (``build_batch(episodes=...)``).
    """
    if scale.episode_tokens is None:
        raise ValueError("aggregation 'episode-mean-token-mean' needs the episode of every turn; "
                         "build the batch with build_batch(..., episodes=<episode id per turn>)")
    return (values * loss_mask / scale.episode_tokens.clamp(min=1.0)).sum() / scale.episodes


@KL_ESTIMATORS.decorator("k1")
def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = logπ − logπ_ref (unbiased for KL(π‖π_ref) on samples of π, high variance)."""
    return logprobs - ref_logprobs


@KL_ESTIMATORS.decorator("k2")
def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = ½ (logπ − logπ_ref)² (biased, low variance; Schulman 2020, "Approximating KL")."""
    return 0.5 * (logprobs - ref_logprobs) ** 2


@KL_ESTIMATORS.decorator("k3")
def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = exp(d) − d − 1 with d = logπ_ref − logπ (unbiased, ≥ 0; GRPO's KL term,
    arXiv 2402.03300). ``d`` is clamped to ±20 to stay finite."""
    d = (ref_logprobs - logprobs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return torch.exp(d) - d - 1.0
