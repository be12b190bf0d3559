"""Admissible-command tries in the HF engine's decoding loop (torch side of ``agentrl.llm.constrained``).

``TrieMask`` is a transformers logits processor that lets row b sample only the ids its
``TokenTrie`` allows after the row's generated prefix. The logprobs of the sampled ids,
renormalised over those ids (what the update recomputes from ``constraint_masks``), are
taken step by step from the raw logits by ``agentrl.llm.step_logprobs``.
"""

from __future__ import annotations

import torch

from agentrl.llm.constrained import TokenTrie

__all__ = ["TrieMask"]


class TrieMask:
    """Logits processor: row b may only sample the ids its trie allows after its generated
    prefix (rows without a trie, finished rows and rows off the trie are left alone)."""

    def __init__(self, tries: list[TokenTrie | None], prompt_width: int, stops: set[int]) -> None:
        self.tries, self.width, self.stops = tries, prompt_width, stops

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        for b, trie in enumerate(self.tries):
            gen = input_ids[b, self.width :].tolist()
            if trie is None or any(t in self.stops for t in gen):
                continue
            ids = trie.allowed(gen)
            if ids is None or ids.size == 0:
                continue
            idx = torch.from_numpy(ids).to(scores.device)
            row = torch.full_like(scores[b], float("-inf"))
            row[idx] = scores[b, idx]
            scores[b] = row
        return scores

