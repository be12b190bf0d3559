"""HiPER in the update (ALGORITHMS.md §14.2–14.3, D-14a): ``build_batch``'s ``token_mask`` (the span
union is the loss mask), the three-head critic (low read after the subgoal, high/term at the last
prompt token; each head towards its own target where it has one) and ``span_token_advantages``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.update import TurnCritic, build_batch, critic_update, make_optimizer, turn_values
from update_fixtures import PAD, random_turns, tiny_model

torch.set_num_threads(1)


def test_token_mask_narrows_the_loss_mask_and_zeroes_the_advantage():
    prompts = [np.array([5, 6, 7]), np.array([5, 6])]
    comps = [np.array([8, 9, 10, 11]), np.array([12, 13])]
    lps = [np.full(4, -1.0, np.float32), np.full(2, -1.0, np.float32)]
    adv = [np.array([1.0, 2.0, 3.0, 4.0]), np.array([5.0, 6.0])]
    b = build_batch(prompts, comps, lps, adv, pad_id=PAD, token_mask=[np.array([1, 0, 1, 0], bool), None])
    assert b.loss_mask[0].tolist() == [0, 0, 0, 1, 0, 1, 0]
    assert b.advantages[0].tolist() == [0, 0, 0, 1, 0, 3, 0]
    assert b.loss_mask[1, :4].tolist() == [0, 0, 1, 1] and b.advantages[1, 2:4].tolist() == [5, 6]
    assert b.turn_ids[0].tolist() == [-1, -1, -1, 0, 0, 0, 0]  # masked tokens still belong to their turn
    with pytest.raises(ValueError, match=r"token_mask\[0\] has 2 entries for 4 completion tokens"):
        build_batch(prompts, comps, lps, adv, pad_id=PAD, token_mask=[np.ones(2, bool), None])
    with pytest.raises(ValueError, match="token_mask has 1 entries for 2 turns"):
        build_batch(prompts, comps, lps, adv, pad_id=PAD, token_mask=[None])


def _three_heads():
    torch.manual_seed(0)
    critic = TurnCritic(tiny_model(1), heads=3)
    torch.nn.init.normal_(critic.head.weight, std=0.5)
    prompts, comps, lps, adv = random_turns(4, (3, 2))
    batch = build_batch(prompts, comps, lps, adv, pad_id=PAD)
    offsets = torch.tensor([min(2, c.size) for c in comps])  # low reads before completion token 2
    return critic, batch.with_(value_low_pos=batch.turn_value_pos + offsets), prompts, comps, offsets


def test_three_heads_read_low_after_the_subgoal_and_high_term_at_the_prompt():
    critic, batch, prompts, comps, offsets = _three_heads()
    values = turn_values(critic, batch, micro_batch=2)
    assert values.shape == (len(prompts), 3)
    for n, (p, c) in enumerate(zip(prompts, comps)):
        seq = np.concatenate([p, c[: int(offsets[n])]])
        with torch.no_grad():
            h = critic.backbone(input_ids=torch.as_tensor(seq[None], dtype=torch.int64)).last_hidden_state[0]
            at_prompt, at_low = critic.head(h[p.size - 1]), critic.head(h[-1])
        assert abs(values[n, 0].item() - at_low[0].item()) < 1e-5
        assert torch.allclose(values[n, 1:], at_prompt[1:], atol=1e-5)
    # shared prefixes and distinct rows give the same values
    assert torch.allclose(turn_values(critic, batch, share_prefix=True), values, atol=1e-5)
    with pytest.raises(ValueError, match="heads must be 1"):
        TurnCritic(tiny_model(1), heads=2)


def test_three_head_update_learns_each_target_and_skips_masked_ones():
    critic, batch, prompts, _, _ = _three_heads()
    n = len(prompts)
    rng = np.random.default_rng(0)
    returns = torch.tensor(rng.normal(size=(n, 3)), dtype=torch.float32)
    mask = torch.ones(n, 3, dtype=torch.bool)
    mask[1:, 1] = False  # the high head has a target on turn 0 only
    target = batch.with_(returns=returns)
    opt = make_optimizer(critic, 1e-2)
    first = critic_update(critic, opt, target, target_mask=mask)
    for _ in range(40):
        last = critic_update(critic, opt, target, target_mask=mask)
    assert last.loss < 0.2 * first.loss and last.explained_var > 0.5
    # a masked target never moves the loss: changing it gives the same pass
    other = returns.clone()
    other[1:, 1] = 100.0
    c1, b1, _, _, _ = _three_heads()
    c2, _, _, _, _ = _three_heads()
    s1 = critic_update(c1, make_optimizer(c1, 1e-2), b1.with_(returns=returns), target_mask=mask)
    s2 = critic_update(c2, make_optimizer(c2, 1e-2), b1.with_(returns=other), target_mask=mask)
    assert s1.loss == pytest.approx(s2.loss, abs=1e-7)
    assert all(torch.equal(a, b) for a, b in zip(c1.parameters(), c2.parameters()))


def test_span_token_advantages_give_each_span_its_own_advantage():
    from agentrl.credit.hiper import critic_targets, low_value_offsets, span_token_advantages
    from agentrl.types import Turn, TurnTable

    # ALGORITHMS.md §14.6's trajectory A (success, T = 4), no bootstrap, no whitening
    n, nan = 4, float("nan")
    table = TurnTable(group=[0] * n, episode=[0] * n, t=range(n), reward=[0, 0, 0, 10], terminated=[0, 0, 0, 1],
                      truncated=[0] * n, action_valid=[1] * n, anchor_key=[0] * n, next_anchor_key=[0] * n,
                      action_key=[0] * n, parent=[-1] * n, episode_ok=[1] * n, trainable=[1] * n, turn_id=range(n),
                      switch=[1, 0, 1, 0], subgoal_key=[0, 0, 1, 2], value_low=[5, 6, 7.5, 9],
                      value_high=[4, nan, 7, nan], value_term=[4.5, 5, 7, 8.5])
    spans = {"switch": [0, 2], "subgoal": [2, 5], "action": [6, 10]}  # token 5: free text between the tags
    turns = [Turn(run_id="r", episode_id=0, group_id=0, t=t, observation="", anchor_obs="", action="a",
                  action_valid=True, reward=0.0, completion_ids=np.arange(11, dtype=np.int32),
                  info={"hiper_spans": spans} if t != 3 else {}) for t in range(n)]
    kw = {"bootstrap_truncated": False, "norm_adv": False}
    advs, masks = span_token_advantages(table, np.arange(n), turns, kw)
    np.testing.assert_allclose(advs[0], [2.425] * 2 + [5.41875] * 3 + [0] + [1.925] * 4 + [0], atol=1e-12)
    assert masks[0].tolist() == [True] * 5 + [False] + [True] * 4 + [False]
    # a KEEP row: its subgoal tokens get nothing and do not train
    np.testing.assert_allclose(advs[1], [1.925] * 2 + [0] * 4 + [0.925] * 4 + [0], atol=1e-12)
    assert masks[1].tolist() == [True] * 2 + [False] * 4 + [True] * 4 + [False]
    # a turn without recorded spans: every token, with the per-row sum (A^lo + A^te)
    np.testing.assert_allclose(advs[3], np.full(11, 0.625 + 1.125), atol=1e-12)
    assert masks[3] is None
    targets, has = critic_targets(table, kw)
    np.testing.assert_allclose(targets[:, 1], [9.41875, 0, 9.625, 0], atol=1e-12)
    assert has[:, 1].tolist() == [True, False, True, False] and has[:, [0, 2]].all()
    assert low_value_offsets(turns).tolist() == [5, 5, 5, 0]  # after </subgoal>; no spans: the first token
