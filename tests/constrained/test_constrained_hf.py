"""Constrained decoding on the tiny HF model: allowed completions only, logprobs renormalised
over the allowed ids, the same masks and logprobs recomputed by the update (fp32, ≤ 1e-4)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import agentrl.llm.trie_decode as trie_decode  # noqa: E402
from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.chat import ChatRenderer  # noqa: E402
from agentrl.llm.constrained import TokenTrie, completion_sequences  # noqa: E402
from agentrl.types import Message  # noqa: E402
from agentrl.update.batch import build_batch  # noqa: E402
from agentrl.update.logprobs import entropy_from_logits, forward_token_stats  # noqa: E402

ACTIONS = ["go east", "go west", "take key", "open door", "look", "inventory"]


def _restricted_reference(model, prompt, completion, trie):
    """Hand computation: teacher-forced raw logits, log-softmax over the trie's allowed ids."""
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # (L, V)
    out, p = [], len(prompt)
    for k, tok in enumerate(completion):
        allowed = torch.from_numpy(trie.allowed(list(completion[:k])))
        z = logits[p + k - 1]
        out.append(float(z[tok] - torch.logsumexp(z[allowed], 0)))
    return np.asarray(out, np.float32), logits


@pytest.fixture(scope="module")
def setup(tiny_engine, tiny_tokenizer):
    r = ChatRenderer(tiny_tokenizer)
    prompts = [r.render_ids([Message("user", f"room {i}: pick a command")]) for i in range(4)]
    return tiny_engine, r, prompts


@pytest.mark.parametrize("fmt,greedy,temp", [("tag:action", False, 1.0), ("whole", False, 0.7), ("whole", True, 1.0)])
def test_engine_samples_only_allowed_with_renormalised_logprobs(setup, fmt, greedy, temp):
    engine, r, prompts = setup
    acts = [ACTIONS[i:] for i in range(4)]  # a different allowed set per row
    seqs = [completion_sequences(a, fmt, r.encode, r.eos_token_id) for a in acts]
    sp = SamplingParams(max_tokens=40, seed=3, greedy=greedy, temperature=temp)
    outs = engine.generate(prompts, sp, allowed=seqs)
    for p, s, c in zip(prompts, seqs, outs):
        assert c.finish_reason == "stop"
        assert any(np.array_equal(c.token_ids, x) for x in s), "completion is not an allowed sequence"
        trie = TokenTrie(s)
        ref, logits = _restricted_reference(engine.model, p, c.token_ids, trie)
        np.testing.assert_allclose(c.logprobs, ref, atol=1e-4)
        assert np.all(c.logprobs <= 0)
        if greedy:  # argmax of the restricted logits at every step
            for k, tok in enumerate(c.token_ids):
                allowed = trie.allowed(list(c.token_ids[:k]))
                z = logits[len(p) + k - 1, torch.from_numpy(allowed)]
                assert allowed[int(z.argmax())] == tok


def test_mixed_batch_unconstrained_row_is_unchanged(setup):
    engine, r, prompts = setup
    sp = SamplingParams(max_tokens=6, seed=11)
    free = engine.generate(prompts[:2], sp)
    seqs = completion_sequences(ACTIONS, "whole", r.encode, r.eos_token_id)
    mixed = engine.generate(prompts[:2], sp, allowed=[None, seqs])
    ref = engine.score(prompts[0], mixed[0].token_ids)  # the free row keeps full-vocab raw logprobs
    np.testing.assert_allclose(mixed[0].logprobs, ref, atol=1e-4)
    assert any(np.array_equal(mixed[1].token_ids, x) for x in seqs)
    assert free[0].token_ids.size >= 1
    with pytest.raises(ValueError, match="one \\(or None\\) per prompt"):
        engine.generate(prompts[:2], sp, allowed=[seqs])


def test_sampling_masks_equal_update_masks_and_logprobs_match(setup, monkeypatch):
    """The ids left finite by the engine's mask at every step are exactly the update's
    ``allowed_ids`` at that position; masked teacher-forced logprobs equal the stored ones."""
    engine, r, prompts = setup
    seen: dict[tuple[int, int], list[int]] = {}
    orig = trie_decode.TrieMask.__call__

    def record(self, input_ids, scores):
        out = orig(self, input_ids, scores)
        step = input_ids.shape[1] - self.width
        for b in range(out.shape[0]):
            finite = torch.isfinite(out[b]).nonzero().flatten().tolist()
            if len(finite) < out.shape[1]:
                seen[(b, step)] = finite
        return out

    monkeypatch.setattr(trie_decode.TrieMask, "__call__", record)
    acts = [ACTIONS, ACTIONS[:2], ACTIONS[2:], ["look"]]
    seqs = [completion_sequences(a, "tag:action", r.encode, r.eos_token_id) for a in acts]
    outs = engine.generate(prompts, SamplingParams(max_tokens=40, seed=5), allowed=seqs)
    per_turn = [TokenTrie(s).walk(c.token_ids) for s, c in zip(seqs, outs)]
    batch = build_batch(prompts, [c.token_ids for c in outs], [c.logprobs for c in outs], np.ones(4),
                        pad_id=engine.pad_token_id, allowed=per_turn)
    for b, (p, c) in enumerate(zip(prompts, outs)):
        for k in range(c.token_ids.size):
            row = batch.allowed_ids[b, p.size + k]
            assert sorted(row[row >= 0].tolist()) == seen[(b, k)]
    assert (batch.allowed_ids[batch.loss_mask == 0] == -1).all()
    with torch.no_grad():
        st = forward_token_stats(engine.model, batch.input_ids, batch.attention_mask, allowed_ids=batch.allowed_ids,
                                 with_entropy=True)
    m = batch.loss_mask.bool()
    assert torch.max(torch.abs(st.logprobs[m] - batch.old_logprobs[m])) <= 1e-4
    # a position with a single allowed id has logprob 0 and entropy 0
    single = m & ((batch.allowed_ids >= 0).sum(-1) == 1)
    assert single.any() and torch.all(st.logprobs[single].abs() < 1e-6) and torch.all(st.entropy[single].abs() < 1e-5)


def test_restricted_entropy_by_hand_and_finite_gradients():
    torch.manual_seed(0)
    logits = torch.randn(1, 3, 7, requires_grad=True)
    ids = torch.tensor([[0, 2, 5]])
    allowed = torch.full((1, 3, 3), -1)
    allowed[0, 1, :2] = torch.tensor([2, 4])  # position 1 constrained to {2, 4}; position 2 free
    ent = entropy_from_logits(logits, allowed_ids=allowed)
    z = logits[0, 0, [2, 4]]
    p = z.softmax(0)
    assert torch.allclose(ent[0, 1], -(p * p.log()).sum(), atol=1e-6)
    free = logits[0, 1].log_softmax(0)
    assert torch.allclose(ent[0, 2], -(free.exp() * free).sum(), atol=1e-6)
    from agentrl.update.logprobs import logprobs_from_logits

    lp = logprobs_from_logits(logits, ids, allowed_ids=allowed)
    assert torch.allclose(lp[0, 1], z.log_softmax(0)[0], atol=1e-6)
    assert torch.allclose(lp[0, 2], free[5], atol=1e-6)
    (lp.sum() + ent.sum()).backward()
    assert torch.isfinite(logits.grad).all()
    assert logits.grad[0, 0, [0, 1, 3, 5, 6]].abs().max() == 0  # only the allowed ids get gradient at pos 1
