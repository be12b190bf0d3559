"""Reference implementations of the rollout and update paths before issue 36 (not in the library).

``benchmarks/rollout_memory.py`` measures their memory against today's, and the tests
(tests/llm/test_step_logprobs.py, tests/update/test_token_head.py) compare today's numbers
with theirs:

- ``captured_generate`` + ``old_completion_logprobs``: ``HFEngine.generate`` as it was — the
  model's ``generate(output_logits=True)``, every step's raw logits stacked into a (B, T, V)
  float tensor, its log-softmax, the per-row trie / grammar renormalisation over the whole
  row and the top-k of the log-softmax. Wrapping ``model.generate`` runs that on the very call
  the engine makes (the same tokens), so the two computations see the same logits.
- ``old_forward_token_stats``: ``forward_token_stats`` as it was — (B, K, V) logits at the
  union K of the rows' kept columns (HF ``logits_to_keep``), shared prefix and deduplication
  included.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np
import torch

from agentrl.llm.base import SamplingParams, check_prompts, clamp_max_tokens, context_batches
from agentrl.llm.constrained import TokenTrie
from agentrl.llm.grammar_decode import GrammarLogits, unpack_bits
from agentrl.update.logprobs import TokenStats, entropy_from_logits, logprobs_from_logits
from agentrl.update.shared_prefix import common_prefix, duplicate_rows, prefix_logits


@contextmanager
def captured_generate(model: torch.nn.Module, **extra) -> Iterator[list]:
    """While the block runs, ``model.generate`` also returns every step's raw logits
    (``output_logits=True``, as the engine asked before; ``extra`` generate keywords too,
    e.g. ``output_hidden_states=True``); yields the list of ``(kwargs, output)`` of each call."""
    calls: list = []
    inner = model.generate

    def generate(**kwargs):
        kwargs.update(output_logits=True, **extra)
        out = inner(**kwargs)
        calls.append((kwargs, out))
        return out

    model.generate = generate
    try:
        yield calls
    finally:
        del model.generate


def old_trie_logprobs(logits: torch.Tensor, new: torch.Tensor, trie: TokenTrie, budget: int,
                      stops: set[int]) -> torch.Tensor:
    """float32[T] logprobs of one row's sampled ids renormalised over the trie's allowed ids
    (raw logits (T, V)); the engine's ``trie_logprobs`` before issue 36."""
    out = torch.zeros(new.shape[0], dtype=torch.float32, device=logits.device)
    toks = new[:budget].tolist()
    end = next((k + 1 for k, t in enumerate(toks) if t in stops), len(toks))
    for k, ids in enumerate(trie.walk(toks[:end])):
        z = logits[k, torch.from_numpy(ids).to(logits.device)]
        out[k] = logits[k, toks[k]] - torch.logsumexp(z, dim=0)
    return out


def old_restricted_logprobs(logits: torch.Tensor, new: torch.Tensor, masks: list[np.ndarray],
                            n_tokens: int) -> torch.Tensor:
    """float32[T] logprobs renormalised over recorded grammar bitmasks (raw logits (T, V));
    the engine's ``restricted_logprobs`` before issue 36."""
    out = torch.zeros(new.shape[0], dtype=torch.float32, device=logits.device)
    if n_tokens == 0:
        return out
    bits = torch.from_numpy(np.stack(masks[:n_tokens])).to(logits.device)  # (C, W)
    z = logits[:n_tokens].float()
    allowed = unpack_bits(bits, z.shape[-1])  # (C, V)
    lse = torch.logsumexp(z.masked_fill(~allowed, float("-inf")), dim=-1)
    out[:n_tokens] = z.gather(-1, new[:n_tokens].unsqueeze(-1)).squeeze(-1) - lse
    return out


def _end(toks: list[int], stops: set[int]) -> int:
    return next((k + 1 for k, t in enumerate(toks) if t in stops), len(toks))


def _old_call(engine, kwargs: dict, out, rows: list[int], allowed, budgets, stops: set[int], top_k: int) -> dict:
    """Old per-row numbers of one captured ``model.generate`` call over batch rows ``rows``."""
    width = kwargs["input_ids"].shape[1]
    gmask = next((p for p in kwargs.get("logits_processor", []) if isinstance(p, GrammarLogits)), None)
    new = out.sequences[:, width:]  # (B, T)
    logits = torch.stack(out.logits, dim=1).float()  # (B, T, V) raw
    sampled = logits.log_softmax(-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)  # (B, T)
    for j, i in enumerate(rows):
        if allowed[i] is not None:
            sampled[j] = old_trie_logprobs(logits[j], new[j], TokenTrie(allowed[i]), budgets[i], stops)
        elif gmask is not None and gmask.grammars[j] is not None:
            n = _end(new[j, :budgets[i]].tolist(), stops)
            sampled[j] = old_restricted_logprobs(logits[j], new[j], gmask.masks[j], n)
    top = logits.log_softmax(-1).topk(min(top_k, logits.shape[-1]), dim=-1) if top_k else None
    res = {}
    for j, i in enumerate(rows):
        end = _end(new[j, :budgets[i]].tolist(), stops)
        res[i] = (sampled[j, :end].cpu().numpy().astype(np.float32),
                  None if top is None else top.indices[j, :end].cpu().numpy(),
                  None if top is None else top.values[j, :end].cpu().numpy())
    return res


def old_completion_logprobs(engine, prompts: Sequence[Sequence[int]], sampling: SamplingParams, calls: list,
                            allowed: Sequence | None = None, top_logprobs: int = 0) -> list[tuple]:
    """Per prompt ``(logprobs float32[C], top_ids int64[C, K] | None, top_logprobs float32[C, K] | None)``
    as ``HFEngine.generate`` computed them before issue 36, from the ``calls`` that
    ``captured_generate`` recorded while the engine ran ``generate(prompts, sampling, ...)``."""
    rows = check_prompts(prompts)
    allowed = list(allowed) if allowed is not None else [None] * len(rows)
    budgets = [clamp_max_tokens(p.size, sampling.max_tokens, engine.max_context) for p in rows]
    batches = context_batches([p.size for p in rows], budgets, engine.max_context)
    if len(batches) == 1:
        batches = [list(range(len(rows)))]
    if len(batches) != len(calls):
        raise ValueError(f"{len(calls)} generate calls recorded for {len(batches)} batches")
    stops = {engine.eos_token_id, *sampling.stop_token_ids}
    res: dict = {}
    for idx, (kwargs, out) in zip(batches, calls):
        res.update(_old_call(engine, kwargs, out, list(idx), allowed, budgets, stops, top_logprobs))
    return [res[i] for i in range(len(rows))]


def old_forward_token_stats(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                            temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False,
                            allowed_ids: torch.Tensor | None = None, token_mask: torch.Tensor | None = None,
                            grammar_mask=None, share_prefix: bool = False) -> TokenStats:
    """``forward_token_stats`` before issue 36: (B, K, V) logits over the union K of the kept
    columns (all T columns without ``token_mask``); the same arguments and outputs."""
    dup = duplicate_rows(input_ids, attention_mask, allowed_ids) if share_prefix and token_mask is not None \
        and grammar_mask is None else None
    if dup is not None:
        first, inverse = dup
        keep = torch.zeros((first.numel(), token_mask.shape[1]), dtype=torch.long, device=token_mask.device)
        keep = keep.index_add_(0, inverse, token_mask.long()) > 0
        sub = old_forward_token_stats(model, input_ids[first], attention_mask[first], temperature=temperature,
                                      with_entropy=with_entropy, entropy_grad=entropy_grad,
                                      allowed_ids=None if allowed_ids is None else allowed_ids[first],
                                      token_mask=keep, share_prefix=True)
        return TokenStats(sub.logprobs[inverse], None if sub.entropy is None else sub.entropy[inverse])
    if token_mask is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        ids, allowed, gmask = input_ids, allowed_ids, grammar_mask
    else:
        cols = torch.nonzero(token_mask[:, 1:].any(0)).squeeze(-1) + 1
        cols = cols if cols.numel() else torch.ones(1, dtype=torch.long, device=token_mask.device)
        shared = min(common_prefix(input_ids, attention_mask), int(cols[0]) - 1) if share_prefix and not \
            getattr(model, "is_gradient_checkpointing", False) else 0
        if shared >= 1:
            logits = prefix_logits(model, input_ids, attention_mask, cols - 1, shared)
        else:
            logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                           logits_to_keep=cols - 1).logits  # (B, K, V)
        logits = torch.cat([logits, logits[:, -1:]], dim=1)
        ids = torch.cat([input_ids[:, :1], input_ids[:, cols]], dim=1)
        allowed = None if allowed_ids is None else torch.cat([allowed_ids[:, :1], allowed_ids[:, cols]], dim=1)
        gmask = None if grammar_mask is None else grammar_mask.columns(cols)
    lp = logprobs_from_logits(logits, ids, temperature, allowed, gmask)
    ent = None
    if with_entropy:
        if entropy_grad:
            ent = entropy_from_logits(logits, temperature, allowed, gmask)
        else:
            with torch.no_grad():
                ent = entropy_from_logits(logits.detach(), temperature, allowed, gmask)
    if token_mask is not None:
        lp = lp.new_zeros(input_ids.shape).index_copy(1, cols, lp[:, 1:])
        ent = None if ent is None else ent.new_zeros(input_ids.shape).index_copy(1, cols, ent[:, 1:])
    return TokenStats(lp, ent)
