"""Oracle and random policies on ``agentrl/WebShop-v0``; BM25 search properties."""

from __future__ import annotations

import random

import numpy as np
import pytest

from agentrl_envs.webshop.policies import oracle_actions, oracle_query, random_action
from agentrl_envs.webshop.search import LUCENE_STOPWORDS, SEARCH_RETURN_N, build_engine, get_engine


def _play(env, task_id, actions):
    obs, info = env.reset(options={"task_id": task_id})
    r = 0.0
    for a in actions(info):
        obs, r, term, trunc, info = env.step(a)
        assert info["action_valid"], (task_id, a, info["feedback"])
    return r, info


def _oracle_rate(env, goals):
    rewards = [_play(env, g.task_id, lambda info: info["walkthrough"])[0] for g in goals]
    return float(np.mean([r == 1.0 for r in rewards])), float(np.mean(rewards))


def test_oracle_sample(env, world):
    sample = world.goals[::35]                      # 198 goals, spread over the shuffled list
    rate, mean = _oracle_rate(env, sample)
    print(f"\nWebShop oracle on {len(sample)} synthetic goals: success {rate:.3f}, mean R {mean:.3f}")
    assert rate >= 0.95


@pytest.mark.slow
def test_oracle_all_synthetic_goals(env, world):
    rate, mean = _oracle_rate(env, world.goals)
    print(f"\nWebShop oracle on all {len(world.goals)} synthetic goals: success {rate:.4f}, mean R {mean:.4f}")
    assert rate >= 0.95


def test_oracle_function_matches_walkthrough(env, world):
    g = world.goals[42]
    _, info = env.reset(options={"task_id": g.task_id})
    assert info["walkthrough"] == oracle_actions(g, world.catalogue, world.engine)
    assert oracle_query("Foo [2 Pack]  Bar]") == "foo 2 pack bar"


def test_random_policy_mean_reward(env, world):
    rng = random.Random(0)
    rewards, bought = [], 0
    for g in world.goals[::35]:
        obs, info = env.reset(options={"task_id": g.task_id})
        term = trunc = False
        while not (term or trunc):
            obs, r, term, trunc, info = env.step(random_action(info["clickables"], g.instruction_text, rng))
            assert info["action_valid"]
        rewards.append(r)
        bought += term
    mean = float(np.mean(rewards))
    print(f"\nWebShop random policy on {len(rewards)} goals: mean R {mean:.3f}, purchases {bought / len(rewards):.2f}, "
          f"wins {np.mean([r == 1.0 for r in rewards]):.3f}")
    assert 0.0 < mean < 0.5 and 0 < bought < len(rewards)


def test_random_action_forms():
    rng = random.Random(1)
    assert random_action(["search"], "Find [a] Lamp", rng) == "search[find a lamp]"
    assert random_action(["back to search", "< prev"], "x", rng) in ("click[back to search]", "click[< prev]")
    with pytest.raises(ValueError):
        random_action([], "x", rng)


def test_search_properties(world):
    eng = world.engine
    assert get_engine(world.catalogue.contents) is eng            # cached per process
    assert eng.tokenize("The running shoes are Women's") == ["run", "shoe", "women"]
    assert not set(LUCENE_STOPWORDS) & set(eng.tokenize(" ".join(LUCENE_STOPWORDS)))
    assert eng.search("the of and") == [] and eng.search("qqqzzzxxy") == []
    hits = eng.search("solid wood console table")
    assert len(hits) == SEARCH_RETURN_N
    s = eng.scores("solid wood console table")
    assert s.shape == (1000,) and s.dtype == np.float32
    assert all(s[a] >= s[b] for a, b in zip(hits, hits[1:], strict=False))
    assert (s > 0).sum() >= len(hits) and all(s[h] > 0 for h in hits)
    # the title of a product finds it first for most products
    top1 = np.mean([eng.search(oracle_query(p.title))[:1] == [i] for i, p in enumerate(world.catalogue.products[:200])])
    assert top1 > 0.9


def test_search_ties_break_by_catalogue_order():
    eng = build_engine(["red apple", "green apple", "apple", "pear"])
    assert eng.search("apple") == [2, 0, 1]          # shorter doc first (BM25), then the tie by index
    eng2 = build_engine(["blue sky", "blue sea", "blue sky"])
    assert eng2.search("blue") == [0, 1, 2]


def test_analyzer_equals_bm25s_tokenize(world):
    import bm25s

    from agentrl_envs.webshop.search import TOKEN_PATTERN, _prepare, analyze

    docs = list(world.catalogue.contents[:300]) + [g.instruction_text for g in world.goals[:100]]
    ref = bm25s.tokenize([_prepare(d) for d in docs], token_pattern=TOKEN_PATTERN, stopwords=list(LUCENE_STOPWORDS),
                         stemmer=world.engine.stemmer, return_ids=False, show_progress=False)
    assert [list(r) for r in ref] == [analyze(d, world.engine.stemmer) for d in docs]
