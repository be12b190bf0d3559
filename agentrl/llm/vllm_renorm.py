"""Renormalised logprobs of ``VLLMEngine``'s constrained rows (``generate(allowed=...)``).

Each sampled token's raw logprob is renormalised over the ids the token trie allows at its
step (the quantity the update recomputes, ``agentrl.llm.constrained.constraint_masks``). The
raw logprobs of a branching step's ids come back with the completion when they fitted in the
request's ``logprob_token_ids``; the others are re-scored with one-token greedy requests on
the prefix (prefix-cached). vLLM is imported lazily (only ``agentrl.llm.vllm`` calls this).
"""

from __future__ import annotations

import numpy as np

from agentrl.llm.constrained import renormalised_logprob

__all__ = ["renormalised"]


def renormalised(llm, rows: list[np.ndarray], outs: list, tries: list, max_ids: int) -> list[np.ndarray | None]:
    """Per row, float32[C] logprobs renormalised over the trie's allowed ids at each step
    (None for unconstrained rows). A step with one allowed id gives 0; a branching step uses
    the raw logprobs returned with the completion, or, when its ids were not among them, a
    one-token re-scoring request on the prefix (``logprob_token_ids`` in chunks of ``max_ids``).

    Args:
        llm: the ``vllm.LLM`` that sampled ``outs`` (call with the engine's lock held).
        rows: int32[P_b] prompts. outs: vLLM ``CompletionOutput`` per row. tries: a
            ``TokenTrie`` or None per row. max_ids: most ids per re-scoring request.
    """
    res: list[np.ndarray | None] = [None] * len(outs)
    todo = []  # (row, step, ids) whose raw logprobs did not come back
    for b, (o, trie) in enumerate(zip(outs, tries)):
        if trie is None:
            continue
        toks = [int(t) for t in o.token_ids]
        lp = np.zeros(len(toks), dtype=np.float64)
        for k, ids in enumerate(trie.walk(toks)):
            if ids.size == 1:
                continue
            got = o.logprobs[k] if o.logprobs is not None else {}
            if all(int(i) in got for i in ids):
                lp[k] = renormalised_logprob({int(i): got[int(i)].logprob for i in ids}, toks[k])
            else:
                todo.append((b, k, ids))
        res[b] = lp
    if todo:
        _rescore(llm, rows, outs, todo, res, max_ids)
    return [None if r is None else r.astype(np.float32) for r in res]


def _rescore(llm, rows: list[np.ndarray], outs: list, todo: list, res: list, max_ids: int) -> None:
    """Fill ``res[b][k]`` for each ``(b, k, ids)`` in ``todo`` from one-token greedy requests on
    ``prompt_b + completion_b[:k]`` returning the raw logprobs of ``ids`` (≤ ``max_ids`` per
    request)."""
    from vllm import SamplingParams as VSP
    from vllm.inputs import TokensPrompt

    reqs, keys = [], []
    for b, k, ids in todo:
        prefix = rows[b].tolist() + [int(t) for t in outs[b].token_ids[:k]]
        for c in range(0, ids.size, max_ids):
            chunk = [int(i) for i in ids[c: c + max_ids]]
            reqs.append(TokensPrompt(prompt_token_ids=prefix))
            keys.append((b, k, chunk))
    params = [VSP(temperature=0.0, max_tokens=1, logprob_token_ids=chunk, detokenize=False) for _, _, chunk in keys]
    got: dict[tuple[int, int], dict[int, float]] = {}
    for (b, k, chunk), o in zip(keys, llm.generate(reqs, params, use_tqdm=False)):
        d = o.outputs[0].logprobs[0]
        got.setdefault((b, k), {}).update({i: d[i].logprob for i in chunk})
    for b, k, _ in todo:
        res[b][k] = renormalised_logprob(got[(b, k)], int(outs[b].token_ids[k]))
