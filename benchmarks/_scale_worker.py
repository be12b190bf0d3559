"""Worker of ``benchmarks/scale.py``, run under ``torchrun --standalone --nproc-per-node N``.

Loads one random-weight model folder written by ``scale.py`` and the saved minibatch, then
for each mode (``lora``: r16 on q/k/v/o of the top 6 layers, as the examples; ``full``):
wraps the model with ``agentrl.distributed.parallelize`` (FSDP2 when N ≥ 2; the plain
1-process path otherwise), runs 1 warm-up + ``--steps`` optimizer steps of
``agentrl.update.step.update(..., dp=ctx)`` (each step timed after a barrier; the time of a
step is the slowest rank's), then ``--pushes`` data-parallel weight syncs:
``agentrl.distributed.inference_state`` (all-gather of the shards to rank 0, LoRA merged) and
``HFEngine.update_weights`` on a second, unsharded engine copy held by rank 0.
Rank 0 writes ``{mode: {...}}`` as JSON to ``--out``.

Usage (normally started by ``scale.py``): ``torchrun --standalone --nproc-per-node 2
benchmarks/_scale_worker.py --folder DIR --batch DIR/batch.pt --threads 1 --out r.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # agentrl from the checkout


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(ctx, fn) -> tuple[float, object]:
    """(seconds of ``fn()`` on the slowest rank, its result); every rank starts after a barrier."""
    import torch

    ctx.barrier()
    _sync(ctx.device)
    t0 = time.perf_counter()
    out = fn()
    _sync(ctx.device)
    dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    return float(ctx.all_reduce(dt, op="max")[0]), out


def _load(folder: str, dtype, device):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device)


def _state_mb(state) -> tuple[float, float]:
    """(MB of distinct tensors — tied weights once when they share memory —, MB summed over
    names) of a state dict; 1 MB = 1e6 bytes."""
    seen = {}
    for t in state.values():
        seen[(t.data_ptr(), t.dtype, tuple(t.shape))] = t.numel() * t.element_size()
    return sum(seen.values()) / 1e6, sum(t.numel() * t.element_size() for t in state.values()) / 1e6


def run_mode(mode: str, args, ctx, batch, engine) -> dict:
    """One mode: the timed update steps, then the timed weight pushes (see the module docstring)."""
    import torch

    from agentrl.config import LoraSpec, UpdateConfig
    from agentrl.distributed import inference_state, parallelize
    from agentrl.update import make_optimizer
    from agentrl.update.lora import prepare_policy
    from agentrl.update.step import update

    dtype = getattr(torch, args.dtype)
    cfg = UpdateConfig(micro_batch=args.micro_batch, lr=1e-4 if mode == "lora" else 1e-5)
    model = _load(args.folder, dtype, ctx.device)
    top = min(6, model.config.num_hidden_layers)  # the tiny model has 2 layers
    lora = LoraSpec(rank=16, alpha=32.0, top_n_layers=top) if mode == "lora" else None
    torch.manual_seed(0)  # the same LoRA A init on every rank and in every run
    model = prepare_policy(model, cfg, lora)
    model = parallelize(model, ctx)
    opt = make_optimizer(model, lr=cfg.lr)
    dp = ctx if ctx.distributed else None
    times, losses = [], []
    for _ in range(1 + args.steps):
        dt, stats = _timed(ctx, lambda: update(model, opt, batch, cfg, dp=dp))
        times.append(dt)
        losses.append(float(stats.loss))
    gathers, loads, mb = [], [], (0.0, 0.0)
    for i in range(args.pushes):
        g, state = _timed(ctx, lambda: inference_state(model, ctx))
        load = 0.0
        if ctx.is_main:
            mb = _state_mb(state)
            _sync(ctx.device)
            t0 = time.perf_counter()
            engine.update_weights(state, version=engine.policy_version + 1)
            _sync(ctx.device)
            load = time.perf_counter() - t0
        del state
        gathers.append(g)
        loads.append(load)
        ctx.barrier()
    push = [a + b for a, b in zip(gathers, loads)]
    out = {
        "warmup_step_s": times[0], "step_s": times[1:], "step_s_median": statistics.median(times[1:]),
        "losses": losses, "trainable_params_m": sum(p.numel() for p in model.parameters() if p.requires_grad) / 1e6,  # DTensor: global
        "fsdp": ctx.distributed, "push_gather_s": gathers, "push_load_s": loads, "push_s": push,
        "push_s_median": statistics.median(push) if push else None, "push_mb": mb[0], "push_mb_names": mb[1],
    }
    del model, opt
    gc.collect()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", required=True, help="the model folder scale.py wrote")
    ap.add_argument("--batch", required=True, help="torch.save'd TrainBatch (the global minibatch)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    ap.add_argument("--device", default="cpu", help="cpu | cuda (one GPU per rank, NCCL)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--modes", nargs="+", default=["lora", "full"], choices=("lora", "full"))
    ap.add_argument("--steps", type=int, default=2, help="timed optimizer steps after 1 warm-up")
    ap.add_argument("--pushes", type=int, default=2, help="timed weight syncs per mode")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from agentrl.distributed import DistContext, leave_rank
    from agentrl.llm.hf import HFEngine

    ctx = DistContext.from_env(args.device)
    batch = torch.load(args.batch, weights_only=False)
    engine = HFEngine.from_pretrained(args.folder, dtype=args.dtype, device=ctx.device,
                                      num_threads=args.threads) if ctx.is_main else None
    try:
        result = {"world_size": ctx.world_size, "backend": ctx.backend, "threads_per_rank": args.threads,
                  "device": str(ctx.device), "dtype": args.dtype, "modes": {}}
        for mode in args.modes:
            result["modes"][mode] = run_mode(mode, args, ctx, batch, engine)
        if ctx.is_main:
            Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        ctx.close(wait=True)  # no rank leaves while rank 0 still gathers
    finally:
        ctx.close()
    leave_rank(0)  # skip finalisation: a C++ destructor there aborts a finished rank now and then


if __name__ == "__main__":
    main()
