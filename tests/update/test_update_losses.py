"""Loss functions, aggregations and KL estimators against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.update.losses import (
    AGGREGATIONS, KL_ESTIMATORS, LOSSES, ClipSpec, LossScale, PolicyLossInputs, register_loss, turn_mean,
)


def _inputs(ratios: list[float], advs: list[float], turn_ids: list[int] | None = None) -> PolicyLossInputs:
    lp = torch.tensor([[math.log(r) for r in ratios]], dtype=torch.float32, requires_grad=True)
    n = len(ratios)
    tid = torch.tensor([turn_ids if turn_ids is not None else list(range(n))])
    return PolicyLossInputs(lp, torch.zeros(1, n), torch.tensor([advs]), torch.ones(1, n), tid)


# (advantage, ratio) → (loss, clipped) with clip_low 0.2, clip_high 0.28, worked by hand:
#  A=+1 r=1.50: max(-1.50, -1.28) = -1.28 clipped    A=+1 r=0.50: max(-0.5, -0.8) = -0.5
#  A=-1 r=0.50: max( 0.50,  0.80) =  0.80 clipped    A=-1 r=1.50: max(1.5, 1.28) = 1.5
#  A=-2 r=0.70: max( 1.40,  1.60) =  1.60 clipped    A=+1 r=1.25: inside [0.8, 1.28] → -1.25
#  A=+2 r=1.10: -2.2 (inside)
PPO_CASES = [(1, 1.5, -1.28, 1), (1, 0.5, -0.5, 0), (-1, 0.5, 0.8, 1), (-1, 1.5, 1.5, 0),
             (-2, 0.7, 1.6, 1), (1, 1.25, -1.25, 0), (2, 1.1, -2.2, 0)]


def test_ppo_clip_asymmetric_hand_values_and_grads() -> None:
    advs, ratios, want, clipped = zip(*[(a, r, w, c) for a, r, w, c in PPO_CASES])
    x = _inputs(list(ratios), list(advs))
    out = LOSSES.get("ppo_clip")(x, ClipSpec(low=0.2, high=0.28))
    assert torch.allclose(out.loss[0], torch.tensor(want), atol=1e-6)
    assert out.clipped[0].tolist() == list(clipped)
    out.loss.sum().backward()
    # d loss / d logπ = −A·r where unclipped, 0 where clipped
    grad = [0.0 if c else -a * r for a, r, _, c in PPO_CASES]
    assert torch.allclose(x.logprobs.grad[0], torch.tensor(grad), atol=1e-6)
    sym = LOSSES.get("ppo_clip")(x, ClipSpec(low=0.2, high=0.2))  # symmetric clip does clip r=1.25
    assert abs(sym.loss[0, 5].item() + 1.2) < 1e-6 and sym.clipped[0, 5] == 1


def test_dual_clip_caps_negative_advantage_loss() -> None:
    x = _inputs([5.0, 1.5, 5.0, 0.5], [-1.0, -1.0, 1.0, -2.0])
    out = LOSSES.get("ppo_clip")(x, ClipSpec(low=0.2, high=0.28, dual_c=3.0))
    # A=-1 r=5: max(5, 1.28)=5 > 3·1 → 3; A=-1 r=1.5: 1.5; A=+1 r=5: -1.28; A=-2 r=.5: 1.6 < 6
    assert torch.allclose(out.loss[0], torch.tensor([3.0, 1.5, -1.28, 1.6]), atol=1e-6)
    assert out.clipped[0].tolist() == [1, 0, 1, 1]
    out.loss.sum().backward()
    assert torch.allclose(x.logprobs.grad[0], torch.tensor([0.0, 1.5, 0.0, 0.0]), atol=1e-6)


def test_gspo_uses_one_ratio_per_turn() -> None:
    # turn 0: log-ratios 0.05, -0.01 → s = exp(0.02), A = 2 (inside the clip range)
    # turn 1: log-ratios 0.30, 0.10 → s = exp(0.2) = 1.2214 > 1.2, A = 1 → clipped at 1.2
    # turn 2: log-ratio -0.1 → s = 0.904837, A = -1 → loss 0.904837
    lr = [0.05, -0.01, 0.30, 0.10, -0.1]
    x = _inputs([math.exp(v) for v in lr], [2, 2, 1, 1, -1], turn_ids=[0, 0, 1, 1, 2])
    out = LOSSES.get("gspo")(x, ClipSpec(low=0.2, high=0.2))
    s0, s2 = math.exp(0.02), math.exp(-0.1)
    assert torch.allclose(out.loss[0], torch.tensor([-2 * s0, -2 * s0, -1.2, -1.2, s2]), atol=1e-6)
    assert torch.allclose(out.ratio[0], torch.tensor([s0, s0, math.exp(0.2), math.exp(0.2), s2]), atol=1e-6)
    out.loss.sum().backward()  # each unclipped token's gradient is −A·s (its sequence ratio)
    assert torch.allclose(x.logprobs.grad[0], torch.tensor([-2 * s0, -2 * s0, 0.0, 0.0, s2]), atol=1e-6)


def test_kl_estimators_hand_values() -> None:
    lp, ref = torch.tensor([-1.0, -2.0, -0.3]), torch.tensor([-1.5, -1.0, -0.3])
    assert torch.allclose(KL_ESTIMATORS.get("k1")(lp, ref), torch.tensor([0.5, -1.0, 0.0]))
    assert torch.allclose(KL_ESTIMATORS.get("k2")(lp, ref), torch.tensor([0.125, 0.5, 0.0]))
    k3 = [math.exp(-0.5) + 0.5 - 1, math.e - 1 - 1, 0.0]  # exp(d) − d − 1, d = ref − lp
    assert torch.allclose(KL_ESTIMATORS.get("k3")(lp, ref), torch.tensor(k3), atol=1e-6)


# Two rows: row 0 packs turn 0 (values 1, 2) and turn 1 (value 3); row 1 holds turn 2
# (values 4, 8) then padding (value 6, masked). 5 tokens, 3 turns.
VALUES = torch.tensor([[9.0, 1, 2, 3], [9.0, 4, 8, 6]])
MASK = torch.tensor([[0.0, 1, 1, 1], [0.0, 1, 1, 0]])
TURNS = torch.tensor([[-1, 0, 0, 1], [-1, 2, 2, -1]])


@pytest.mark.parametrize("name, want", [
    ("token-mean", 18 / 5),                      # (1+2+3+4+8) / 5 tokens
    ("seq-mean-token-mean", (1.5 + 3 + 6) / 3),  # mean of the turn means
    ("seq-mean-token-sum-norm", 18 / (3 * 4)),   # Dr.GRPO: Σ / (turns · norm_tokens=4)
])
def test_aggregations_hand_values_and_split_sum(name: str, want: float) -> None:
    agg = AGGREGATIONS.get(name)
    scale = LossScale.of(MASK, TURNS, norm_tokens=4)
    assert (scale.tokens, scale.turns) == (5.0, 3.0)
    assert abs(agg(VALUES, MASK, TURNS, scale).item() - want) < 1e-6
    # micro-batches with the global scale add up to the full value (turn ids renumbered)
    parts = agg(VALUES[:1], MASK[:1], TURNS[:1], scale) + agg(VALUES[1:], MASK[1:], torch.tensor([[-1, 0, 0, -1]]), scale)
    assert abs(parts.item() - want) < 1e-6


EPISODES = torch.tensor([[-1, 0, 0, 0], [-1, 1, 1, -1]])  # turns 0, 1 in episode 0; turn 2 in episode 1


def test_episode_mean_token_mean_hand_values_and_split_sum() -> None:
    """Episode 0 (turns 0, 1): token mean (1+2+3)/3 = 2; episode 1: (4+8)/2 = 6 → (2+6)/2 = 4;
    micro-batches with the minibatch's episode counts add up to it."""
    agg = AGGREGATIONS.get("episode-mean-token-mean")
    scale = LossScale.of(MASK, TURNS, norm_tokens=4).with_episodes(MASK, EPISODES)
    assert scale.episodes == 2.0 and scale.episode_counts.tolist() == [3.0, 2.0]
    assert abs(agg(VALUES, MASK, TURNS, scale.for_tokens(EPISODES)).item() - 4.0) < 1e-6
    parts = (agg(VALUES[:1], MASK[:1], TURNS[:1], scale.for_tokens(EPISODES[:1]))
             + agg(VALUES[1:], MASK[1:], TURNS[1:], scale.for_tokens(EPISODES[1:])))
    assert abs(parts.item() - 4.0) < 1e-6
    with pytest.raises(ValueError, match="needs the episode of every turn"):
        agg(VALUES, MASK, TURNS, LossScale.of(MASK, TURNS, norm_tokens=4))


@pytest.mark.parametrize("name, ratio", [
    ("token-mean", 10.0), ("seq-mean-token-mean", 10.0), ("seq-mean-token-sum-norm", 10.0),
    ("episode-mean-token-mean", 1.0),
])
def test_gradient_weight_of_a_ten_turn_vs_a_one_turn_episode(name: str, ratio: float) -> None:
    """Issue 19 item 10: one row per turn, 2 tokens per turn; episode A has 10 turns, B 1.
    The summed gradient weight (∂loss/∂value over an episode's tokens) is 10:1 in the per-token
    and per-turn modes and 1:1 in the episode-normalised one."""
    values = torch.ones(11, 2, requires_grad=True)
    mask = torch.ones(11, 2)
    turns = torch.arange(11).repeat_interleave(2).reshape(11, 2)
    episode = torch.tensor([0] * 10 + [1]).repeat_interleave(2).reshape(11, 2)
    scale = LossScale.of(mask, turns, norm_tokens=2).with_episodes(mask, episode).for_tokens(episode)
    AGGREGATIONS.get(name)(values, mask, turns, scale).backward()
    weight_a, weight_b = values.grad[:10].sum().item(), values.grad[10:].sum().item()
    assert abs(weight_a / weight_b - ratio) < 1e-5


def test_turn_mean_broadcasts_per_turn() -> None:
    assert torch.allclose(turn_mean(VALUES, MASK, TURNS), torch.tensor([[0, 1.5, 1.5, 3], [0, 6, 6, 0]]))


def test_registries_suggest_and_refuse_duplicates() -> None:
    with pytest.raises(KeyError, match="did you mean 'ppo_clip'"):
        LOSSES.get("ppo_clp")
    with pytest.raises(KeyError, match="did you mean 'token-mean'"):
        AGGREGATIONS.get("token_mean")
    with pytest.raises(ValueError, match="already registered"):
        register_loss("ppo_clip")(lambda x, clip: None)
    assert {"ppo_clip", "gspo"} <= set(LOSSES.names())
    assert set(KL_ESTIMATORS.names()) == {"k1", "k2", "k3"}
