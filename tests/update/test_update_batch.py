"""TrainBatch construction: loss mask exactly on sampled tokens (PITFALLS P3), packing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.update import build_batch, minibatches, pack_chains
from update_fixtures import PAD, episode_turns, random_turns


def _masked_tokens(batch) -> list[int]:
    """Token ids at loss-mask positions, row by row, left to right."""
    out = []
    for r in range(batch.num_rows):
        on = batch.loss_mask[r] > 0
        out += batch.input_ids[r][on].tolist()
    return out


def test_unpacked_rows_hand_example() -> None:
    prompts = [np.array([5, 6, 7], np.int32), np.array([9], np.int32)]
    comps = [np.array([11, 12], np.int32), np.array([13, 14, 15], np.int32)]
    lps = [np.array([-0.5, -1.0], np.float32), np.array([-0.1, -0.2, -0.3], np.float32)]
    b = build_batch(prompts, comps, lps, np.array([2.0, -1.0]), pad_id=PAD)
    assert b.input_ids.tolist() == [[5, 6, 7, 11, 12], [9, 13, 14, 15, PAD]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert b.loss_mask.tolist() == [[0, 0, 0, 1, 1], [0, 1, 1, 1, 0]]
    assert b.advantages.tolist() == [[0, 0, 0, 2, 2], [0, -1, -1, -1, 0]]
    assert torch.allclose(b.old_logprobs, torch.tensor([[0, 0, 0, -0.5, -1.0], [0, -0.1, -0.2, -0.3, 0]]))
    assert b.turn_ids.tolist() == [[-1, -1, -1, 0, 0], [-1, 1, 1, 1, -1]]
    assert b.turn_row.tolist() == [0, 1] and b.turn_value_pos.tolist() == [2, 0]
    assert b.input_ids.dtype == torch.int64 and b.loss_mask.dtype == torch.float32
    assert b.num_tokens == 5


def test_packed_chain_hand_example() -> None:
    p0 = np.array([5, 6], np.int32)
    c0 = np.array([7, 8], np.int32)
    p1 = np.concatenate([p0, c0, [20, 21]]).astype(np.int32)  # bridge + observation
    c1 = np.array([9], np.int32)
    p2 = np.array([5, 6, 7, 99], np.int32)  # history rewritten: not an extension → new row
    c2 = np.array([3], np.int32)
    lps = [np.array([-1, -2], np.float32), np.array([-3], np.float32), np.array([-4], np.float32)]
    b = build_batch([p0, p1, p2], [c0, c1, c2], lps, np.array([1.0, 2.0, 3.0]), pad_id=PAD, pack=True)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 20, 21, 9], [5, 6, 7, 99, 3, PAD, PAD]]
    assert b.loss_mask.tolist() == [[0, 0, 1, 1, 0, 0, 1], [0, 0, 0, 0, 1, 0, 0]]
    assert b.advantages.tolist() == [[0, 0, 1, 1, 0, 0, 2], [0, 0, 0, 0, 3, 0, 0]]
    assert b.old_logprobs.tolist() == [[0, 0, -1, -2, 0, 0, -3], [0, 0, 0, 0, -4, 0, 0]]
    assert b.turn_ids.tolist() == [[-1, -1, 0, 0, -1, -1, 1], [-1, -1, -1, -1, 2, -1, -1]]
    assert b.turn_row.tolist() == [0, 0, 1] and b.turn_value_pos.tolist() == [1, 5, 3]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.integers(1, 4), min_size=1, max_size=4), st.booleans())
def test_mask_holds_exactly_the_sampled_tokens(seed: int, episodes: list[int], pack: bool) -> None:
    """P3 property: mask-1 positions hold the concatenated completion ids in order, their
    count is the number of sampled tokens, and padding / prompts are never in the mask."""
    prompts, comps, lps, adv = random_turns(seed, tuple(episodes))
    b = build_batch(prompts, comps, lps, adv, pad_id=PAD, pack=pack)
    assert _masked_tokens(b) == np.concatenate(comps).tolist()
    assert b.num_tokens == sum(c.size for c in comps)
    assert bool((b.loss_mask <= b.attention_mask).all())
    assert b.num_rows == (len(episodes) if pack else len(prompts))
    for n, c in enumerate(comps):  # each turn's advantage / logprobs land on its own tokens
        on = b.turn_ids == n
        assert int(on.sum()) == c.size
        assert torch.allclose(b.advantages[on], torch.full((c.size,), float(adv[n])))
        assert torch.equal(b.old_logprobs[on], torch.from_numpy(lps[n]))
        r, pos = int(b.turn_row[n]), int(b.turn_value_pos[n])
        assert b.input_ids[r, pos].item() == prompts[n][-1] and b.loss_mask[r, pos + 1] == 1


def test_pack_chains_breaks_on_non_extension() -> None:
    rng = np.random.default_rng(0)
    p, c = episode_turns(rng, 3)
    q, d = episode_turns(rng, 2)
    assert pack_chains(p + q, c + d) == [[0, 1, 2], [3, 4]]
    p[2] = p[2].copy()
    p[2][0] += 1  # turn 2's prompt no longer extends turn 1
    assert pack_chains(p, c) == [[0, 1], [2]]


def test_per_token_advantages() -> None:
    b = build_batch([np.array([4])], [np.array([5, 6])], [np.zeros(2)], [np.array([0.5, -0.25])], pad_id=PAD)
    assert b.advantages.tolist() == [[0, 0.5, -0.25]]


def test_select_renumbers_turns_and_trims_padding() -> None:
    prompts, comps, lps, adv = random_turns(3, (2, 1, 3))
    b = build_batch(prompts, comps, lps, adv, pad_id=PAD, pack=True)
    sub = b.select([2, 0])
    assert sub.num_rows == 2 and sub.num_turns == 5
    assert sub.input_ids.shape[1] == int(b.attention_mask[[2, 0]].sum(1).max())
    assert sub.turn_row.tolist() == [1, 1, 0, 0, 0]  # turns 0,1 (row 0) and 3,4,5 (row 2)
    assert sorted(set(sub.turn_ids[sub.turn_ids >= 0].tolist())) == [0, 1, 2, 3, 4]
    assert torch.equal(sub.loss_mask[1], b.loss_mask[0, : sub.input_ids.shape[1]])


@pytest.mark.parametrize("bad, match", [
    (dict(old_logprobs=[np.zeros(1)]), "old logprobs for 2 completion tokens"),
    (dict(prompt_ids=[np.zeros(0, np.int32)]), "empty prompt"),
    (dict(completion_ids=[np.zeros(0, np.int32)], old_logprobs=[np.zeros(0)]), "no completion ids"),
    (dict(episodes=[0, 1]), "episodes has 2 entries for 1 turns"),
    (dict(episodes=[None, 1], prompt_ids=[np.array([3])] * 2, completion_ids=[np.array([4])] * 2,
          old_logprobs=[np.zeros(1)] * 2, advantages=np.ones(2)), "comparable ids"),
    (dict(advantages=np.array([np.nan])), "NaN or inf"),
    (dict(advantages=np.array([1.0, 2.0])), r"float64\[N\] with N=1"),
    (dict(prompt_ids=[np.array([1.5])]), "integer array"),
])
def test_bad_input_errors(bad: dict, match: str) -> None:
    kw = dict(prompt_ids=[np.array([3])], completion_ids=[np.array([4, 5])], old_logprobs=[np.zeros(2)],
              advantages=np.array([1.0]))
    kw.update(bad)
    with pytest.raises(ValueError, match=match):
        build_batch(**kw, pad_id=PAD)


def test_minibatches_seeded_cover_all_rows() -> None:
    parts = minibatches(7, 3, seed=1)
    assert [len(p) for p in parts] == [3, 3, 1]
    assert sorted(torch.cat(parts).tolist()) == list(range(7))
    assert [p.tolist() for p in parts] == [p.tolist() for p in minibatches(7, 3, seed=1)]
    assert [p.tolist() for p in minibatches(5, 0)] == [[0, 1, 2, 3, 4]]


def test_nan_episode_ids_are_refused_not_merged() -> None:
    """np.unique merges NaNs: two turns with NaN ids became one episode (silently reweighted)."""
    kw = dict(prompt_ids=[np.array([3]), np.array([9])], completion_ids=[np.array([4]), np.array([5])],
              old_logprobs=[np.zeros(1), np.zeros(1)], advantages=np.array([1.0, 1.0]), pad_id=PAD)
    with pytest.raises(ValueError, match="NaN or inf ids"):
        build_batch(**kw, episodes=[np.nan, np.nan])
    assert build_batch(**kw, episodes=["b", "a"]).token_episode.max().item() == 1  # strings: 2 episodes
