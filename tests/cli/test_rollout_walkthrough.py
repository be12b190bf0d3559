"""`agentrl rollout agentrl/ALFWorld-v0 --policy walkthrough` on a real kept game with an empty
walkthrough cache (issue 20 item 10): the env declares the kwargs under which it gives
walkthroughs (``expert=True``) and the walkthrough policy builds it with them; ``--env-kwarg``
passes any constructor keyword."""

from __future__ import annotations

import pytest

from agentrl.cli import main
from agentrl.store import TurnStore

pytest.importorskip("alfworld", reason="needs the alfworld extra: pip install 'agentrl[alfworld]'")


def test_walkthrough_policy_plays_an_uncached_alfworld_game_to_a_win(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path / "cache"))  # nothing planned yet
    monkeypatch.setenv("COLUMNS", "200")
    store = tmp_path / "s.sqlite"
    rc = main(["rollout", "agentrl/ALFWorld-v0", "--policy", "walkthrough", "--episodes", "1", "--split", "eval_seen",
               "--store", str(store), "--run", "w", "--slots", "1", "--workers", "1"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "1 won" in out.out
    with TurnStore(store, readonly=True) as st:
        (ep,) = st.load_episodes("w")
    assert ep.success and ep.task_id.startswith("valid_seen/") and len(ep.turns) >= 2
    assert list((tmp_path / "cache").rglob("*.json"))  # the plan was computed once and cached


def test_env_kwarg_is_parsed_and_checked(tmp_path, capsys):
    rc = main(["rollout", "agentrl/Toy-v0", "--env-kwarg", "max_room=4", "--store", str(tmp_path / "s.sqlite")])
    assert rc == 2 and "did you mean 'max_rooms'" in capsys.readouterr().err
    rc = main(["rollout", "agentrl/Toy-v0", "--env-kwarg", "oops", "--store", str(tmp_path / "s.sqlite")])
    assert rc == 2 and "is not KEY=VALUE" in capsys.readouterr().err
    rc = main(["rollout", "agentrl/Toy-v0", "--env-kwarg", "max_rooms=4", "--episodes", "2", "--workers", "1",
               "--store", str(tmp_path / "s.sqlite"), "--run", "k"])
    assert rc == 0


def test_env_kwarg_reaches_the_alfworld_env(tmp_path, monkeypatch, capsys):
    from agentrl_envs.alfworld.data import default_data_dir

    monkeypatch.setenv("AGENTRL_ALFWORLD_DATA", str(tmp_path / "nowhere"))  # the kwarg wins over the variable
    rc = main(["rollout", "agentrl/ALFWorld-v0", "--episodes", "1", "--split", "eval_seen", "--env-kwarg",
               f"data_dir={default_data_dir()}", "--store", str(tmp_path / "s.sqlite"), "--workers", "1"])
    assert rc == 0, capsys.readouterr().err
