"""``studies/llm_maze.py`` at the junction maze's ``paraphrase=1`` (tiny random model, k = 1): π of a
room is the mean of the per-wording π (each computed here on its own, through the agent loop's
window context and ``action_probs``), the values use the first turn's own π at t = 0, and a batch
sampled through the real collector maps back onto its rooms (every stored prompt found, logprobs
equal to π of that prompt)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import agentrl  # noqa: E402,F401
from agentrl.credit.exact import exact_values  # noqa: E402
from agentrl.llm.chat import ChatRenderer  # noqa: E402
from agentrl.llm.constrained import completion_sequences  # noqa: E402
from agentrl.rollout.agent_loop import WindowContext  # noqa: E402
from agentrl.rollout.parsing import parse_format  # noqa: E402
from agentrl.rollout.prompt import render_system  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402
from agentrl_envs.junction import paraphrase as para  # noqa: E402
from agentrl_envs.junction.maze import split_mazes  # noqa: E402
from studies.llm_maze import (PolicyTables, action_probs, batch_action_probs, map_batch, markov_loop,  # noqa: E402
                              sample_batch)

B = 8
MAZE = split_mazes(1, 24, 2, "train", 20)[0]


def _prompt(renderer, loop, graph, first: str, state: str | None, text: str = "") -> np.ndarray:
    """The window prompt of a turn in ``state`` shown as ``text`` after a reset shown as ``first``
    (``state`` None: the first turn), rendered here from ``WindowContext`` itself."""
    system = render_system(loop.system_prompt, None, parse_format(loop.action_format).instructions)
    ctx = WindowContext(renderer, system, 0)
    adm = lambda s: ", ".join(graph.actions[s])  # noqa: E731
    ids = ctx.first(f"{first}\nAdmissible actions: {adm(graph.start)}", task=first)
    return ids if state is None else ctx.next(np.zeros(0, np.int32), "", f"{text}\nAdmissible actions: {adm(state)}",
                                              past=text)


@pytest.mark.parametrize("member", [(0, 1), (1, 2)])
def test_room_policy_is_the_mean_of_the_per_wording_policies(tiny_engine, tiny_tokenizer, member):
    torch.set_num_threads(1)
    renderer, loop = ChatRenderer(tiny_tokenizer), markov_loop(24)
    tables = PolicyTables(tiny_engine.model, renderer, loop, tiny_engine.pad_token_id, paraphrase_bank=B)
    g, j, n = MAZE.graph(24), *member
    first = para.bank(MAZE.task_id, g.start, B)[j::n][-1]
    m = tables.maze(MAZE.task_id, 24, first=first, member=member)
    eos = renderer.eos_token_id

    def pi_of(prompt, s):
        p = action_probs(tiny_engine.model, prompt, completion_sequences(g.actions[s], "whole", renderer.encode, eos),
                         tiny_engine.pad_token_id)
        return p / p.sum()

    for s in g.actions:
        words = para.bank(MAZE.task_id, s, B)[j::n]
        assert len(words) == B // n and len(m.prompts[s]) == B // n
        per = [pi_of(_prompt(renderer, loop, g, first, s, w), s) for w in words]
        np.testing.assert_allclose(m.pi[s], np.mean(per, axis=0), rtol=0, atol=2e-6)
        assert abs(m.pi[s].sum() - 1.0) < 1e-12 and len(set(np.round(np.asarray(per)[:, 0], 9))) > 1
        for w, p in zip(words, m.prompts[s]):
            assert m.room_of(p) == s
    pi0 = pi_of(_prompt(renderer, loop, g, first, None), g.start)
    np.testing.assert_allclose(m.first_pi, pi0, rtol=0, atol=2e-6)
    # a later visit to the entrance worded `first` is rendered as the first turn (WindowContext): same prompt
    np.testing.assert_array_equal(m.prompts[g.start][-1], _prompt(renderer, loop, g, first, None))
    ev = exact_values(g, m.pi)  # t >= 1 under the room means; t = 0 under the first turn's own π
    np.testing.assert_allclose(m.values.V[1:], ev.V[1:], rtol=0, atol=1e-12)
    i0 = ev.index[g.start]
    assert m.values.v(0, g.start) == pytest.approx(float(pi0 @ ev.Q[0, i0, :len(pi0)]), abs=1e-6)
    assert tables.forwards == sum(B // n for _ in g.actions)  # the first turn's prompt is one of the entrance's
    with pytest.raises(ValueError, match="not a wording of the entrance"):
        tables.maze(MAZE.task_id, 24, first="elsewhere", member=member)


def test_batch_action_probs_equals_action_probs(tiny_engine, tiny_tokenizer):
    torch.set_num_threads(1)
    renderer, loop = ChatRenderer(tiny_tokenizer), markov_loop(24)
    g, eos = MAZE.graph(24), renderer.eos_token_id
    first = para.bank(MAZE.task_id, g.start, B)[0]
    prompts, seqs = [], []
    for s in g.actions:
        for w in para.bank(MAZE.task_id, s, B)[:3]:
            prompts.append(_prompt(renderer, loop, g, first, s, w))
            seqs.append(completion_sequences(g.actions[s], "whole", renderer.encode, eos))
    fast = batch_action_probs(tiny_engine.model, prompts, seqs, tiny_engine.pad_token_id, max_rows=5)
    for p, q, f in zip(prompts, seqs, fast):
        slow = action_probs(tiny_engine.model, p, q, tiny_engine.pad_token_id)
        np.testing.assert_allclose(f, slow / slow.sum(), rtol=0, atol=2e-6)


def test_map_batch_maps_a_collected_paraphrased_batch(tiny_engine, tiny_tokenizer, tmp_path):
    torch.set_num_threads(1)
    renderer = ChatRenderer(tiny_tokenizer)
    store = TurnStore(tmp_path / "t.sqlite")
    eps = sample_batch(tiny_engine, renderer, store, "r", k=1, seed=5, n_tasks=2, group=4,
                       env_kwargs={"paraphrase": 1, "paraphrase_bank": B}, return_hidden=False)
    anchors = [{t.anchor_obs for t in e.turns} for e in eps]
    assert not any(anchors[a] & anchors[b] for a in range(4) for b in range(a + 1, 4))  # group 0: no shared anchor
    tables = PolicyTables(tiny_engine.model, renderer, markov_loop(24), tiny_engine.pad_token_id, paraphrase_bank=B)
    mb = map_batch(store, "r", eps, tables)
    assert mb.invalid_episodes == 0 and mb.prompt_mismatch == 0 and mb.logp_gap < 1e-4
    assert len({(e.task_id, e.turns[0].anchor_obs) for e in eps}) == len(tables.by_task)  # per (maze, first, member)
    assert 0.0 < mb.success_exact < 1.0 and np.isfinite(mb.a_true).all() and np.abs(mb.a_true).max() > 0
