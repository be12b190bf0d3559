"""Turn-level critic (turn-PPO): value read at the last prompt token, loss, training."""

from __future__ import annotations

import numpy as np
import torch

from agentrl.update import TurnCritic, build_batch, critic_loss, critic_update, make_optimizer, turn_values
from update_fixtures import PAD, random_turns, tiny_model


def _critic_and_batch(pack: bool = True):
    critic = TurnCritic(tiny_model(1))
    torch.nn.init.normal_(critic.head.weight, std=0.5)  # zero-init head would read 0 everywhere
    prompts, comps, lps, adv = random_turns(4, (3, 2))
    batch = build_batch(prompts, comps, lps, adv, pad_id=PAD, pack=pack)
    returns = torch.tensor(np.random.default_rng(0).normal(size=len(prompts)), dtype=torch.float32)
    return critic, batch.with_(returns=returns), prompts


def test_value_read_at_last_prompt_token() -> None:
    critic, batch, prompts = _critic_and_batch()
    values = turn_values(critic, batch, micro_batch=1)
    for n, p in enumerate(prompts):  # V(s_n) from the prompt alone equals the in-batch read
        with torch.no_grad():
            h = critic.backbone(input_ids=torch.as_tensor(p[None], dtype=torch.int64)).last_hidden_state[0, -1]
            assert abs(values[n].item() - critic.head(h).item()) < 1e-5
    flat = build_batch(*random_turns(4, (3, 2)), pad_id=PAD)  # same turns, unpacked
    assert torch.allclose(turn_values(critic, flat), values, atol=1e-5)


def test_critic_loss_hand_values() -> None:
    v, r, old = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.0, 1.0, 0.0]), torch.tensor([0.0, 0.5, 2.5])
    assert torch.allclose(critic_loss(v, r), torch.tensor([0.5, 0.5, 2.0]))
    # clip 0.2: V_clip = [0.2, 0.3, 2.3] → (V_clip − R)² = [0.04, 0.49, 5.29]; max with (V − R)²
    assert torch.allclose(critic_loss(v, r, old, value_clip=0.2), 0.5 * torch.tensor([1.0, 1.0, 5.29]))


def test_critic_update_microbatch_equivalence_and_learning() -> None:
    grads = []
    for mb in (5, 1):
        critic, batch, _ = _critic_and_batch(pack=False)
        opt = make_optimizer(critic, 1e-2)
        stats = critic_update(critic, opt, batch, micro_batch=mb)
        grads.append((stats, {n: p.grad.clone() for n, p in critic.named_parameters() if p.grad is not None}))
    (s1, g1), (s2, g2) = grads
    assert abs(s1.loss - s2.loss) < 1e-6 and s1.turns == 5
    assert all(torch.allclose(g1[n], g2[n], atol=1e-6) for n in g1)
    critic, batch, _ = _critic_and_batch()
    opt = make_optimizer(critic, 1e-2)
    losses = [critic_update(critic, opt, batch).loss for _ in range(30)]
    assert losses[-1] < 0.2 * losses[0]
    assert critic_update(critic, opt, batch).explained_var > 0.5


def test_top_n_layers_critic_trains_only_its_top_layers_norm_and_head() -> None:
    import pytest

    critic = TurnCritic(tiny_model(1), top_n_layers=1)
    torch.nn.init.normal_(critic.head.weight, std=0.5)
    layers = critic.backbone.layers
    assert len(layers) >= 2
    trained = {n for n, p in critic.named_parameters() if p.requires_grad}
    top = {f"backbone.layers.{len(layers) - 1}.{n}" for n, _ in layers[-1].named_parameters()}
    assert trained == top | {"backbone.norm.weight", "head.weight", "head.bias"}
    prompts, comps, lps, adv = random_turns(4, (3, 2))
    batch = build_batch(prompts, comps, lps, adv, pad_id=PAD)
    batch = batch.with_(returns=torch.tensor(np.random.default_rng(0).normal(size=len(prompts)), dtype=torch.float32))
    before = {n: p.detach().clone() for n, p in critic.named_parameters()}
    opt = make_optimizer(critic, 1e-2)
    critic_update(critic, opt, batch, micro_batch=2)
    moved = {n for n, p in critic.named_parameters() if not torch.equal(p, before[n])}
    assert moved and moved <= trained and "backbone.embed_tokens.weight" not in moved
    for bad in (0, len(layers) + 1):
        with pytest.raises(ValueError, match="critic_top_n_layers"):
            TurnCritic(tiny_model(1), top_n_layers=bad)


def test_critic_top_n_layers_config() -> None:
    import pytest

    from agentrl.config import ConfigError, UpdateConfig

    assert UpdateConfig(critic_top_n_layers=6).critic_top_n_layers == 6 and UpdateConfig().critic_top_n_layers is None
    with pytest.raises(ConfigError, match="critic_top_n_layers must be >= 1"):
        UpdateConfig(critic_top_n_layers=0)
