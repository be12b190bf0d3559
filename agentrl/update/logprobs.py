"""Per-token logprobs and entropy from a teacher-forced forward pass.

Logits are cast to float32 before the softmax (bf16 logsumexp loses ~2 digits), divided by
the sampling temperature (so the ratio compares the policy that sampled with the one being
trained) and read at shifted positions: the logprob of token ``input_ids[:, t]`` comes from
the logits at ``t − 1``. Column 0 has no predecessor and is 0 (never in the loss mask, since
every prompt has at least one token). Training logprobs always come from raw logits,
never from ``generate(output_scores=True)`` (MODELS.md decision 6).

Constrained decoding (``agentrl.llm.constrained``): at positions where ``allowed_ids``
(B, T, A) lists ids, the log-softmax and the entropy are taken over those ids only (the
distribution the engine sampled from, renormalised); other positions are unchanged.
Grammar-constrained turns (``agentrl.llm.grammar``) carry bitmasks instead
(``grammar_mask``: ``agentrl.update.bitmask.BatchMasks``), renormalised the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrl.update.batch import TrainBatch, model_device
from agentrl.update.bitmask import BatchMasks
from agentrl.update.shared_prefix import common_prefix, duplicate_rows
from agentrl.update.token_head import TokenPairs, stats_forward, token_entropy, token_logprobs

__all__ = ["TokenStats", "logprobs_from_logits", "entropy_from_logits", "forward_token_stats", "batch_logprobs"]


@dataclass(frozen=True)
class TokenStats:
    """Per-token outputs of one forward pass, aligned with ``input_ids`` columns.

    Attributes:
        logprobs: (B, T) float32, log π(input_ids[:, t] | input_ids[:, :t]); column 0 is 0.
        entropy: (B, T) float32 entropy (nats) of the distribution that predicted token t,
            or None when not requested; column 0 is 0.
    """

    logprobs: torch.Tensor
    entropy: torch.Tensor | None


def _pad_first(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x.new_zeros(x.shape[0], 1), x], dim=1)


def _shifted(allowed_ids: torch.Tensor | None, grammar_mask: BatchMasks | None) -> dict:
    """The constraint keywords of ``token_logprobs`` for columns 1..T-1."""
    return dict(allowed=None if allowed_ids is None else allowed_ids[:, 1:],
                gindex=None if grammar_mask is None else grammar_mask.index[:, 1:],
                bits=None if grammar_mask is None else grammar_mask.bits)


def logprobs_from_logits(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0,
                         allowed_ids: torch.Tensor | None = None,
                         grammar_mask: BatchMasks | None = None) -> torch.Tensor:
    """Shifted token logprobs: (B, T, V) logits, (B, T) int64 ids → (B, T) float32.

    ``out[:, t] = log_softmax(logits[:, t-1] / temperature)[input_ids[:, t]]``, ``out[:, 0] = 0``.
    Computed as ``gathered − logsumexp`` in float32 (no (B, T, V) log-softmax tensor kept).
    With ``allowed_ids`` (B, T, A) int64, the logsumexp at constrained positions runs over
    the allowed ids only (renormalised logprobs of constrained decoding); with
    ``grammar_mask`` (index (B, T) aligned with ``input_ids``) likewise over its bitmasks.
    """
    z = logits[:, :-1].float() / temperature  # (B, T-1, V)
    return _pad_first(token_logprobs(z, input_ids[:, 1:], **_shifted(allowed_ids, grammar_mask)))


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0,
                        allowed_ids: torch.Tensor | None = None,
                        grammar_mask: BatchMasks | None = None) -> torch.Tensor:
    """Shifted entropy in nats: (B, T, V) logits → (B, T) float32; ``out[:, t]`` is the
    entropy of the distribution predicting token t (over the allowed ids where
    ``allowed_ids`` (B, T, A) constrains it); ``out[:, 0] = 0``."""
    z = logits[:, :-1].float() / temperature
    return _pad_first(token_entropy(z, **_shifted(allowed_ids, grammar_mask)))


def forward_token_stats(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                        temperature: float = 1.0, with_entropy: bool = False,
                        entropy_grad: bool = False, allowed_ids: torch.Tensor | None = None,
                        token_mask: torch.Tensor | None = None, grammar_mask: BatchMasks | None = None,
                        share_prefix: bool = False, chunk: int | None = None,
                        position_ids: torch.Tensor | None = None) -> TokenStats:
    """One forward pass of a causal LM (HF ``...ForCausalLM`` or peft-wrapped) on a batch.

    The LM head runs only at the positions asked for, in chunks of ``chunk`` tokens that the
    backward recomputes one at a time (``agentrl.update.token_head``): no (B, T, V) logits.
    Args:
        model: an HF causal LM (``get_decoder()``, ``get_output_embeddings()``), peft-wrapped
            or FSDP2-sharded or neither.
        input_ids, attention_mask: (B, T) int64, right padded.
        temperature: sampling temperature the behaviour policy used (> 0).
        with_entropy: also return the per-token entropy.
        entropy_grad: keep the entropy in the autograd graph (for an entropy bonus);
            otherwise it is computed detached, for logging only.
        allowed_ids: optional (B, T, A) int64 (``TrainBatch.allowed_ids``): renormalise
            logprobs and entropy over these ids at constrained positions.
        grammar_mask: optional ``BatchMasks`` (``TrainBatch.grammar_mask``): the same over
            grammar bitmasks.
        token_mask: optional (B, T) mask of the tokens whose stats are needed (e.g. the loss
            mask). The LM head and the softmax then run only at each row's own masked
            positions: for multi-turn prompts with short completions most of the (T, V)
            logits — the largest cost of a small-model update — are never formed. Other
            positions are returned as 0. None: every column t ≥ 1.
        share_prefix: with ``token_mask``, run identical rows once (``duplicate_rows``: their
            stats are gathered back, so each copy's loss still reaches the shared forward's
            gradient), then the tokens every row shares at the start once and the rows'
            suffixes on its key/value cache (``agentrl.update.shared_prefix``; the same
            logprobs to float rounding, less compute when the rows are turns of one task).
            The prefix part is off under gradient checkpointing (it drops the cache) and, with
            gradients, on an FSDP2-sharded model (the prefix's key/value cache carries the
            gradient into layers whose pre-backward hooks sit on their outputs, so their
            resharded weights would be gone in backward); rows with grammar bitmasks are not
            deduplicated.
        chunk: tokens per LM-head call (default: ``token_head.CHUNK_BYTES`` of float32 logits).
        position_ids: optional (B, T) int64 for packed rows (``agentrl.update.packing``):
            the model gets them with ``attention_mask=None``, and transformers reads each
            restart at 0 as a sequence boundary (block-diagonal causal mask for sdpa/eager,
            flash-attention varlen). ``share_prefix`` is then ignored.
    Returns:
        ``TokenStats`` with (B, T) float32 tensors (gradients flow through ``logprobs``
        when grad mode is on).
    Raises:
        ValueError: a model whose logits are not its output embedding of the final hidden
            state (``token_head.OutputHead``), or ``chunk`` < 1.
    """
    share_prefix = share_prefix and position_ids is None
    dup = duplicate_rows(input_ids, attention_mask, allowed_ids) if share_prefix and token_mask is not None \
        and grammar_mask is None else None
    if dup is not None:  # one forward per distinct row; a kept position of any copy is kept
        first, inverse = dup
        keep = torch.zeros((first.numel(), token_mask.shape[1]), dtype=torch.long, device=token_mask.device)
        keep = keep.index_add_(0, inverse, token_mask.long()) > 0
        sub = forward_token_stats(model, input_ids[first], attention_mask[first], temperature=temperature,
                                  with_entropy=with_entropy, entropy_grad=entropy_grad,
                                  allowed_ids=None if allowed_ids is None else allowed_ids[first],
                                  token_mask=keep, share_prefix=True, chunk=chunk)
        return TokenStats(logprobs=sub.logprobs[inverse],
                          entropy=None if sub.entropy is None else sub.entropy[inverse])
    pairs = TokenPairs.of(input_ids, token_mask, allowed_ids, grammar_mask)
    shared = 0
    if share_prefix and token_mask is not None and not getattr(model, "is_gradient_checkpointing", False) \
            and not (torch.is_grad_enabled() and _fsdp_sharded(model)):
        shared = max(0, min(common_prefix(input_ids, attention_mask), int(pairs.cols.min()) - 1))
    out = stats_forward(model, input_ids, attention_mask, pairs, prefix=shared, temperature=temperature,
                        with_entropy=with_entropy, entropy_grad=entropy_grad, chunk=chunk,
                        position_ids=position_ids)
    return TokenStats(logprobs=pairs.scatter(out.logprobs, input_ids.shape),
                      entropy=None if out.entropy is None else pairs.scatter(out.entropy, input_ids.shape))


def _fsdp_sharded(model: torch.nn.Module) -> bool:
    """True for a model wrapped by FSDP2's ``fully_shard`` (``agentrl.distributed.parallelize``)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


@torch.no_grad()
def batch_logprobs(model: torch.nn.Module, batch: TrainBatch, *, micro_batch: int = 4,
                   temperature: float = 1.0, loss_only: bool = False, share_prefix: bool = False) -> torch.Tensor:
    """Logprobs of every token of ``batch`` without gradients, ``micro_batch`` rows per
    forward (e.g. the frozen reference for the KL term, or a recompute of the old policy).
    ``loss_only``: only at loss-mask tokens (the LM head runs at those columns only, as in
    the update's forward; other tokens get 0). ``share_prefix`` (with ``loss_only``): identical
    rows and the prefix a micro-batch shares run once (``forward_token_stats``; the same
    logprobs to float rounding).

    Returns:
        (B, T) float32 tensor aligned with ``batch.input_ids``, 0 where ``attention_mask``
        is 0 and in column 0.
    Raises:
        ValueError: ``micro_batch`` < 1.
    """
    if micro_batch < 1:
        raise ValueError(f"micro_batch must be >= 1 rows, got {micro_batch}")
    was_training = model.training
    model.eval()
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    device = model_device(model)
    try:
        for start in range(0, batch.num_rows, micro_batch):
            rows = slice(start, start + micro_batch)
            attn = batch.attention_mask[rows]
            length = max(int(attn.sum(1).max().item()), 1)
            ids, attn = batch.input_ids[rows, :length].to(device), attn[:, :length].to(device)
            allowed = None if batch.allowed_ids is None else batch.allowed_ids[rows, :length].to(device)
            keep = (batch.loss_mask[rows, :length] > 0).to(device) if loss_only else None
            gm = None if batch.grammar_mask is None else batch.grammar_mask.select(torch.arange(
                rows.start, min(rows.stop, batch.num_rows)), length).to(device)
            lp = forward_token_stats(model, ids, attn, temperature=temperature, allowed_ids=allowed,
                                     token_mask=keep, grammar_mask=gm, share_prefix=share_prefix and loss_only).logprobs
            out[rows, :length] = (lp * attn).cpu()
    finally:
        model.train(was_training)
    return out
