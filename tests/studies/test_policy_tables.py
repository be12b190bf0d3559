"""``studies.llm_maze.PolicyTables.graph_policy`` scores a maze's new prompts in one
``batch_action_probs`` call (issue 51's cell speed-up): the same π as one ``action_probs``
forward per prompt within 1e-6, for the plain tiny model and for it under a LoRA adapter whose
weights are not zero (the trainer's live model in the oracle arm); prompts already scored are
not scored again."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from agentrl.llm.chat import ChatRenderer  # noqa: E402
from agentrl.llm.constrained import completion_sequences  # noqa: E402
from studies.llm_maze import PolicyTables, markov_loop  # noqa: E402
from studies.maze_probs import action_probs, renormalised  # noqa: E402


def _graph(k=2, hinted=12, seed=4):
    import gymnasium as gym

    import agentrl_envs  # noqa: F401

    env = gym.make("agentrl/JunctionMaze-v0", k=k, split="train", n_hinted=hinted).unwrapped
    env.reset(seed=seed)
    return env.task_graph()


def _lora(model):
    cfg = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return peft.get_peft_model(copy.deepcopy(model), cfg).eval()


@pytest.mark.parametrize("adapter", [False, True])
def test_batched_graph_policy_equals_one_forward_per_prompt(tiny_engine, tiny_tokenizer, adapter):
    torch.set_num_threads(1)
    model = _lora(tiny_engine.model) if adapter else tiny_engine.model
    renderer, loop = ChatRenderer(tiny_tokenizer), markov_loop(24)
    tables = PolicyTables(model, renderer, loop, tiny_engine.pad_token_id)
    g = _graph()
    pi, prompts = tables.graph_policy(g)
    distinct = {p.tobytes() for p in prompts.values()}
    assert tables.forwards == len(distinct) == len(tables.by_prompt)
    gap = 0.0
    for s, prompt in prompts.items():
        seqs = completion_sequences(g.actions[s], loop.action_format, renderer.encode, renderer.eos_token_id)
        want = renormalised(action_probs(model, prompt, seqs, tiny_engine.pad_token_id))
        assert pi[s].shape == want.shape and abs(pi[s].sum() - 1.0) < 1e-9
        gap = max(gap, float(np.max(np.abs(pi[s] - want))))
    assert gap < 1e-6
    again, _ = tables.graph_policy(g)
    assert tables.forwards == len(distinct)  # cached: nothing scored twice
    assert all(np.array_equal(again[s], pi[s]) for s in pi)
    if adapter:  # the adapter moves π: the test would not notice a path that dropped it
        plain = PolicyTables(tiny_engine.model, renderer, loop, tiny_engine.pad_token_id).graph_policy(g)[0]
        assert max(float(np.max(np.abs(plain[s] - pi[s]))) for s in pi) > 1e-4
