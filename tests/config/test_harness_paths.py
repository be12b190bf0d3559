"""Issue 53: a harness program path is read against the config file's folder (then the working
directory) and a missing program stops the run at start with one line naming the path — from
a copy of examples/harness_toy.yaml in another folder, every episode used to abort while
``agentrl train`` exited 0."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from agentrl.config import ConfigError, load_config
from agentrl.config.harness_paths import check_harness_program, resolve_harness_command

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_harness_config_loads_from_any_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the repository
    cfg = load_config(ROOT / "examples" / "harness_toy.yaml")
    assert cfg.rollout.harness.command[:2] == ("{python}", str(ROOT / "examples" / "harness_agent.py"))
    assert cfg.rollout.harness.command[2:4] == ("--max-turns", "20")


def test_a_copy_whose_program_is_missing_stops_at_start_naming_the_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / "mine" / "harness.yaml"
    copy.parent.mkdir()
    shutil.copy(ROOT / "examples" / "harness_toy.yaml", copy)
    with pytest.raises(ConfigError) as err:
        load_config(copy)
    msg = str(err.value)
    assert "\n" not in msg and "the harness program 'harness_agent.py' is neither beside the config" in msg
    assert str(copy.parent / "harness_agent.py") in msg and str(tmp_path / "harness_agent.py") in msg
    (copy.parent / "harness_agent.py").write_text("print('hi')\n")  # put it beside the copy: found there
    assert load_config(copy).rollout.harness.command[1] == str(copy.parent / "harness_agent.py")


def test_resolution_order_and_the_forms_that_name_no_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cwd_agent.py").write_text("")
    cfg_dir = tmp_path / "cfg"
    cfg_dir.mkdir()
    assert resolve_harness_command(("{python}", "cwd_agent.py"), cfg_dir) == ("{python}", str(tmp_path / "cwd_agent.py"))
    (cfg_dir / "cwd_agent.py").write_text("")  # beside the config wins over the working directory
    assert resolve_harness_command(("{python}", "cwd_agent.py"), cfg_dir)[1] == str(cfg_dir / "cwd_agent.py")
    assert resolve_harness_command(("{python}", "-m", "pkg.agent"), cfg_dir) == ("{python}", "-m", "pkg.agent")
    assert resolve_harness_command((sys.executable, "x"), cfg_dir) == (sys.executable, "x")
    check_harness_program(("python3", "agent.py")) if shutil.which("python3") else None
    with pytest.raises(ConfigError, match="'no-such-harness-xyz' is not on PATH"):
        check_harness_program(("no-such-harness-xyz",))
    with pytest.raises(ConfigError, match="does not exist"):
        check_harness_program(("{python}", str(tmp_path / "gone.py")))
    with pytest.raises(ConfigError, match="needs a script after it"):
        resolve_harness_command(("{python}",), cfg_dir)


def test_agentrl_train_stops_at_start_or_at_the_first_all_failed_iteration(tiny_dir, tmp_path, monkeypatch, capsys):
    """Through the CLI: a copy of the shipped config whose program is missing exits 2 with one
    line naming the path before anything loads; a harness that fails on every episode (exit 3
    at once) makes ``agentrl train`` exit 1 at iteration 1 with the failure counts and the
    first error, its aborted episodes stored, no checkpoint written."""
    from agentrl.cli import main
    from agentrl.store import TurnStore

    monkeypatch.chdir(tmp_path)
    copy = tmp_path / "harness.yaml"
    shutil.copy(ROOT / "examples" / "harness_toy.yaml", copy)
    assert main(["train", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "the harness program 'harness_agent.py' is neither beside the config" in err
    broken = ["{python}", "-c", "import sys; sys.exit(3)"]
    code = main(["train", str(ROOT / "examples" / "harness_toy.yaml"), f"policy.model={tiny_dir}", "policy.lora=null",
                 "policy.dtype=float32", "run.eval_before=false", "run.eval_every=0", f"run.out_dir={tmp_path}",
                 "run.iterations=2", "log.console=false", "rollout.groups_per_iteration=1", "rollout.group_size=2",
                 f"rollout.harness.command={broken}"])
    err = capsys.readouterr().err
    assert code == 1, err[-2000:]
    assert "every episode of iteration 1 failed, so nothing can be trained: 2 of 2 episode(s) failed (aborted 2" in err
    assert "first error (episode 0): " in err
    run = tmp_path / "harness-toy"
    with TurnStore(run / "store.sqlite", readonly=True) as store:
        assert [e.status.value for e in store.episodes("harness-toy")] == ["aborted", "aborted"]
    assert not (run / "checkpoints").exists() or not any((run / "checkpoints").iterdir())
