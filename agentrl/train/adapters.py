"""Extra LoRA adapters on the policy's base model, and per-turn log-probabilities under them: what
the model-based step scorers (OPRL's PRM, StepOPSD's stale teacher; ALGORITHMS.md Part III) share.

An extra adapter is a peft adapter added next to the policy's own (``"default"``) with the same
``LoraConfig``; its B matrices start at zero, so before it trains it computes exactly the base
model. ``use_adapter`` makes it the active one for a forward and always switches back: peft's
``set_adapter`` also moves ``requires_grad`` to the active adapter, so outside the block the
policy's parameters are the only trainable ones (the policy optimizer, its checkpoints and the
engine's merged weights never see an extra adapter).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np
import torch

from agentrl.config import ConfigError
from agentrl.llm.constrained import constraint_masks
from agentrl.llm.grammar import grammar_masks
from agentrl.types import Turn
from agentrl.update.batch import TrainBatch, build_batch, model_device
from agentrl.update.logprobs import batch_logprobs, forward_token_stats

__all__ = ["POLICY_ADAPTER", "add_adapter", "use_adapter", "adapter_parameters", "named_adapter_parameters",
           "copy_adapter", "turns_batch",
           "row_logprobs", "row_sums", "weighted_backward"]

#: peft's name of the policy's own adapter.
POLICY_ADAPTER = "default"


def add_adapter(model: torch.nn.Module, name: str, who: str) -> list[torch.nn.Parameter]:
    """Add adapter ``name`` to the peft ``model`` with the policy adapter's config (B = 0: the base
    model until it trains) and return its parameters (frozen: ``requires_grad`` False outside
    ``use_adapter``). ``who``: the scorer, for messages.

    Raises:
        ConfigError: ``model`` has no LoRA adapters (``policy.lora`` null: full fine-tuning, whose
            base weights drift under any adapter added to them), or already has ``name``.
    """
    cfg = getattr(model, "peft_config", None)
    if not isinstance(cfg, dict) or POLICY_ADAPTER not in cfg or not hasattr(model, "add_adapter"):
        raise ConfigError(f"{who} is a second LoRA adapter on the policy's base model, but the policy is fully "
                          "fine-tuned (policy.lora is null), so the base would drift under it; set policy.lora "
                          "(e.g. {rank: 16, alpha: 32}) or pick another estimator")
    if name in cfg:
        raise ConfigError(f"{who}: the policy model already has an adapter named {name!r}")
    model.add_adapter(name, copy.deepcopy(cfg[POLICY_ADAPTER]))
    model.set_adapter(POLICY_ADAPTER)  # add_adapter leaves the active one; be explicit about requires_grad
    return adapter_parameters(model, name)


def named_adapter_parameters(model: torch.nn.Module, name: str) -> dict[str, torch.nn.Parameter]:
    """``{parameter name: parameter}`` of adapter ``name`` (``...lora_A.<name>.weight`` / ``lora_B``),
    in model order (what a scorer saves and loads)."""
    return {n: p for n, p in model.named_parameters() if f".{name}." in n and ".lora_" in n}


def adapter_parameters(model: torch.nn.Module, name: str) -> list[torch.nn.Parameter]:
    """The parameters of adapter ``name``, in model order (``named_adapter_parameters``)."""
    return list(named_adapter_parameters(model, name).values())


def copy_adapter(model: torch.nn.Module, src: str, dst: str) -> None:
    """Overwrite adapter ``dst``'s weights with adapter ``src``'s (a stale snapshot, bit-exact)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if f".{dst}." in n and ".lora_" in n:
                p.copy_(model.get_parameter(n.replace(f".{dst}.", f".{src}.")))


@contextmanager
def use_adapter(model: torch.nn.Module, name: str) -> Iterator[None]:
    """Make adapter ``name`` the active one (and its parameters the trainable ones) inside the
    block; the policy adapter is active again afterwards, also when the block raises."""
    model.set_adapter(name)
    try:
        yield
    finally:
        model.set_adapter(POLICY_ADAPTER)


def turns_batch(turns: Sequence[Turn], renderer, pad_id: int, prompts: Sequence[np.ndarray] | None = None
                ) -> TrainBatch:
    """A padded batch with one row per turn (row i = ``turns[i]``): the stored prompt (or
    ``prompts[i]``, e.g. a teacher context) followed by the stored completion ids, with the
    turn's constrained-decoding ids / grammar masks so log-probs are renormalised exactly as
    when it was sampled. Loss mask = the completion tokens."""
    prompt_ids = [t.prompt_ids for t in turns] if prompts is None else list(prompts)
    return build_batch(prompt_ids, [t.completion_ids for t in turns], [t.completion_logprobs for t in turns],
                       np.zeros(len(turns)), pad_id=pad_id, allowed=constraint_masks(turns, renderer),
                       grammar=grammar_masks(turns, renderer))


def row_logprobs(model: torch.nn.Module, batch: TrainBatch, micro_batch: int, share_prefix: bool = False,
                 temperature: float = 1.0) -> torch.Tensor:
    """(B, T) float32 log-probs at ``temperature`` of the completion tokens of ``batch`` (0
    elsewhere), no gradient, ``micro_batch`` rows per forward, under the active adapter;
    ``share_prefix`` (``update.share_prefix``): a micro-batch's shared prompt prefix runs once."""
    with torch.no_grad():
        return batch_logprobs(model, batch, micro_batch=micro_batch, temperature=temperature, loss_only=True,
                              share_prefix=share_prefix)


def row_sums(token_values: torch.Tensor, batch: TrainBatch) -> np.ndarray:
    """float64[B]: the sum over each row's completion tokens of ``token_values`` (B, T)."""
    return (token_values.double() * batch.loss_mask.double()).sum(1).numpy()


def weighted_backward(model: torch.nn.Module, batch: TrainBatch, weights: np.ndarray, micro_batch: int,
                      share_prefix: bool = False) -> None:
    """Accumulate into the active adapter's ``.grad`` the gradient of Σ_i weights[i] · Σ_tokens
    log π(y_k | ...) over the rows of ``batch`` (float64[B] ``weights``; rows with weight 0 are
    skipped), ``micro_batch`` rows per forward + backward. With ``weights`` = ∂L/∂(row sum) this
    is the exact gradient of any loss L of the rows' log-prob sums (the chain rule), whatever the
    micro-batching. ``share_prefix``: as ``row_logprobs`` (the gradient still reaches every row).
    """
    device = model_device(model)
    rows = np.flatnonzero(weights != 0.0)
    was_training = model.training
    model.eval()  # no dropout: the same function as the no-grad scoring forward
    try:
        for start in range(0, rows.size, micro_batch):
            sel = torch.as_tensor(rows[start:start + micro_batch])
            mb = batch.select(sel)
            attn = mb.attention_mask
            length = max(int(attn.sum(1).max().item()), 1)
            keep = (mb.loss_mask[:, :length] > 0).to(device)
            gm = None if mb.grammar_mask is None else mb.grammar_mask.to(device)  # select trimmed it to `length`
            lp = forward_token_stats(model, mb.input_ids[:, :length].to(device), attn[:, :length].to(device),
                                     allowed_ids=None if mb.allowed_ids is None else mb.allowed_ids[:, :length].to(device),
                                     token_mask=keep, grammar_mask=gm, share_prefix=share_prefix).logprobs
            w = torch.as_tensor(weights[rows[start:start + micro_batch]], dtype=torch.float32, device=device)
            ((lp * keep).sum(1) * w).sum().backward()
    finally:
        model.train(was_training)
