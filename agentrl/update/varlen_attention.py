"""Attention over packed rows, one segment at a time: the CPU/sdpa stand-in for flash-attention varlen.

A packed micro-batch (``agentrl.update.packing``) is one (1, L) sequence whose
``position_ids`` restart at 0 at each row. With ``sdpa`` transformers keeps the rows apart by a
dense (L, L) block-diagonal mask, so attention costs L² whatever the rows' lengths: packing
2,048 tokens of ~300-token rows took 1.7× the padded update's time on a CPU (bf16 SmolLM2,
the main job's turns). ``segment_attention`` instead runs ``scaled_dot_product_attention`` with
``is_causal=True`` on each row's own slice of the queries, keys and values — Σ Lᵢ² work, no
mask, as flash-attention's varlen kernel does on a GPU. It also reads one layout flash cannot:
a segment whose positions start at P > 0 is a row's suffix on the pack's first P tokens (a
prefix the rows share, laid down once: ``update.share_prefix`` with packing), and attends to
those P keys and then its own, causally.

``packed_attention(model)`` switches a model running ``sdpa`` (or agentrl's decode variant
``agentrl_grouped``) to it for the duration of a packed forward. Every call that is not a
packed one (a cache, padding, a batch of several rows) goes to the implementation the model
had, so the switch changes nothing else. Not switched: flash-attention (varlen already),
``eager``, and models under gradient checkpointing (the backward's recompute runs after the
switch is undone; the mask path keeps it consistent).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

__all__ = ["NAME", "segment_attention", "attends_per_segment", "packed_attention"]

#: Name under which the implementation is registered with transformers.
NAME = "agentrl_varlen"
_SWITCHED = ("sdpa", "agentrl_grouped")
_fallback: dict[int, str] = {}  # id(config) → the implementation it had, while switched


def _segments(position_ids: torch.Tensor | None, q: int) -> list[tuple[int, int, int]] | None:
    """The segments ``(start, end, first position)`` of a packed (1, q) sequence — a new one
    wherever the position does not follow the previous one — or None if not packed that way
    (the first position must be 0; a segment starting at position s > 0 continues the first
    s tokens, which the first segment must have)."""
    if position_ids is None or position_ids.shape != (1, q) or q == 0:
        return None
    pos = position_ids[0]
    if int(pos[0]) != 0:
        return None
    starts = [0, *(torch.nonzero(pos[1:] != pos[:-1] + 1).flatten() + 1).tolist()]
    bounds = list(zip(starts, starts[1:] + [q]))
    first = [int(pos[a]) for a, _ in bounds]
    if max(first) > bounds[0][1]:
        return None
    return [(a, b, f) for (a, b), f in zip(bounds, first)]


def segment_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """A transformers attention function (``AttentionInterface`` signature).

    Args:
        query: float[1, H, L, D]; key, value: float[1, H_kv, L, D] of a packed sequence whose
            ``kwargs["position_ids"]`` (1, L) restart at 0 at each row; ``attention_mask`` None.
    Returns:
        (float[1, L, H, D], None), as ``sdpa_attention_forward``. Any other call (padding, a
        cache, several rows) is passed to the model's own implementation.
    """
    from transformers import AttentionInterface

    config = getattr(module, "config", None)
    bounds = None
    if attention_mask is None and query.shape[0] == 1 and key.shape[2] == query.shape[2]:
        bounds = _segments(kwargs.get("position_ids"), query.shape[2])
    if bounds is None:
        name = _fallback.get(id(config), "sdpa")
        return AttentionInterface._global_mapping[name](module, query, key, value, attention_mask, dropout=dropout,
                                                        scaling=scaling, is_causal=is_causal, **kwargs)
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # grouped-query attention: repeat the key/value heads (sdpa's enable_gqa is not on every path)
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    outs = []
    for a, b, p in bounds:
        if p == 0:
            outs.append(sdpa(query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], dropout_p=dropout, is_causal=True,
                             scale=scaling))
            continue
        n = b - a  # a row's suffix on the shared prefix: every prefix key, then its own keys causally
        mask = torch.ones((n, p + n), dtype=torch.bool, device=query.device)
        mask[:, p:] = torch.ones((n, n), dtype=torch.bool, device=query.device).tril()
        outs.append(sdpa(query[:, :, a:b], torch.cat([key[:, :, :p], key[:, :, a:b]], 2),
                         torch.cat([value[:, :, :p], value[:, :, a:b]], 2), attn_mask=mask, dropout_p=dropout,
                         scale=scaling))
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None


def _mask(*args, attention_mask: torch.Tensor | None = None, **kwargs):
    """Mask builder: none for an unpadded sequence (packed or not), sdpa's otherwise."""
    from transformers.masking_utils import sdpa_mask

    return None if attention_mask is None else sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    if NAME not in AttentionInterface._global_mapping:
        AttentionInterface.register(NAME, segment_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, _mask)


def _configs(model: torch.nn.Module) -> list:
    """The distinct transformers configs of ``model``'s modules (one for a plain LM)."""
    seen: dict[int, object] = {}
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation") and id(cfg) not in seen:
            seen[id(cfg)] = cfg
    return list(seen.values())


def _switchable(model: torch.nn.Module) -> list:
    """The configs ``packed_attention`` switches (none under gradient checkpointing)."""
    if getattr(model, "is_gradient_checkpointing", False):
        return []
    return [cfg for cfg in _configs(model) if cfg._attn_implementation in _SWITCHED]


def attends_per_segment(model: torch.nn.Module) -> bool:
    """True when ``model``'s packed forwards run ``segment_attention`` (so a pack may lay a
    shared prefix down once: ``agentrl.update.packing.pack_rows(prefix=...)``)."""
    return bool(_switchable(model))


@contextmanager
def packed_attention(model: torch.nn.Module) -> Iterator[None]:
    """While the block runs, ``model``'s packed forwards use ``segment_attention`` (see the
    module docstring for what is left alone)."""
    switched = [(cfg, cfg._attn_implementation) for cfg in _switchable(model)]
    if switched:
        _register()
    try:
        for cfg, old in switched:
            _fallback[id(cfg)] = old
            cfg._attn_implementation = NAME
        yield
    finally:
        for cfg, old in switched:
            cfg._attn_implementation = old
            _fallback.pop(id(cfg), None)
