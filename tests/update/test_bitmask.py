"""Grammar bitmasks in the training batch (``agentrl.update.bitmask``), on synthetic masks:
packing and deduplication, row selection, and the renormalised logprobs / entropy against a
plain masked log-softmax (no grammar engine needed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from agentrl.update.batch import build_batch
from agentrl.update.logprobs import entropy_from_logits, logprobs_from_logits

V = 70  # not a multiple of 32: the last word's high bits must stay unused


@dataclass
class _Masks:  # the shape of agentrl.llm.grammar.TokenMasks
    index: np.ndarray
    bits: np.ndarray


def _pack(allowed: np.ndarray) -> np.ndarray:
    """bool[N, V] → int32[N, W] bitmasks."""
    w = (allowed.shape[1] + 31) // 32
    out = np.zeros((allowed.shape[0], w), dtype=np.int64)
    for i in np.argwhere(allowed):
        out[i[0], i[1] // 32] |= 1 << (i[1] % 32)
    return out.astype(np.uint32).view(np.int32)


def _turn_masks(rng, comp: np.ndarray, n_distinct: int) -> tuple[_Masks, np.ndarray]:
    table = rng.random((n_distinct, V)) < 0.3
    index = rng.integers(0, n_distinct, size=comp.size).astype(np.int32)
    table[index, comp] = True  # the sampled id is always allowed
    return _Masks(index, _pack(table)), table[index]


def test_packed_masks_give_the_masked_log_softmax_and_survive_select():
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, V, 4), rng.integers(0, V, 3), rng.integers(0, V, 5)]
    comps = [rng.integers(0, V, 5), rng.integers(0, V, 2), rng.integers(0, V, 4)]
    m0, a0 = _turn_masks(rng, comps[0], 2)
    m2, a2 = _turn_masks(rng, comps[2], 3)
    batch = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], np.ones(3), pad_id=0,
                        grammar=[m0, None, m2])
    gm = batch.grammar_mask
    assert gm.index.shape == batch.input_ids.shape and gm.bits.dtype == torch.int32 and gm.bits.shape[0] <= 5
    assert (gm.index[1] == -1).all() and (gm.index[0, :4] == -1).all() and (gm.index[0, 4:9] >= 0).all()
    logits = torch.randn(3, batch.input_ids.shape[1], V, dtype=torch.float32, requires_grad=True)
    lp = logprobs_from_logits(logits, batch.input_ids, grammar_mask=gm)
    ent = entropy_from_logits(logits, grammar_mask=gm)
    lpd, entd = lp.detach(), ent.detach()
    for row, (p, c, allowed) in enumerate([(prompts[0], comps[0], a0), (prompts[2], comps[2], a2)]):
        b = 0 if row == 0 else 2
        for k, tok in enumerate(c):
            z = logits[b, p.size + k - 1].detach().double()
            want = z[tok] - torch.logsumexp(z[torch.from_numpy(allowed[k])], 0)
            assert abs(float(lpd[b, p.size + k]) - float(want)) < 1e-5
            q = torch.softmax(z[torch.from_numpy(allowed[k])], 0)
            assert abs(float(entd[b, p.size + k]) + float((q * q.log()).sum())) < 1e-5
    free = logits[1, 2].detach().log_softmax(-1)[batch.input_ids[1, 3]]
    assert abs(float(lpd[1, 3]) - float(free)) < 1e-6  # the unconstrained turn is a plain softmax
    (lp.sum() + ent.sum()).backward()
    assert torch.isfinite(logits.grad).all()
    sub = batch.select([2, 0])
    assert torch.equal(sub.grammar_mask.index[0, :sub.input_ids.shape[1]], gm.index[2, :sub.input_ids.shape[1]])
    assert sub.to("cpu").grammar_mask.bits is not None


def test_packing_chains_keeps_each_turns_masks_at_its_positions():
    rng = np.random.default_rng(1)
    p0, c0 = rng.integers(0, V, 3), rng.integers(0, V, 2)
    p1 = np.concatenate([p0, c0, rng.integers(0, V, 2)])
    c1 = rng.integers(0, V, 3)
    m0, _ = _turn_masks(rng, c0, 1)
    m1, _ = _turn_masks(rng, c1, 2)
    batch = build_batch([p0, p1], [c0, c1], [np.zeros(2), np.zeros(3)], np.ones(2), pad_id=0, pack=True,
                        grammar=[m0, m1])
    idx = batch.grammar_mask.index
    assert batch.num_rows == 1 and (idx[0, 3:5] >= 0).all() and (idx[0, 5:7] == -1).all() and (idx[0, 7:10] >= 0).all()
    bits = batch.grammar_mask.bits.numpy()
    np.testing.assert_array_equal(bits[idx[0, 3:5].numpy()], m0.bits[m0.index])  # deduplicated, same masks
    np.testing.assert_array_equal(bits[idx[0, 7:10].numpy()], m1.bits[m1.index])


def test_a_mask_that_forbids_the_sampled_id_is_refused():
    comp = np.array([5, 6])
    bad = _Masks(np.zeros(2, np.int32), _pack(np.zeros((1, V), bool)))
    with pytest.raises(ValueError, match="allowing the sampled id"):
        build_batch([np.array([1, 2])], [comp], [np.zeros(2)], np.ones(1), pad_id=0, grammar=[bad])
    with pytest.raises(ValueError, match="one .* per turn"):
        build_batch([np.array([1, 2])], [comp], [np.zeros(2)], np.ones(1), pad_id=0, grammar=[bad, bad])
