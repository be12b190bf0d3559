"""Grammar bitmasks in a training batch: ``BatchMasks`` and the renormalised logsumexp.

A grammar-constrained turn (``agentrl.llm.grammar``: forced tool calls, JSON output) was
sampled from the raw-logit softmax restricted to the grammar's allowed ids at each step. Its
masks travel as bitmasks, not id lists: inside a JSON string almost the whole vocabulary is
allowed, so a (B, T, A) id tensor would hold ~V int64 per token, while a bitmask is V / 8
bytes and the distinct masks of a batch are few. ``BatchMasks.index`` (B, T) points each
constrained completion position at a row of ``BatchMasks.bits`` (U, W); ``masked_logsumexp``
recomputes the logsumexp over exactly those ids, at the constrained positions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from agentrl.llm.grammar_decode import unpack_bits

__all__ = ["BatchMasks", "pack_masks", "masked_logsumexp"]

_NEG = -1e30  # finite "minus infinity": exp(_NEG − lse) = 0 and 0 · _NEG = 0 (no NaN in the entropy)


@dataclass(frozen=True, eq=False)
class BatchMasks:
    """Per-position grammar masks of a ``TrainBatch``.

    Attributes:
        index: (B, T) int64, the row of ``bits`` allowed at each grammar-constrained
            completion position (aligned with ``input_ids`` columns), −1 elsewhere.
        bits: (U, W) int32 distinct bitmasks (bit ``i % 32`` of word ``i // 32`` = id i allowed).
    """

    index: torch.Tensor
    bits: torch.Tensor

    def select(self, rows: torch.Tensor, length: int) -> "BatchMasks":
        """The masks of ``rows`` (int64 indices), columns cut to ``length``."""
        return BatchMasks(self.index[rows, :length], self.bits)

    def columns(self, cols: torch.Tensor) -> "BatchMasks":
        """The masks of column 0 then ``cols`` (as ``forward_token_stats`` keeps them)."""
        return BatchMasks(torch.cat([self.index[:, :1], self.index[:, cols]], dim=1), self.bits)

    def to(self, device: torch.device | str) -> "BatchMasks":
        return BatchMasks(self.index.to(device), self.bits.to(device))


def _checked(masks, comps: list[np.ndarray]) -> list:
    """Validate per-turn ``TokenMasks`` (``index`` int[C_i], ``bits`` int32[U_i, W]) or None."""
    width = {int(np.asarray(m.bits).shape[1]) for m in masks if m is not None}
    if len(width) > 1:
        raise ValueError(f"grammar masks of different widths {sorted(width)}: the turns come from different "
                         "tokenizers; build one batch per policy")
    for i, (m, c) in enumerate(zip(masks, comps)):
        if m is None:
            continue
        idx, bits = np.asarray(m.index, dtype=np.int64), np.asarray(m.bits, dtype=np.int32)
        ok = idx.shape == c.shape and (idx.size == 0 or (idx.min() >= 0 and idx.max() < bits.shape[0]))
        if ok and c.size:
            words = bits[idx, c // 32]
            ok = bool(((words >> (c % 32)) & 1).all()) and bool((c < 32 * bits.shape[1]).all())
        if not ok:
            raise ValueError(f"turn {i}: grammar masks must give one mask per completion token ({c.size}), each "
                             "allowing the sampled id; rebuild them with agentrl.llm.grammar.turn_grammar_masks")
    return masks


def pack_masks(masks: Sequence | None, comps: list[np.ndarray], chains: list[list[int]], prompts: list[np.ndarray],
               b: int, t: int) -> BatchMasks | None:
    """``BatchMasks`` of a batch of ``b`` rows × ``t`` columns built from per-turn masks
    (``agentrl.llm.grammar.TokenMasks`` or None; None / all None → None); the turns' tables
    are merged and deduplicated.

    Raises:
        ValueError: not one entry per turn, a mask per token missing, a sampled id not
            allowed, or widths that differ.
    """
    if masks is None or all(m is None for m in masks):
        return None
    if len(masks) != len(comps):
        raise ValueError(f"grammar has {len(masks)} entries for {len(comps)} turns; pass one (or None) per turn")
    masks = _checked(masks, comps)
    tables, offset, base = [], 0, {}
    for i, m in enumerate(masks):
        if m is not None:
            base[i] = offset
            tables.append(np.asarray(m.bits, dtype=np.int32))
            offset += tables[-1].shape[0]
    table = np.concatenate(tables, axis=0)
    uniq, inverse = np.unique(table, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    index = np.full((b, t), -1, dtype=np.int64)
    for r, chain in enumerate(chains):
        for i in chain:
            if masks[i] is not None:
                s = prompts[i].size
                index[r, s:s + comps[i].size] = inverse[base[i] + np.asarray(masks[i].index, dtype=np.int64)]
    return BatchMasks(torch.from_numpy(index), torch.from_numpy(np.ascontiguousarray(uniq, dtype=np.int32)))


def masked_logsumexp(z: torch.Tensor, index: torch.Tensor, bits: torch.Tensor,
                     entropy: bool = False) -> tuple | None:
    """Over the allowed ids at the constrained positions of (B, K, V) logits ``z``.

    Args:
        z: (B, K, V) float32 logits (already divided by the temperature).
        index: (B, K) int64 rows of ``bits`` (−1 = unconstrained).
        bits: (U, W) int32 bitmasks.
        entropy: also return the entropy (nats) of the restricted distribution.
    Returns:
        None when no position is constrained, else ``(pos, lse)`` (plus ``ent`` when
        ``entropy``): ``pos`` the (B, K) index tuple of the M constrained positions, ``lse``
        and ``ent`` (M,) float32 — differentiable in ``z``.
    """
    pos = torch.nonzero(index >= 0, as_tuple=True)
    if pos[0].numel() == 0:
        return None
    zc = z[pos]  # (M, V)
    allowed = unpack_bits(bits[index[pos]], zc.shape[-1])  # (M, V) bool
    za = zc.masked_fill(~allowed, _NEG)
    lse = torch.logsumexp(za, dim=-1)
    if not entropy:
        return pos, lse
    lp = za - lse.unsqueeze(-1)
    return pos, lse, -(lp.exp() * lp).sum(-1)
