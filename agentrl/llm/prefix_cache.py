"""Prefix KV cache for ``HFEngine``: reuse the attention keys/values of prompts already seen.

A multi-turn rollout re-sends the same leading tokens many times: every turn of an episode
starts with the same system and task text, every episode of a group shares it, and in
``policy.context: chat`` a turn's prompt extends the previous prompt and completion. The
prefill of those tokens dominates a CPU turn (docs/scaling.md). ``PrefixKVCache`` keeps the
keys/values that ``generate`` computed for each row (its prompt and all but the last
completion token) and, on the next call, starts each row from the longest cached prefix of
its prompt, so only the new tokens are prefilled.

Batched layout. Row b reuses ``r_b`` cached tokens and prefills the ``s_b`` others. The
batch is laid out as ``[pad × (R − r_b)] [cached r_b] [pad × (S − s_b)] [new s_b]`` with
``R = max r_b``, ``S = max s_b``; the cache holds the first ``R`` columns and the attention
mask is 0 on every pad. transformers derives position ids from the mask's cumulative sum,
so every real token keeps the position it had when its keys were computed (the cached keys
carry their rotary position). Logits therefore equal a full prefill up to float rounding
(measured within 1e-5 on fp32; tests/llm/test_prefix_cache.py), and the stored logprobs
still match the update's teacher-forced recompute.

Validity. Entries are tied to the exact weights: a key of every parameter's storage and
in-place version counter (``Tensor._version``, bumped by optimizer steps, ``copy_`` and
``load_state_dict``) is checked on each call, and a change empties the cache. Entries are
evicted oldest first beyond ``max_bytes``.

Used only for models whose every cache layer is a plain full-attention layer
(``DynamicLayer``: Llama, Qwen2, SmolLM2, …); sliding-window or hybrid caches run uncached.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

#: Default memory bound of the cached keys/values, bytes.
DEFAULT_MAX_BYTES = 1 << 30


@dataclass
class _Entry:
    tokens: np.ndarray  # int64[L]
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (heads, L, head_dim) keys, values
    nbytes: int


@dataclass
class CachedBatch:
    """A batch laid out over cached prefixes (see the module docstring).

    Attributes:
        input_ids: int64[B, R + S], the full rows (cached tokens included; pads = pad id).
        attention_mask: int64[B, R + S], 1 on real tokens.
        cache: a transformers ``DynamicCache`` holding the first R columns.
        reused: int, total cached tokens reused over the batch (the tokens not prefilled).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    cache: object
    reused: int


class PrefixKVCache:
    """Longest-prefix reuse of keys/values across ``HFEngine.generate`` calls.

    Args:
        max_bytes: memory bound of the stored keys/values (bytes, default 1 GiB); the
            oldest entries go first.
        min_tokens: a call reuses the cache only when some row saves at least this many
            prefill tokens (default 16).
    Raises:
        ValueError: ``max_bytes`` < 0 or ``min_tokens`` < 1.
    Attributes:
        hits, reused_tokens, prefilled_tokens: counters over the cache's life (calls that
            reused a prefix; prompt tokens taken from the cache; prompt tokens prefilled).
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, min_tokens: int = 16) -> None:
        if max_bytes < 0 or min_tokens < 1:
            raise ValueError(f"PrefixKVCache needs max_bytes >= 0 and min_tokens >= 1, got {max_bytes}, {min_tokens}")
        self.max_bytes, self.min_tokens = int(max_bytes), int(min_tokens)
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next = 0
        self._bytes = 0
        self._weights: tuple | None = None
        self.hits = self.reused_tokens = self.prefilled_tokens = 0

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        self._entries.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    # ------------------------------------------------------------------ lookup
    def check_weights(self, model: torch.nn.Module) -> None:
        """Empty the cache when any parameter changed since the last call."""
        key = tuple((p.data_ptr(), p._version, p.dtype) for p in model.parameters())
        if key != self._weights:
            self.clear()
            self._weights = key

    def plan(self, rows: Sequence[np.ndarray], budgets: Sequence[int], max_context: int, pad_id: int,
             device: torch.device) -> CachedBatch | None:
        """The cached layout for ``rows`` (int64 prompts), or None when reuse does not pay
        (no row saves ``min_tokens``; the padded suffix is not shorter than the plain batch;
        the layout plus the largest budget would pass ``max_context`` tokens)."""
        self.prefilled_tokens += sum(r.size for r in rows)
        if not self._entries or self.max_bytes == 0:
            return None
        best = [self._longest(r) for r in rows]  # (entry key | None, reused length)
        reuse = [n for _, n in best]
        if max(reuse) < self.min_tokens:
            return None
        width_r = max(reuse)
        width_s = max(r.size - n for r, n in zip(rows, reuse))
        plain = max(r.size for r in rows)
        if width_s > 0.8 * plain or width_r + width_s + max(budgets) > max_context:
            return None
        batch = self._layout(rows, best, width_r, width_s, pad_id, device)
        self.hits += 1
        self.reused_tokens += batch.reused
        self.prefilled_tokens -= batch.reused
        return batch

    def prefill_shared(self, rows: Sequence[np.ndarray], model: torch.nn.Module, pad_id: int,
                       device: torch.device) -> int:
        """Prefill, once each, the prefixes that rows of this batch share with each other and
        the cache does not hold (e.g. the first turn of a group: every episode of the group
        has the same prompt), so that ``plan`` then reuses them for every row.

        A row's shared prefix is its longest common prefix with another row of the batch,
        kept when it passes what the cache already gives that row by ``min_tokens``; a
        prefix that begins a longer one is served by the longer one. Returns the number of
        tokens prefilled (0 when nothing is shared).
        """
        if self.max_bytes == 0 or len(rows) < 2:
            return 0
        want: dict[tuple, np.ndarray] = {}
        for i, row in enumerate(rows):
            shared = max(_lcp(row, other) for j, other in enumerate(rows) if j != i)
            shared = min(shared, row.size - 1)
            if shared - self._longest(row)[1] >= self.min_tokens:
                want.setdefault(tuple(row[:shared].tolist()), row[:shared])
        keys = sorted(want, key=len, reverse=True)
        todo = [want[k] for n, k in enumerate(keys) if not any(len(o) > len(k) and o[: len(k)] == k for o in keys[:n])]
        if not todo:
            return 0
        width = max(t.size for t in todo)
        ids = torch.full((len(todo), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(todo), width), dtype=torch.long)
        for b, t in enumerate(todo):
            ids[b, width - t.size:] = torch.from_numpy(t)
            mask[b, width - t.size:] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: real tokens keep positions 0..n-1
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        self.store(todo, mask, torch.zeros((len(todo), 0), dtype=torch.long), [0] * len(todo), out.past_key_values)
        n = int(sum(t.size for t in todo))
        self.prefilled_tokens += n
        return n

    def _longest(self, row: np.ndarray) -> tuple[int | None, int]:
        """The entry sharing the longest prefix with ``row`` (capped at ``row.size − 1``: the
        last prompt token is always prefilled, it gives the first logits)."""
        cap = row.size - 1
        best_key, best_n = None, 0
        for key, e in self._entries.items():
            if min(cap, e.tokens.size) <= best_n:
                continue
            n = min(cap, _lcp(e.tokens, row))
            if n > best_n:
                best_key, best_n = key, n
        return best_key, best_n

    def _layout(self, rows, best, width_r: int, width_s: int, pad_id: int, device) -> CachedBatch:
        from transformers import DynamicCache

        b_n, width = len(rows), width_r + width_s
        ids = torch.full((b_n, width), pad_id, dtype=torch.long)
        mask = torch.zeros((b_n, width), dtype=torch.long)
        some = next(self._entries[k] for k, _ in best if k is not None)
        layers = []
        for k0, v0 in some.kv:
            heads, _, dim = k0.shape
            layers.append((k0.new_zeros((b_n, heads, width_r, dim)), v0.new_zeros((b_n, heads, width_r, dim))))
        for b, (row, (key, n)) in enumerate(zip(rows, best)):
            s = row.size - n
            ids[b, width_r - n: width_r] = torch.from_numpy(row[:n])
            ids[b, width - s:] = torch.from_numpy(row[n:])
            mask[b, width_r - n: width_r] = 1
            mask[b, width - s:] = 1
            if n:
                for (kb, vb), (ke, ve) in zip(layers, self._entries[key].kv):
                    kb[b, :, width_r - n:] = ke[:, :n]
                    vb[b, :, width_r - n:] = ve[:, :n]
        cache = DynamicCache()
        for i, (k, v) in enumerate(layers):
            cache.update(k.to(device), v.to(device), i)
        return CachedBatch(ids.to(device), mask.to(device), cache, sum(n for _, n in best))

    # ------------------------------------------------------------------ storing
    def store(self, rows: Sequence[np.ndarray], mask: torch.Tensor, new: torch.Tensor, lengths: Sequence[int],
              past) -> None:
        """Keep each row's keys/values: its prompt and its completion but the last token.

        Args:
            rows: the B prompts (int64 arrays) in batch order.
            mask: int64[B, W], the attention mask of the input columns (1 on each row's prompt).
            new: int64[B, T], the generated ids.
            lengths: completion length of each row (tokens, stop included).
            past: the ``past_key_values`` that ``generate`` returned (W + T − 1 columns).
        """
        if self.max_bytes == 0 or past is None or not _plain_layers(past):
            return
        width = mask.shape[1]
        for b, row in enumerate(rows):
            keep = max(int(lengths[b]) - 1, 0)
            toks = np.concatenate([row, new[b, :keep].cpu().numpy().astype(np.int64)])
            if self._covered(toks):
                continue
            cols = torch.cat([torch.nonzero(mask[b]).flatten().cpu(), torch.arange(width, width + keep)])
            kv = [(lay.keys[b][:, cols], lay.values[b][:, cols]) for lay in past.layers]  # indexing copies
            nbytes = sum(k.numel() * k.element_size() * 2 for k, _ in kv)
            if nbytes > self.max_bytes:
                continue
            self._entries[self._next] = _Entry(toks, kv, nbytes)
            self._next += 1
            self._bytes += nbytes
        while self._bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.nbytes

    def _covered(self, toks: np.ndarray) -> bool:
        """True when an entry already starts with all of ``toks``."""
        return any(e.tokens.size >= toks.size and np.array_equal(e.tokens[: toks.size], toks)
                   for e in self._entries.values())


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two int arrays."""
    n = min(a.size, b.size)
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


def _plain_layers(cache) -> bool:
    """True when every layer of a transformers cache is a plain full-attention layer."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(lay).__name__ == "DynamicLayer" for lay in layers)


def supports_prefix_cache(model: torch.nn.Module) -> bool:
    """True when ``model``'s generation cache is plain full attention on every layer."""
    try:
        from transformers import DynamicCache

        return _plain_layers(DynamicCache(config=model.config)) and not getattr(model.config, "is_encoder_decoder", False)
    except (ImportError, TypeError, ValueError, AttributeError):
        return False
