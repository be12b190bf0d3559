"""Shared fixtures: tiny offline tokenizer/model (MODELS.md §2.1–2.2) and the packaged SmolLM2.

The tiny model is built once and cached on disk in ``$TMPDIR/agentrl-test-cache`` (atomic
rename, so parallel sessions and the pytest-xdist workers of scripts/test.sh share it); fixtures are
session-scoped (once per xdist worker). SmolLM2 fixtures need
``agentrl models prepare smollm2`` (scripts/setup.sh runs it); the tokenizer fixture loads
only the tokenizer.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TEST_CACHE = Path(tempfile.gettempdir()) / "agentrl-test-cache"

# hypothesis keeps neither its example database nor its caches in the tree (.hypothesis/)
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(TEST_CACHE / "hypothesis"))
try:
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("agentrl", database=None)
    _hypothesis_settings.load_profile("agentrl")
except ModuleNotFoundError:  # pragma: no cover - hypothesis is in the dev extra
    pass


@pytest.fixture(scope="session")
def tiny_dir() -> Path:
    """Folder with the tiny BPE-2k tokenizer (ChatML template) and random Qwen3 model."""
    pytest.importorskip("transformers", reason="needs the llm extra: pip install 'agentrl[llm]'")
    import torch

    torch.set_num_threads(1)
    from agentrl.llm.tiny import tiny_model_dir

    return tiny_model_dir(TEST_CACHE)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(scope="session")
def tiny_engine(tiny_dir):
    """``HFEngine`` on the tiny model, fp32, 1 thread."""
    from agentrl.llm.hf import HFEngine

    return HFEngine.from_pretrained(tiny_dir)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The prepared SmolLM2-135M-Instruct folder (skips with the fix when not prepared)."""
    from agentrl.llm.models import is_prepared, model_dir

    if not is_prepared("smollm2"):
        pytest.skip(f"SmolLM2 is not prepared in {model_dir('smollm2')}; run: agentrl models prepare smollm2")
    return model_dir("smollm2")


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir):
    """Only the SmolLM2 tokenizer (fast: no weights)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_dir):
    """``HFEngine`` on SmolLM2 loaded as fp32 (stored bf16; the cast is exact)."""
    import torch

    torch.set_num_threads(1)
    from agentrl.llm.hf import HFEngine

    return HFEngine.from_pretrained(smollm2_dir)


@pytest.fixture(scope="session")
def update_logprob_gap():
    """``gap(model, turns, renderer, pad_id) -> float``: the largest |stored − recomputed|
    logprob over the completion tokens of ``turns`` when the update rebuilds them
    (``build_batch`` with ``constraint_masks`` and ``grammar_masks``, masked ``forward_token_stats``)."""
    import numpy as np
    import torch

    from agentrl.llm.constrained import constraint_masks
    from agentrl.llm.grammar import grammar_masks
    from agentrl.update.batch import build_batch
    from agentrl.update.logprobs import forward_token_stats

    def gap(model, turns, renderer, pad_id: int) -> float:
        batch = build_batch([t.prompt_ids for t in turns], [t.completion_ids for t in turns],
                            [t.completion_logprobs for t in turns], np.ones(len(turns)), pad_id=pad_id,
                            allowed=constraint_masks(turns, renderer), grammar=grammar_masks(turns, renderer))
        with torch.no_grad():
            st = forward_token_stats(model, batch.input_ids, batch.attention_mask, allowed_ids=batch.allowed_ids,
                                     grammar_mask=batch.grammar_mask)
        m = batch.loss_mask.bool()
        return float(torch.max(torch.abs(st.logprobs[m] - batch.old_logprobs[m])))

    return gap
