"""Per-token logprobs / entropy from a forward pass equal a manual log_softmax gather."""

from __future__ import annotations

import numpy as np
import torch

from agentrl.update import batch_logprobs, build_batch, entropy_from_logits, forward_token_stats, logprobs_from_logits
from update_fixtures import PAD, random_turns, tiny_model


def test_logprobs_from_logits_manual_gather() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 7, generator=g, dtype=torch.float64).to(torch.bfloat16)
    ids = torch.randint(0, 7, (2, 4), generator=g)
    for temp in (1.0, 0.7):
        got = logprobs_from_logits(logits, ids, temperature=temp)
        assert got.dtype == torch.float32 and got.shape == (2, 4)
        for b in range(2):
            assert got[b, 0] == 0
            for t in range(1, 4):
                ref = torch.log_softmax(logits[b, t - 1].double() / temp, -1)[ids[b, t]]
                assert abs(got[b, t].item() - ref.item()) < 1e-5
        ent = entropy_from_logits(logits, temperature=temp)
        p = torch.softmax(logits[0, 2].double() / temp, -1)
        assert abs(ent[0, 3].item() + (p * p.log()).sum().item()) < 1e-5 and ent[0, 0] == 0


def test_forward_logprobs_equal_manual_and_are_padding_invariant() -> None:
    model = tiny_model()
    prompts, comps, lps, adv = random_turns(0)
    b = build_batch(prompts, comps, lps, adv, pad_id=PAD)
    with torch.no_grad():
        stats = forward_token_stats(model, b.input_ids, b.attention_mask, with_entropy=True)
    for r in (0, b.num_rows - 1):  # a padded row and the longest row, each run alone unpadded
        n = int(b.attention_mask[r].sum())
        ids = b.input_ids[r : r + 1, :n]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]
        manual = torch.log_softmax(logits[:-1].float(), -1).gather(-1, ids[0, 1:, None])[:, 0]
        assert torch.allclose(stats.logprobs[r, 1:n], manual, atol=1e-5)
        p = torch.softmax(logits[:-1].float(), -1)
        assert torch.allclose(stats.entropy[r, 1:n], -(p * p.log()).sum(-1), atol=1e-5)


def test_batch_logprobs_microbatched_equals_full_and_masks_padding() -> None:
    model = tiny_model()
    prompts, comps, lps, adv = random_turns(1)
    b = build_batch(prompts, comps, lps, adv, pad_id=PAD)
    full = batch_logprobs(model, b, micro_batch=b.num_rows)
    for mb in (1, 2):
        assert torch.allclose(batch_logprobs(model, b, micro_batch=mb), full, atol=1e-6)
    assert bool((full[b.attention_mask == 0] == 0).all())
    assert model.training  # mode restored


def test_packed_logprobs_equal_unpacked_on_completion_tokens() -> None:
    """A causal model scores each completion from its prefix only, so a packed row gives
    the same completion logprobs as one row per turn."""
    model = tiny_model()
    prompts, comps, lps, adv = random_turns(2, (3, 2))
    flat = build_batch(prompts, comps, lps, adv, pad_id=PAD)
    packed = build_batch(prompts, comps, lps, adv, pad_id=PAD, pack=True)
    assert packed.num_rows == 2 and flat.num_rows == 5
    lp_flat, lp_packed = batch_logprobs(model, flat), batch_logprobs(model, packed)
    for n in range(len(prompts)):
        a, b = lp_flat[flat.turn_ids == n], lp_packed[packed.turn_ids == n]
        assert a.numel() == comps[n].size and torch.allclose(a, b, atol=1e-5)
    assert np.isclose(float(lp_flat[flat.loss_mask > 0].sum()), float(lp_packed[packed.loss_mask > 0].sum()), atol=1e-4)


def test_token_mask_path_equals_full_logits_with_gradients():
    """``token_mask``: the LM head runs only at the needed columns (``logits_to_keep``); the
    logprobs, entropies and gradients at the masked tokens equal the full-logits path."""
    import torch

    from agentrl.update.logprobs import forward_token_stats
    from update_fixtures import tiny_model

    model = tiny_model(1)
    torch.manual_seed(0)
    b, t = 3, 24
    ids = torch.randint(0, model.config.vocab_size, (b, t))
    attn = torch.ones(b, t, dtype=torch.long)
    attn[2, 18:] = 0
    mask = torch.zeros(b, t, dtype=torch.bool)
    mask[0, 5:8], mask[1, 12:16], mask[2, 14:18] = True, True, True
    allowed = torch.full((b, t, 2), -1)
    allowed[0, 6] = torch.tensor([int(ids[0, 6]), 3])
    grads = []
    for kw in ({}, {"token_mask": mask}):
        model.zero_grad()
        out = forward_token_stats(model, ids, attn, with_entropy=True, entropy_grad=True, allowed_ids=allowed, **kw)
        ((out.logprobs + out.entropy) * mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
        if not kw:
            full = out
    # the LM head's matmul over K kept columns instead of all T may block its sums differently: on
    # AVX2 kernels the logits differ by 1 ulp (6e-8; bit-equal on AVX-512), the logprobs and
    # entropies (|x| ≈ 5.5, ulp 4.8e-7) by 1–2 ulps and the gradients (max |g| ≈ 4.7) by 1.3e-6.
    # A column off by one moves these logprobs by 8e-3 to units: 2000× the tolerance and more.
    assert torch.allclose(full.logprobs * mask, out.logprobs * mask, rtol=0, atol=4e-6)
    assert float(out.logprobs.detach()[mask].abs().min()) > 0.1  # real values at every masked token, not zeros
    assert torch.allclose(full.entropy * mask, out.entropy * mask, rtol=0, atol=4e-6)
    assert len(grads[0]) == len(grads[1])
    for g_full, g_kept in zip(*grads):
        assert torch.allclose(g_full, g_kept, rtol=1e-5, atol=1e-6)
