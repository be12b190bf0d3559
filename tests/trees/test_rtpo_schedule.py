"""RTPO's sparse reverse trees and reverse-turn schedule: branch points from the end with
stride s, K siblings from the exact pre-turn context, rounds in decreasing branch turn with
the continuations of each round sampled by the policy updated on the previous round."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import trees_fake_envs as fake

pytest.importorskip("transformers")

from agentrl.config import TreeConfig  # noqa: E402
from agentrl.credit import compute_advantages, update_groups  # noqa: E402
from agentrl.llm.chat import ChatRenderer  # noqa: E402
from agentrl.rollout.agent_loop import LoopConfig  # noqa: E402
from agentrl.rollout.reverse import branch_turns, run_rtpo_iteration  # noqa: E402
from agentrl.rollout.tree import add_linked  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402
from trees_helpers import _cc, heuristic_engine  # noqa: E402


def test_branch_turns_go_backwards_with_stride():
    assert branch_turns(5, TreeConfig(stride=2, branch_points=3)) == [4, 2, 0]
    assert branch_turns(5, TreeConfig(stride=2, branch_points=2)) == [4, 2]
    assert branch_turns(2, TreeConfig(stride=3, branch_points=4)) == [1]
    assert branch_turns(0, TreeConfig()) == []


@pytest.fixture(scope="module")
def rtpo_run(tiny_tokenizer, tmp_path_factory):
    engine = heuristic_engine(tiny_tokenizer)
    tc = TreeConfig(stride=2, siblings=3, branch_points=3)
    fake.register_dense()  # shaping reward: random walks of siblings get different returns
    cc = replace(_cc(seed=4, n_groups=2), env_id=fake.DENSE_ID, group_size=2,
                 loop=LoopConfig(max_turns=5, action_format="whole"))
    store = TurnStore(tmp_path_factory.mktemp("rtpo") / "s.sqlite")
    rounds = []

    def update_fn(rnd):
        add_linked(store, list(rnd.new_episodes), run_id="r")
        table = store.table(run_id="r", episode_ids=[e.episode_id for e in rnd.episodes])
        adv = compute_advantages(table, "rtpo")
        rows = np.flatnonzero(adv != 0)
        order = update_groups("rtpo", table, rows) or []
        rounds.append((rnd, table, adv, [sorted({int(table.t[rows[g]].min())}) for g in order]))
        engine.policy_version += 1  # what the trainer does after its update

    episodes = run_rtpo_iteration(engine, ChatRenderer(tiny_tokenizer), cc, tc, update_fn, iteration=0)
    yield episodes, rounds, tc, store
    store.close()


def test_reverse_tree_layout(rtpo_run):
    episodes, rounds, tc, _ = rtpo_run
    bases = [e for e in episodes if e.turns and e.turns[0].t == 0 and "tree_parent" not in e.turns[0].info
             and "rtpo_round" not in e.turns[0].info]
    assert len(bases) == 4
    turns = {(e.episode_id, tr.t): tr for e in episodes for tr in e.turns}
    for base in bases:
        points = branch_turns(len(base.turns), tc)
        marked = [tr.t for tr in base.turns if "branch" in tr.info]
        assert marked == sorted(points)
        for j, b in enumerate(points):
            bid = base.turns[b].info["branch"]
            sibs = [e for e in episodes if e.turns and e.turns[0].info.get("branch") == bid and e is not base]
            assert len(sibs) == tc.siblings - 1
            for e in sibs:
                first = e.turns[0]
                assert first.t == b and first.info["rtpo"]["round"] == j
                np.testing.assert_array_equal(first.prompt_ids, base.turns[b].prompt_ids)  # exact context
                if b > 0:
                    assert first.info["tree_parent"] == [base.episode_id, b - 1]
                    assert first.parent_turn_id == turns[(base.episode_id, b - 1)].turn_id
                assert all("branch" not in tr.info for tr in e.turns[1:])


def test_rounds_run_in_reverse_turn_order_on_updated_policies(rtpo_run):
    episodes, rounds, tc, _ = rtpo_run
    assert len(rounds) == tc.branch_points
    assert sum(len(order) for *_, order in rounds) >= 3  # some branch groups did get a signal
    for j, (rnd, table, adv, order) in enumerate(rounds):
        assert rnd.index == j and rnd.policy_version == j  # sampled after j updates
        conts = [e for e in rnd.episodes if "rtpo_round" in e.turns[0].info]
        assert conts and all(e.turns[0].info["rtpo"]["sampled_at"] == j for e in conts)
        assert all(tr.policy_version == j for e in conts for tr in e.turns)
        # only this round's branching turns carry advantage
        active = np.unique(table.branch[adv != 0])
        assert set(active.tolist()) <= set(rnd.branch_ids)
        assert np.all(adv[table.branch < 0] == 0)
        turns_in_order = [t[0] for t in order]
        assert turns_in_order == sorted(turns_in_order, reverse=True)  # trainer steps later turns first
    # per base, the branch turn of round j+1 is s earlier than that of round j
    for base in {e.episode_id for e in episodes if "branch" in e.turns[-1].info and e.turns[0].t == 0
                 and "rtpo_round" not in e.turns[0].info}:
        seq = [tr.info["rtpo"]["branch_turn"] for e in episodes if e.episode_id == base for tr in e.turns
               if "rtpo" in tr.info]
        assert seq == sorted(seq)  # stored in t order: b_last ... b_0
        rounds_of = {tr.info["rtpo"]["branch_turn"]: tr.info["rtpo"]["round"] for e in episodes
                     if e.episode_id == base for tr in e.turns if "rtpo" in tr.info}
        assert [rounds_of[b] for b in sorted(rounds_of, reverse=True)] == list(range(len(rounds_of)))
        assert all(b1 - b2 == tc.stride for b1, b2 in zip(sorted(rounds_of, reverse=True), sorted(rounds_of, reverse=True)[1:]))
