"""Pre-flight of env kwargs (issue 20 items 7 and 9): missing data, a bogus split or an unknown
env keyword is one line and exit 2, found at config time (before any worker or model starts),
not a 40-line traceback from an env worker."""

from __future__ import annotations

import re
import textwrap

import pytest

from agentrl.cli import main
from agentrl.config import ConfigError
from agentrl.env import DataMissingError
from agentrl.train.checks import checked_config_from_dict, load_checked_config

ALF, SHOP, TOY = "agentrl/ALFWorld-v0", "agentrl/WebShop-v0", "agentrl/Toy-v0"


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "Traceback" not in err
    return lines[0]


def test_hook_reports_missing_and_empty_data_dirs(tmp_path):
    from agentrl.env.preflight import check_env_kwargs

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataMissingError, match="ALFWorld data dir .*holds no ALFWorld games"):
        check_env_kwargs(ALF, {"data_dir": str(empty)})
    with pytest.raises(DataMissingError, match="ALFWorld data dir .*does not exist"):
        check_env_kwargs(ALF, {"data_dir": str(tmp_path / "nowhere")})
    with pytest.raises(DataMissingError, match="WebShop data folder .*missing or empty"):
        check_env_kwargs(SHOP, {"data_dir": str(empty)})
    check_env_kwargs(ALF, {"split": "eval_seen"})  # the kept data: fine
    check_env_kwargs(SHOP, {"split": "eval"})


def test_unknown_split_and_keyword_are_refused_by_name():
    from agentrl.env.preflight import check_env_kwargs

    with pytest.raises(ValueError, match=r"split 'bogus'.*train"):
        check_env_kwargs(TOY, {"split": "bogus"})
    with pytest.raises(ValueError, match=r"split 'bogus'.*eval_seen"):
        check_env_kwargs(ALF, {"split": "bogus"})
    with pytest.raises(ValueError, match=r"no keyword 'max_room'.*did you mean 'max_rooms'"):
        check_env_kwargs(TOY, {"max_room": 3})
    with pytest.raises(ValueError) as ei:  # no close name: a full stop before the list
        check_env_kwargs(TOY, {"split": "zzzz"})
    assert re.search(r"has no split 'zzzz'\. Its splits: \w", str(ei.value)), str(ei.value)
    with pytest.raises(ValueError) as ei:
        check_env_kwargs(TOY, {"qqqq": 1})
    assert re.search(r"takes no keyword 'qqqq'\. Its keywords: \w", str(ei.value)), str(ei.value)


@pytest.mark.parametrize("env_id, var", [(ALF, "AGENTRL_ALFWORLD_DATA"), (SHOP, "AGENTRL_WEBSHOP_DATA")])
def test_rollout_with_an_empty_data_dir_is_one_line_exit_2(env_id, var, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(var, str(tmp_path))
    rc = main(["rollout", env_id, "--episodes", "1", "--store", str(tmp_path / "s.sqlite"), "--workers", "1"])
    assert rc == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(tmp_path) in line and ("ALFWorld" in line or "WebShop" in line)
    assert not (tmp_path / "s.sqlite").exists()  # refused before the store was opened


def test_rollout_bogus_split_is_one_line_exit_2(tmp_path, capsys):
    rc = main(["rollout", TOY, "--split", "bogus", "--store", str(tmp_path / "s.sqlite"), "--workers", "1"])
    assert rc == 2
    assert "split 'bogus'" in _one_error_line(capsys.readouterr().err)


def _cfg_file(tmp_path, env: str) -> str:
    p = tmp_path / "cfg.yaml"
    p.write_text(textwrap.dedent(f"""
        run: {{name: r, out_dir: {tmp_path / 'runs'}, iterations: 1}}
        env: {env}
        policy: {{model: smollm2-135m-instruct}}
    """))
    return str(p)


def test_train_refuses_missing_data_at_config_time(tmp_path, monkeypatch, capsys):
    import agentrl.train.loop as loop

    def no_model(*a, **k):  # pragma: no cover - reached only before the fix
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(loop, "load_policy", no_model)
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = _cfg_file(tmp_path, f"{{id: {ALF}, split: train, eval_split: eval_seen, kwargs: {{data_dir: {empty}}}}}")
    with pytest.raises(ConfigError, match="env: ALFWorld data dir"):
        load_checked_config(cfg)
    assert main(["train", cfg]) == 2
    assert "ALFWorld data dir" in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "runs").exists()


def test_config_checks_the_eval_split_only_when_evaluating():
    base = {"env": {"id": ALF, "split": "train", "eval_split": "eval"}}
    with pytest.raises(ConfigError, match=r"env.eval_split.*'eval'.*eval_unseen"):
        checked_config_from_dict(base)
    checked_config_from_dict(base, ["run.eval_every=0"])  # no evaluation: the eval split is never built
    with pytest.raises(ConfigError, match="env.kwargs: .*no keyword 'nope'"):
        checked_config_from_dict({"env": {"id": TOY, "kwargs": {"nope": 1}}})
