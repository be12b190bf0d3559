"""Grouped-query attention for decode steps without copying the keys/values.

With a padded batch (left padding: every batched rollout turn) transformers' ``sdpa``
attention cannot use PyTorch's native grouped-query path (it needs ``attn_mask=None``), so
it repeats every key/value head ``num_key_value_groups`` times first (``repeat_kv``): at a
decode step that copies the whole cache, 3× its size for SmolLM2 (9 query / 3 key-value
heads), in every layer, at every generated token. On one CPU thread that copy and the
flash kernel's single-query overhead were 60 % of a batch-16 decode step with 450 cached
columns (0.95 s → 0.38 s with this function; ``benchmarks/RESULTS.md``).

``grouped_attention`` instead folds the query heads that share a key/value head into the
query-length axis — queries ``(B, H_kv, groups·q, D)`` against keys ``(B, H_kv, L, D)`` —
and computes ``softmax(Q Kᵀ · scale + mask) V`` with two matmuls: no copy of the cache. It
serves float32 queries of at most ``MAX_QUERY`` tokens (decode steps, the last prompt column);
any other call (prefill, the update's forward, bf16/fp16 — whose scores sdpa keeps in float32 —
dropout, position biases, models without grouped heads) goes to transformers'
``sdpa_attention_forward`` unchanged, with the same
masks (the implementation registers ``sdpa``'s mask builder). Outputs equal ``sdpa``'s to
float rounding (logits within 3e-5 on SmolLM2 fp32; tests/llm/test_decode_attention.py).
"""

from __future__ import annotations

import torch

#: Name under which the implementation is registered with transformers.
NAME = "agentrl_grouped"
#: Longest query (tokens) computed here; longer ones go to ``sdpa``.
MAX_QUERY = 4
#: ``policy.decode_attention`` values.
MODES = ("grouped", "sdpa")


def grouped_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """A transformers attention function (``AttentionInterface`` signature).

    Args:
        query: float[B, H, q, D]; key, value: float[B, H_kv, L, D] (H = groups · H_kv).
        attention_mask: sdpa's mask, bool[B|1, 1, q, ≥ L] (True = attend) or an additive
            float mask of that shape; None (no padding) for a one-token query.
    Returns:
        (float[B, q, H, D], None), as ``sdpa_attention_forward``.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = int(getattr(module, "num_key_value_groups", 1))
    b, h, q, d = query.shape
    # without a mask, a multi-token query means transformers' upper-left causal case (no cache): sdpa's
    # bf16/fp16: sdpa's kernels keep the scores in float32, two half-precision matmuls would not
    if (groups == 1 or q > MAX_QUERY or (q > 1 and attention_mask is None) or query.dtype != torch.float32 or dropout
            or kwargs.get("position_bias") is not None or kwargs.get("cache") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    h_kv, length = key.shape[1], key.shape[2]
    scale = scaling if scaling is not None else d ** -0.5
    scores = torch.matmul(query.reshape(b, h_kv, groups * q, d), key.transpose(-1, -2)) * scale  # (B, H_kv, g·q, L)
    if attention_mask is not None:
        mask = attention_mask[..., :length]  # (B|1, 1, q, L)
        if q > 1:  # rows of the folded axis are (group, query position): repeat the mask per group
            mask = mask.unsqueeze(2).expand(mask.shape[0], 1, groups, q, length).reshape(mask.shape[0], 1, groups * q, length)
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = scores.softmax(-1)
    if attention_mask is not None and mask.dtype == torch.bool:  # a fully masked row (a left pad's query
        empty = ~mask.any(-1, keepdim=True)  # in a ≤ MAX_QUERY-wide prefill) attends to nothing: 0, as sdpa
        if bool(empty.any()):  # gives, not the NaN of softmax(all −inf), which its keys/values would spread
            probs = probs.masked_fill(empty, 0.0)
    out = torch.matmul(probs, value)  # (B, H_kv, g·q, D)
    return out.reshape(b, h, q, d).transpose(1, 2).contiguous(), None


def set_decode_attention(model: torch.nn.Module, mode: str) -> str:
    """Make ``model`` use ``grouped_attention`` (``mode="grouped"``) or transformers' stock
    ``sdpa`` (``mode="sdpa"``). Only models running ``sdpa`` are switched (an explicit
    ``eager`` / flash implementation is left alone). Returns the implementation in use.

    Raises:
        ValueError: ``mode`` is not one of ``MODES``.
    """
    if mode not in MODES:
        raise ValueError(f"decode_attention must be one of {MODES}, got {mode!r}")
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current not in ("sdpa", NAME):
        return str(current)
    want = NAME if mode == "grouped" else "sdpa"
    if want == NAME:
        _register()
    config._attn_implementation = want  # read by every attention layer at each forward
    return want


def _register() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(NAME, grouped_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
