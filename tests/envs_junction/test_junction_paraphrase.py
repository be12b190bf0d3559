"""agentrl/JunctionMaze-v0 at ``paraphrase=1``: the banks keep what a room says, the task graph is
unchanged, replays are exact, the contract holds, and through the real collector no two episodes
of a group share an anchor (at 0 they do); envs that do not ask get no member option."""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest

from agentrl.env import META_RESET_MEMBER, OPTION_MEMBER, check_env, env_metadata, make
from agentrl.env.pool import EnvPool
from agentrl.llm.scripted import ScriptedEngine
from agentrl.rollout.agent_loop import LoopConfig
from agentrl.rollout.branching import EnvTrace, replay_env, replay_prefix
from agentrl.rollout.collector import CollectConfig, collect, reset_options, wants_member
from agentrl.types import EpisodeStatus
from agentrl_envs.junction import paraphrase as para
from agentrl_envs.junction.env import NOTHING, OVER
from agentrl_envs.junction.maze import EXITS, Maze, split_mazes

ID = "agentrl/JunctionMaze-v0"
TOY = "agentrl/Toy-v0"


def _rooms(env) -> list[str]:
    g = env.unwrapped.task_graph()
    return [s for s in g.states if s not in g.terminal]


@pytest.mark.parametrize("kwargs", [{"k": 5}, {"k": 3, "n_exits": 3, "n_cues": 6, "n_hinted": 3}])
def test_every_wording_keeps_cue_exits_hint_and_place(kwargs):
    env = make(ID, paraphrase=1, paraphrase_bank=24, **kwargs)
    for seed in range(6):
        env.reset(seed=seed)
        seen: dict[str, set[str]] = {}
        u = env.unwrapped
        maze, g = u.maze, u.task_graph()
        for s in _rooms(env):
            bank = u.wordings(s)
            assert len(bank) == 24 and len(set(bank)) == 24  # distinct, of size B
            assert bank == para.bank(maze.task_id, s, 24) and bank[:16] == para.bank(maze.task_id, s, 16)
            words = [set(re.findall(r"[a-z]+", w.lower())) for w in bank]
            exits = [a[3:] for a in g.actions[s] if a.startswith("go ")]
            for w, ws in zip(bank, words):
                assert all(e in ws for e in exits), (s, w)  # every exit stays readable
                assert not (set(EXITS) - set(exits)) & ws, (s, w)  # and no other direction appears
                if g.kind[s] == "junction":
                    j = int(s[1:])
                    assert f"'{maze.cue(j)}'" in w and f"junction {j} of {maze.k}" in w.replace("Junction", "junction")
                    hints = re.findall(r"go (\w+)", w)
                    assert hints == ([maze.right_exit(j)] if maze.hinted(j) else []), w  # the voice, only when hinted
                else:
                    assert "go " not in w and "'" not in w
                    assert ("entrance" in w) == (s == "r1.1")
            assert not any(texts & set(bank) for texts in seen.values())  # a maze's rooms never share a wording
            seen[s] = set(bank)
        assert u.wordings("goal") == (g.observation["goal"],)  # terminal rooms: canonical
    with pytest.raises(KeyError):
        u.wordings("nowhere")
    env.close()


def test_task_graph_is_the_same_and_paraphrase_0_is_unchanged():
    a, b = make(ID, k=3), make(ID, k=3, paraphrase=1)
    for seed in range(5):
        oa, ia = a.reset(seed=seed, options={OPTION_MEMBER: [1, 4]})  # ignored at 0
        ob, ib = b.reset(seed=seed, options={OPTION_MEMBER: [1, 4]})
        ga, gb = a.unwrapped.task_graph(), b.unwrapped.task_graph()
        assert ga == gb and ia["task_id"] == ib["task_id"] and ia["walkthrough"] == ib["walkthrough"]
        assert oa == ia["anchor_obs"] == ga.observation[ga.start] and a.unwrapped.wordings("r1.1") == (oa,)
        assert ob == ib["anchor_obs"] in b.unwrapped.wordings("r1.1")[1::4]  # member 1 of 4: its slice
        for act in ia["walkthrough"]:
            ra, rb = a.step(act), b.step(act)
            assert ra[1:4] == rb[1:4] and ra[4]["milestone"] == rb[4]["milestone"]
            assert ra[0] == ga.observation[a.unwrapped.state]
        assert ra[0] == rb[0]  # the goal's text stays canonical
    assert make(ID, paraphrase=1).unwrapped.metadata[META_RESET_MEMBER] is True


def test_same_seed_and_member_replays_exactly_and_members_differ():
    env = make(ID, k=2, paraphrase=1)
    rng = np.random.default_rng(0)

    def play(seed, member, actions=None):
        obs, info = env.reset(seed=seed, options=None if member is None else {OPTION_MEMBER: member})
        out, acts = [(obs, info["anchor_obs"])], []
        for t in range(12):
            a = actions[t] if actions else str(rng.choice(info["admissible_actions"] + ["dance"]))
            obs, _, term, trunc, info = env.step(a)
            out.append((obs, info["anchor_obs"]))
            acts.append(a)
            if term or trunc:
                break
        return out, acts

    for member in ([0, 1], [3, 8], None):
        first, acts = play(11, member)
        assert play(11, member, acts)[0] == first
        for obs, anchor in first:
            assert obs in (anchor, f"{NOTHING} {anchor}")
    a, acts = play(11, [2, 8], ["look"] * 12)
    b, _ = play(11, [5, 8], ["look"] * 12)
    assert not {x[1] for x in a} & {x[1] for x in b}  # two members never word a room alike
    assert len({x[1] for x in a}) == 2  # member 2 of 8 with B = 16: two wordings of the entrance


def test_snapshot_restore_and_prefix_replay_carry_the_draws():
    env = make(ID, k=2, paraphrase=1)
    opts = {OPTION_MEMBER: [1, 2]}
    obs, info = env.reset(seed=4, options=opts)
    walk = info["walkthrough"]
    observations = [obs] + [env.step(a)[0] for a in ["look", walk[0], "wait"]]
    snap = env.unwrapped.snapshot()
    rest = [env.step(a)[0] for a in walk[1:]]
    env.unwrapped.restore(snap)
    assert [env.step(a)[0] for a in walk[1:]] == rest
    trace = EnvTrace(4, ("look", walk[0], "wait"), tuple(observations), opts)
    assert replay_env(env, trace)[0] == observations[-1]
    with EnvPool(ID, 1, env_kwargs={"k": 2, "paraphrase": 1}, num_workers=1) as pool:
        assert replay_prefix(pool, {0: trace})[0].error is None
        assert "not deterministic" in replay_prefix(pool, {0: EnvTrace(4, trace.actions, trace.observations)})[0].error
    with pytest.raises(ValueError, match="paraphrase=0"):
        make(ID, k=2).unwrapped.restore(snap)


def test_bad_settings_raise_with_the_fix():
    with pytest.raises(ValueError, match="paraphrase must be 0"):
        make(ID, paraphrase=2)
    with pytest.raises(ValueError, match="paraphrase_bank"):
        make(ID, paraphrase=1, paraphrase_bank=0)
    env = make(ID, paraphrase=1, paraphrase_bank=8)
    with pytest.raises(ValueError, match=r"G=16 exceeds paraphrase_bank=8.*paraphrase_bank >= 16"):
        env.reset(seed=0, options={OPTION_MEMBER: [0, 16]})
    for bad in ([3, 3], [1], "x"):
        with pytest.raises(ValueError, match="agentrl.member"):
            env.reset(seed=0, options={OPTION_MEMBER: bad})
    env.reset(seed=0, options={OPTION_MEMBER: [7, 8]})
    assert env.step("look")[0] in env.unwrapped.wordings("r1.1")[7::8]


@pytest.mark.parametrize("kwargs", [{"k": 1}, {"k": 5}, {"k": 3, "n_exits": 3, "n_cues": 6, "n_hinted": 4,
                                                          "paraphrase_bank": 4}])
def test_check_env_is_clean_at_paraphrase_1(kwargs):
    report = check_env(ID, paraphrase=1, **kwargs)
    assert report.walkthrough_won is True and report.episodes == 5


class _RecordingPool:
    """An ``EnvPool`` that records the options of every reset."""

    def __init__(self, pool: EnvPool) -> None:
        self.pool, self.options = pool, []

    def __getattr__(self, name):
        return getattr(self.pool, name)

    def reset(self, slots, seeds, options=None):
        self.options += list(options) if options is not None else [None] * len(slots)
        return self.pool.reset(slots, seeds, options)


def _engine(renderer) -> ScriptedEngine:
    """Picks one of the prompt's admissible actions by a hash of the prompt and the call index (look
    and wait often: rooms are visited again)."""

    def script(prompt, call):
        text = renderer.tokenizer.decode(prompt)
        acts = re.findall(r"Admissible actions: ([^<\n]*)", text)[-1].split(", ")
        pick = acts[(zlib.crc32(np.asarray(prompt).tobytes()) + call) % len(acts)]
        return [*renderer.encode(pick).tolist(), renderer.eos_token_id]

    return ScriptedEngine(script, eos_token_id=renderer.eos_token_id, max_context=1 << 16)


def _collect(renderer, env_id, env_kwargs, n_groups=3, group=8):
    cfg = CollectConfig(env_id=env_id, n_groups=n_groups, group_size=group, seed=3, env_kwargs=env_kwargs,
                        progress=False, loop=LoopConfig(context="window", window_k=0, max_turns=10,
                                                        action_format="whole"))
    with EnvPool(env_id, 8, env_kwargs=env_kwargs, num_workers=1) as pool:
        rec = _RecordingPool(pool)
        eps = collect(_engine(renderer), renderer, cfg, pool=rec)
    return eps, rec.options


@pytest.mark.parametrize("paraphrase", [0, 1])
def test_collector_groups_share_anchors_only_at_paraphrase_0(tiny_tokenizer, paraphrase):
    from agentrl.llm.chat import ChatRenderer

    eps, options = _collect(ChatRenderer(tiny_tokenizer), ID, {"k": 2, "paraphrase": paraphrase})
    assert all(e.status == EpisodeStatus.OK for e in eps) and sum(len(e.turns) for e in eps) > 3 * len(eps)
    assert sorted(tuple(o[OPTION_MEMBER]) for o in options) == sorted((j, 8) for _ in range(3) for j in range(8))
    by_group: dict[int, list] = {}
    for e in eps:
        anchors = {t.anchor_obs for t in e.turns} | {t.next_anchor_obs for t in e.turns}
        by_group.setdefault(e.group_id, []).append(anchors)
    for members in by_group.values():
        shared = [a & b for i, a in enumerate(members) for b in members[i + 1:]]
        if paraphrase:
            terminal = {e.turns[-1].next_anchor_obs for e in eps if e.turns[-1].terminated}  # canonical
            assert not any(s - terminal for s in shared)  # no room worded alike by two members
        else:
            assert all(s for s in shared)  # every pair shares the entrance at least


def test_collector_passes_no_member_option_to_envs_that_do_not_ask(tiny_tokenizer):
    from agentrl.llm.chat import ChatRenderer

    assert wants_member(ID) and not wants_member(TOY) and META_RESET_MEMBER not in env_metadata(TOY)
    assert reset_options("", None) is None and reset_options("t", (1, 4)) == {"task_id": "t", OPTION_MEMBER: [1, 4]}
    eps, options = _collect(ChatRenderer(tiny_tokenizer), TOY, {}, n_groups=2, group=4)
    assert len(eps) == 8 and options == [None] * 8


def test_tree_roots_are_members_and_branches_replay_with_their_options(tiny_tokenizer):
    from agentrl.config import TreeConfig
    from agentrl.llm.chat import ChatRenderer
    from agentrl.rollout.tree import sample_trees

    renderer = ChatRenderer(tiny_tokenizer)
    cc = CollectConfig(env_id=ID, n_groups=1, seed=2, env_kwargs={"k": 2, "paraphrase": 1}, progress=False,
                       num_workers=1, loop=LoopConfig(context="window", window_k=0, max_turns=6, action_format="whole"))
    res = sample_trees(_engine(renderer), renderer, cc, TreeConfig(trees=4, rounds=2, branches=2, leaves=None))
    assert res.complete == len(res.episodes)  # every branch's prefix replay matched (same seed and options)
    firsts: dict[int, set[str]] = {}
    for e in res.episodes:
        if "tree_parent" not in e.turns[0].info:  # a root: reset as member [m, 4] of its tree m
            firsts.setdefault(e.turns[0].info["tree"], set()).add(e.turns[0].anchor_obs)
    assert len(firsts) == 4 and all(len(f) == 1 for f in firsts.values())  # one entrance wording per tree
    assert len(set.union(*firsts.values())) == 4  # and no two trees of the task share it


def test_rtpo_bases_are_members_and_continuations_replay_with_their_options(tiny_tokenizer):
    from agentrl.config import TreeConfig
    from agentrl.llm.chat import ChatRenderer
    from agentrl.rollout.reverse import run_rtpo_iteration

    renderer = ChatRenderer(tiny_tokenizer)
    cc = CollectConfig(env_id=ID, n_groups=1, group_size=4, seed=2, env_kwargs={"k": 2, "paraphrase": 1},
                       progress=False, num_workers=1,
                       loop=LoopConfig(context="window", window_k=0, max_turns=6, action_format="whole"))
    rounds = []
    eps = run_rtpo_iteration(_engine(renderer), renderer, cc, TreeConfig(stride=1, siblings=2, branch_points=1),
                             rounds.append)
    assert rounds and all(e.status == EpisodeStatus.OK for e in eps)  # every continuation's prefix replay matched
    bases = eps[:4]
    assert len({b.turns[0].anchor_obs for b in bases}) == 4  # four members, four entrance wordings
    for c in eps[4:]:  # a continuation shows its base's wording of the room it branched from
        assert c.turns[0].anchor_obs in {b.turns[t].anchor_obs for b in bases for t in range(len(b.turns))}
