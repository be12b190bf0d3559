"""Issue 37: float32 master weights for the policy's bf16 full fine-tuning (``update.master_weights``),
in one process (autocast over float32 parameters; the FSDP2 side is in
tests/distributed/test_master_weights_dp.py).

At lr 1e-5 AdamW moves every weight by ~1e-5 per step; a bf16 weight keeps it only where that is
more than half its spacing (|w| ≲ 2.5e-3). The tiny model's matrices are N(0, 0.02) and its norm
gains 1.0, so plain bf16 AdamW moves the ~15 % smallest entries and never a norm gain, while the
float32 masters move nearly every entry as the engines see it (rounded to bf16); a norm gain's
master moves too, and shows in bf16 once it has gathered half a spacing (2^-9 ≈ 2e-3: ~200 steps).
"""

from __future__ import annotations

import pytest
import torch

from agentrl.config import ConfigError, LoraSpec, UpdateConfig
from agentrl.update import build_batch, make_optimizer, train_on_batch
from agentrl.update.checkpoint import TrainState, load_checkpoint, save_checkpoint
from agentrl.update.lora import apply_lora, inference_state_dict
from agentrl.update.master_weights import compute_dtype, keep_master_weights
from update_fixtures import PAD, random_turns, tiny_model

CFG = UpdateConfig(lr=1e-5, grad_clip=1.0, micro_batch=2)
STEPS = 10


def _batch():
    prompts, comps, lps, adv = random_turns(3, (2, 1, 2))
    return build_batch(prompts, comps, lps, adv, pad_id=PAD)


def _model(masters: bool):
    model = tiny_model(0).to(torch.bfloat16)
    if masters:
        keep_master_weights(model, torch.bfloat16, autocast=True)
    return model, make_optimizer(model, CFG.lr)


def _steps(model, opt, batch, first: int, n: int) -> None:
    for i in range(first, first + n):
        train_on_batch(model, opt, batch, CFG, seed=i)


def moved_fractions(before: dict, after: dict) -> dict[str, float]:
    """Fraction of entries whose bf16 value changed: over all weights, the matrices, the norm gains."""
    kinds = {"all": list(before), "matrices": [k for k in before if before[k].ndim >= 2],
             "norms": [k for k in before if before[k].ndim < 2]}
    out = {}
    for kind, keys in kinds.items():
        moved = sum(int((after[k].to(torch.bfloat16) != before[k]).sum()) for k in keys)
        out[kind] = moved / sum(before[k].numel() for k in keys)
    return out


def test_masters_move_the_weights_plain_bf16_adamw_rounds_away(capsys):
    batch = _batch()
    moved = {}
    for name in ("plain", "masters"):
        model, opt = _model(name == "masters")
        before = {k: v.detach().to(torch.bfloat16).clone() for k, v in model.named_parameters()}
        _steps(model, opt, batch, 0, STEPS)
        moved[name] = moved_fractions(before, inference_state_dict(model))  # what an engine loads
        norms = [p for p in model.parameters() if p.ndim < 2]
        moved[name]["norm masters"] = sum(int((p != 1.0).sum()) for p in norms) / sum(p.numel() for p in norms)
    with capsys.disabled():
        print(f"\n1 process, bf16, lr 1e-5, {STEPS} AdamW steps, fraction of entries moved: {moved}")
    assert moved["masters"]["all"] > 0.8 and moved["plain"]["all"] < 0.25 * moved["masters"]["all"]
    assert moved["plain"]["norms"] == moved["plain"]["norm masters"] == 0.0  # rounded away, every step
    assert moved["masters"]["norm masters"] > 0.9


def test_masters_are_float32_and_compute_in_bf16():
    model, opt = _model(True)
    assert compute_dtype(model) == torch.bfloat16 and {p.dtype for p in model.parameters()} == {torch.float32}
    seen = []
    model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    _steps(model, opt, _batch(), 0, 1)
    assert seen and set(seen) == {torch.bfloat16}  # the forward ran under autocast
    assert {p.grad.dtype for p in model.parameters() if p.grad is not None} == {torch.float32}
    weights = inference_state_dict(model)  # the engines' copy: rounded masters, new tensors
    params = dict(model.named_parameters())
    assert {w.dtype for w in weights.values()} == {torch.bfloat16}
    assert all(torch.equal(w, params[k].detach().to(torch.bfloat16)) for k, w in weights.items() if k in params)
    model(input_ids=torch.tensor([[3, 4, 5]]))  # no autocast left active after a call
    assert not torch.is_autocast_enabled("cpu")


def _state(model, opt) -> tuple[dict, dict]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    return get_model_state_dict(model), get_optimizer_state_dict(model, opt)


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def test_dcp_resume_continues_bit_exactly(tmp_path):
    batch, k, m = _batch(), 2, 2
    model, opt = _model(True)
    _steps(model, opt, batch, 0, k)
    folder = save_checkpoint(tmp_path, model, opt, TrainState(iteration=1, optimizer_steps=k))
    _steps(model, opt, batch, k, m)
    fresh, fresh_opt = _model(True)
    assert load_checkpoint(folder, fresh, fresh_opt).optimizer_steps == k
    _steps(fresh, fresh_opt, batch, k, m)
    (pa, oa), (pb, ob) = _state(model, opt), _state(fresh, fresh_opt)
    assert {v.dtype for v in pa.values()} == {torch.float32} and _same(pa, pb)
    assert oa["state"]["model.norm.weight"]["exp_avg"].dtype == torch.float32 and _same(oa, ob)


def test_lora_is_unchanged():
    from agentrl.config import config_from_dict

    base = {"env": {"id": "agentrl/Toy-v0"}, "policy": {"dtype": "bfloat16"}}
    assert config_from_dict(base).update.master_weights == "on"  # auto: bf16 full fine-tuning
    lora = {**base, "policy": {"dtype": "bfloat16", "lora": {"rank": 4}}}
    assert config_from_dict(lora).update.master_weights == "off"  # peft's adapters are float32
    assert config_from_dict({**base, "policy": {}}).update.master_weights == "off"  # float32 weights
    with pytest.raises(ConfigError, match="LoRA adapters are float32 already.*update.master_weights: auto"):
        config_from_dict({**lora, "update": {"master_weights": "on"}})
    with pytest.raises(ConfigError, match="policy.dtype is float32"):
        config_from_dict({**base, "policy": {}, "update": {"master_weights": "on"}})
    peft_model = apply_lora(tiny_model(0).to(torch.bfloat16), LoraSpec(rank=4, alpha=8.0))
    with pytest.raises(ValueError, match="full fine-tuning"):
        keep_master_weights(peft_model, torch.bfloat16, autocast=True)
    trained = [p for p in peft_model.parameters() if p.requires_grad]
    assert trained and {p.dtype for p in trained} == {torch.float32} and compute_dtype(peft_model) is None
    merged = inference_state_dict(peft_model)
    assert {w.dtype for w in merged.values()} == {torch.bfloat16}
