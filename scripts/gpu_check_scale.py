"""The at-scale measurements of ``scripts/gpu_check.py`` (second parts file, beside
``gpu_check_parts.py``): the peak memory of a realistic rollout (``rollout_peak``) and the
2-rank data-parallel update + weight sync (``dp2``, launched with ``torch.distributed.run``;
the ranks run ``scripts/gpu_check_dp2.py``).

Units as in ``gpu_check_parts``: seconds of wall clock after ``torch.cuda.synchronize``,
memory in GiB (2**30 bytes), throughput in tokens per second.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from gpu_check_dp2 import ERROR_PREFIX
from gpu_check_parts import Sizes, free_memory, model_ids, random_prompts, timed_generate

GIB = 2**30
WORKER = Path(__file__).resolve().with_name("gpu_check_dp2.py")
#: Wall-clock limit of the 2-rank run (seconds): start, two model builds, 2 steps, sync, probe.
DP2_TIMEOUT_S = 300


def kv_cache_bytes(config, batch: int, tokens: int, dtype: torch.dtype) -> int:
    """Bytes of the keys and values of ``batch`` rows of ``tokens`` positions:
    2 × layers × batch × tokens × KV heads × head dim × bytes per element."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * batch * tokens * kv_heads * head_dim * dtype.itemsize


def _peak_pass(model, prompts: list[list[int]], new: int, device: torch.device, prefix_cache_mb: int | None) -> dict:
    """One ``HFEngine.generate`` call of ``prompts`` (per-row seeds 0…B−1, ``new`` tokens) on a
    fresh engine (``prefix_cache_mb`` None: the engine's default prefix cache, 0: none) from a
    clean allocator; returns its tokens, seconds, peak and the tokens of every row."""
    from agentrl.llm.base import SamplingParams
    from agentrl.llm.hf import HFEngine

    ids = model_ids(model)
    kw = {} if prefix_cache_mb is None else {"prefix_cache_mb": prefix_cache_mb}
    engine = HFEngine(model, eos_token_id=ids["eos"], pad_token_id=ids["pad"], num_threads=None, **kw)
    sp = SamplingParams(max_tokens=new, row_seeds=tuple(range(len(prompts))))
    free_memory(device)
    outs, dt, peak = timed_generate(engine, prompts, sp, device)
    cache = engine.prefix_cache
    n = sum(o.token_ids.size for o in outs)
    rows = [o.token_ids for o in outs]
    out = {"tokens": n, "seconds": dt, "tokens_per_s": n / dt, "peak_gib": peak, "rows": rows,
           "cache_entries": len(cache) if cache is not None else 0,
           "cache_limit_gib": cache.max_bytes / GIB if cache is not None else 0.0}
    del engine, outs
    free_memory(device)
    return out


def rollout_peak(model, sizes: Sizes, device: torch.device) -> dict:
    """Peak memory of a rollout at the main job's shape: ``sizes.peak_batch`` prompts of
    ``sizes.peak_prompt`` random tokens, ``sizes.peak_new`` sampled tokens each, per-row seeds,
    one ``HFEngine.generate`` call on ``model`` (its own dtype; only ``generate`` is used, so any
    internal logprob layout of the engine is measured as it is).

    Two passes from a clean allocator: the engine as a run builds it (default prefix KV cache,
    which keeps copies of the rows' keys/values) and one without a prefix cache (``nocache_*``).
    Fields (GiB): ``model_gib`` (parameters and buffers), ``kv_cache_gib`` (from the config,
    ``kv_cache_bytes`` at prompt + new tokens), ``peak_mem_gib`` (``torch.cuda.max_memory_allocated``
    during the call, everything resident included), ``resident_before_gib`` and
    ``above_model_kv_gib`` = peak − model − KV; ``generate_seconds`` and ``tokens_per_s``
    (sampled tokens per second); ``prefix_cache_limit_gib`` / ``prefix_cache_entries_after``
    (the default engine's cache bound and the rows it kept); ``passes_same_tokens`` (both
    passes drew the same tokens: per-row seeds, cold caches). On CPU the memory fields are
    None. ``ok``: every row sampled tokens (and on CUDA the peak covers model + KV)."""
    ids = model_ids(model)
    b, p, new = sizes.peak_batch, sizes.peak_prompt, sizes.peak_new
    dtype = next(model.parameters()).dtype
    prompts = random_prompts(ids["vocab"], b, p, seed=4242)
    _peak_pass(model, prompts[:2], 2, device, 0)  # warm-up: the per-row sampler's first call
    model_b = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    kv_b = kv_cache_bytes(model.config, b, p + new, dtype)
    free_memory(device)
    resident = torch.cuda.memory_allocated(device) / GIB if device.type == "cuda" else None
    out: dict = {"batch": b, "prompt_tokens": p, "new_tokens": new, "dtype": str(dtype).removeprefix("torch."),
                 "model_gib": model_b / GIB, "kv_cache_gib": kv_b / GIB, "resident_before_gib": resident}
    cached = _peak_pass(model, prompts, new, device, None)
    plain = _peak_pass(model, prompts, new, device, 0)
    for prefix, res in (("", cached), ("nocache_", plain)):
        peak = res["peak_gib"]
        out.update({f"{prefix}peak_mem_gib": peak, f"{prefix}tokens": res["tokens"],
                    f"{prefix}generate_seconds": res["seconds"], f"{prefix}tokens_per_s": res["tokens_per_s"],
                    f"{prefix}above_model_kv_gib": None if peak is None else peak - (model_b + kv_b) / GIB})
    out.update(prefix_cache_limit_gib=cached["cache_limit_gib"], prefix_cache_entries_after=cached["cache_entries"])
    out["passes_same_tokens"] = all(x.size == y.size and (x == y).all() for x, y in zip(cached["rows"], plain["rows"]))
    ok = all(r.size > 0 for r in cached["rows"]) and len(cached["rows"]) == b
    if device.type == "cuda":
        ok = ok and out["peak_mem_gib"] >= (model_b + kv_b) / GIB
    out["ok"] = bool(ok)
    return out


# ------------------------------------------------------------------ section: 2 ranks
#: Substrings of a rank's own last words that ``dp2`` keeps ahead of the launcher's summary: Python
#: errors, a C++ exception's ``what()``, and the messages of an abort with no exception (libstdc++'s
#: ``terminate called ...``, glibc's heap checks, a fatal signal).
CAUSE_MARKS = ("Error", "error:", "what()", "terminate called", "Fatal", "Abort", "Segmentation", "free()",
               "corrupted", "pure virtual")

def dp2(mode: str, model: str, sizes: Sizes, dtype: str, timeout: float = DP2_TIMEOUT_S) -> dict:
    """The 2-rank data-parallel path (``mode`` "cuda": NCCL, one GPU per rank; "cpu": gloo):
    ``python -m torch.distributed.run --standalone --nproc-per-node 2 scripts/gpu_check_dp2.py``
    (see that file for what each rank does). Returns rank 0's JSON: ``step_seconds`` (per
    step, rank 0), ``sync_seconds`` / ``probe_gap`` / ``peak_mem_gib`` per rank,
    ``probe_gap_max``, ``probe_tolerance`` (nats) and ``ok``; or ``ok`` False with the
    launcher's exit status and the end of its output."""
    with tempfile.TemporaryDirectory(prefix="gpu-check-dp2-") as tmp:
        result = Path(tmp) / "dp2.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(WORKER),
               "--device", mode, "--model", model, "--dtype", dtype, "--out", str(result),
               "--sizes", json.dumps(dataclasses.asdict(sizes))]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
               "AGENTRL_DIST_TIMEOUT_S": str(int(timeout))}  # a stuck collective fails inside the limit
        rc, tail = _launch(cmd, env, timeout)
        if rc != 0 or not result.is_file():
            errors = [line.split(ERROR_PREFIX, 1)[1].strip() for line in tail if ERROR_PREFIX in line]
            why = "; ".join(errors) or "see output_tail"
            causes = [line for line in tail[:-12] if any(k in line for k in CAUSE_MARKS)][-8:]
            return {"ok": False, "error": f"torch.distributed.run exited {rc}: {why}",
                    "output_tail": causes + tail[-12:]}  # the ranks' own errors, then the launcher's summary
        return json.loads(result.read_text())


def _launch(cmd: list[str], env: dict, timeout: float) -> tuple[int, list[str]]:
    """Run ``cmd`` in its own process group; past ``timeout`` seconds kill that group (the
    launcher and its ranks). Returns (exit status, 124 on timeout; its output's lines)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=timeout)
        return proc.returncode, text.splitlines()
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this call started: launcher and ranks
        text, _ = proc.communicate()
        return 124, (text or "").splitlines() + [f"gpu_check: the 2-rank run passed {timeout:g} s and was stopped"]
