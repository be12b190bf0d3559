"""Issue 23 item 9: ``agentrl train CFG --print-config`` prints every key of the effective
config with its value and doc (and trains nothing); Hydra's override spellings work
(``+key=value``, ``~key`` resets a key to its default) and a bare key gets a message that
shows the syntax."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.config import ConfigError, apply_overrides, load_config, to_dict
from agentrl.config.docs import describe_config
from agentrl.train.checks import estimator_docstring, load_checked_config

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "examples" / "gigpo_toy.yaml"


def _leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "kwargs":
            out.update(_leaves(v, f"{prefix}{k}."))
        elif k == "kwargs" and isinstance(v, dict):
            out.update({f"{prefix}{k}.{kk}": vv for kk, vv in v.items()} or {f"{prefix}{k}": v})
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_hydra_spellings() -> None:
    raw = {"run": {"iterations": 10, "seed": 1}, "update": {"lr": 0.1}}
    assert apply_overrides(raw, ["+update.lr=0.5", "++run.seed=2"]) == {"run": {"iterations": 10, "seed": 2},
                                                                        "update": {"lr": 0.5}}
    assert apply_overrides(raw, ["~run.iterations", "~log.console", "~nope.deeper"]) == {
        "run": {"seed": 1}, "update": {"lr": 0.1}}  # absent keys: already their default
    assert apply_overrides(raw, ["~run.seed=1"]) == {"run": {"iterations": 10}, "update": {"lr": 0.1}}
    with pytest.raises(ConfigError, match="run.seed is 1 in the config, not '3'"):
        apply_overrides(raw, ["~run.seed=3"])
    with pytest.raises(ConfigError, match="'~key.sub' resets a key"):
        apply_overrides(raw, ["run.seed"])
    cfg = load_config(TOY, ["~run.iterations"])
    assert cfg.run.iterations == 100 != load_config(TOY).run.iterations  # the dataclass default


def test_print_config_covers_every_key_with_value_and_doc() -> None:
    cfg = load_checked_config(TOY)
    rows = {k.key: k for k in describe_config(cfg, estimator_doc=estimator_docstring)}
    leaves = _leaves(to_dict(cfg))
    assert set(rows) == set(leaves)
    assert rows["update.lr"].value == str(cfg.update.lr) and rows["policy.lora.rank"].value == str(cfg.policy.lora.rank)
    assert all(k.doc for k in rows.values()), [k.key for k in rows.values() if not k.doc]
    assert rows["algorithm.kwargs.gamma"].doc == "step-return discount γ"  # the estimator's own Args entry
    assert rows["update.aggregation"].doc.startswith("how token losses are averaged")


def test_every_key_has_its_own_help_never_a_clipped_fragment() -> None:
    from agentrl.config.help import KEY_HELP
    from agentrl.train.checks import estimator_docstring

    cfg = load_config(TOY, ["policy.lora=null", "rollout.harness.command=[x]", "reward.judge.endpoint=policy"])
    keys = {k.key: k.doc for c in (load_config(TOY), cfg) for k in describe_config(c, estimator_doc=estimator_docstring)}
    for key, doc in keys.items():
        assert doc and "…" not in doc and "``" not in doc, key
        if not key.startswith("algorithm.kwargs."):
            assert doc == KEY_HELP[key], key  # the key's own help, not its section's prose
    stale = set(KEY_HELP) - set(keys) - {"algorithm.kwargs"}  # that one shows for an estimator without kwargs
    assert not stale, stale  # no help for a key that is gone
    assert keys["env.split"] == "task split the training episodes are drawn from"
    assert keys["rollout.group_size"] == "episodes per task instance (one comparison group)"
    assert keys["policy.system_prompt"].startswith("system message template: {env_instructions}")
    assert keys["policy.lora"] == "LoRA adapters (peft); null = full fine-tuning"


def test_cli_print_config_wraps_the_help_never_clips_it(tmp_path) -> None:
    import io

    from rich.console import Console

    from agentrl.cli.train import _print_config

    cfg = load_config(TOY)
    for width in (100, 220):
        buf = io.StringIO()
        _print_config(Console(file=buf, width=width), cfg)
        out = buf.getvalue()
        assert "…" not in out and "policy.system_prompt" in out
        words = " ".join(out.split())
        for k in describe_config(cfg):
            assert k.key in out
            assert all(w in words for w in k.doc.split()), k.key  # every word of every help is printed


def test_cli_print_config_trains_nothing(tmp_path, capsys) -> None:
    rc = main(["train", str(TOY), "--print-config", f"run.out_dir={tmp_path}", "+update.lr=3e-4"])
    out = capsys.readouterr().out
    assert rc == 0 and "update.lr" in out and "0.0003" in out and "algorithm.kwargs.stats_over" in out
    assert not any(tmp_path.iterdir())  # no run folder, no store
    with pytest.raises(SystemExit):
        main(["train", str(TOY), "--print-config", "run.iterations"])
    assert "'run.iterations' is not an override: write key.sub=value" in capsys.readouterr().err


def test_cli_print_config_keeps_every_column_on_a_narrow_terminal() -> None:
    import io

    from rich.console import Console

    from agentrl.cli.train import _print_config

    buf = io.StringIO()
    _print_config(Console(file=buf, width=40), load_config(TOY))
    lines = buf.getvalue().splitlines()
    assert lines[0].split() == ["key", "value", "what", "it", "is"]  # no column dropped
    assert "agentrl/To" in lines[1] and "registered" in lines[1]  # env.id's value and help start on its row
