"""``MasterAdamW``: float32 master weights for half-precision training (turn-PPO's bf16 critic)."""

from __future__ import annotations

import pytest
import torch

from agentrl.update import TurnCritic, critic_update
from agentrl.update.master_weights import MasterAdamW, needs_master_weights
from test_critic_prefix import _critic_and_batch
from update_fixtures import tiny_model


def _quadratic_steps(opt, w: torch.Tensor, target: torch.Tensor, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        (0.5 * ((w.float() - target) ** 2).sum()).backward()
        opt.step()


def test_float32_parameters_step_exactly_as_adamw() -> None:
    torch.manual_seed(0)
    init, target = torch.randn(50), torch.randn(50)
    a, b = torch.nn.Parameter(init.clone()), torch.nn.Parameter(init.clone())
    _quadratic_steps(MasterAdamW([a], lr=1e-2, weight_decay=0.1), a, target, 20)
    _quadratic_steps(torch.optim.AdamW([b], lr=1e-2, weight_decay=0.1), b, target, 20)
    assert torch.equal(a.detach(), b.detach()) and not torch.equal(a.detach(), init)


def test_bf16_updates_below_the_weights_spacing_accumulate() -> None:
    # weights near 0.1 (bf16 spacing 2^-11 ≈ 4.9e-4): an lr 1e-5 step is 2 % of half a spacing
    init = torch.linspace(0.09, 0.11, 64).to(torch.bfloat16)
    target = torch.zeros(64)
    plain, master = torch.nn.Parameter(init.clone()), torch.nn.Parameter(init.clone())
    _quadratic_steps(torch.optim.AdamW([plain], lr=1e-5), plain, target, 60)
    opt = MasterAdamW([master], lr=1e-5)
    _quadratic_steps(opt, master, target, 60)
    assert torch.equal(plain.detach(), init)  # every update rounded away
    assert master.dtype == torch.bfloat16 and bool((master.detach() < init).all())
    # the master moved by ~60 · lr and the parameter is that master rounded to bf16
    assert torch.allclose(init.float() - opt.masters[0], torch.full((64,), 6e-4), rtol=0.05)
    assert torch.equal(master.detach(), opt.masters[0].to(torch.bfloat16))


def test_gradient_clipping_over_param_groups_reaches_the_step() -> None:
    w = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = MasterAdamW([w], lr=0.1)
    (w.float() * torch.tensor([300.0, 400.0, 0.0, 0.0])).sum().backward()
    params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
    assert float(torch.nn.utils.clip_grad_norm_(params, 1.0)) == pytest.approx(500.0, rel=1e-2)
    opt.step()
    assert opt.inner.state[opt.masters[0]]["exp_avg"][:2].tolist() == pytest.approx([0.1 * 0.6, 0.1 * 0.8], rel=1e-2)


def test_state_dict_round_trip_continues_identically() -> None:
    import io

    torch.manual_seed(1)
    init, target = torch.randn(32).to(torch.bfloat16), torch.randn(32)
    a = torch.nn.Parameter(init.clone())
    opt = MasterAdamW([a], lr=1e-3)
    _quadratic_steps(opt, a, target, 5)
    buf = io.BytesIO()
    torch.save((opt.state_dict(), a.detach().clone()), buf)  # as save_critic: serialised at once
    _quadratic_steps(opt, a, target, 5)
    buf.seek(0)
    saved, saved_w = torch.load(buf, weights_only=False)
    b = torch.nn.Parameter(saved_w.clone())
    fresh = MasterAdamW([b], lr=1e-3)
    fresh.load_state_dict(saved)
    assert not torch.equal(fresh.masters[0], opt.masters[0])  # the masters of step 5, not 10
    _quadratic_steps(fresh, b, target, 5)
    assert torch.equal(a.detach(), b.detach()) and torch.equal(opt.masters[0], fresh.masters[0])
    assert fresh.inner.state[fresh.masters[0]]["step"] == opt.inner.state[opt.masters[0]]["step"] == 10
    with pytest.raises(ValueError, match="not a MasterAdamW state"):
        MasterAdamW([torch.nn.Parameter(torch.zeros(3))], lr=1e-3).load_state_dict(saved)
    with pytest.raises(ValueError, match="no parameters"):
        MasterAdamW([], lr=1e-3)


def test_bf16_critic_update_moves_its_backbone_only_with_masters() -> None:
    critic, batch, _ = _critic_and_batch(top_n=1)
    critic = critic.to(torch.bfloat16)
    critic.head.float()  # as make_critic: a float32 head on a half-precision backbone
    trained = [p for p in critic.backbone.parameters() if p.requires_grad]
    assert needs_master_weights(trained) and not needs_master_weights(critic.head.parameters())
    moved = {}
    for name, make in (("plain", torch.optim.AdamW), ("master", MasterAdamW)):
        c = TurnCritic(tiny_model(1), top_n_layers=1)
        c.load_state_dict(critic.state_dict())
        c.backbone.to(torch.bfloat16)
        before = [p.detach().clone() for p in c.backbone.parameters() if p.requires_grad]
        opt = make([p for p in c.parameters() if p.requires_grad], lr=1e-5)
        for _ in range(30):
            critic_update(c, opt, batch, micro_batch=4)
        after = [p.detach() for p in c.backbone.parameters() if p.requires_grad]
        moved[name] = sum(int((x != y).sum()) for x, y in zip(before, after)) / sum(x.numel() for x in before)
    assert moved["master"] > 0.5 and moved["plain"] < 0.5 * moved["master"]


def test_half_precision_full_fine_tuning_is_warned_about_lora_is_not(caplog) -> None:
    from agentrl.config import LoraSpec
    from agentrl.update import make_optimizer
    from agentrl.update.lora import apply_lora

    with caplog.at_level("WARNING", logger="agentrl.update.step"):
        make_optimizer(apply_lora(tiny_model(0).to(torch.bfloat16), LoraSpec()), 1e-3)  # peft: float32 adapters
        assert caplog.text == ""
        make_optimizer(tiny_model(0).to(torch.bfloat16), 1e-3)
    assert "are half precision" in caplog.text and "policy.dtype: float32" in caplog.text
