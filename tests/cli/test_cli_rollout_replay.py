"""`agentrl rollout` fills a store without a model; `agentrl replay` shows it."""

from __future__ import annotations

import gymnasium
import pytest

from agentrl.cli import main
from agentrl.env.registry import load_plugins, make
from agentrl.rollout import RolloutRequest, get_runner
from agentrl.store import TurnStore
from agentrl.types import EpisodeStatus

TOY = "agentrl/Toy-v0"
FLAKY = "agentrl-test/Flaky-v0"


@pytest.fixture(autouse=True)
def _envs(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich: no wrapping of long lines
    load_plugins()
    if TOY not in gymnasium.registry:  # registered by envs/__init__.py; kept for a partial checkout
        gymnasium.register(id=TOY, entry_point="agentrl_envs.toy.env:ToyEnv")
    if FLAKY not in gymnasium.registry:
        gymnasium.register(id=FLAKY, entry_point="cli_fake_envs:FlakyEnv")


def _rollout(store, *extra: str) -> int:
    return main(["rollout", TOY, "--store", str(store), "--slots", "4", "--workers", "1", *extra])


def test_random_rollout_groups_share_seed_and_are_reproducible(tmp_path, capsys):
    store = tmp_path / "s.sqlite"
    assert _rollout(store, "--policy", "random", "--episodes", "6", "--group", "3", "--seed", "5",
                    "--run", "a", "--max-turns", "4") == 0
    out = capsys.readouterr().out
    assert "stored 6 episodes of run a" in out
    assert f"agentrl replay {store} --run a" in out
    assert _rollout(store, "--policy", "random", "--episodes", "6", "--group", "3", "--seed", "5",
                    "--run", "b", "--max-turns", "4") == 0
    capsys.readouterr()
    assert main(["replay", str(store)]) == 0
    out = capsys.readouterr().out
    assert "showing run b, the latest of 2 runs (a, b)" in out and "run b: 6 episodes" in out
    with TurnStore(store, readonly=True) as st:
        a, b = st.load_episodes("a"), st.load_episodes("b")
    assert [e.group_id for e in a] == [0, 0, 0, 1, 1, 1]
    assert [e.seed for e in a] == [5, 5, 5, 6, 6, 6]
    tasks = {g: {e.task_id for e in a if e.group_id == g} for g in (0, 1)}
    assert all(len(v) == 1 for v in tasks.values())
    assert tasks[0] == {make(TOY).reset(seed=5)[1]["task_id"]}
    for ea, eb in zip(a, b):  # same seeds → identical episodes, whatever the scheduling
        assert [t.action for t in ea.turns] == [t.action for t in eb.turns]
        assert ea.turns[0].observation == make(TOY).reset(seed=ea.seed)[0]
    # within a group the random streams differ (seeded per episode)
    assert len({tuple(t.action for t in e.turns) for e in a}) > 1
    for e in a:
        assert len(e.turns) <= 4 and e.status == EpisodeStatus.OK
        assert e.turns[-1].terminated or e.turns[-1].truncated
        assert [t.t for t in e.turns] == list(range(len(e.turns)))
        # the next anchor of a turn is the anchor of the following turn
        assert all(x.next_anchor_obs == y.anchor_obs for x, y in zip(e.turns, e.turns[1:]))


def test_walkthrough_rollout_wins_and_replay_shows_turns(tmp_path, capsys):
    store = tmp_path / "w.sqlite"
    assert _rollout(store, "--policy", "walkthrough", "--episodes", "4", "--group", "2", "--run", "w") == 0
    with TurnStore(store) as st:
        eps = st.load_episodes("w")
        assert all(e.success and e.return_ == 1.0 for e in eps)
        plan = make(TOY).reset(seed=eps[0].seed)[1]["walkthrough"]
        assert [t.action for t in eps[0].turns] == plan
        first = eps[0].turns[0]
        st.set_advantages("w", [first.turn_id], [0.75], iteration=3, estimator="grpo")
    capsys.readouterr()
    assert main(["replay", str(store)]) == 0
    out = capsys.readouterr().out
    assert "run w: 4 episodes" in out
    assert out.count(eps[0].task_id) == 2 and "yes" in out
    assert main(["replay", str(store), "--episode", "0", "--run", "w"]) == 0
    out = capsys.readouterr().out
    assert out.count("turn_id=") == len(plan)
    assert "> " + plan[0] in out and "> " + plan[-1] in out
    assert eps[0].turns[0].observation.splitlines()[0] in out
    assert "grpo@3=+0.75" in out and out.count("advantage") == 1
    assert "reward=1 valid=yes" in out and "terminated" in out


def test_env_errors_are_stored_as_env_error(tmp_path, capsys):
    store = tmp_path / "f.sqlite"
    assert main(["rollout", FLAKY, "--store", str(store), "--policy", "walkthrough", "--episodes", "4",
                 "--group", "2", "--seed", "0", "--run", "f", "--workers", "1"]) == 0
    assert "2 ok, 2 env_error" in capsys.readouterr().out
    with TurnStore(store, readonly=True) as st:
        eps = st.load_episodes("f")
        table = st.table("f")
    status = {e.episode_id: (e.seed, e.status, len(e.turns)) for e in eps}
    assert status == {0: (0, EpisodeStatus.OK, 3), 1: (0, EpisodeStatus.OK, 3),
                      2: (1, EpisodeStatus.ENV_ERROR, 1), 3: (1, EpisodeStatus.ENV_ERROR, 1)}
    assert all("flaky env exploded" in e.error for e in eps if e.status != EpisodeStatus.OK)
    assert table.episode_ok.tolist() == [True] * 6 + [False] * 2
    assert main(["replay", str(store)]) == 0
    assert "env_error" in capsys.readouterr().out


def test_user_errors_are_one_line(tmp_path, capsys):
    assert main(["rollout", "agentrl/Toy-v9", "--store", str(tmp_path / "x.sqlite")]) == 2
    assert "did you mean" in capsys.readouterr().err
    assert _rollout(tmp_path / "x.sqlite", "--episodes", "5", "--group", "2") == 2
    assert "multiple of group" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert _rollout(tmp_path / "file" / "x.sqlite", "--episodes", "1") == 2
    err = capsys.readouterr().err
    assert "cannot create the directory of store path" in err and "writable directory" in err
    assert main(["replay", str(tmp_path / "missing.sqlite")]) == 2
    assert "no turn store" in capsys.readouterr().err
    assert _rollout(tmp_path / "x.sqlite", "--episodes", "1", "--run", "r", "--max-turns", "1") == 0
    assert _rollout(tmp_path / "x.sqlite", "--episodes", "1", "--run", "r") == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "x.sqlite"), "--episode", "7"]) == 2
    assert "episode 7 is not in run" in capsys.readouterr().err


def test_llm_policy_dispatch_error(monkeypatch):
    import agentrl.rollout as rollout

    monkeypatch.setattr(rollout, "LLM_RUNNER", ("agentrl.rollout._no_such_llm_runner", "run_llm_rollout"))
    with pytest.raises(ValueError, match="LLM policies need"):
        get_runner("smollm2-135m-instruct")
    assert get_runner("random").__name__ == "run_scripted"
    with pytest.raises(ValueError, match="multiple of group"):
        RolloutRequest(env_id=TOY, policy="random", episodes=3, group=2)


def test_unknown_policy_fails_before_creating_the_store(tmp_path, capsys):
    from agentrl.cli import main

    store = tmp_path / "never.sqlite"
    assert main(["rollout", "agentrl/Toy-v0", "--policy", "walkthru", "--episodes", "2", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'walkthrough'" in err and "random" in err
    assert not store.exists()
