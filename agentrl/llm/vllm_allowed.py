"""vLLM V1 logits processor for constrained action decoding (``VLLMEngine.generate(allowed=...)``).

``AllowedTokensProcessor`` is registered on the engine when the ``vllm.LLM`` is built
(``logits_processors=[FQCN]``, ``VLLMEngine.from_pretrained(constrained=True)``). A request
opts in by carrying its allowed completions in ``SamplingParams.extra_args[EXTRA_KEY]`` (a
list of int id lists, each ending with EOS); at every step the processor sets to ``-inf``
every logit whose id the request's ``TokenTrie`` does not allow after the tokens generated
so far (rows off the trie or at a complete sequence are left alone, like ``HFEngine``).
Requests without the key are untouched and cost nothing.

The processor runs before temperature / top-k / top-p (vLLM's non-argmax-invariant stage),
so sampling uses the restricted distribution, greedy included. It does not change the
returned logprobs (the engine keeps ``logprobs_mode="raw_logprobs"``; ``VLLMEngine``
renormalises them over the allowed ids itself).

This module imports vLLM: only ``agentrl.llm.vllm`` names it (by FQCN string), so
``import agentrl`` never needs vLLM.
"""

from __future__ import annotations

from typing import Sequence

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from agentrl.llm.constrained import TokenTrie

#: ``SamplingParams.extra_args`` key holding a request's allowed completions.
EXTRA_KEY = "agentrl_allowed"
#: Fully-qualified class name passed to ``vllm.LLM(logits_processors=[...])``.
FQCN = "agentrl.llm.vllm_allowed:AllowedTokensProcessor"


def allowed_of(params) -> list[list[int]] | None:
    """The allowed completions a ``vllm.SamplingParams`` carries, or None (unconstrained).

    Raises:
        ValueError: the entry is not a non-empty list of non-empty int lists.
    """
    seqs = (getattr(params, "extra_args", None) or {}).get(EXTRA_KEY)
    if seqs is None:
        return None
    if not isinstance(seqs, (list, tuple)) or not seqs or not all(
        isinstance(s, (list, tuple)) and s and all(isinstance(t, int) and t >= 0 for t in s) for s in seqs
    ):
        raise ValueError(f"SamplingParams.extra_args[{EXTRA_KEY!r}] must be a non-empty list of non-empty "
                         f"lists of token ids (each ending with EOS)")
    return [list(s) for s in seqs]


class _TrieRow:
    """Per-request callable ``(output_ids, logits[V]) -> logits[V]``: keeps only the ids the
    trie allows after ``output_ids`` (in place)."""

    def __init__(self, trie: TokenTrie) -> None:
        self.trie = trie
        self._idx: dict[tuple[int, ...], torch.Tensor] = {}  # prefix -> allowed ids on the logits' device

    def __call__(self, output_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        key = tuple(output_ids)
        idx = self._idx.get(key)
        if idx is None:
            ids = self.trie.allowed(key)
            if ids is None or ids.size == 0:  # off the trie / sequence complete: leave the row alone
                return logits
            idx = self._idx[key] = torch.from_numpy(ids).to(logits.device)
        keep = logits[idx].clone()
        logits.fill_(float("-inf"))
        logits[idx] = keep
        return logits


class AllowedTokensProcessor(AdapterLogitsProcessor):
    """vLLM V1 engine-level logits processor: per-request token-trie masking.

    A request is constrained when ``SamplingParams.extra_args[EXTRA_KEY]`` holds its allowed
    completions (``allowed_of``). Not argmax-invariant (it changes greedy picks), so vLLM
    applies it to raw float32 logits before temperature and top-k / top-p.
    """

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        """Reject a malformed ``extra_args[EXTRA_KEY]`` at request admission (``ValueError``)."""
        allowed_of(sampling_params)

    def is_argmax_invariant(self) -> bool:
        """False: masking changes the argmax."""
        return False

    def new_req_logits_processor(self, params) -> _TrieRow | None:
        """The masking callable of a constrained request, None for an unconstrained one."""
        seqs = allowed_of(params)
        return None if seqs is None else _TrieRow(TokenTrie(seqs))
