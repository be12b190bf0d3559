"""agentrl.update — the policy update (layer L3, the only L3 package that imports torch).

Owns: ``TrainBatch`` and ``build_batch`` (turns → padded tensors, loss mask exactly on
sampled tokens, optional packing of prefix-consistent turns), per-token logprobs/entropy
(``logprobs``; the LM head run in chunks at each row's trained tokens: ``token_head``), registered policy losses, aggregations and KL estimators (``losses``), one
optimizer step with micro-batch gradient accumulation (``step``; padding-free packed micro-batches
by token budget, balanced over ranks: ``packing``, with per-row attention: ``varlen_attention``), the rollout (off-policy)
correction: π_old recomputed by the trainer, truncated / masked importance weights
(``correction``: none | tis | mis | icepop), LoRA through peft (``lora``) and the
turn-level critic of turn-PPO (``critic``).

May import: torch, transformers/peft (lazily), NumPy, and agentrl L0 (types, config,
registry). Meets the rest of agentrl only through arrays (token ids, logprobs, advantages).
"""

from agentrl.update.batch import TrainBatch, build_batch, minibatches, model_device, pack_chains
from agentrl.update.correction import CORRECTIONS, Correction, apply_rollout_correction, correction_weights, register_correction
from agentrl.update.critic import CriticStats, TurnCritic, critic_loss, critic_update, turn_values
from agentrl.update.logprobs import TokenStats, batch_logprobs, entropy_from_logits, forward_token_stats, logprobs_from_logits
from agentrl.update.lora import apply_lora, prepare_policy, reference_logprobs
from agentrl.update.losses import (
    AGGREGATIONS, KL_ESTIMATORS, LOSSES, ClipSpec, LossScale, PolicyLossInputs, TokenLoss, register_aggregation,
    register_loss,
)
from agentrl.update.step import UpdateStats, make_optimizer, train_on_batch, update

__all__ = [
    "TrainBatch", "build_batch", "minibatches", "model_device", "pack_chains", "CORRECTIONS", "Correction",
    "apply_rollout_correction", "correction_weights", "register_correction", "CriticStats", "TurnCritic", "critic_loss",
    "critic_update", "turn_values", "TokenStats", "batch_logprobs", "entropy_from_logits", "forward_token_stats",
    "logprobs_from_logits", "apply_lora", "prepare_policy", "reference_logprobs", "AGGREGATIONS", "KL_ESTIMATORS", "LOSSES",
    "ClipSpec", "LossScale", "PolicyLossInputs", "TokenLoss", "register_aggregation", "register_loss",
    "UpdateStats", "make_optimizer", "train_on_batch", "update",
]
