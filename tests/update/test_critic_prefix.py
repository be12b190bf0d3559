"""The turn critic's prompt-only, distinct-prompt, shared-prefix path (``update.share_prefix`` for
turn-PPO): the same values, loss and gradients as the plain path, on fewer tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.update import TurnCritic, build_batch, critic_update, make_optimizer, turn_values
from agentrl.update.critic import value_rows
from update_fixtures import PAD, VOCAB, tiny_model


def _turns(seed: int = 0):
    """Window-style turns of two tasks: every episode's first prompt repeats (4 copies of task A's,
    2 of task B's), later prompts share the task prefix; one prompt is a prefix of another."""
    rng = np.random.default_rng(seed)
    ids = lambda n: rng.integers(2, VOCAB, size=n).astype(np.int32)  # noqa: E731
    task_a, task_b = ids(12), ids(9)
    first_a, first_b = np.concatenate([task_a, ids(4)]), np.concatenate([task_b, ids(3)])
    prompts = [first_a, first_b, first_a, np.concatenate([task_a, ids(7)]), first_a, first_b,
               np.concatenate([first_a, ids(2)]), first_a, np.concatenate([task_b, ids(6)])]
    comps = [ids(int(rng.integers(1, 5))) for _ in prompts]
    return prompts, comps


def _critic_and_batch(top_n: int | None = None, seed: int = 0, attn: str = "eager"):
    model = tiny_model(1)
    model.config._attn_implementation = attn  # make_critic loads the real model with transformers' default, sdpa
    critic = TurnCritic(model, top_n_layers=top_n)
    torch.nn.init.normal_(critic.head.weight, std=0.5)
    prompts, comps = _turns(seed)
    batch = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], np.zeros(len(prompts)), pad_id=PAD)
    rng = np.random.default_rng(seed + 1)
    returns = torch.tensor(rng.normal(size=len(prompts)), dtype=torch.float32)
    old = torch.tensor(rng.normal(scale=0.2, size=len(prompts)), dtype=torch.float32)
    return critic, batch.with_(returns=returns, old_values=old), prompts


def test_value_rows_by_hand() -> None:
    prompts, comps = _turns()
    batch = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], np.zeros(len(prompts)), pad_id=PAD)
    plain = value_rows(batch)
    assert plain.num_prompts == 9 and plain.turn_prompt.tolist() == list(range(9))
    for n, p in enumerate(prompts):  # each turn's prompt, no completion token
        assert plain.last[n] == p.size - 1
        assert plain.input_ids[n, :p.size].tolist() == p.tolist() and int(plain.attention_mask[n].sum()) == p.size
    rows = value_rows(batch, distinct=True)
    assert rows.num_prompts == 5  # first_a ×4, first_b ×2, and 3 others
    for n, p in enumerate(prompts):  # every turn points at its own prompt
        u = int(rows.turn_prompt[n])
        assert rows.input_ids[u, :p.size].tolist() == p.tolist() and int(rows.last[u]) == p.size - 1
    assert rows.turn_prompt[0] == rows.turn_prompt[2] == rows.turn_prompt[4] == rows.turn_prompt[7]
    assert rows.turn_prompt[1] == rows.turn_prompt[5] and rows.turn_prompt[0] != rows.turn_prompt[6]
    keys = [tuple(rows.input_ids[u, :int(rows.last[u]) + 1].tolist()) for u in range(rows.num_prompts)]
    assert keys == sorted(keys)  # lexicographic: a task's prompts are neighbours


def test_packed_batch_values_each_turn_at_its_own_prompt() -> None:
    critic, _, _ = _critic_and_batch()
    rng = np.random.default_rng(3)
    p0 = rng.integers(2, VOCAB, size=6).astype(np.int32)
    c0 = rng.integers(2, VOCAB, size=3).astype(np.int32)
    p1 = np.concatenate([p0, c0, rng.integers(2, VOCAB, size=2).astype(np.int32)])
    c1 = rng.integers(2, VOCAB, size=2).astype(np.int32)
    packed = build_batch([p0, p1], [c0, c1], [np.zeros(3), np.zeros(2)], np.zeros(2), pad_id=PAD, pack=True)
    assert packed.num_rows == 1
    got = turn_values(critic, packed, share_prefix=True)
    with torch.no_grad():
        want = [critic.head(critic.backbone(input_ids=torch.as_tensor(p[None], dtype=torch.int64))
                            .last_hidden_state[0, -1]).item() for p in (p0, p1)]
    assert np.allclose(got.numpy(), want, atol=1e-5)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_turn_values_equal_the_plain_path_and_each_prompt_alone(attn) -> None:
    critic, batch, prompts = _critic_and_batch(attn=attn)
    for mb in (1, 3, 8):
        plain = turn_values(critic, batch, micro_batch=mb)
        shared = turn_values(critic, batch, micro_batch=mb, share_prefix=True)
        assert float((plain - shared).abs().max()) < 1e-5, mb
    with torch.no_grad():
        alone = [critic.head(critic.backbone(input_ids=torch.as_tensor(p[None], dtype=torch.int64))
                             .last_hidden_state[0, -1]).item() for p in prompts]
    assert np.allclose(shared.numpy(), alone, atol=1e-5) and np.ptp(alone) > 0.1


def test_shared_path_runs_fewer_tokens() -> None:
    critic, batch, prompts = _critic_and_batch()
    seen = []
    hook = critic.backbone.layers[0].register_forward_hook(lambda m, a, kw=None, out=None: seen.append(a[0].shape[:2]))
    try:
        for share in (False, True):
            seen.clear()
            turn_values(critic, batch, micro_batch=8, share_prefix=share)
            tokens = sum(int(b) * int(t) for b, t in seen)
            if share:
                # 5 distinct prompts in one micro-batch: their common prefix is empty (two tasks), so one
                # padded forward of the 5 distinct prompts, none of the 4 copies
                assert sum(int(b) for b, _ in seen) == 5 and tokens < plain_tokens
            else:
                plain_tokens = tokens
                assert sum(int(b) for b, _ in seen) == 9
    finally:
        hook.remove()
    one_task = value_rows(batch, distinct=True)
    same_task = [u for u in range(one_task.num_prompts) if one_task.input_ids[u, 0] == prompts[0][0]]
    ids, attn, last = one_task.chunk(torch.tensor(same_task), torch.device("cpu"))
    calls = []
    hook = critic.backbone.layers[0].register_forward_hook(lambda m, a, kw=None, out=None: calls.append(a[0].shape[:2]))
    try:
        with torch.no_grad():
            v = critic.prompt_values(ids, attn, last, share_prefix=True)
    finally:
        hook.remove()
    assert [tuple(c) for c in calls][0] == (1, 12)  # task A's 12 shared tokens once, then the suffixes
    with torch.no_grad():
        assert torch.allclose(v, critic.prompt_values(ids, attn, last), atol=1e-5)


@pytest.mark.parametrize("top_n, value_clip, attn", [(None, None, "eager"), (1, 0.1, "eager"), (1, None, "sdpa")],
                         ids=["whole", "top1-clipped", "top1-sdpa"])
def test_critic_update_equals_the_plain_path(top_n, value_clip, attn) -> None:
    out = {}
    for share in (False, True):
        critic, batch, _ = _critic_and_batch(top_n, attn=attn)
        opt = make_optimizer(critic, 1e-2)
        stats = critic_update(critic, opt, batch, micro_batch=3, value_clip=value_clip, share_prefix=share)
        grads = {n: p.grad.clone() for n, p in critic.named_parameters() if p.grad is not None}
        out[share] = stats, grads, {n: p.detach().clone() for n, p in critic.named_parameters() if n in grads}
    (s0, g0, w0), (s1, g1, w1) = out[False], out[True]
    rel = lambda a, b: abs(a - b) / max(abs(a), 1e-12)  # noqa: E731  (float32 sums in another order)
    assert s0.turns == s1.turns == 9 and s0.loss > 0 and rel(s0.loss, s1.loss) < 1e-6
    assert rel(s0.grad_norm, s1.grad_norm) < 1e-6 and rel(s0.explained_var, s1.explained_var) < 1e-6
    assert g0.keys() == g1.keys() and len(g0) > 0
    assert all(float((g0[n] - g1[n]).norm()) <= 1e-5 * float(g0[n].norm()) + 1e-7 for n in g0)
    if top_n is not None:
        assert not any("layers.0." in n or "embed" in n for n in g0)
    # the step itself: AdamW's first step is ~lr·sign(g), which turns rounding noise in a near-zero
    # gradient entry into a full lr; compare the weights where the gradient is not near zero
    for n in g0:
        big = g0[n].abs() > 1e-4 * float(g0[n].abs().max())
        assert torch.allclose(w0[n][big], w1[n][big], atol=1e-6), n
