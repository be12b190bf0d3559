"""HFEngine: raw-logit logprobs equal a teacher-forced forward; seeding, stops, budgets, control."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.llm.base import SamplingParams  # noqa: E402


def _prompts(tok):
    texts = ["def foo(x):\n    return", "import os", "class A:\n    def __init__(self):\n        self.x = [1, 2"]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def test_logprobs_equal_teacher_forced_forward_tiny(tiny_engine, tiny_tokenizer):
    prompts = _prompts(tiny_tokenizer)  # different lengths: left padding is exercised
    comps = tiny_engine.generate(prompts, SamplingParams(max_tokens=24, seed=7, temperature=1.3, top_p=0.9))
    assert len(comps) == 3
    for p, c in zip(prompts, comps):
        assert c.token_ids.dtype == np.int32 and c.logprobs.dtype == np.float32
        assert c.token_ids.size == c.logprobs.size > 0
        ref = tiny_engine.score(p, c.token_ids)
        assert np.max(np.abs(ref - c.logprobs)) <= 1e-4
        assert np.all(c.logprobs <= 0)


def test_seeded_sampling_is_reproducible_and_seed_dependent(tiny_engine, tiny_tokenizer):
    prompts = _prompts(tiny_tokenizer)
    a = tiny_engine.generate(prompts, SamplingParams(max_tokens=16, seed=1))
    b = tiny_engine.generate(prompts, SamplingParams(max_tokens=16, seed=1))
    c = tiny_engine.generate(prompts, SamplingParams(max_tokens=16, seed=2))
    assert all(np.array_equal(x.token_ids, y.token_ids) for x, y in zip(a, b))
    assert not all(np.array_equal(x.token_ids, y.token_ids) for x, y in zip(a, c))


def test_greedy_matches_argmax_of_forward(tiny_engine, tiny_tokenizer):
    p = _prompts(tiny_tokenizer)[0]
    c = tiny_engine.generate([p], SamplingParams(max_tokens=5, greedy=True))[0]
    seq = list(p)
    for tok in c.token_ids:
        with torch.no_grad():
            logits = tiny_engine.model(input_ids=torch.tensor([seq])).logits[0, -1]
        assert int(logits.argmax()) == int(tok)
        seq.append(int(tok))


def test_stop_token_ends_completion_and_is_included(tiny_engine, tiny_tokenizer):
    p = _prompts(tiny_tokenizer)[1]
    free = tiny_engine.generate([p], SamplingParams(max_tokens=12, greedy=True))[0]
    stop = int(free.token_ids[3])
    k = int(np.flatnonzero(free.token_ids == stop)[0])
    c = tiny_engine.generate([p], SamplingParams(max_tokens=12, greedy=True, stop_token_ids=(stop,)))[0]
    np.testing.assert_array_equal(c.token_ids, free.token_ids[: k + 1])
    assert c.finish_reason == "stop"
    assert free.finish_reason == "length" or free.token_ids[-1] == tiny_engine.eos_token_id


def test_budget_clamped_to_context(tiny_tokenizer, tiny_dir):
    from agentrl.llm.hf import HFEngine

    eng = HFEngine.from_pretrained(tiny_dir, max_context=20)
    p = list(range(100, 115))  # 15 tokens → room for 5
    c = eng.generate([p, p[:5]], SamplingParams(max_tokens=50, seed=0))
    assert c[0].token_ids.size <= 5 and c[1].token_ids.size <= 15
    assert c[0].finish_reason in ("length", "stop")
    with pytest.raises(ValueError, match="leaves no room"):
        eng.generate([list(range(100, 120))], SamplingParams(max_tokens=4))


def test_hidden_state_is_final_layer_at_last_prompt_token(tiny_engine, tiny_tokenizer):
    prompts = _prompts(tiny_tokenizer)
    comps = tiny_engine.generate(prompts, SamplingParams(max_tokens=3, seed=0), return_hidden=True)
    for p, c in zip(prompts, comps):
        with torch.no_grad():
            out = tiny_engine.model(input_ids=torch.tensor([p]), output_hidden_states=True)
        ref = out.hidden_states[-1][0, -1].numpy()
        assert c.hidden.shape == (64,) and c.hidden.dtype == np.float32
        np.testing.assert_allclose(c.hidden, ref, atol=1e-4)


def test_update_weights_changes_logprobs_and_version(tiny_dir, tiny_tokenizer):
    from agentrl.llm.hf import HFEngine

    eng = HFEngine.from_pretrained(tiny_dir)
    p = _prompts(tiny_tokenizer)[0]
    c = eng.generate([p], SamplingParams(max_tokens=6, seed=3))[0]
    before = eng.score(p, c.token_ids)
    state = {k: v.clone() for k, v in eng.model.state_dict().items()}
    state["model.norm.weight"] = state["model.norm.weight"] * 2.0
    eng.update_weights(state, version=3)
    assert eng.policy_version == 3
    assert eng.generate([p], SamplingParams(max_tokens=2, seed=3))[0].policy_version == 3
    assert np.max(np.abs(eng.score(p, c.token_ids) - before)) > 1e-3
    eng.update_weights(tiny_dir, version=4)  # back from the safetensors folder
    np.testing.assert_array_equal(eng.score(p, c.token_ids), before)
    with pytest.raises(RuntimeError, match="missing"):
        eng.update_weights({"model.norm.weight": state["model.norm.weight"]}, version=5)


def test_pause_abort_and_resume(tiny_engine, tiny_tokenizer):
    p = _prompts(tiny_tokenizer)[1]
    tiny_engine.pause("abort")
    with pytest.raises(RuntimeError, match="paused"):
        tiny_engine.generate([p], SamplingParams(max_tokens=2))
    tiny_engine.resume()
    assert tiny_engine.generate([p], SamplingParams(max_tokens=2, seed=0))[0].token_ids.size >= 1
    with pytest.raises(ValueError, match="pause mode"):
        tiny_engine.pause("later")


@pytest.mark.slow
def test_logprobs_equal_teacher_forced_forward_smollm2(smollm2_engine, smollm2_tokenizer):
    from agentrl.llm.chat import ChatRenderer
    from agentrl.types import Message as M

    r = ChatRenderer(smollm2_tokenizer)
    prompts = [r.render_ids([M("user", q)]) for q in ("What is 2+3? Answer briefly.", "Name a colour.")]
    comps = smollm2_engine.generate(prompts, SamplingParams(max_tokens=16, seed=0))
    for p, c in zip(prompts, comps):
        assert np.max(np.abs(smollm2_engine.score(p, c.token_ids) - c.logprobs)) <= 1e-4


@pytest.mark.parametrize("env, expected", [("3", 3), ("", None), ("junk", None)])
def test_num_threads_zero_follows_omp_num_threads(tiny_dir, monkeypatch, env, expected):
    """num_threads=0: OMP_NUM_THREADS when it is a positive integer, else every usable core."""
    import os

    from agentrl.llm.hf import HFEngine

    monkeypatch.setenv("OMP_NUM_THREADS", env)
    before = torch.get_num_threads()
    try:
        HFEngine.from_pretrained(tiny_dir, num_threads=0)
        want = expected if expected is not None else len(os.sched_getaffinity(0))
        assert torch.get_num_threads() == want
        torch.set_num_threads(1)
        HFEngine.from_pretrained(tiny_dir, num_threads=None)  # None leaves the setting alone
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_long_prompt_does_not_cut_a_short_ones_room_or_overrun_the_context(tiny_dir):
    from agentrl.llm.hf import HFEngine

    eng = HFEngine.from_pretrained(tiny_dir, max_context=40)
    calls = []
    real = eng.model.generate

    def spy(**kw):  # every model.generate call must fit the context: prompt width + new tokens
        calls.append(kw["input_ids"].shape[1] + kw["max_new_tokens"])
        return real(**kw)

    eng.model.generate = spy
    short, long_ = [100, 101], list(range(200, 236))  # 2 tokens: room for 12 (max_tokens); 36 tokens: room for 4
    sp = SamplingParams(max_tokens=12, seed=0, stop_token_ids=())
    a, b = eng.generate([short, long_], sp)
    assert calls and max(calls) <= 40  # 36 + 12 = 48 positions before the fix
    assert b.token_ids.size <= 4
    alone = eng.generate([short], sp)[0]  # the short prompt kept its own budget (same seed, alone = batched)
    np.testing.assert_array_equal(a.token_ids, alone.token_ids)


def test_unseeded_sampling_draws_fresh_tokens_seeded_sampling_repeats(tiny_engine):
    import torch

    p = [5, 17, 99, 3]
    unseeded = {tuple(tiny_engine.generate([p], SamplingParams(max_tokens=8, temperature=1.0))[0].token_ids.tolist())
                for _ in range(5)}
    assert len(unseeded) > 1  # five identical calls without a seed: not one reply five times
    state = torch.random.get_rng_state()
    seeded = {tuple(tiny_engine.generate([p], SamplingParams(max_tokens=8, seed=4))[0].token_ids.tolist())
              for _ in range(3)}
    assert len(seeded) == 1 and torch.equal(torch.random.get_rng_state(), state)  # seeded: repeats, RNG untouched
