"""Issue 48: a range error names the value given, a YAML syntax error names the file and line,
and ``policy.system_prompt`` is checked at config time and reaches the agent loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.config import ConfigError, config_from_dict, load_config
from agentrl.config.sections import SYSTEM_PROMPT, SYSTEM_PROMPT_PLACEHOLDERS


def _cfg(*overrides: str):
    return config_from_dict({"env": {"id": "agentrl/Toy-v0"}}, list(overrides))


@pytest.mark.parametrize("override, match", [
    ("rollout.group_size=-2", r"rollout\.group_size must be >= 1, got -2$"),
    ("rollout.groups_per_iteration=0", r"rollout\.groups_per_iteration must be >= 1, got 0$"),
    ("run.eval_every=-1", r"run\.eval_every must be >= 0 \(0 = off\), got -1$"),
    ("policy.temperature=0", r"policy\.temperature must be > 0 \(sampling; greedy eval is separate\), got 0"),
    ("policy.max_batch=0", r"policy\.max_batch must be >= 1 or null \(null: all active slots\), got 0$"),
    ("rollout.tree.siblings=1", r"rollout\.tree\.siblings must be >= 2 .*, got 1$"),
    ("update.epochs=0", r"update\.epochs must be >= 1, got 0$"),
    ("update.lr=-1e-5", r"update\.lr must be > 0, got -1e-05$"),
    ("policy.top_p=1.5", r"policy\.top_p must be in \(0, 1\], got 1\.5$"),
])
def test_range_errors_name_the_value_given(override, match):
    with pytest.raises(ConfigError, match=match):
        _cfg(override)


def test_yaml_syntax_error_names_the_file_line_and_column(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  id: agentrl/Toy-v0\nrollout:\n  group_size: [1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as ei:
        load_config(bad)
    msg = str(ei.value)
    assert msg.startswith(f"{bad}, line 5, column 1: not valid YAML: expected ',' or ']'"), msg
    assert "line 4, column 15" in msg and "<unicode string>" not in msg
    with pytest.raises(ConfigError, match=r"override 'policy\.system_prompt=\{x\} y', line 1, column 5: .*YAML quotes"):
        _cfg("policy.system_prompt={x} y")


def test_system_prompt_placeholders_are_checked_at_config_time():
    with pytest.raises(ConfigError, match=r"policy\.system_prompt: unknown placeholder \{task\}; the allowed "
                                          r"placeholders are \{env_instructions\}, \{action_format\}"):
        _cfg("policy.system_prompt='Play. {task}'")
    assert _cfg("policy.system_prompt='Reply as {\"a\": 1}. {env_instructions}'").policy.system_prompt.endswith(
        "{env_instructions}")


def test_system_prompt_default_matches_the_renderer_and_reaches_the_loop():
    from agentrl.eval import loop_config
    from agentrl.rollout import prompt

    assert SYSTEM_PROMPT == prompt.DEFAULT_SYSTEM_PROMPT and SYSTEM_PROMPT_PLACEHOLDERS == prompt.PLACEHOLDERS
    assert loop_config(_cfg()).system_prompt == SYSTEM_PROMPT
    assert loop_config(_cfg("policy.system_prompt='{env_instructions}'")).system_prompt == "{env_instructions}"


@pytest.mark.parametrize("overrides, match", [
    (["update.kl_coef=0.1"], r"update.kl_coef=0.1 asks for a KL penalty to a frozen reference model.*set update.kl_coef: 0"),
    (["policy.action_constraint=none", "policy.action_format=regex:("], r"policy.action_format: action format 'regex:\('"),
    (["policy.action_constraint=none", "policy.action_format=nonsense"], r"policy.action_format: unknown action format"),
    (["update.lr=.inf"], r"update.lr must be a finite number > 0, got inf"),
])
def test_the_checked_config_refuses_what_would_fail_after_a_rollout(overrides, match, tmp_path):
    from agentrl.train.checks import checked_config_from_dict

    with pytest.raises(ConfigError, match=match):
        checked_config_from_dict({"run": {"out_dir": str(tmp_path)}, "env": {"id": "agentrl/Toy-v0"}}, overrides)


def test_a_declared_action_format_must_be_one_the_loop_knows(tmp_path):
    import numpy as np

    from agentrl.credit import register_estimator, unregister_estimator
    from agentrl.train.checks import checked_config_from_dict

    register_estimator("fmt_nonsense", action_format="nonsense")(lambda table: np.zeros(len(table)))
    try:
        with pytest.raises(ConfigError, match="declares an action format the agent loop does not know"):
            checked_config_from_dict({"run": {"out_dir": str(tmp_path)}, "env": {"id": "agentrl/Toy-v0"},
                                      "algorithm": {"estimator": "fmt_nonsense"}})
    finally:
        unregister_estimator("fmt_nonsense")


def test_unquoted_on_off_reach_the_enum_keys_that_spell_them(tmp_path):
    # YAML 1.1 reads on/off as booleans; update.master_weights' choices are auto | on | off
    assert _cfg("update.master_weights=off").update.master_weights == "off"
    path = tmp_path / "c.yaml"
    path.write_text("env: {id: agentrl/Toy-v0}\nupdate: {master_weights: off}\n")
    assert load_config(path).update.master_weights == "off"
    with pytest.raises(ConfigError, match=r"rollout.on_weight_update: False is not allowed.*quote it"):
        _cfg("rollout.on_weight_update=no")
