"""``studies/llm_maze.py`` and ``credit_fidelity.py --policy`` (issue 38) on the tiny random
model: batches sampled through the real rollout path map onto the maze graphs, the policy the DP
uses is the one the sampler used (stored logprobs of the sampled actions = log π within 1e-5 in
fp32, rebuilt prompts = stored prompts), π sums to 1 per state, and the LLM mode's table holds
every estimator with the oracle at corr 1. Files only under tmp_path."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import agentrl  # noqa: E402,F401
from agentrl.credit import list_estimators  # noqa: E402
from agentrl.llm.chat import ChatRenderer  # noqa: E402
from agentrl.llm.constrained import completion_sequences  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402
from agentrl_envs.junction.maze import Maze  # noqa: E402
from studies.credit_fidelity import LEFT_OUT, ORACLE, llm_summary, run_llm  # noqa: E402
from studies.fidelity import fidelity  # noqa: E402
from studies.llm_maze import (PolicyTables, action_probs, map_batch, markov_loop, sample_batch,  # noqa: E402
                              state_prompts)


@pytest.fixture(scope="module")
def tiny(tiny_dir, tiny_engine, tiny_tokenizer):
    torch.set_num_threads(1)
    return tiny_engine, ChatRenderer(tiny_tokenizer)


def test_sampled_batch_maps_onto_the_graph_with_the_samplers_policy(tiny, tmp_path):
    engine, renderer = tiny
    store = TurnStore(tmp_path / "t.sqlite")
    tables = PolicyTables(engine.model, renderer, markov_loop(24), engine.pad_token_id)
    eps = sample_batch(engine, renderer, store, "r", k=2, seed=5, n_tasks=2, group=3)
    mb = map_batch(store, "r", eps, tables)
    assert len(mb.state) == len(mb.table) == sum(len(e.turns) for e in eps) > 6
    assert mb.invalid_episodes == 0 and mb.prompt_mismatch == 0  # constrained: every action is in the graph
    assert mb.logp_gap < 1e-5  # the DP's π is the sampler's distribution (fp32)
    for p in tables.by_prompt.values():
        assert abs(p.sum() - 1.0) < 1e-12 and np.all(p > 0)
    # raw constrained probabilities sum to 1 before the renormalisation, up to fp32 rounding
    g = Maze.parse(eps[0].task_id).graph(24)
    prompt = state_prompts(g, renderer, markov_loop(24))["j1"]
    raw = action_probs(engine.model, prompt, completion_sequences(g.actions["j1"], "whole", renderer.encode,
                                                                  renderer.eos_token_id), engine.pad_token_id)
    assert raw.shape == (len(g.actions["j1"]),) and abs(raw.sum() - 1.0) < 1e-5
    assert set(mb.kind) <= {"start", "filler", "junction"} and 0.0 <= mb.success_exact <= 1.0
    oracle = fidelity(mb.a_true, mb.a_true, mb.kind, mb.onward, mb.won)
    assert oracle["corr"] == pytest.approx(1.0) or np.isnan(oracle["corr"])
    assert oracle["sign_acc"] == pytest.approx(1.0) or np.isnan(oracle["sign_acc"])
    store.close()


def test_llm_mode_reports_every_estimator(tiny_dir, tmp_path):
    args = argparse.Namespace(policy="smollm2", model=str(tiny_dir), dtype="float32", ks=[1, 2], seeds=2, tasks=2,
                              group=4, max_turns=24, store=str(tmp_path / "s.sqlite"), tag="t")
    data = run_llm(args)
    for k in ("1", "2"):
        d = data["by_k"][k]
        assert set(d["fidelity"]) == (set(list_estimators()) - set(LEFT_OUT)) | {ORACLE} and d["episodes"] == 16
        assert d["checks"]["invalid_episodes"] == 0 and d["checks"]["prompt_mismatches"] == 0
        assert d["checks"]["max_logprob_gap"] < 1e-5
        assert d["fidelity"][ORACLE]["corr"][0] == pytest.approx(1.0)
        top = d["checks"]["most_visited"][0]
        assert abs(sum(top["pi"]) - 1.0) < 2e-3 and top["visits"] >= 4
    json.dumps(data, default=float)
    assert "| grpo |" in llm_summary(data)
