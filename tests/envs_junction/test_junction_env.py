"""agentrl/JunctionMaze-v0: contract, walkthroughs, splits, the graph behind step, wrong exits,
truncation, Markov texts and the per-junction cue tables."""

from __future__ import annotations

import numpy as np
import pytest

from agentrl.env import check_env, make
from agentrl.env.tasks import tasks_of
from agentrl_envs.junction.env import NOTHING, OVER
from agentrl_envs.junction.maze import EXITS, Maze, cue_table, hinted_cues, split_mazes

ID = "agentrl/JunctionMaze-v0"


@pytest.fixture(scope="module")
def env5():
    env = make(ID)
    yield env
    env.close()


@pytest.mark.parametrize("kwargs", [{"k": 1}, {"k": 5}, {"k": 3, "n_exits": 3, "n_cues": 6, "n_hinted": 4, "split": "eval"}])
def test_check_env_is_clean(kwargs):
    report = check_env(ID, **kwargs)
    assert report.walkthrough_won is True and report.episodes == 5 and report.steps >= 8


def test_hand_played_episode_pins_the_texts():
    env = make(ID, k=2, max_turns=8, n_exits=3, n_hinted=0)  # three exits, bare cues (no voice)
    tid = "k2x3c24-se10-s11"  # the first train maze at k=2 (pins the generator)
    assert split_mazes(2, 24, 3, "train")[0].task_id == tid
    obs, info = env.reset(seed=0, options={"task_id": tid})
    assert obs == info["anchor_obs"] == "You are at the entrance of a maze with 2 junctions. Exits: south."
    assert info["admissible_actions"] == ["go south", "look", "wait"] and info["won"] is False
    maze = Maze.parse(tid)
    right1, right2 = maze.right_exit(1), maze.right_exit(2)
    assert info["walkthrough"] == ["go south", "go east", f"go {right1}", "go south", f"go {right2}"]
    assert env.step("go  east ")[0] == "Nothing happens. You are at the entrance of a maze with 2 junctions. Exits: south."
    obs, r, term, trunc, info = env.step(" go   south")  # whitespace is normalised
    assert (obs, r, term, trunc, info["action_valid"]) == (
        "You are in a corridor, room 2 of 2 before junction 1 of 2. Exits: east.", 0.0, False, False, True)
    obs, *_ , info = env.step("go east")
    assert obs == f"You are at junction 1 of 2. Exits: north, east, west. A sign reads '{maze.cue(1)}'."
    assert info["admissible_actions"] == ["go north", "go east", "go west", "look", "wait"]
    assert env.step("look")[0] == env.step("wait")[0] == obs  # no-ops: same state, same text
    env.step(f"go {right1}")
    obs, r, term, trunc, info = env.step("go south")
    assert obs == f"You are at junction 2 of 2. Exits: north, east, west. A sign reads '{maze.cue(2)}'."
    obs, r, term, trunc, info = env.step(f"go {right2}")
    assert obs == f"You take the {right2} exit at junction 2 of 2 and reach the treasure room. You won!"
    assert (r, term, trunc, info["won"], info["admissible_actions"]) == (1.0, True, False, True, [])
    assert env.step("look")[0] == OVER


@pytest.mark.parametrize("k", [1, 5])
def test_walkthrough_wins_on_200_mazes(k):
    env = make(ID, k=k)
    lengths, ids = [], set()
    for seed in range(200):
        _, info = env.reset(seed=seed)
        ids.add(info["task_id"])
        rewards, walk = [], info["walkthrough"]
        for t, a in enumerate(walk):
            _, r, term, trunc, step_info = env.step(a)
            rewards.append(r)
            assert step_info["action_valid"] and not trunc and term == (t == len(walk) - 1)
        assert step_info["won"] and rewards == [0.0] * (len(walk) - 1) + [1.0]
        lengths.append(len(walk))
    assert 2 * k <= min(lengths) and max(lengths) <= 3 * k and len(set(lengths)) > 1
    assert len(ids) > 150  # seeds draw many distinct mazes (k=1: 376 train mazes)


def test_splits_are_disjoint_and_sized():
    for k, (n_train, n_eval) in ((1, (376, 104)), (5, (4096, 512))):
        train, ev, every = (tasks_of(ID, s, {"k": k}) for s in ("train", "eval", "all"))
        assert (len(train), len(ev), len(every)) == (n_train, n_eval, n_train + n_eval)
        assert not {r.task_id for r in train} & {r.task_id for r in ev}
        assert not {r.digest for r in train} & {r.digest for r in ev}
        assert set(every) == set(train) | set(ev)
    assert n_train + n_eval == 4608 and 376 + 104 == 20 * 24  # k=1: every distinct maze, once
    train_env, eval_env = make(ID, split="train"), make(ID, split="eval")
    train_ids = {r.task_id for r in tasks_of(ID, "train")}
    seen_train = {train_env.reset(seed=s)[1]["task_id"] for s in range(50)}
    seen_eval = {eval_env.reset(seed=s)[1]["task_id"] for s in range(50)}
    assert seen_train <= train_ids and not seen_eval & train_ids
    with pytest.raises(ValueError, match="not in split 'train'"):
        train_env.reset(seed=0, options={"task_id": next(iter(seen_eval))})
    assert make(ID).reset(seed=7)[1]["task_id"] == train_env.reset(seed=7)[1]["task_id"]  # the seed decides


def test_step_follows_the_task_graph_exactly(env5):
    rng = np.random.default_rng(0)
    for seed in range(60):
        obs, info = env5.reset(seed=seed)
        g = env5.unwrapped.task_graph()
        s, t = g.start, 0
        assert obs == g.observation[s] and info["admissible_actions"] == list(g.actions[s])
        while True:
            acts = g.actions[s]
            a = "dance" if rng.random() < 0.1 else acts[int(rng.integers(len(acts)))]
            obs, r, term, trunc, info = env5.step(a)
            t += 1
            if a in acts:
                s, want_r = g.next_state[(s, a)], g.reward[(s, a)]
                assert obs == g.observation[s] and info["action_valid"]
            else:
                want_r = 0.0
                assert obs == f"{NOTHING} {g.observation[s]}" and not info["action_valid"]
            assert r == want_r and info["anchor_obs"] == g.observation[s]
            assert term == (s in g.terminal) and trunc == (not term and t >= g.horizon)
            assert info["won"] == (g.kind[s] == "goal")
            if term or trunc:
                break
            assert info["admissible_actions"] == list(g.actions[s])


def test_task_graph_shape_and_markov_texts(env5):
    env5.reset(seed=3)
    g = env5.unwrapped.task_graph()
    assert g.horizon == 24 and g.start == "r1.1" and g.kind["r1.1"] == "start"
    kinds = [g.kind[s] for s in g.states]
    assert kinds.count("junction") == 5 and kinds.count("dead") == 5 * (env5.unwrapped.n_exits - 1) and kinds.count("goal") == 1
    assert 4 <= kinds.count("filler") <= 9
    assert g.terminal == frozenset(s for s in g.states if g.kind[s] in ("goal", "dead"))
    assert len(set(g.observation.values())) == len(g.states)  # one text per state, no history
    for s, acts in g.actions.items():
        assert acts[-2:] == ("look", "wait") and all(g.next_state[(s, a)] == s for a in acts[-2:])
        assert len(acts) == (2 + env5.unwrapped.n_exits if g.kind[s] == "junction" else 3)
    assert sum(g.reward.values()) == 1.0 and g.reward[("j5", f"go {env5.unwrapped.maze.right_exit(5)}")] == 1.0


def test_wrong_exit_ends_the_episode_with_reward_0(env5):
    for j in (1, 3):
        _, info = env5.reset(seed=11)
        maze, walk = env5.unwrapped.maze, info["walkthrough"]
        upto = sum(len(c) + 1 for c in maze.corridors[: j - 1]) + len(maze.corridors[j - 1])
        for a in walk[:upto]:
            env5.step(a)
        wrong = next(d for d in EXITS[:3] if d != maze.right_exit(j))
        obs, r, term, trunc, info = env5.step(f"go {wrong}")
        assert obs == f"You take the {wrong} exit at junction {j} of 5 and fall into a pit. You lost."
        assert (r, term, trunc, info["won"], info["action_valid"], info["admissible_actions"]) == (
            0.0, True, False, False, True, [])
        assert env5.step(f"go {maze.right_exit(j)}")[4]["action_valid"] is False  # over: nothing more


def test_truncation_at_the_horizon():
    env = make(ID, k=2, max_turns=7)
    env.reset(seed=1)
    for t in range(1, 8):
        obs, r, term, trunc, info = env.step("wait" if t % 2 else "xyzzy")
        assert (r, term, trunc) == (0.0, False, t == 7)
    assert info["admissible_actions"] == [] and env.step("look")[0] == OVER
    tight = make(ID, k=1, max_turns=3)  # a 3-move walkthrough wins on the last turn: terminated, not truncated
    for seed in range(20):
        _, info = tight.reset(seed=seed)
        for a in info["walkthrough"]:
            _, r, term, trunc, _ = tight.step(a)
        assert (r, term, trunc) == (1.0, True, False)


def test_cue_tables_are_per_junction_fixed_and_balanced():
    t1, t2 = cue_table(1, 24, 3), cue_table(2, 24, 3)
    assert len(t1) == 24 and len({w for w, _ in t1}) == 24
    assert sorted(np.bincount([e for _, e in t1]).tolist()) == [8, 8, 8]
    assert t1 != t2 and {w for w, _ in t1} & {w for w, _ in t2}  # words shared, mapped per junction
    shared = {w: e for w, e in t1}
    assert any(shared[w] != e for w, e in t2 if w in shared)
    # junction 1 reads the same table at every k (same prior difficulty per junction)
    for k in (1, 5):
        for m in split_mazes(k, 24, 3, "train")[:50]:
            assert m.right_exit(1) == EXITS[dict(t1)[m.cue(1)]]


def test_hinted_cues_are_balanced_and_voiced():
    env = make(ID, k=5)
    assert (env.unwrapped.n_exits, env.unwrapped.n_cues, env.unwrapped.n_hinted) == (2, 24, 20)  # the defaults
    for j in (1, 2, 5):
        hinted = hinted_cues(j, 24, 2, 20)
        assert len(hinted) == 20 and sorted(np.bincount([cue_table(j, 24, 2)[i][1] for i in hinted]).tolist()) == [10, 10]
        assert hinted_cues(j, 24, 3, 5) <= hinted_cues(j, 24, 3, 6)  # nested: more hints add to the same set
    voiced = bare = 0
    for seed in range(40):
        env.reset(seed=seed)
        maze, g = env.unwrapped.maze, env.unwrapped.task_graph()
        assert maze.task_id.startswith("k5x2c24h20-") and Maze.parse(maze.task_id) == maze
        for j in range(1, 6):
            text = g.observation[f"j{j}"]
            voice = f" A voice says: go {maze.right_exit(j)}."
            assert text == f"You are at junction {j} of 5. Exits: north, east. A sign reads '{maze.cue(j)}'." + (
                voice if maze.hinted(j) else "")
            voiced, bare = voiced + maze.hinted(j), bare + (not maze.hinted(j))
    assert voiced > 3 * bare > 0  # 20 of 24 cues hinted
    with pytest.raises(ValueError, match="n_hinted"):
        make(ID, n_hinted=25)


def test_task_ids_round_trip_and_bad_input_raises():
    for m in split_mazes(5, 24, 3, "eval")[:20]:
        assert Maze.parse(m.task_id) == m
    for bad in ("k2x3c24-ne7", "k1x3c24-q7", "k1x3c24-n24", "rooms4", "k1x9c24-n1"):
        with pytest.raises(ValueError):
            Maze.parse(bad)
    for kwargs in ({"k": 5, "max_turns": 14}, {"split": "test"}, {"n_exits": 7}, {"n_cues": 2}, {"k": 0}):
        with pytest.raises(ValueError):
            make(ID, **kwargs)
    with pytest.raises(RuntimeError, match="before reset"):
        make(ID).unwrapped.task_graph()


def test_snapshot_restore_round_trip(env5):
    _, info = env5.reset(seed=5)
    for a in info["walkthrough"][:4]:
        env5.step(a)
    snap = env5.unwrapped.snapshot()
    after = env5.step(info["walkthrough"][4])
    other = make(ID, split="all")
    other.reset(seed=99)  # another maze, then the snapshot's
    other.unwrapped.restore(snap)
    assert other.step(info["walkthrough"][4])[:4] == after[:4] and snap["state"] != env5.unwrapped.state
