"""`agentrl replay` prints hostile stored text literally: no rich markup, no terminal control codes."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.cli import main
from agentrl.store import TurnStore
from agentrl.types import Episode, Turn

CLEAR = "\x1b[2J"  # clears the terminal when written raw
TITLE = "\x1b]0;pwned\x07"  # sets the terminal title


@pytest.fixture()
def hostile(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    path = tmp_path / "s.sqlite"
    turn = Turn(run_id="", episode_id=-1, group_id=0, t=0, observation=f"obs {CLEAR}[bold]x[/] \r\x08 line2\n\tend",
                anchor_obs="a", action=f"act [/] {TITLE}", action_valid=True, reward=1.0, terminated=True,
                prompt_ids=np.array([1], np.int32), completion_ids=np.array([2], np.int32),
                completion_logprobs=np.array([-0.5], np.float32), info={"note": CLEAR})
    ep = Episode(episode_id=-1, group_id=0, env_id="agentrl/Toy-v0", task_id=f"task [/] {CLEAR}", seed=0,
                 turns=[turn], error="")
    bad = Episode(episode_id=-1, group_id=1, env_id="e[/]", task_id="[red]t", seed=1, status="env_error",
                  error=f"boom [/] {CLEAR}")
    with TurnStore(path) as store:
        store.add_episodes([ep, bad], run_id="run[/]")
        store.add_episodes([Episode(episode_id=-1, group_id=0, env_id="x", task_id="t", seed=0)], run_id="other")
    return path


def test_summary_prints_markup_literally_and_no_control_codes(hostile, capsys):
    assert main(["replay", str(hostile), "--run", "run[/]"]) == 0
    out = capsys.readouterr().out
    assert "task [/] \\x1b[2J" in out and "[red]t" in out and "run run[/]" in out
    assert "\x1b" not in out


def test_episode_prints_markup_literally_and_no_control_codes(hostile, capsys):
    assert main(["replay", str(hostile), "--run", "run[/]", "--episode", "0"]) == 0
    out = capsys.readouterr().out
    assert "task [/]" in out and "[bold]x[/]" in out and "act [/]" in out
    assert "\\x1b[2J" in out and "\\x1b]0;pwned\\x07" in out and "\\x0d\\x08" in out
    lines = out.splitlines()  # newline and tab are kept: "end" is on the line after "line2"
    assert "end" in lines[next(i for i, line in enumerate(lines) if "line2" in line) + 1]
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out and "\x08" not in out
    assert main(["replay", str(hostile), "--run", "run[/]", "--episode", "1"]) == 0
    out = capsys.readouterr().out
    assert "boom [/] \\x1b[2J" in out and "\x1b" not in out


def test_latest_run_notice_and_errors_print_markup_literally(hostile, capsys):
    assert main(["replay", str(hostile)]) == 0  # latest run: "other"; the notice lists "run[/]"
    assert "(run[/], other)" in capsys.readouterr().out
    assert main(["replay", str(hostile), "--run", f"nope[/]{CLEAR}"]) == 2  # KeyError names the unknown run
    err = capsys.readouterr().err
    assert "nope[/]" in err and "\x1b" not in err
    assert main(["replay", str(hostile), "--run", "run[/]", "--episode", "9"]) == 2
    err = capsys.readouterr().err
    assert "episode 9" in err and "run[/]" in err


def test_rollout_summary_prints_a_markup_run_id_literally(tmp_path, capsys):
    import gymnasium

    if "agentrl/Toy-v0" not in gymnasium.registry:
        gymnasium.register(id="agentrl/Toy-v0", entry_point="agentrl_envs.toy.env:ToyEnv")
    store = tmp_path / "r[/].sqlite"
    assert main(["rollout", "agentrl/Toy-v0", "--store", str(store), "--policy", "random", "--episodes", "2",
                 "--workers", "1", "--run", "x[/]"]) == 0
    assert "stored 2 episodes of run x[/]" in capsys.readouterr().out
