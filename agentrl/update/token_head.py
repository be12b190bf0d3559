"""The LM head at each row's own completion positions, in chunks (issue 36).

``forward_token_stats`` used to ask the model for (B, K, V) float logits over the **union**
of the rows' completion columns (HF ``logits_to_keep``) and take the log-softmax and the
entropy of all of them: with long prompts of different lengths and short completions most
of those columns belong to another row, and at V = 152k each column costs 600 KB per row,
several times over (the float32 copy, the softmax, the entropy's terms, and all of it saved
for backward). Here the head runs only on the N (row, column) pairs the rows need:

1. ``TokenPairs``: the pairs (b, t), t ≥ 1, where ``token_mask`` is set, with their target
   ids and constraint masks;
2. ``stats_forward``: one forward of the model (plain, or on a shared prefix's cache) with
   a cheap ``logits_to_keep`` (no column); a hook on its decoder keeps the final (post-norm)
   hidden states (B, L, H), and a forward hook on the model itself runs ``head_stats`` on the
   N selected rows **inside** the model's forward and returns its results as the forward's
   output. Under FSDP2 the root's parameters (embeddings, final norm, LM head) are gathered
   there, and FSDP registers its pre-backward hook on these outputs, so the backward gathers
   them again before it reaches the head; a peft wrapper and gradient checkpointing are
   unchanged (the head is the model's own output-embedding module);
3. ``head_stats``: ``OutputHead`` (the output embedding, tied or not, with the model's logit
   scaling / soft-capping) on chunks of ``chunk`` tokens, each under
   ``torch.utils.checkpoint`` so that the backward recomputes one chunk's (chunk, V) logits
   at a time instead of keeping all N × V.

The per-token formulas are ``token_logprobs`` / ``token_entropy`` (float32, over the
allowed ids or grammar bitmask where a position is constrained), shared with
``agentrl.update.logprobs.logprobs_from_logits``; the values equal the union-column path's
to float rounding (tests/update/test_token_head.py).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterator

import torch
from torch.utils.checkpoint import checkpoint

from agentrl.llm.step_logprobs import hf_model
from agentrl.update.bitmask import BatchMasks, masked_logsumexp
from agentrl.update.varlen_attention import packed_attention

__all__ = ["CHUNK_BYTES", "TokenPairs", "token_logprobs", "token_entropy", "OutputHead", "head_stats",
           "stats_forward"]

#: Float32 logits of one head chunk, bytes (the chunk is ``CHUNK_BYTES // (4 V)`` tokens).
CHUNK_BYTES = 64 << 20
_NEG = -1e30  # finite "minus infinity" for padded allowed slots (keeps gradients NaN-free)


def _restricted(z: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., V) logits at (..., A) allowed ids (−1 = padding) → (..., A) logits (padded slots
    ``_NEG``) and (...) bool "this position is constrained"."""
    valid = allowed >= 0
    return z.gather(-1, allowed.clamp(min=0)).masked_fill(~valid, _NEG), valid.any(-1)


def token_logprobs(z: torch.Tensor, ids: torch.Tensor, allowed: torch.Tensor | None = None,
                   gindex: torch.Tensor | None = None, bits: torch.Tensor | None = None) -> torch.Tensor:
    """``z[..., ids] − logsumexp(z)``: (..., V) float32 logits (already / temperature), (...)
    int64 ids → (...) float32. Where ``allowed`` (..., A) lists ids the logsumexp runs over
    them only; where ``gindex`` (...) ≥ 0, over the bitmask ``bits[gindex]`` (``BatchMasks``)."""
    picked = z.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    lse = torch.logsumexp(z, dim=-1)
    if allowed is not None:
        za, constrained = _restricted(z, allowed)
        lse = torch.where(constrained, torch.logsumexp(za, dim=-1), lse)
    if gindex is not None:
        got = masked_logsumexp(z, gindex, bits)
        lse = lse if got is None else lse.index_put(got[0], got[1])
    return picked - lse


def token_entropy(z: torch.Tensor, allowed: torch.Tensor | None = None, gindex: torch.Tensor | None = None,
                  bits: torch.Tensor | None = None) -> torch.Tensor:
    """Entropy (nats) of softmax(z): (..., V) float32 → (...) float32, over the allowed ids /
    bitmask where a position is constrained (as ``token_logprobs``)."""
    logp = torch.log_softmax(z, dim=-1)
    ent = -(logp.exp() * logp).sum(-1)
    if allowed is not None:
        za, constrained = _restricted(z, allowed)
        lpa = torch.log_softmax(za, dim=-1)
        ent = torch.where(constrained, -(lpa.exp() * lpa).sum(-1), ent)
    if gindex is not None:
        got = masked_logsumexp(z, gindex, bits, entropy=True)
        ent = ent if got is None else ent.index_put(got[0], got[2])
    return ent


@dataclass(frozen=True)
class TokenPairs:
    """The N (row, column) positions whose token stats a batch needs.

    Attributes:
        rows, cols: (N,) int64; column t ≥ 1 is predicted by the hidden state at t − 1.
        ids: (N,) int64 target ids ``input_ids[rows, cols]``.
        allowed: (N, A) int64 allowed ids (−1 padding) or None.
        gindex: (N,) int64 rows of ``bits`` (−1 = unconstrained) or None; bits: (U, W) int32 or None.
        dummy: True when no position was asked for: one pair (0, 0) (predicted from the last
            column's state) keeps the graph; its values are zeroed.
    """

    rows: torch.Tensor
    cols: torch.Tensor
    ids: torch.Tensor
    allowed: torch.Tensor | None
    gindex: torch.Tensor | None
    bits: torch.Tensor | None
    dummy: bool = False

    @classmethod
    def of(cls, input_ids: torch.Tensor, token_mask: torch.Tensor | None, allowed_ids: torch.Tensor | None = None,
           grammar_mask: BatchMasks | None = None) -> "TokenPairs":
        """Pairs where ``token_mask`` (B, T) is set (every column t ≥ 1 when None), row-major."""
        keep = torch.ones_like(input_ids, dtype=torch.bool) if token_mask is None else token_mask.bool()
        keep = torch.cat([torch.zeros_like(keep[:, :1]), keep[:, 1:]], dim=1)  # column 0 has no predecessor
        rows, cols = torch.nonzero(keep, as_tuple=True)
        dummy = rows.numel() == 0
        if dummy:
            rows, cols = rows.new_zeros(1), rows.new_zeros(1)
        return cls(rows, cols, input_ids[rows, cols], None if allowed_ids is None else allowed_ids[rows, cols],
                   None if grammar_mask is None else grammar_mask.index[rows, cols],
                   None if grammar_mask is None else grammar_mask.bits, dummy)

    def scatter(self, values: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """(N,) values → (B, T) float32 at the pairs, 0 elsewhere (differentiable)."""
        values = values * 0 if self.dummy else values
        return values.new_zeros(shape).index_put((self.rows, self.cols), values)


class OutputHead:
    """The map final hidden state (N, H) → logits (N, V) of an HF causal LM (or peft-wrapped):
    its output-embedding module (tied or not, with any LoRA on it), then the logit scaling the
    model applies after it (Granite ``logits_scaling``, Cohere ``logit_scale``, Gemma
    ``final_logit_softcapping``).

    Attributes:
        vocab: V, the logits' width.
    Raises:
        ValueError: the model has no output embedding, or post-processes its logits in a way
            not listed here (``logits_soft_cap``, ``output_multiplier``, ``unpadded_vocab_size``).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        base = hf_model(model)
        self.lm = base.get_output_embeddings()
        cfg = base.config.get_text_config() if hasattr(base.config, "get_text_config") else base.config
        odd = [a for a in ("logits_soft_cap", "output_multiplier", "unpadded_vocab_size") if getattr(cfg, a, None)]
        if self.lm is None or odd:
            raise ValueError(f"{type(base).__name__}: the update's chunked LM head needs a plain output embedding "
                             f"(got {type(self.lm).__name__}, logit post-processing {odd}); not supported")
        self.scaling = getattr(cfg, "logits_scaling", None)
        self.scale = getattr(base, "logit_scale", None)
        self.cap = getattr(cfg, "final_logit_softcapping", None)
        self.vocab = int(self.lm.weight.shape[0])

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        z = self.lm(h)
        if self.scaling is not None:
            z = z / self.scaling
        if self.scale is not None:
            z = z * self.scale
        if self.cap is not None:
            z = torch.tanh(z / self.cap) * self.cap
        return z


def _chunk_stats(head, bits, temperature: float, with_entropy: bool, entropy_grad: bool, h: torch.Tensor,
                 ids: torch.Tensor, allowed: torch.Tensor | None, gindex: torch.Tensor | None):
    """Logprobs (and entropy) of one chunk: (C, H) hidden → (C,) float32 each."""
    z = head(h).float() / temperature  # (C, V)
    lp = token_logprobs(z, ids, allowed, gindex, bits)
    if not with_entropy:
        return lp, None
    if entropy_grad:
        return lp, token_entropy(z, allowed, gindex, bits)
    with torch.no_grad():
        return lp, token_entropy(z.detach(), allowed, gindex, bits)


def head_stats(head: OutputHead, hidden: torch.Tensor, pairs: TokenPairs, *, temperature: float = 1.0,
               with_entropy: bool = False, entropy_grad: bool = False,
               chunk: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token logprobs (and entropy) at ``pairs`` from their hidden states.

    Args:
        head: ``OutputHead(model)``.
        hidden: (N, H) final hidden states, row n predicting ``pairs.ids[n]``.
        chunk: tokens per head call; default ``CHUNK_BYTES`` of float32 logits. Under grad
            mode each chunk runs under ``torch.utils.checkpoint`` (backward recomputes it).
    Returns:
        ``(logprobs, entropy)``, (N,) float32 (entropy None unless ``with_entropy``; detached
        unless ``entropy_grad``).
    Raises:
        ValueError: ``chunk`` < 1.
    """
    size = chunk if chunk is not None else max(1, CHUNK_BYTES // (4 * head.vocab))
    if size < 1:
        raise ValueError(f"head chunk must be >= 1 token, got {size}")
    fn = partial(_chunk_stats, head, pairs.bits, temperature, with_entropy, entropy_grad)
    lps, ents = [], []
    for s in range(0, hidden.shape[0], size):
        part = slice(s, s + size)
        args = (hidden[part], pairs.ids[part], None if pairs.allowed is None else pairs.allowed[part],
                None if pairs.gindex is None else pairs.gindex[part])
        lp, ent = checkpoint(fn, *args, use_reentrant=False) if torch.is_grad_enabled() else fn(*args)
        lps.append(lp)
        ents.append(ent)
    return torch.cat(lps), None if not with_entropy else torch.cat(ents)


@dataclass
class HeadOutput:
    """What ``stats_forward``'s model call returns: (N,) float32 logprobs and entropy (or None)."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None


@contextmanager
def _head_hooks(model: torch.nn.Module, compute: Callable[[torch.Tensor], HeadOutput]) -> Iterator[None]:
    """While the block runs, ``model``'s forward returns ``compute(last_hidden_state)``
    (computed in its forward hook, before FSDP's post-forward: see the module docstring)."""
    seen: list[torch.Tensor] = []

    def keep(module, args, output) -> None:
        seen.append(output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0])

    def run(module, args, output) -> HeadOutput:
        if len(seen) != 1:
            raise RuntimeError(f"expected one decoder forward inside the model's forward, saw {len(seen)}")
        return compute(seen.pop())

    handles = [hf_model(model).get_decoder().register_forward_hook(keep),
               model.register_forward_hook(run, prepend=True)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def stats_forward(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  pairs: TokenPairs, *, prefix: int = 0, position_ids: torch.Tensor | None = None,
                  **head_kwargs) -> HeadOutput:
    """One forward of ``model`` on a right-padded batch and ``head_stats`` at ``pairs``.

    Args:
        input_ids, attention_mask: (B, T) int64.
        prefix: 0 (plain forward) or the length of a prefix every row shares, run once
            (``agentrl.update.shared_prefix.shared_cache``); every pair's column must be > prefix.
        position_ids: optional (B, T) int64 of packed rows (``agentrl.update.packing``),
            passed with ``attention_mask=None`` (prefix must be 0); sdpa models attend per
            row meanwhile (``agentrl.update.varlen_attention.packed_attention``).
        head_kwargs: ``head_stats`` keywords (temperature, with_entropy, entropy_grad, chunk).
    Returns:
        ``HeadOutput`` with (N,) float32 tensors aligned with ``pairs``.
    """
    from agentrl.update.shared_prefix import shared_cache

    head = OutputHead(model)
    none = torch.zeros(0, dtype=torch.long, device=input_ids.device)  # logits_to_keep: no column

    def compute(hidden: torch.Tensor) -> HeadOutput:  # (B, L, H) → the pairs' stats
        lp, ent = head_stats(head, hidden[pairs.rows, pairs.cols - 1 - prefix], pairs, **head_kwargs)
        return HeadOutput(lp, ent)

    if prefix:
        cache = shared_cache(model, input_ids, attention_mask, prefix, logits_to_keep=none)
        with _head_hooks(model, compute):
            return model(input_ids=input_ids[:, prefix:], attention_mask=attention_mask, past_key_values=cache,
                         use_cache=True, logits_to_keep=none)
    if position_ids is not None:  # packed: attention per row (flash varlen, or agentrl.update.varlen_attention)
        with packed_attention(model), _head_hooks(model, compute):
            return model(input_ids=input_ids, attention_mask=None, position_ids=position_ids, use_cache=False,
                         logits_to_keep=none)
    with _head_hooks(model, compute):
        return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, logits_to_keep=none)
