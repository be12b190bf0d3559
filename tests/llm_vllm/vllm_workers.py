"""Subprocess workers of the vLLM tier (issue 36 item 2), run as
``python vllm_workers.py MODE MODEL_DIR OUT_DIR`` — under ``torchrun`` for ``torchrun`` — by
``run_worker``; each process writes ``OUT_DIR/rank<R>.json``.

- ``torchrun`` (2 gloo ranks): each rank joins the trainer's process group
  (``DistContext.from_env``), builds its own ``VLLMEngine`` (vLLM's ``external_launcher``), pushes
  the same changed weights, samples rows with per-request seeds and compares the logprobs with
  an HF reference; the trainer's group is checked before and after.
- ``multiprocess``: an engine whose core runs in another process
  (``VLLM_ENABLE_V1_MULTIPROCESSING=1``, read once per process by vLLM): a bucketed push
  without a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PROMPT, COMPLETION = [5, 17, 99, 4, 250, 41, 7], [33, 8, 2, 100, 1500]


def run_worker(mode: str, model_dir, *, nproc: int | None = None, env: dict | None = None,
               timeout: int = 900) -> dict | list[dict]:
    """Run ``mode`` in a fresh process (``nproc``: under torchrun with that many ranks) and
    return its result (a list of per-rank results under torchrun).

    Raises:
        AssertionError: the process failed (with the tail of its output).
    """
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)] if nproc else []
    with tempfile.TemporaryDirectory(prefix="agentrl-vllm-worker-") as out:
        cmd = [sys.executable, *launcher, __file__, mode, str(model_dir), out]
        full_env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1",
                    "TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "WARNING", **(env or {})}
        proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
        results = [json.loads(p.read_text()) for p in sorted(Path(out).glob("rank*.json"))]
    assert results, "the worker wrote no result"
    return results if nproc else results[0]


def perturbed(hf, seed: int) -> dict:
    """Add seeded noise (σ 0.05) to every weight of an ``HFEngine``'s model; returns its state dict."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return hf.model.state_dict()


def _max_diff(hf, completions) -> float:
    import numpy as np

    return max(float(np.abs(hf.score(PROMPT, c.token_ids.tolist()) - c.logprobs).max()) for c in completions)


def torchrun_rank(model_dir: str, out: Path) -> None:
    import torch
    from vllm.distributed.parallel_state import get_tp_group, get_world_group

    from agentrl.distributed import DistContext, leave_rank
    from agentrl.llm.base import SamplingParams
    from agentrl.llm.hf import HFEngine
    from agentrl.llm.vllm import VLLMEngine

    ctx = DistContext.from_env("cpu")
    eng = VLLMEngine.from_pretrained(model_dir, dtype="float32", max_context=512)
    group_ok = [float(ctx.all_reduce(torch.tensor([ctx.rank + 1.0]))[0])]  # the trainer's group still works
    hf = HFEngine.from_pretrained(model_dir, max_context=512)
    eng.update_weights(perturbed(hf, 7), 1)  # the same trainer weights on every rank
    outs = eng.generate([PROMPT] * 3, SamplingParams(max_tokens=8, row_seeds=[100, 101, 200 + ctx.rank]))
    group_ok.append(float(ctx.all_reduce(torch.tensor([ctx.rank + 1.0]))[0]))
    result = dict(rank=ctx.rank, world=ctx.world_size, backend=ctx.backend, group_sums=group_ok,
                  executor=eng.llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend,
                  vllm_world=get_world_group().world_size, vllm_tp=get_tp_group().world_size,
                  tokens=[o.token_ids.tolist() for o in outs], versions=[o.policy_version for o in outs],
                  max_abs_diff=_max_diff(hf, outs),
                  score_diff=float(abs(eng.score(PROMPT, COMPLETION) - hf.score(PROMPT, COMPLETION)).max()))
    (out / f"rank{ctx.rank}.json").write_text(json.dumps(result))
    ctx.barrier()
    eng.close()  # before the group goes: vLLM's shutdown destroys the default group itself
    ctx.close()
    leave_rank(0)  # finalisation aborts a finished rank now and then (agentrl.distributed.context.leave_rank)


def multiprocess(model_dir: str, out: Path) -> None:
    import safetensors.torch

    from agentrl.llm.hf import HFEngine
    from agentrl.llm.vllm import VLLMEngine
    from agentrl.llm.vllm_weights import weight_buckets, with_tied_head

    eng = VLLMEngine.from_pretrained(model_dir, dtype="float32", max_context=512, weight_bucket_mb=0.05)
    hf = HFEngine.from_pretrained(model_dir, max_context=512)
    before = eng.score(PROMPT, COMPLETION)
    new = perturbed(hf, 3)
    folders, saved = [], []
    real_mkdtemp, real_save = tempfile.mkdtemp, safetensors.torch.save_file
    tempfile.mkdtemp = lambda *a, **k: folders.append(k.get("prefix")) or real_mkdtemp(*a, **k)
    safetensors.torch.save_file = lambda *a, **k: saved.append(a[1]) or real_save(*a, **k)
    try:
        eng.update_weights(new, 1)
    finally:
        tempfile.mkdtemp, safetensors.torch.save_file = real_mkdtemp, real_save
    after = eng.score(PROMPT, COMPLETION)
    result = dict(client=type(eng.llm.llm_engine.engine_core).__name__, pack_buckets=eng.pack_buckets,
                  buckets=len(list(weight_buckets(with_tied_head(new.items()), eng.bucket_bytes))),
                  temp_folders=folders, saved_files=saved,
                  max_abs_diff=float(abs(after - hf.score(PROMPT, COMPLETION)).max()),
                  moved=float(abs(after - before).max()))
    (out / "rank0.json").write_text(json.dumps(result))
    eng.close()


if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import torch

    torch.set_num_threads(1)
    mode, model, out_dir = sys.argv[1:4]
    {"torchrun": torchrun_rank, "multiprocess": multiprocess}[mode](model, Path(out_dir))
