"""Fixtures of the vLLM tier (marker ``vllm``), run inside ``.venv-vllm`` (scripts/vllm_env.sh)
by ``scripts/test.sh`` when ``AGENTRL_VLLM_TESTS=1`` (default in CI).

Where vLLM is not importable (the main ``.venv``), this directory is not collected and a
note with the reason is printed at the end of the run. The tiny model here has
``head_dim=32``: vLLM's CPU attention rejects 16 (MODELS.md §3.6).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

_spec = importlib.util.find_spec("vllm")
HAVE_VLLM = _spec is not None and _spec.origin not in (None, "namespace")  # a real package, not a stray folder
SKIP_NOTE = ("tests/llm_vllm not collected: vllm is not importable in this environment; they run in .venv-vllm "
             "(bash scripts/vllm_env.sh; AGENTRL_VLLM_TESTS=1 bash scripts/test.sh, the default when CI=true)")

if not HAVE_VLLM:
    collect_ignore_glob = ["test_*.py"]
else:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine core (weight iterator)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def pytest_terminal_summary(terminalreporter) -> None:
    if not HAVE_VLLM:
        terminalreporter.write_line(SKIP_NOTE, yellow=True)


def _tiny32(name: str, max_context: int) -> Path:
    """Build (once, cached) the tiny BPE-2k tokenizer + random Qwen3 model with head_dim 32."""
    import torch

    torch.set_num_threads(1)
    from agentrl.llm.tiny import build_tiny_model, build_tiny_tokenizer

    cache = Path(tempfile.gettempdir()) / "agentrl-test-cache"
    out = cache / name
    if not (out / "config.json").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="tiny32-", dir=str(cache)))
        build_tiny_model(tmp, build_tiny_tokenizer(tmp), head_dim=32, max_context=max_context)
        try:
            tmp.rename(out)  # atomic; a concurrent builder's copy is dropped
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


@pytest.fixture(scope="session")
def tiny32_dir() -> Path:
    """Tiny BPE-2k tokenizer + random Qwen3 model with head_dim 32, context 2048 (built once, cached)."""
    return _tiny32("tiny-qwen3-bpe2k-hd32", 2048)


@pytest.fixture(scope="session")
def tiny32_long_dir() -> Path:
    """The same tiny model (same seed, same weights) with ``max_position_embeddings`` 8192,
    SmolLM2's context (built once, cached)."""
    return _tiny32("tiny-qwen3-bpe2k-hd32-ctx8k", 8192)


@pytest.fixture(scope="session")
def vllm_tiny(tiny32_dir):
    """``VLLMEngine`` on the tiny model, fp32, context 512 (one per session: init ~3-10 s)."""
    from agentrl.llm.vllm import VLLMEngine

    return VLLMEngine.from_pretrained(tiny32_dir, dtype="float32", max_context=512)


@pytest.fixture()
def hf_tiny(tiny32_dir):
    """A fresh ``HFEngine`` on the same weights (fp32, 1 thread); tests may change its weights."""
    from agentrl.llm.hf import HFEngine

    return HFEngine.from_pretrained(tiny32_dir, max_context=512)
