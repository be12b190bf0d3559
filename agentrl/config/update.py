"""The ``update`` config section (``UpdateConfig``): the policy-gradient step, the off-policy
correction, the critic of turn-PPO and master weights.

Kept apart from ``agentrl.config.sections`` (which embeds it in ``Config`` and re-exports it) so
each module stays one screenful of sections. Layer L0: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from agentrl.config.errors import check as _check
from agentrl.config.errors import check_min as _check_min


@dataclass(frozen=True)
class UpdateConfig:
    """``update``: the policy-gradient step (``agentrl.update``).

    ``loss`` names a registered policy loss (``ppo_clip``, ``gspo``); ``clip_low`` /
    ``clip_high`` bound the ratio to [1 − clip_low, 1 + clip_high] (DAPO's clip-higher,
    arXiv 2503.14476); ``clip_c`` enables dual-clip (arXiv 1912.09729, > 1). ``epochs``
    passes over each iteration's batch, ``minibatch`` rows per optimizer step (0 = all),
    ``micro_batch`` rows per forward pass (gradient accumulation in between), or with ``micro_batch_tokens``
    N > 0 rows packed without padding, ≤ N tokens per pass, even over ranks (``agentrl.update.packing``;
    with ``share_prefix`` rows of one task share a pack and their common prefix is in it once).
    ``aggregation`` (one row per turn, so it decides how much a turn and an episode weigh):
    ``token-mean`` (every trained token the same: an N-turn episode weighs ~N× a 1-turn one) |
    ``seq-mean-token-mean`` (every turn the same, whatever its length: still N× per episode) |
    ``seq-mean-token-sum-norm`` (Dr.GRPO, arXiv 2503.20783: token sums / ``sum_norm_tokens``,
    defaulting to ``policy.max_tokens``; weight ∝ tokens, N× per episode) |
    ``episode-mean-token-mean`` (every episode the same; inside it every token the same).
    ``kl_coef`` > 0 adds a KL penalty to the frozen reference (``k1`` | ``k2`` | ``k3``) in
    ``agentrl.update.step.update``; the trainer loads no reference model yet, so ``agentrl.train``
    refuses it when the config is checked.
    ``pack`` puts prefix-consistent turns of one episode into one sequence. ``share_prefix``
    runs identical rows of a micro-batch once and the prompt prefix that all its rows share once
    per micro-batch (``agentrl.update.shared_prefix``: turns of one task; the same logprobs and
    gradients to float rounding, for window prompts that ``pack`` cannot join); for turn-PPO's
    critic it also runs each distinct prompt of the whole batch once (``micro_batch`` then counts
    distinct prompts; ``agentrl.update.critic``). ``critic_lr``, ``critic_minibatch``,
    ``critic_top_n_layers`` and ``value_clip`` configure the turn-level critic of turn-PPO
    (``critic_top_n_layers`` n: only the top n transformer layers, the final norm and the
    value head train — the layers below run without autograd state, so a critic step costs
    about what a LoRA-on-the-top-n policy step does; null: the whole copy trains;
    ``critic_minibatch`` k > 0: an optimizer step per k distinct prompts — runs of the sorted
    distinct prompts in a seeded order, the same with or without ``share_prefix`` — so each of
    the ``epochs`` passes takes several steps at the cost of one; 0: one step per pass; the
    critic's weight decay is ``weight_decay``).

    Rollout (off-policy) correction (``agentrl.update.correction``): ``rollout_correction``
    ``auto`` (default: ``tis`` where the sampler is not the trained model itself —
    ``policy.engine`` other than ``hf``, a half-precision ``policy.dtype``, or engine workers
    ``rollout.engines`` ≥ 1 — else ``none``; resolved when the config is loaded, so config.yaml
    records the value in effect) | ``none`` (π_old = the engine's behaviour logprobs, no
    weight) | ``tis`` | ``mis`` | ``icepop``: the last three recompute π_old with the trainer at
    the start of each update phase and weight each token's policy loss by w = f(ρ),
    ρ = π_old/π_behav (detached): ``tis``
    min(ρ, C); ``mis`` ρ if ρ ≤ C else 0; ``icepop`` ρ if α ≤ ρ ≤ C else 0, with
    C = ``correction_high`` (> 1) and α = ``correction_low`` (in (0, 1), icepop only).
    ``correction_level``: ``token`` (one ρ per token) | ``sequence`` (one ρ per turn, the
    product of its tokens' ρ, on all its tokens). Masked tokens stay in the denominators.
    Every mode, ``none`` included, logs ``correction/kl`` (the trainer–sampler KL, measured by
    one forward pass without gradients per update phase). ``sampler_kl_every`` k (``none``
    only): that probe on every k-th update phase (iterations 1, 1 + k, ...; default 1, every
    phase), 0 never — for a sampler that *is* the trained model (fp32 ``hf`` in one process, no
    engine workers), where the KL is 0 by construction and the probe costs a forward pass over
    the trained rows (``correction/*`` metrics then appear only on probed iterations). The modes
    that correct need π_old every phase: ``tis`` / ``mis`` / ``icepop`` with a value other than 1
    is a ConfigError.

    ``master_weights``: ``auto`` (default: ``on`` for full fine-tuning with a bfloat16/float16
    ``policy.dtype``, else ``off``; resolved when the config is loaded) | ``on``: the trained
    parameters are float32 masters computing in ``policy.dtype`` (FSDP2 mixed precision, or
    autocast in one process; engines get ``policy.dtype`` weights), so AdamW steps below half a
    bf16 spacing accumulate (``agentrl.update.master_weights``) | ``off``: train in ``policy.dtype``.

    ``audit`` (default true): the credit audit (``agentrl.update.audit``) checks every micro-batch
    right before the loss — each trained token carries its own turn's (or span's) advantage, no
    token outside the loss mask carries any, every turn trains exactly once per optimizer step —
    and stops the run with one line naming the row, episode and turn on a mismatch; ``false``
    skips it (its cost is logged as ``audit/seconds``).
    """

    loss: str = "ppo_clip"
    clip_low: float = 0.2
    clip_high: float = 0.2
    clip_c: Optional[float] = None
    epochs: int = 1
    minibatch: int = 0
    micro_batch: int = 4
    micro_batch_tokens: int = 0
    lr: float = 1e-5
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    kl_coef: float = 0.0
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    entropy_coef: float = 0.0
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm",
                         "episode-mean-token-mean"] = "token-mean"
    sum_norm_tokens: Optional[int] = None
    pack: bool = False
    share_prefix: bool = False
    gradient_checkpointing: bool = False
    critic_lr: float = 1e-5
    critic_minibatch: int = 0
    critic_top_n_layers: Optional[int] = None
    value_clip: Optional[float] = None
    rollout_correction: Literal["auto", "none", "tis", "mis", "icepop"] = "auto"
    correction_level: Literal["token", "sequence"] = "token"
    correction_high: float = 2.0
    correction_low: float = 0.5
    sampler_kl_every: int = 1
    master_weights: Literal["auto", "on", "off"] = "auto"
    audit: bool = True

    def __post_init__(self) -> None:
        _check(0 <= self.clip_low < 1, f"update.clip_low must be in [0, 1), got {self.clip_low!r}")
        _check_min("update.clip_high", self.clip_high, 0)
        _check_min("update.clip_c", self.clip_c, 1, "dual-clip", strict=True, null_ok=True)
        _check_min("update.epochs", self.epochs, 1)
        _check_min("update.micro_batch", self.micro_batch, 1)
        _check_min("update.minibatch", self.minibatch, 0, "0 = whole batch")
        _check_min("update.micro_batch_tokens", self.micro_batch_tokens, 0, "0 = padded micro-batches of rows")
        _check_min("update.lr", self.lr, 0, strict=True)
        _check_min("update.critic_lr", self.critic_lr, 0, strict=True)
        _check_min("update.weight_decay", self.weight_decay, 0)
        _check_min("update.grad_clip", self.grad_clip, 0, "0 = off")
        _check_min("update.kl_coef", self.kl_coef, 0, "0 = no reference model")
        _check_min("update.sum_norm_tokens", self.sum_norm_tokens, 1, null_ok=True)
        _check_min("update.critic_minibatch", self.critic_minibatch, 0, "prompts per critic step; 0 = the whole batch")
        _check_min("update.value_clip", self.value_clip, 0, strict=True, null_ok=True)
        _check_min("update.critic_top_n_layers", self.critic_top_n_layers, 1, "the critic's top layers that train; "
                   "null: all of them", null_ok=True)
        _check(self.correction_high > 1, f"update.correction_high must be > 1 (the cap C of tis/mis, the upper bound "
               f"β of icepop; ρ = 1 is on-policy), got {self.correction_high}")
        _check_min("update.sampler_kl_every", self.sampler_kl_every, 0, "0 = never probe the sampler's KL")
        _check(self.sampler_kl_every == 1 or self.rollout_correction in ("auto", "none"),
               f"update.sampler_kl_every: {self.sampler_kl_every} with rollout_correction: "
               f"{self.rollout_correction}; a correcting mode recomputes pi_old on every update phase, so leave "
               f"sampler_kl_every at 1 or set rollout_correction: none")
        _check(0 < self.correction_low < 1, f"update.correction_low must be in (0, 1) (the lower bound α of icepop), "
               f"got {self.correction_low}")
