"""Collector with a real HF engine: stored logprobs equal a teacher-forced forward of the
same model on the stored ids (fp32, max |Δ| ≤ 1e-4), per turn and per training segment."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.chat import ChatRenderer, episode_segments  # noqa: E402
from agentrl.rollout.agent_loop import LoopConfig  # noqa: E402
from agentrl.rollout.collector import CollectConfig, collect  # noqa: E402


def _segment_logprobs(model, seg) -> np.ndarray:
    """Teacher-forced logprob of every token of the segment (float32[L], position 0 = 0)."""
    ids = torch.from_numpy(seg.ids.astype(np.int64))[None]  # (1, L)
    with torch.no_grad():
        logp = model(input_ids=ids).logits[0].float().log_softmax(-1)  # (L, V)
    out = np.zeros(seg.ids.size, np.float32)
    out[1:] = logp[:-1].gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1).numpy()
    return out


def _check_episodes(engine, eps, check_hidden=False):
    n_tok = 0
    for ep in eps:
        for turn in ep.turns:
            ref = engine.score(turn.prompt_ids, turn.completion_ids)
            assert np.max(np.abs(ref - turn.completion_logprobs)) <= 1e-4
            n_tok += turn.completion_ids.size
            if check_hidden:
                assert turn.hidden is not None and turn.hidden.dtype == np.float32
        for seg in episode_segments(ep.turns):
            ref = _segment_logprobs(engine.model, seg)
            m = seg.loss_mask == 1
            assert np.max(np.abs(ref[m] - seg.logprobs[m])) <= 1e-4
    return n_tok


@pytest.mark.parametrize("context", ["chat", "window"])
def test_stored_logprobs_match_teacher_forcing_tiny(tiny_engine, tiny_tokenizer, context):
    cfg = CollectConfig(env_id="agentrl/Toy-v0", n_groups=2, group_size=2, seed=1, num_workers=1, progress=False,
                        loop=LoopConfig(context=context, max_turns=3),
                        sampling=SamplingParams(max_tokens=12, seed=4, temperature=1.0), return_hidden=True)
    eps = collect(tiny_engine, ChatRenderer(tiny_tokenizer), cfg)
    assert len(eps) == 4 and all(len(e.turns) == 3 for e in eps)
    assert _check_episodes(tiny_engine, eps, check_hidden=True) > 0
    # same seed, same config → the same tokens (invariant 3)
    again = collect(tiny_engine, ChatRenderer(tiny_tokenizer), cfg)
    for a, b in zip(eps, again):
        for ta, tb in zip(a.turns, b.turns):
            np.testing.assert_array_equal(ta.completion_ids, tb.completion_ids)


@pytest.mark.slow
def test_stored_logprobs_match_teacher_forcing_smollm2(smollm2_engine, smollm2_tokenizer):
    cfg = CollectConfig(env_id="agentrl/Toy-v0", n_groups=1, group_size=2, seed=0, num_workers=1, progress=False,
                        loop=LoopConfig(context="chat", max_turns=2), sampling=SamplingParams(max_tokens=12, seed=0))
    eps = collect(smollm2_engine, ChatRenderer(smollm2_tokenizer), cfg)
    assert _check_episodes(smollm2_engine, eps) > 0
