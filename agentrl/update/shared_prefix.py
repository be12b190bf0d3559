"""One forward of the prompt prefix that every row of a micro-batch shares.

Turns of one task share their first tokens — the system prompt and the task text are the same
for every turn of an episode and every episode of a group (the window prompts of the
TextWorld examples: ~74 % of a collect's prompt tokens, ``benchmarks/engine_speed.py``). A
plain forward runs those tokens through every layer once per row; ``prefix_logits`` runs them
once for the micro-batch, repeats the resulting key/value cache over the rows
(``DynamicCache.batch_repeat_interleave``, differentiable, so the gradient of the LoRA layers
above still gets every row's share) and runs only each row's suffix on top of it. Positions
continue from the prefix (transformers takes them from the cache length), so each token sees
the same context at the same position as in the plain forward and the logprobs agree to
float rounding (tests/update/test_shared_prefix.py: fp32 logprobs and LoRA gradients against
the plain forward).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["common_prefix", "prefix_order", "prefix_logits", "prefix_forward", "shared_cache", "duplicate_rows"]


def common_prefix(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Length of the longest prefix that every row of ``input_ids`` (B, T) has, attended.

    Returns:
        int in [0, T]; 0 for a single row (nothing to share).
    """
    if input_ids.shape[0] < 2:
        return 0
    same = ((input_ids == input_ids[:1]) & (attention_mask > 0)).all(0)  # (T,)
    return int(same.long().cumprod(0).sum())


def duplicate_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   allowed_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Rows of a micro-batch that are identical — same attended tokens, same mask and, with
    constrained decoding, the same allowed ids at every position — so one forward serves all.

    Turns repeat whole: every episode of a group starts from the same prompt, and episodes
    that took the same first actions reach the same window prompts and often sample the same
    completion (15–33 % of the rows of a micro-batch of 8 sorted turns on the TextWorld cu1
    learning runs).

    Args:
        input_ids, attention_mask: (B, T) int64. allowed_ids: optional (B, T, A) int64.
    Returns:
        ``(first, inverse)``: (U,) int64 the first row of each distinct row, in row order,
        and (B,) int64 the index into ``first`` of every row (``rows[i] == rows[first[inverse[i]]]``);
        None when every row is distinct (or B < 2).
    """
    b = input_ids.shape[0]
    if b < 2:
        return None
    key = [input_ids * (attention_mask > 0), attention_mask]
    if allowed_ids is not None:
        key.append(allowed_ids.reshape(b, -1))
    _, inverse = torch.unique(torch.cat(key, dim=1), dim=0, return_inverse=True)
    n = int(inverse.max()) + 1
    if n == b:
        return None
    first = torch.full((n,), b, dtype=torch.long, device=inverse.device).scatter_reduce(
        0, inverse, torch.arange(b, device=inverse.device), reduce="amin")
    order = torch.argsort(first)  # distinct rows in their order of first appearance
    rank = torch.empty_like(order)
    rank[order] = torch.arange(n, device=order.device)
    return first[order], rank[inverse]


def prefix_order(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Row order (B,) int64 that sorts the rows by their attended tokens, lexicographically, so
    rows with a common prefix (turns of one task) are neighbours and consecutive micro-batches
    share more of it (on the main job's turns: 46 % of the forward's tokens at 8 rows per
    micro-batch, against 15 % in shuffled order). Ties keep their order (stable)."""
    ids = (input_ids * (attention_mask > 0)).cpu().numpy()
    return torch.from_numpy(np.lexsort(ids.T[::-1]).astype(np.int64))


def prefix_logits(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  keep: torch.Tensor, prefix: int) -> torch.Tensor:
    """Logits at positions ``keep`` (K,) int64 of a right-padded batch whose rows share their
    first ``prefix`` tokens: (B, K, V), as ``model(..., logits_to_keep=keep).logits``.

    Args:
        model: an HF causal LM (or peft-wrapped) that takes ``past_key_values``.
        input_ids, attention_mask: (B, T) int64, right padded.
        keep: sorted positions ≥ ``prefix`` whose logits are needed.
        prefix: shared tokens, 1 ≤ prefix < T (``common_prefix``).
    Raises:
        ValueError: ``prefix`` out of range or a kept position inside the prefix.
    """
    t = input_ids.shape[1]
    if not 1 <= prefix < t or int(keep.min()) < prefix:
        raise ValueError(f"shared prefix {prefix} must be in [1, {t}) and before every kept position "
                         f"(first {int(keep.min())})")
    return prefix_forward(model, input_ids, attention_mask, prefix, {"logits_to_keep": 1},
                          logits_to_keep=keep - prefix).logits


def prefix_forward(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, prefix: int,
                   prefix_kwargs: dict | None = None, **kwargs):
    """One forward of a right-padded batch whose rows share their first ``prefix`` tokens: the
    prefix once (row 0, with ``prefix_kwargs``), its key/value cache repeated over the B rows (in
    the autograd graph) and every row's tokens after it on that cache (with ``kwargs``).

    Args:
        model: an HF model (causal LM, bare ``...Model`` or peft-wrapped) taking ``past_key_values``.
        input_ids, attention_mask: (B, T) int64, right padded; 1 ≤ ``prefix`` < T.
    Returns:
        The model's output for the columns ``prefix..T-1`` (e.g. ``.last_hidden_state``
        (B, T − prefix, H)); positions continue from the prefix.
    """
    cache = shared_cache(model, input_ids, attention_mask, prefix, **(prefix_kwargs or {}))
    return model(input_ids=input_ids[:, prefix:], attention_mask=attention_mask, past_key_values=cache,
                 use_cache=True, **kwargs)


def shared_cache(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, prefix: int,
                 **prefix_kwargs):
    """The key/value cache of the first ``prefix`` tokens, computed once (row 0, with
    ``prefix_kwargs``) and repeated over the B rows in the autograd graph: run the rows'
    tokens after it on it (``prefix_forward``; ``agentrl.update.token_head.stats_forward``
    takes the final hidden states of that forward).

    Args:
        input_ids, attention_mask: (B, T) int64, right padded; 1 ≤ ``prefix`` < T.
    Returns:
        A transformers ``Cache`` of B rows × ``prefix`` positions.
    """
    head = model(input_ids=input_ids[:1, :prefix], attention_mask=attention_mask[:1, :prefix], use_cache=True,
                 **prefix_kwargs)
    cache = head.past_key_values
    cache.batch_repeat_interleave(input_ids.shape[0])
    return cache
