"""agentrl/JunctionMaze-v0 publishes BEACON's milestones (ALGORITHMS.md §15.2, D-15): the right
exit of each junction is one, ``n_milestones = k``; the agent loop and ``TurnTable`` carry them."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.credit import compute_advantages
from agentrl.env import INFO_MILESTONE, INFO_N_MILESTONES, make
from agentrl.env.contract import milestone_info
from agentrl.types import Episode, Turn, TurnTable
from agentrl_envs.junction.maze import EXITS

ID = "agentrl/JunctionMaze-v0"


def _play(env, actions, seed):
    obs, info = env.reset(seed=seed)
    assert info[INFO_N_MILESTONES] == env.unwrapped.k
    steps = []
    for a in actions:
        o, r, term, trunc, info = env.step(a)
        steps.append((a, r, info))
        if term or trunc:
            break
    return steps


@pytest.mark.parametrize("k", [1, 3, 5])
def test_walkthrough_publishes_k_milestones_at_the_junction_exits(k):
    env = make(ID, k=k)
    try:
        for seed in range(20):
            walk = env.reset(seed=seed)[1]["walkthrough"]
            maze = env.unwrapped.maze
            steps = _play(env, ["look", *walk], seed)  # a no-op first: never a milestone
            flags = [s[2][INFO_MILESTONE] for s in steps]
            assert sum(flags) == k and flags[0] is False
            # the milestone turns are exactly the junction exits: after each corridor (len + 1 moves)
            exits = np.cumsum([len(c) + 1 for c in maze.corridors])  # 1-based positions in walk
            assert [i for i, f in enumerate(flags) if f] == exits.tolist()  # +1 for "look", −1 for 0-based
            assert all(s[2][INFO_N_MILESTONES] == k for s in steps)
            assert steps[-1][1] == 1.0 and flags[-1] is True  # the winning move is the last milestone
    finally:
        env.close()


def test_wrong_exit_invalid_and_noop_are_not_milestones():
    env = make(ID, k=3)
    try:
        walk = env.reset(seed=4)[1]["walkthrough"]
        maze = env.unwrapped.maze
        upto = len(maze.corridors[0])
        wrong = f"go {next(d for d in EXITS if d != maze.right_exit(1))}"
        steps = _play(env, [*walk[:upto], "dance", "wait", wrong], 4)
        assert [s[2][INFO_MILESTONE] for s in steps] == [False] * (upto + 3)
        assert steps[-1][2]["won"] is False and steps[upto][2]["action_valid"] is False
        assert env.step("look")[4][INFO_MILESTONE] is False  # after the end
    finally:
        env.close()


def test_turn_info_and_beacon_on_played_episodes():
    env = make(ID, k=2)
    episodes = []
    try:
        walk = env.reset(seed=7)[1]["walkthrough"]
        maze = env.unwrapped.maze
        wrong2 = f"go {next(d for d in EXITS if d != maze.right_exit(2))}"
        plans = [walk, walk[:-1] + [wrong2], walk[:2] + ["wait"] * 2]
        for e, plan in enumerate(plans):
            steps = _play(env, plan, 7)
            turns = [Turn(run_id="r", episode_id=e, group_id=0, t=t, observation="o", anchor_obs=f"s{t}", action=a,
                          action_valid=bool(info["action_valid"]), reward=r, prompt_ids=np.arange(2, dtype=np.int32),
                          completion_ids=np.arange(2, dtype=np.int32),
                          info={"won": info["won"], **milestone_info(info)})
                     for t, (a, r, info) in enumerate(steps)]
            episodes.append(Episode(e, 0, ID, maze.task_id, 7, turns=turns))
    finally:
        env.close()
    tb = TurnTable.from_episodes(episodes)
    assert tb.n_milestones.tolist() == [2] * len(tb)
    first = len(maze.corridors[0])  # 0-based turn of junction 1's exit
    ms = [[i for i, tr in enumerate(ep.turns) if tr.info["milestone"]] for ep in episodes]
    assert ms == [[first, len(walk) - 1], [first], []]
    adv = compute_advantages(tb, "beacon")
    assert adv.shape == (len(tb),) and np.isfinite(adv).all()
    # the winner and the wrong-exit loser share segment 0 (same turns, same shaped rewards): there they
    # differ by the episode term alone, reward 1 vs 0 (mean_norm); the winner's last segment beats the
    # loser's tail, which is compared with it in group (uid, 1)
    win, lose = adv[tb.episode == 0], adv[tb.episode == 1]
    np.testing.assert_allclose(win[: first + 1] - lose[: first + 1], 1.0, atol=1e-9)
    assert win[first + 1:].min() > lose[first + 1:].max()


def test_walkthrough_rollout_stores_milestones(tmp_path, capsys):
    """The scripted rollout path copies the env's milestones into ``Turn.info``; the store's table has them."""
    from agentrl.cli import main
    from agentrl.store import TurnStore

    store = tmp_path / "s.sqlite"
    rc = main(["rollout", ID, "--policy", "walkthrough", "--episodes", "3", "--env-kwarg", "k=3", "--store", str(store),
               "--run", "w", "--workers", "1"])
    assert rc == 0, capsys.readouterr().err
    with TurnStore(store, readonly=True) as st:
        tb = st.table("w")
    assert tb.n_milestones.tolist() == [3] * len(tb)
    for e in np.unique(tb.episode):  # every walkthrough wins through exactly k milestones, the last on its last turn
        rows = tb.episode == e
        assert tb.milestone[rows].sum() == 3 and tb.milestone[rows][np.argmax(tb.t[rows])]
