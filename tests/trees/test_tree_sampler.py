"""Tree-GRPO sampling on the toy env: structure in the store, token-faithful branch prompts,
pruning to K leaves (tiny model), and the tree_grpo estimator fed from the store checked
against a direct computation over the sampled root-to-leaf paths (a scripted policy that
wins sometimes, so the scores differ)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.config import TreeConfig  # noqa: E402
from agentrl.credit import compute_advantages  # noqa: E402
from agentrl.llm.chat import ChatRenderer  # noqa: E402
from agentrl.rollout.agent_loop import LoopConfig  # noqa: E402
from agentrl.rollout.tree import add_linked, sample_trees, tree_episode_stride  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402
from trees_helpers import _cc, heuristic_engine  # noqa: E402

@pytest.fixture(scope="module")
def grown(tiny_tokenizer):
    tc = TreeConfig(trees=2, rounds=2, branches=2, leaves=None)
    cc = replace(_cc(), loop=LoopConfig(max_turns=5, action_format="whole"))
    return sample_trees(heuristic_engine(tiny_tokenizer), ChatRenderer(tiny_tokenizer), cc, tc, iteration=1), tc


def _stored(tmp_path, episodes):
    store = TurnStore(tmp_path / "s.sqlite")
    add_linked(store, episodes, run_id="r")
    return store, store.table(run_id="r", episode_ids=[e.episode_id for e in episodes])


def test_tree_structure_in_the_store(grown, tmp_path):
    res, tc = grown
    n_trees = 2 * tc.trees
    assert res.n_trees == n_trees and len(res.episodes) == n_trees * (1 + tc.rounds * tc.branches)
    assert res.complete == res.kept_leaves == len(res.episodes)  # no pruning, no failure
    ids = [e.episode_id for e in res.episodes]
    assert min(ids) == tree_episode_stride(2, tc) and len(set(ids)) == len(ids)
    assert {e.group_id for e in res.episodes} == {2, 3}  # iteration 1, two tasks
    assert res.generated_tokens == sum(t.completion_ids.size for e in res.episodes for t in e.turns)
    store, table = _stored(tmp_path, res.episodes)
    with store:
        row = {(int(e), int(t)): i for i, (e, t) in enumerate(zip(table.episode, table.t))}
        n_branches = 0
        for e in res.episodes:
            first = e.turns[0]
            tree = first.info["tree"]
            assert all(tr.info["tree"] == tree for tr in e.turns) and tree // tc.trees == e.group_id
            if "tree_parent" in first.info:  # a branch: linked to the parent node's row
                pe, pt = first.info["tree_parent"]
                assert first.t == pt + 1 and table.parent[row[(e.episode_id, first.t)]] == row[(pe, pt)]
                assert table.tree[row[(pe, pt)]] == tree
                n_branches += 1
            else:
                assert first.t == 0 and table.parent[row[(e.episode_id, 0)]] == -1
        assert n_branches > 0
        # one leaf per complete trajectory, per tree
        is_leaf = np.ones(len(table), bool)
        is_leaf[table.parent[table.parent >= 0]] = False
        for tree in np.unique(table.tree):
            assert is_leaf[table.tree == tree].sum() == 1 + tc.rounds * tc.branches


def test_branch_prompts_are_the_parents_exact_next_prompt(grown):
    res, _ = grown
    turns = {(e.episode_id, tr.t): tr for e in res.episodes for tr in e.turns}
    by_tree: dict = {}
    for e in res.episodes:
        by_tree.setdefault(e.turns[0].info["tree"], []).append(e)
    checked = 0
    for e in res.episodes:
        first = e.turns[0]
        if "tree_parent" not in first.info:
            continue
        pe, pt = first.info["tree_parent"]
        nxt = turns.get((pe, pt + 1))  # the parent chain's own next turn: same context
        assert nxt is not None
        np.testing.assert_array_equal(first.prompt_ids, nxt.prompt_ids)
        assert first.observation == nxt.observation and first.anchor_obs == nxt.anchor_obs
        parent = turns[(pe, pt)]
        assert first.prompt_ids.size > parent.prompt_ids.size + parent.completion_ids.size  # history kept
        np.testing.assert_array_equal(first.prompt_ids[: parent.prompt_ids.size], parent.prompt_ids)
        checked += 1
    assert checked >= 4


def test_tree_grpo_from_the_store_matches_the_paths(grown, tmp_path):
    """Leaf score = rewards summed along the root path (across chains); A = inter + intra
    (GRPO-std, singleton → score/(1+eps)); node value = sum of the leaf advantages below."""
    res, _ = grown
    store, table = _stored(tmp_path, res.episodes)
    store.close()
    adv = compute_advantages(table, "tree_grpo")
    eps_by_id = {e.episode_id: e for e in res.episodes}

    def path(e, upto):  # [(episode id, t)] from the root to (e, upto)
        out = [(e.episode_id, tr.t) for tr in e.turns if tr.t <= upto]
        ref = e.turns[0].info.get("tree_parent")
        return (path(eps_by_id[ref[0]], ref[1]) if ref else []) + out

    reward = {(e.episode_id, tr.t): tr.reward for e in res.episodes for tr in e.turns}
    leaves = [(e, path(e, e.turns[-1].t)) for e in res.episodes]
    score = np.array([sum(reward[k] for k in p) for _, p in leaves])
    assert 0 < score.sum() < score.size  # some trajectories won, some did not

    def gn(x):
        if x.size == 1:
            return x / (1 + 1e-6)
        s = x.std(ddof=1)
        return np.zeros_like(x) if s == 0 else (x - x.mean()) / (s + 1e-6)

    a = np.zeros(len(leaves))
    for key in ("group", "tree"):
        labels = np.array([e.group_id if key == "group" else e.turns[0].info["tree"] for e, _ in leaves])
        for v in np.unique(labels):
            a[labels == v] += gn(score[labels == v])
    want: dict = {}
    for (e, p), ai in zip(leaves, a):
        for k in p:
            want[k] = want.get(k, 0.0) + ai
    got = {(int(e), int(t)): v for e, t, v in zip(table.episode, table.t, adv)}
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[k] for k in sorted(got)], [want[k] for k in sorted(want)], atol=1e-9)


def test_pruning_keeps_k_leaves_and_their_paths(tiny_engine, tiny_tokenizer, tmp_path):
    tc = TreeConfig(trees=1, rounds=2, branches=2, leaves=2)
    res = sample_trees(tiny_engine, ChatRenderer(tiny_tokenizer), _cc(seed=7, n_groups=1), tc)
    assert res.complete == 5 and res.kept_leaves == 2
    # the unsampled leaves' last turns were generated, then pruned
    assert res.generated_tokens > sum(t.completion_ids.size for e in res.episodes for t in e.turns)
    store, table = _stored(tmp_path, res.episodes)
    store.close()
    is_leaf = np.ones(len(table), bool)
    is_leaf[table.parent[table.parent >= 0]] = False
    assert is_leaf.sum() == 2
    leaf_rows = np.flatnonzero(is_leaf)
    assert all(table.terminated[i] or table.truncated[i] for i in leaf_rows)  # leaves are finished episodes
    # every kept row lies on the root path of a kept leaf
    on_path = np.zeros(len(table), bool)
    for i in leaf_rows:
        while i >= 0:
            on_path[i] = True
            i = table.parent[i]
    assert on_path.all()
