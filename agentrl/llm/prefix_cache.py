"""Prefix KV cache for ``HFEngine``: reuse the attention keys/values of prompts already seen.

A multi-turn rollout re-sends the same leading tokens many times: every turn of an episode
starts with the same system and task text, every episode of a group shares it, and in
``policy.context: chat`` a turn's prompt extends the previous prompt and completion. The
prefill of those tokens dominates a CPU turn (docs/scaling.md). ``PrefixKVCache`` keeps the
keys/values that ``generate`` computed for each row (its prompt and all but the last
completion token) and, on the next call, starts each row from the longest cached prefix of
its prompt, so only the new tokens are prefilled.

Ragged prefill. Row b reuses ``r_b`` tokens, from the cache or from an earlier row of the
same batch (the episodes of a group share their task prompt), and computes the others alone
(batch 1, no padding), so a batch costs the tokens its rows do not share rather than
``B × max(new part)``: the main job's rows need 20–160 new tokens each, and a padded batch
spent 2.5–6× the tokens it needed (benchmarks/RESULTS.md, ``engine_speed.py``). Each row's
keys/values (its prompt but the last token) are then laid out right-aligned in a left-padded
batch cache of W − 1 columns (W = the longest prompt, as in a plain batch), and ``generate``
runs the last column. transformers derives position ids from the mask's cumulative sum, so
every real token keeps the position its keys were computed at (the cached keys carry their
rotary position). Logits therefore equal a full prefill up to float rounding (measured within
1e-5 on fp32; tests/llm/test_prefix_cache.py), and the stored logprobs still match the
update's teacher-forced recompute.

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
#: Cost of a prompt token prefilled alone (batch 1) relative to one in a padded batch: the
#: ratio measured for SmolLM2-135M fp32 on 1 CPU thread, 100 new tokens (0.59 s vs 7.6 s / 16).
RAGGED_COST = 1.25


@dataclass
class _Entry:
    tokens: np.ndarray  # int64[L]
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (heads, L, head_dim) keys, values
    nbytes: int


@dataclass
class CachedBatch:
    """The keys/values of a batch laid out over cached prefixes (see the module docstring).

    Attributes:
        cache: a transformers ``DynamicCache`` of the first W − 1 columns of the batch that
            ``HFEngine``'s left padding builds (W = the longest prompt).
        reused: int, total prompt tokens taken from the cache or an earlier row (not prefilled).
    """

    cache: object
    reused: int


class PrefixKVCache:
    """Longest-prefix reuse of keys/values across ``HFEngine.generate`` calls.

    Args:
        max_bytes: memory bound of the stored keys/values (bytes, default 1 GiB); the
            oldest entries go first.
    Raises:
        ValueError: ``max_bytes`` < 0.
    Attributes:
        hits, reused_tokens, prefilled_tokens: counters over the cache's life (calls that
            reused a prefix; prompt tokens taken from the cache; prompt tokens prefilled).
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"PrefixKVCache needs max_bytes >= 0 (0 = off), got {max_bytes}")
        self.max_bytes = int(max_bytes)
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

    def prepare(self, rows: Sequence[np.ndarray], model: torch.nn.Module,
                device: torch.device) -> CachedBatch | None:
        """Compute, row by row, the keys/values of every prompt but its last token, starting
        each row from the longest prefix held by the cache or by an earlier row of this batch
        (so the episodes of a group prefill their shared prompt once); return the batch laid
        out over them, or None when the plain padded prefill is cheaper: ``RAGGED_COST`` × the tokens
        left to compute ≥ B × W (e.g. an empty cache and no shared prompts).

        Each row runs alone (batch 1, no padding): a batch costs the tokens its rows do not
        share, not ``B × (longest new part)``. Call in eval mode, without autograd.
        Args:
            rows: B prompts (int64 arrays, each ≥ 1 token).
        Returns:
            ``CachedBatch``: a cache of the first W − 1 columns of the left-padded batch
            (W = the longest prompt).
        """
        self.prefilled_tokens += sum(r.size for r in rows)
        if self.max_bytes == 0:
            return None
        sources = self._sources(rows)
        reused = sum(n for _, n in sources)
        width = max(r.size for r in rows)
        todo = sum(r.size - 1 for r in rows) - reused
        if RAGGED_COST * todo + len(rows) >= len(rows) * width:
            return None
        done: list[_Entry] = []
        for row, (src, n) in zip(rows, sources):
            done.append(self._extend(row[:-1], src if isinstance(src, _Entry) or src is None else done[src], n,
                                     model, device))
        self.hits += reused > 0
        self.reused_tokens += reused
        self.prefilled_tokens -= reused
        return CachedBatch(self._layout(done, width), reused)

    def _sources(self, rows: Sequence[np.ndarray]) -> list[tuple[_Entry | int | None, int]]:
        """Per row, where its keys/values start: (cached entry | index of an earlier row |
        None, tokens taken from it), the longest match capped at ``row.size − 1``."""
        out: list[tuple[_Entry | int | None, int]] = []
        for b, row in enumerate(rows):
            src, best = self._longest(row)
            cap = row.size - 1
            for j in range(b):
                n = min(cap, rows[j].size - 1, _lcp(rows[j], row))
                if n > best:
                    src, best = j, n
            out.append((src, best))
        return out

    def _extend(self, ctx: np.ndarray, src: _Entry | None, n: int, model: torch.nn.Module,
                device: torch.device) -> _Entry:
        """Keys/values of the tokens ``ctx`` (int64[L]): the first ``n`` copied from ``src``,
        the other L − n computed by one batch-1 forward on top of them."""
        if n == ctx.size:  # all from ``src`` (or a 1-token prompt: nothing before its last token)
            return _Entry(ctx, [] if src is None else [(k[:, :n], v[:, :n]) for k, v in src.kv], 0)
        from transformers import DynamicCache

        cache = DynamicCache()
        if n:
            for i, (k, v) in enumerate(src.kv):
                cache.update(k[None, :, :n], v[None, :, :n], i)
        ids = torch.from_numpy(ctx[n:]).to(device)[None]
        model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return _Entry(ctx, [(lay.keys[0], lay.values[0]) for lay in cache.layers], 0)

    def _longest(self, row: np.ndarray) -> tuple[_Entry | None, int]:
        """The entry sharing the longest prefix with ``row`` (capped at ``row.size − 1``: the
        last prompt token is always prefilled, it gives the first logits)."""
        cap = row.size - 1
        best, best_n = None, 0
        for e in self._entries.values():
            if min(cap, e.tokens.size) <= best_n:
                continue
            n = min(cap, _lcp(e.tokens, row))
            if n > best_n:
                best, best_n = e, n
        return best, best_n

    @staticmethod
    def _layout(done: list[_Entry], width: int):
        """A ``DynamicCache`` of width − 1 columns, row b's keys/values right-aligned in it
        (as left padding puts every row's last prompt token in the last column)."""
        from transformers import DynamicCache

        b_n = len(done)
        cache = DynamicCache()
        for i, (k0, v0) in enumerate(next(e for e in done if e.kv).kv):
            heads, _, dim = k0.shape
            kb, vb = k0.new_zeros((b_n, heads, width - 1, dim)), v0.new_zeros((b_n, heads, width - 1, dim))
            for b, e in enumerate(done):
                if e.tokens.size:
                    kb[b, :, width - 1 - e.tokens.size:] = e.kv[i][0]
                    vb[b, :, width - 1 - e.tokens.size:] = e.kv[i][1]
            cache.update(kb, vb, i)
        return cache

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
            while self._bytes > self.max_bytes:  # oldest first, row by row: never B rows' copies over the bound
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
