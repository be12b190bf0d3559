"""Sampled-token logprobs one decoding step at a time, for ``HFEngine.generate``.

``generate(output_logits=True)`` keeps every step's raw logits, a (B, T, V) float tensor that
the engine then stacked and log-softmaxed: ~20 GB per copy at B = 128, T = 256, V = 152k.
``StepLogprobs`` keeps instead one (B, V) row per step and only until the next step reveals
the token sampled from it:

- a forward hook on the generating model copies the last column of each forward's logits
  (``output.logits[:, -1]`` as float32, exactly the row transformers' ``_sample`` copies
  before any logits processor runs, so it stays raw whatever the processors do to their
  scores: ``TrieMask`` and ``GrammarLogits`` write into them in place, and a model's
  ``generation_config`` can add processors that run before ours);
- as a logits processor (it returns the scores untouched) it sees step s begin, with
  ``input_ids[:, -1]`` the token sampled at step s − 1, and turns the kept row of step s − 1
  into that token's logprob: the full log-softmax for a free row, ``logit − logsumexp`` over
  the trie's allowed ids for a trie row (``agentrl.llm.constrained``), over the recorded
  bitmask for a grammar row (``agentrl.llm.grammar_decode``); with ``top_k`` also the K most
  likely ids of the raw (unconstrained) log-softmax;
- ``finish`` does the last step once ``generate`` has returned.

The numbers are those of the whole-tensor computation bit for bit (fp32, the same kernels on
the same rows; ``tests/llm/test_step_logprobs.py`` compares them with a reference of it).
With ``hidden=True`` the hook on the decoder keeps the final (post-norm) hidden state of the
last prompt token from the prefill (``Completion.hidden``, BiPACE) instead of
``output_hidden_states``, which kept every layer's states of every step.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np
import torch

from agentrl.llm.constrained import TokenTrie
from agentrl.llm.grammar_decode import unpack_bits

__all__ = ["StepLogprobs", "hf_model"]


def hf_model(model: torch.nn.Module) -> torch.nn.Module:
    """The HF ``PreTrainedModel`` inside a peft wrapper, the model itself otherwise: the module
    whose forward ``generate`` calls (``PeftModel.generate`` delegates to it)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


class StepLogprobs:
    """Logits processor + forward hooks computing the sampled tokens' logprobs per step.

    Args:
        tries: per row a ``TokenTrie`` or None (free row).
        grammar: the batch's ``GrammarLogits`` (its ``masks`` are read) or None.
        prompt_width: columns of the left-padded prompt in ``input_ids``.
        stops: ids that end a completion.
        budgets: per row the most new tokens it may keep.
        top_k: also keep the ``top_k`` most likely ids per step (0: none).
    Shape:
        ``finish`` returns ``sampled`` float32 (B, T) and, with ``top_k``, ids int64 and
        logprobs float32 (B, T, K); T = the number of decoding steps.
    Raises:
        ValueError (from ``finish``): a trie row sampled an id its trie does not allow, or a
            grammar row has fewer recorded masks than sampled tokens.
    """

    def __init__(self, tries: Sequence[TokenTrie | None], grammar, prompt_width: int, stops: set[int],
                 budgets: Sequence[int], top_k: int = 0) -> None:
        self.tries, self.grammar, self.width, self.stops = list(tries), grammar, prompt_width, stops
        self.budgets, self.top_k = list(budgets), int(top_k)
        self.hidden: torch.Tensor | None = None  # (B, H) float32 with attach(hidden=True)
        self._free = [t is None and (grammar is None or grammar.grammars[b] is None) for b, t in enumerate(tries)]
        self._tracked = not all(self._free)  # constrained rows: follow each row's tokens on the host
        self._gen: list[list[int]] = [[] for _ in self.tries]
        self._active = [True] * len(self.tries)
        self._missing: set[int] = set()
        self._latest: torch.Tensor | None = None
        self._prev: torch.Tensor | None = None
        self._cols: list[torch.Tensor] = []
        self._top: list[tuple[torch.Tensor, torch.Tensor]] = []

    @contextmanager
    def attach(self, model: torch.nn.Module, hidden: bool = False) -> Iterator["StepLogprobs"]:
        """Hook ``model`` (the module ``generate`` runs: ``hf_model``) while the block
        runs; with ``hidden`` also its decoder (``get_decoder()``) for ``self.hidden``."""
        handles = [model.register_forward_hook(self._keep_row)]
        if hidden:
            handles.append(model.get_decoder().register_forward_hook(self._keep_hidden))
        try:
            yield self
        finally:
            for h in handles:
                h.remove()

    def _keep_row(self, module, args, output) -> None:
        self._latest = output.logits[:, -1].to(copy=True, dtype=torch.float32)  # (B, V), as _sample copies it

    def _keep_hidden(self, module, args, output) -> None:
        if self.hidden is None:  # the prefill: its last column is every row's last prompt token
            state = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
            self.hidden = state[:, -1, :].float()

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.width
        if step > 0:
            self._finish_step(step - 1, input_ids[:, -1], self._prev)
        self._prev, self._latest = self._latest, None
        return scores

    def finish(self, sequences: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Complete the last step from ``sequences`` (``generate``'s (B, W + T) output) and
        return ``(sampled, top)`` (see the class docstring)."""
        steps = sequences.shape[1] - self.width
        if self._prev is not None and len(self._cols) < steps:
            self._finish_step(steps - 1, sequences[:, -1], self._prev)
        self._prev = None
        for b in sorted(self._missing):
            toks = self._gen[b][: self.budgets[b]]
            n = next((k + 1 for k, t in enumerate(toks) if t in self.stops), len(toks))
            raise ValueError(f"{len(self.grammar.masks[b])} grammar masks recorded for {n} sampled tokens")
        b_n = sequences.shape[0]
        sampled = torch.stack(self._cols, dim=1) if self._cols else torch.zeros((b_n, 0), device=sequences.device)
        top = None
        if self.top_k:
            top = (torch.stack([i for i, _ in self._top], dim=1), torch.stack([v for _, v in self._top], dim=1))
        return sampled, top

    def _finish_step(self, k: int, toks: torch.Tensor, raw: torch.Tensor) -> None:
        """Logprobs of the ids ``toks`` (B,) sampled at step ``k`` from the raw logits ``raw`` (B, V)."""
        lsm = raw.log_softmax(-1) if self.top_k or any(self._free) else None  # (B, V)
        col = (lsm.gather(-1, toks.unsqueeze(-1)).squeeze(-1) if lsm is not None
               else torch.zeros(toks.shape[0], dtype=torch.float32, device=raw.device))  # (B,)
        if self.top_k:
            top = lsm.topk(min(self.top_k, lsm.shape[-1]), dim=-1)
            self._top.append((top.indices, top.values))
        if self._tracked:
            ids = toks.tolist()
            active = [b for b in range(len(ids)) if self._active[b] and k < self.budgets[b]]
            self._constrained(k, ids, active, raw, col)
            for b in active:
                self._gen[b].append(ids[b])
                self._active[b] = ids[b] not in self.stops
        self._cols.append(col)

    def _constrained(self, k: int, ids: list[int], active: list[int], raw: torch.Tensor, col: torch.Tensor) -> None:
        """Write into ``col`` the renormalised logprobs of the active trie and grammar rows."""
        rows, bits = [], []
        for b in active:
            trie = self.tries[b]
            if trie is not None:
                allowed = trie.allowed(self._gen[b])
                if allowed is None or ids[b] not in allowed:
                    raise ValueError(f"completion token {ids[b]} at position {k} is not allowed by the trie; "
                                     "was it sampled with this constraint?")
                z = raw[b, torch.from_numpy(allowed).to(raw.device)]
                col[b] = raw[b, ids[b]] - torch.logsumexp(z, dim=0)
            elif self.grammar is not None and self.grammar.grammars[b] is not None:
                masks = self.grammar.masks[b]
                if len(masks) <= k:
                    self._missing.add(b)
                    continue
                rows.append(b)
                bits.append(masks[k])
        if rows:
            idx = torch.tensor(rows, device=raw.device)
            z = raw[idx]  # (G, V)
            allowed = unpack_bits(torch.from_numpy(np.stack(bits)).to(raw.device), z.shape[-1])
            lse = torch.logsumexp(z.masked_fill(~allowed, float("-inf")), dim=-1)
            picked = z.gather(-1, torch.tensor([ids[b] for b in rows], device=raw.device).unsqueeze(-1)).squeeze(-1)
            col[idx] = picked - lse
