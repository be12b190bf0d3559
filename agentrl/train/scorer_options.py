"""Options of the built-in step scorers (``algorithm.scorers.<name>`` in a config): OPRL's ``prm``
and StepOPSD's ``hindsight`` (ALGORITHMS.md §17.5 and §18.5, the trainer-side rows).

Kept apart from the scorers themselves so the config check reads them without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from agentrl.config.errors import check as _check
from agentrl.config.errors import check_min as _check_min

__all__ = ["PRMOptions", "HindsightOptions"]


@dataclass(frozen=True)
class PRMOptions:
    """``algorithm.scorers.prm``: OPRL's implicit process reward model (arXiv 2509.19199, §17.3).

    ``prm_lr``: the PRM adapter's AdamW learning rate; null = 2 × ``update.lr`` (D-17h); **0 = the
    PRM never trains**, which reproduces the released code (its DPO loss reaches no parameter,
    §17.2: the step reward is then β·log π_init/π_old). ``prm_grad_clip`` (0 = off),
    ``prm_weight_decay``: its optimizer. ``traj_aggregate``: a trajectory's DPO value is the
    ``sum`` of its turns' log-ratios (paper, D-17b) or their ``mean`` (released code).
    ``success_threshold`` θ: a (success, failure) pair needs EpReward(τ+) > θ ≥ EpReward(τ−).
    ``score_after_update``: score with the PRM after its step (paper, D-17c; one more no-grad
    forward per turn) or with the pre-step forward (released code). ``reference``: π_θold of the
    log-ratio from the ``trainer``'s own forward with the policy adapter (default: ℓ is exactly 0
    while both adapters are at their initialisation, and the sampler's kernel noise never enters
    a batch-normalised step reward) or the ``stored`` behaviour log-probs (one forward per turn
    fewer; the spec's proposal for a sampler that is the trained model). ``micro_batch``: rows per
    PRM forward (null = ``update.micro_batch``)."""

    prm_lr: Optional[float] = None
    prm_grad_clip: float = 10.0
    prm_weight_decay: float = 0.0
    traj_aggregate: Literal["sum", "mean"] = "sum"
    success_threshold: float = 0.0
    score_after_update: bool = True
    reference: Literal["trainer", "stored"] = "trainer"
    micro_batch: Optional[int] = None

    def __post_init__(self) -> None:
        _check_min("algorithm.scorers.prm.prm_lr", self.prm_lr, 0, "0 = the PRM never trains (released code)",
                   null_ok=True)
        _check_min("algorithm.scorers.prm.prm_grad_clip", self.prm_grad_clip, 0, "0 = off")
        _check_min("algorithm.scorers.prm.prm_weight_decay", self.prm_weight_decay, 0)
        _check_min("algorithm.scorers.prm.micro_batch", self.micro_batch, 1, null_ok=True)


@dataclass(frozen=True)
class HindsightOptions:
    """``algorithm.scorers.hindsight``: StepOPSD's hindsight teacher (arXiv 2605.27140, §18.3).

    ``teacher``: ``stale`` (paper: a frozen copy of the policy's LoRA adapter, refreshed every
    ``teacher_refresh`` iterations; at iteration 0 the initial policy) | ``current`` (RLSD's
    choice, D-18e: the sampling policy's own weights, a pure context effect). ``segment``: the
    scored tokens, ``action_only`` (the completion tokens of the parsed action; the whole
    completion when the response has no action tag) | ``completion``. ``max_hindsight_actions``:
    lines of the successful sibling's actions in the hindsight block. ``success_threshold``: success
    means EpReward > it. ``max_prompt_tokens``: the teacher prompt is cut from the left to this
    many tokens (null = the engine's context minus the completion). ``micro_batch``: rows per
    teacher forward (null = ``update.micro_batch``)."""

    teacher: Literal["stale", "current"] = "stale"
    teacher_refresh: int = 10
    segment: Literal["action_only", "completion"] = "action_only"
    max_hindsight_actions: int = 30
    success_threshold: float = 0.0
    max_prompt_tokens: Optional[int] = None
    micro_batch: Optional[int] = None

    def __post_init__(self) -> None:
        _check_min("algorithm.scorers.hindsight.teacher_refresh", self.teacher_refresh, 1)
        _check_min("algorithm.scorers.hindsight.max_hindsight_actions", self.max_hindsight_actions, 0)
        _check_min("algorithm.scorers.hindsight.max_prompt_tokens", self.max_prompt_tokens, 1, null_ok=True)
        _check_min("algorithm.scorers.hindsight.micro_batch", self.micro_batch, 1, null_ok=True)
        _check(self.teacher in ("stale", "current"), f"algorithm.scorers.hindsight.teacher must be stale or current, "
               f"got {self.teacher!r}")
