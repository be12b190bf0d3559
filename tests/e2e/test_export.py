"""Issue 23 item 8: ``agentrl export`` writes a trained run's policy as folders that plain
transformers / peft load, and their logits equal the trained policy's (fp32, tiny model, two
iterations on the toy env): the merged HF folder (LoRA and full fine-tuning) and the PEFT
adapter folder on the base model."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from agentrl.cli import main  # noqa: E402
from agentrl.config import config_from_dict  # noqa: E402


def _cfg(tiny_dir, out_dir, name: str, lora: bool):
    policy = {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole", "action_constraint": "admissible"}
    if lora:
        policy["lora"] = {"rank": 4, "alpha": 8.0}
    return config_from_dict({
        "run": {"name": name, "out_dir": str(out_dir), "iterations": 2, "eval_every": 0, "save_every": 1, "seed": 3},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 8},
        "policy": policy,
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1},
        "algorithm": {"estimator": "gigpo"},
        "update": {"lr": 2e-2, "micro_batch": 8},
        "log": {"console": False},
    })


def _logits(model, ids):
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.fixture(scope="module", params=[True, False], ids=["lora", "full"])
def trained(request, tiny_dir, tmp_path_factory):
    from agentrl.eval import load_eval_policy
    from agentrl.train import train

    out = tmp_path_factory.mktemp("export")
    cfg = _cfg(tiny_dir, out, "exp", request.param)
    result = train(cfg, resume=False)
    assert result.state.optimizer_steps >= 1
    policy = load_eval_policy(cfg, result.run_dir / "checkpoints" / "iter_000002")
    ids = torch.tensor([[5, 17, 42, 99, 3, 250, 7]])
    return request.param, result.run_dir, out, _logits(policy.model, ids), ids


def test_export_reloads_in_plain_transformers_and_peft(trained, tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lora, run_dir, out, want, ids = trained
    dest = out / "portable"
    assert main(["export", str(run_dir), str(dest)]) == 0
    merged = AutoModelForCausalLM.from_pretrained(dest / "merged", dtype=torch.float32)
    assert (_logits(merged, ids) - want).abs().max().item() < 1e-5
    assert AutoTokenizer.from_pretrained(dest / "merged").chat_template  # the chat template travels along
    meta = json.loads((dest / "agentrl_export.json").read_text())
    assert meta["iteration"] == 2 and meta["lora"] is lora
    base = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    assert (_logits(base, ids) - want).abs().max().item() > 1e-4  # training did change the policy
    if lora:
        from peft import PeftModel

        adapted = PeftModel.from_pretrained(base, dest / "adapter")
        assert (_logits(adapted, ids) - want).abs().max().item() < 1e-5
    else:
        assert not (dest / "adapter").exists()


def test_export_refuses_bad_input(trained, capsys):
    lora, run_dir, out, _, _ = trained
    assert main(["export", str(run_dir), str(out / "x"), "--iteration", "7"]) == 2
    assert "has no checkpoint of iteration 7; it has [1, 2]" in capsys.readouterr().err
    assert main(["export", str(out), str(out / "y")]) == 2  # not a run folder
    assert "not a run folder" in capsys.readouterr().err
    busy = out / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    assert main(["export", str(run_dir), str(busy)]) == 2 and "exists and is not empty" in capsys.readouterr().err
    assert (busy / "keep.txt").read_text() == "mine"
    if not lora:
        assert main(["export", str(run_dir), str(out / "z"), "--format", "adapter"]) == 2
        assert "trained without LoRA" in capsys.readouterr().err
