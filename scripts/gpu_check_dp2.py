"""One rank of ``scripts/gpu_check.py``'s ``dp2`` section, run by
``python -m torch.distributed.run --standalone --nproc-per-node 2 scripts/gpu_check_dp2.py
--device cuda|cpu --model NAME --dtype DTYPE --sizes JSON --out FILE``.

Each rank: ``DistContext.from_env`` (NCCL on ``cuda:LOCAL_RANK``, gloo on CPU), builds the
random-weight model (the same seed on every rank, so the shards start equal) and an unsharded
``HFEngine`` copy of it on its own device, ``parallelize``s the trainer (FSDP2) and runs 2
full fine-tuning steps of ``agentrl.update.step.update(..., dp=ctx)`` on the rows of
``gpu_check_parts.update_batch`` (each rank trains its share). Then it streams the trained
weights into its engine (``iter_inference_weights`` → ``engine.update_weights``: a
collective, consumed to the end on every rank) and compares the engine's ``score`` of a fixed
probe with the trainer's logprobs (``agentrl.train.sync.trainer_logprobs``, a collective).
Rank 0 gathers every rank's result and writes the JSON (seconds, GiB, nats).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # agentrl from the checkout, and gpu_check_parts

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gpu_check_parts as parts  # noqa: E402

#: Optimizer steps per rank, and the probe's prompt / completion lengths (tokens).
STEPS, PROBE_PROMPT, PROBE_COMPLETION = 2, 24, 8
#: Start of the line a failing rank prints (``gpu_check_scale.dp2`` reports those lines).
ERROR_PREFIX = "gpu_check_dp2 error:"


def _engine_copy(model, ids: dict):
    """An ``HFEngine`` over a frozen deep copy of ``model`` on the same device (the rank's
    unsharded sampler; ``agentrl.distributed.engine_copy`` does the same for a ``Policy``)."""
    from agentrl.llm.hf import HFEngine

    with torch.no_grad():
        twin = copy.deepcopy(model).eval()
    for p in twin.parameters():
        p.requires_grad_(False)
    return HFEngine(twin, eos_token_id=ids["eos"], pad_token_id=ids["pad"], num_threads=None)


def _stream(model, engine, version: int) -> None:
    """``engine.update_weights(iter_inference_weights(model))``; when the load stops early the
    rest of the stream is still consumed (each tensor is an all-gather every rank must join)."""
    from agentrl.distributed import iter_inference_weights

    pairs = iter_inference_weights(model)
    try:
        engine.update_weights(pairs, version=version)
    finally:
        for _ in pairs:
            pass


def run_rank(ctx, name: str, sizes: parts.Sizes, dtype: torch.dtype) -> dict:
    """This rank's steps, sync and probe (module doc); returns its flat result."""
    from agentrl.config import UpdateConfig
    from agentrl.distributed import parallelize
    from agentrl.train.sync import default_tolerance, trainer_logprobs
    from agentrl.update import batch_logprobs, make_optimizer
    from agentrl.update.step import update

    dev = ctx.device
    model = parts.build_model(name, dev, dtype, seed=1)
    ids = parts.model_ids(model)
    engine = _engine_copy(model, ids)
    batch = parts.update_batch(ids["vocab"], sizes, ids["pad"])
    rng = np.random.default_rng(7)
    prompt = rng.integers(3, ids["vocab"] - 8, size=PROBE_PROMPT).astype(np.int32)
    completion = rng.integers(3, ids["vocab"] - 8, size=PROBE_COMPLETION).astype(np.int32)
    before = engine.score(prompt.tolist(), completion.tolist())
    cfg = UpdateConfig(micro_batch=sizes.micro_batch, lr=1e-5)
    model.train()
    model = parallelize(model, ctx)
    batch = batch.with_(old_logprobs=batch_logprobs(model, batch, micro_batch=sizes.micro_batch) * batch.loss_mask)
    opt = make_optimizer(model, lr=cfg.lr)
    parts.reset_peak(dev)
    times, losses = [], []
    for _ in range(STEPS):
        parts.sync(dev)
        t0 = time.perf_counter()
        losses.append(update(model, opt, batch, cfg, dp=ctx).loss)
        parts.sync(dev)
        times.append(time.perf_counter() - t0)
    model.eval()
    ctx.barrier()
    t0 = time.perf_counter()
    _stream(model, engine, version=1)
    parts.sync(dev)
    sync_s = time.perf_counter() - t0
    eng = engine.score(prompt.tolist(), completion.tolist())
    trainer = trainer_logprobs(model, prompt, completion)
    return {"rank": ctx.rank, "device": str(dev), "step_seconds": times, "losses": [float(x) for x in losses],
            "sync_seconds": sync_s, "probe_gap": float(np.max(np.abs(eng - trainer))),
            "probe_engine_moved": float(np.max(np.abs(eng - before))),
            "probe_trainer_moved": float(np.max(np.abs(trainer - before))), "engine_version": engine.policy_version,
            "peak_mem_gib": parts.peak_gib(dev), "tolerance": default_tolerance(model),
            "rows_per_step": batch.num_rows, "trained_tokens_per_step": int(batch.num_tokens)}


def summary(ranks: list[dict], backend: str) -> dict:
    """The section's JSON from every rank's result: per-rank lists, rank 0's step times, ``ok``
    (finite losses, each engine loaded the sync — version 1, probe moved — and every probe gap
    within the tolerance: 1e-3 nats for float32 weights, 0.5 for bf16/fp16)."""
    tol = ranks[0]["tolerance"]
    gaps = [r["probe_gap"] for r in ranks]
    ok = (all(np.isfinite(r["losses"]).all() for r in ranks) and all(r["engine_version"] == 1 for r in ranks)
          and all(r["probe_engine_moved"] > 0 for r in ranks) and max(gaps) <= tol)
    return {"world_size": len(ranks), "backend": backend, "devices": [r["device"] for r in ranks],
            "steps": STEPS, "step_seconds": ranks[0]["step_seconds"], "losses": ranks[0]["losses"],
            "rows_per_step": ranks[0]["rows_per_step"], "trained_tokens_per_step": ranks[0]["trained_tokens_per_step"],
            "sync_seconds": [r["sync_seconds"] for r in ranks], "probe_gap": gaps, "probe_gap_max": max(gaps),
            "probe_tolerance": tol, "probe_engine_moved": [r["probe_engine_moved"] for r in ranks],
            "probe_trainer_moved": [r["probe_trainer_moved"] for r in ranks],
            "peak_mem_gib": [r["peak_mem_gib"] for r in ranks], "ok": bool(ok)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), required=True)
    ap.add_argument("--model", required=True, choices=tuple(parts.MODELS))
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--sizes", required=True, help="gpu_check_parts.Sizes as JSON")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from agentrl.distributed import DistContext, leave_rank

    raw = json.loads(args.sizes)
    sizes = parts.Sizes(**{**raw, "gen_batches": tuple(raw["gen_batches"])})
    if args.device == "cpu":
        torch.set_num_threads(1)
    try:
        ctx = DistContext.from_env(args.device)
        try:
            mine = run_rank(ctx, args.model, sizes, getattr(torch, args.dtype))
            every = ctx.gather_object(mine)
            if ctx.is_main:
                args.out.write_text(json.dumps(summary(every, ctx.backend), indent=1))
            ctx.close(wait=True)  # no rank tears its gloo/NCCL pairs down while a peer is still writing
        finally:
            ctx.close()
    except Exception as exc:  # one line the launcher keeps (its own summary names no cause)
        print(f"{ERROR_PREFIX} rank {os.environ.get('RANK', '?')}: {type(exc).__name__}: {exc}", file=sys.stderr,
              flush=True)
        raise
    leave_rank(0)


if __name__ == "__main__":
    main()
