"""SFT warm-start: expert turns are token-identical to RL turns (same prompts, same loss
masks), a few steps lower the loss on toy walkthroughs, the output folder loads as a policy."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.config import ConfigError, PolicyConfig  # noqa: E402
from agentrl.eval import env_kwargs, loop_config  # noqa: E402
from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.chat import ChatRenderer  # noqa: E402
from agentrl.llm.scripted import ScriptedEngine  # noqa: E402
from agentrl.rollout.collector import CollectConfig, collect  # noqa: E402
from agentrl.sft import (SFTConfig, expert_completion, expert_episodes, sft_batch, sft_loss,  # noqa: E402
                         split_sft_config, train_sft)
from agentrl.train.checks import checked_config_from_dict  # noqa: E402
from agentrl.update.batch import build_batch  # noqa: E402


def _cfg(tiny_dir, tmp_path=None, context="chat", constraint="none", fmt="tag:action"):
    raw = {"env": {"id": "agentrl/Toy-v0", "max_turns": 12, "split": "all"},
           "policy": {"model": str(tiny_dir), "context": context, "action_format": fmt,
                      "action_constraint": constraint},
           "run": {"name": "sft-test", "out_dir": str(tmp_path or "runs")}}
    return checked_config_from_dict(raw)


@pytest.mark.parametrize("context,constraint", [("chat", "none"), ("window", "admissible")])
def test_expert_turns_are_token_identical_to_rl_turns(tiny_dir, tiny_tokenizer, context, constraint):
    cfg = _cfg(tiny_dir, context=context, constraint=constraint)
    r = ChatRenderer(tiny_tokenizer)
    data = expert_episodes(cfg, r, 2048, n=2, seed=5, num_slots=2)
    assert len(data.episodes) == 2 and data.won == 2 and data.skipped == 0
    ep = data.episodes[0]
    loop = loop_config(cfg)
    # RL: the collector with an engine that emits the same expert tokens, same env seed
    engine = ScriptedEngine([expert_completion(t.action, loop, r).token_ids for t in ep.turns],
                            eos_token_id=r.eos_token_id)
    rl = collect(engine, r, CollectConfig(env_id=cfg.env.id, n_groups=1, seed=ep.seed, loop=loop, num_workers=1,
                                          sampling=SamplingParams(max_tokens=64), progress=False,
                                          env_kwargs=env_kwargs(cfg, cfg.env.split)))[0]
    assert [t.action for t in rl.turns] == [t.action for t in ep.turns]
    for a, b in zip(ep.turns, rl.turns):
        np.testing.assert_array_equal(a.prompt_ids, b.prompt_ids)
        np.testing.assert_array_equal(a.completion_ids, b.completion_ids)
        assert a.info.get("allowed_actions") == b.info.get("allowed_actions")
    for pack in (False, True):
        sft = sft_batch(ep.turns, r, 0, constrained=constraint == "admissible", pack=pack)
        rlb = build_batch([t.prompt_ids for t in rl.turns], [t.completion_ids for t in rl.turns],
                          [t.completion_logprobs for t in rl.turns], np.ones(len(rl.turns)), pad_id=0, pack=pack)
        assert torch.equal(sft.loss_mask, rlb.loss_mask) and torch.equal(sft.input_ids, rlb.input_ids)
        assert int(sft.loss_mask.sum()) == sum(t.completion_ids.size for t in ep.turns)
        assert (sft.allowed_ids is not None) == (constraint == "admissible")


def test_sft_config_split_and_errors(tiny_dir):
    cfg, sft = split_sft_config({"env": {"id": "agentrl/Toy-v0"}, "sft": {"epochs": 3}}, ["sft.lr=0.01", "run.seed=4"])
    assert (sft.epochs, sft.lr, cfg.run.seed) == (3, 0.01, 4)
    with pytest.raises(ConfigError, match="valid: episodes"):
        split_sft_config({"env": {"id": "agentrl/Toy-v0"}, "sft": {"epoch": 3}})
    with pytest.raises(ConfigError):
        SFTConfig(episodes=0)


@pytest.mark.parametrize("constraint", ["none", "admissible"])
def test_sft_lowers_the_loss_and_writes_a_loadable_policy(tiny_dir, tmp_path, constraint):
    from agentrl.llm.policy import load_policy

    cfg = _cfg(tiny_dir, tmp_path, constraint=constraint, fmt="whole")
    before_policy = load_policy(PolicyConfig(model=str(tiny_dir)))
    r = before_policy.renderer
    turns = expert_episodes(cfg, r, 2048, n=6, seed=0, num_slots=3).turns
    constrained = constraint == "admissible"
    before = sft_loss(before_policy.model, turns, r, before_policy.pad_id, constrained=constrained)
    res = train_sft(cfg, SFTConfig(episodes=6, epochs=4, lr=3e-3, batch_turns=8, seed=0, num_slots=3),
                    log=lambda *_: None)
    assert res.out_dir == tmp_path / "sft-test" / "sft" and res.turns == len(turns) and res.won == 6
    after_policy = load_policy(PolicyConfig(model=str(res.out_dir)))
    after = sft_loss(after_policy.model, turns, r, after_policy.pad_id, constrained=constrained)
    assert after < before - 0.1, (before, after)
    assert res.last_epoch_loss < res.first_epoch_loss


def test_sft_cli_writes_the_folder_and_reports_bad_keys(tiny_dir, tmp_path, capsys):
    from agentrl.cli import main

    cfg = tmp_path / "sft.yaml"
    cfg.write_text(f"env: {{id: agentrl/Toy-v0, max_turns: 12, split: all}}\n"
                   f"policy: {{model: {tiny_dir}, action_format: whole}}\n"
                   f"run: {{name: cli, out_dir: {tmp_path}}}\nsft: {{episodes: 2, epochs: 1, lr: 1e-3}}\n")
    assert main(["sft", str(cfg), "sft.num_slots=2"]) == 0
    assert (tmp_path / "cli" / "sft" / "config.json").is_file()
    assert "policy.model=" in capsys.readouterr().out
    assert main(["sft", str(cfg), "sft.epoch=2"]) != 0
    assert "valid: episodes" in capsys.readouterr().err.replace("\n", " ")
