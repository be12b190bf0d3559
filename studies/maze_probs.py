"""The constrained-decoding probability of each admissible action after a prompt, under an HF causal
LM: ``action_probs`` (one padded forward per prompt) and ``batch_action_probs`` (many prompts at once:
their common prefix once on a KV cache, one row per branching path of the completions' token trie).
Used by ``studies.llm_maze`` to compute a policy's exact values on the junction maze.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from agentrl.llm.constrained import TokenTrie

__all__ = ["action_probs", "batch_action_probs", "renormalised"]


def _branch_rows(seqs: list[np.ndarray]) -> tuple[list[list[np.ndarray]], list[int]]:
    """Per completion, the trie's allowed ids at each position (``TokenTrie.walk``), and the indices
    of the completions whose paths cover every node with >= 2 allowed ids (where a choice is made;
    a position with one allowed id contributes log 1 = 0)."""
    trie = TokenTrie(seqs)
    walks, rows, covered = [trie.walk(s) for s in seqs], [], set()
    for i, (s, walk) in enumerate(zip(seqs, walks)):
        nodes = {tuple(int(x) for x in s[:k]) for k, a in enumerate(walk) if len(a) > 1}
        if nodes - covered:
            rows.append(i)
            covered |= nodes
    return walks, rows


@torch.inference_mode()
def batch_action_probs(model: torch.nn.Module, prompts: list[np.ndarray], seqs: list[list[np.ndarray]], pad_id: int,
                       max_rows: int = 32) -> list[np.ndarray]:
    """``action_probs`` of many prompts at once, renormalised (float64[A_i] per prompt, summing to 1):
    the prompts' longest common token prefix runs once (KV cache); each prompt then needs one row
    per path through its completions' token trie that reaches a node with >= 2 allowed ids (the
    other positions contribute log 1 = 0), holding only its own suffix; rows go ``max_rows`` to a
    forward. Logits are ``model.get_output_embeddings()`` of the decoder's last hidden state at the
    needed positions only (a causal LM without logit post-processing, e.g. Llama, Qwen3); equal to
    ``action_probs`` within float rounding (~1e-6)."""
    from transformers import DynamicCache

    if not prompts:
        return []
    lengths = [len(p) for p in prompts]
    c = min(lengths) - 1  # every row keeps >= 1 token of its own
    first = np.asarray(prompts[0])
    for p in prompts[1:]:
        diff = np.flatnonzero(np.asarray(p[:c]) != first[:c])
        c = int(diff[0]) if diff.size else c
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    dev = next(model.parameters()).device
    cache = None
    if c > 0:
        cache = DynamicCache(config=model.config)
        decoder(input_ids=torch.as_tensor(first[None, :c], dtype=torch.long, device=dev), past_key_values=cache,
                use_cache=True)
    rows, walks = [], []  # rows: (prompt index, completion index, its input ids, positions to read)
    for i, (p, ss) in enumerate(zip(prompts, seqs)):
        walk, cover = _branch_rows(ss)
        walks.append(walk)
        for r in cover:
            ks = [k for k, a in enumerate(walk[r]) if len(a) > 1]
            ids = np.concatenate([np.asarray(p[c:], np.int64), np.asarray(ss[r][: ks[-1]], np.int64)])
            rows.append((i, r, ids, ks))
    node_lp: dict[tuple, dict[int, float]] = {}  # (prompt, trie node) -> {allowed id: logprob}
    for lo in range(0, len(rows), max_rows):
        chunk = rows[lo:lo + max_rows]
        width = max(len(r[2]) for r in chunk)
        ids = torch.full((len(chunk), width), int(pad_id), dtype=torch.long)
        mask = torch.zeros((len(chunk), c + width), dtype=torch.long)
        mask[:, :c] = 1
        for n, (_, _, row, _) in enumerate(chunk):
            ids[n, :len(row)] = torch.as_tensor(row)
            mask[n, c:c + len(row)] = 1
        past = None
        if cache is not None:
            past = copy.deepcopy(cache)
            past.batch_repeat_interleave(len(chunk))
        pos = torch.arange(c, c + width, device=dev).expand(len(chunk), width)
        h = decoder(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos, past_key_values=past,
                    use_cache=past is not None).last_hidden_state
        where = [(n, len(prompts[i]) - c - 1 + k) for n, (i, _, _, ks) in enumerate(chunk) for k in ks]
        logits = head(h[[n for n, _ in where], [q for _, q in where]]).float().cpu()
        m = 0
        for i, r, _, ks in chunk:
            s = seqs[i][r]
            for k in ks:
                allowed = torch.from_numpy(walks[i][r][k])
                z = logits[m, allowed]
                lp = z - torch.logsumexp(z, dim=0)
                node_lp[(i, tuple(int(x) for x in s[:k]))] = {int(a): float(v) for a, v in zip(allowed, lp)}
                m += 1
    out = []
    for i, ss in enumerate(seqs):
        lp = np.array([sum(node_lp[(i, tuple(int(x) for x in s[:k]))][int(s[k])]
                           for k, a in enumerate(walks[i][n]) if len(a) > 1) for n, s in enumerate(ss)])
        out.append(renormalised(np.exp(lp)))
    return out


@torch.inference_mode()
def action_probs(model: torch.nn.Module, prompt: np.ndarray, seqs: list[np.ndarray], pad_id: int) -> np.ndarray:
    """float64[A]: the constrained-decoding probability of each completion in ``seqs`` after
    ``prompt`` (one batched forward of A rows, right-padded; per token the raw logit minus the
    logsumexp over the trie's allowed ids at that position). Sums to 1 when ``seqs`` is every
    allowed completion (each ending with EOS, as ``completion_sequences`` gives them)."""
    p, width = len(prompt), max(len(s) for s in seqs)
    ids = torch.full((len(seqs), p + width), int(pad_id), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :p], ids[i, p:p + len(s)] = torch.as_tensor(prompt, dtype=torch.long), torch.as_tensor(s)
        mask[i, :p + len(s)] = 1
    dev = next(model.parameters()).device
    logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), logits_to_keep=width + 1).logits
    raw = logits[:, :width].float().cpu()  # (A, width, V): position p - 1 + k predicts token k
    trie, out = TokenTrie(seqs), np.zeros(len(seqs))
    for i, s in enumerate(seqs):
        for k, allowed in enumerate(trie.walk(s)):
            z = raw[i, k, torch.from_numpy(allowed)]
            out[i] += float(raw[i, k, int(s[k])] - torch.logsumexp(z, dim=0))
    return np.exp(out)


def renormalised(p: np.ndarray) -> np.ndarray:
    """float64[A] ``p / p.sum()``: ``action_probs`` in fp32 sums to 1 within ~1e-6 (rounding of the
    per-token logsumexps), ``exact_values`` wants 1e-9."""
    return p / p.sum()
