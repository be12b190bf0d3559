"""GPU check for a lent accelerator machine (torch + CUDA, transformers, peft; no vLLM, no
network, no model files). Builds random-weight models in memory and measures agentrl's own
code paths, printing one JSON object (also written to ``--out``); exit 0 when every check holds.

Sections of the JSON (each also records its wall-clock ``seconds``, or ``error`` when it
raised; a failed section does not stop the others):

1. ``device_paths`` — ``policy.device`` end to end on the tiny model (written to a temp
   folder): ``load_policy`` placement and dtype, generate / hidden states / constrained
   decoding / score return CPU numpy, ``batch_logprobs``, ``update``, LoRA
   ``reference_logprobs``, ``sft_update``, the turn critic on the policy's device, and
   ``resolve_device`` rejecting ``cuda:<device count>``.
2. ``rollout`` — ``HFEngine.generate`` tokens/s at each batch size (``--model``, bf16),
   sampled logprobs vs ``score``, seeded repeatability, peak memory.
3. ``update_lora`` / ``update_full`` — the FSDP2 code path with 1 rank (``agentrl.distributed``:
   ``DistContext.from_env(init_single=True)``, ``parallelize``, ``update(..., dp=ctx)``):
   seconds per optimizer step, sequence and trained tokens/s, peak memory
   (``torch.cuda.max_memory_allocated``, GiB), weights and logprobs moved; then the weight
   push to a second ``HFEngine`` copy (gather the full state dict, ``update_weights``) and
   the engine's logprobs vs the trainer's.

``--model qwen1.5b`` (default) is Qwen2.5-1.5B's published config (hidden 1536, 28 layers,
12 heads / 2 KV heads, intermediate 8960, vocab 151,936, rope θ 1e6, tied embeddings);
``smollm2`` the SmolLM2-135M shape; ``tiny`` a 2-layer Qwen2 for the CPU smoke run
(``--device cpu --model tiny``, < 1 min, tested by tests/device/test_gpu_check_smoke.py).
Budget on an H200 with the default model: a few minutes (≤ 8).

Usage: ``python scripts/gpu_check.py [--model qwen1.5b] [--device cuda] [--out gpu_check.json]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # agentrl from the checkout, no install needed
sys.path.insert(0, str(ROOT / "scripts"))

SECTIONS = ("device_paths", "rollout", "update_lora", "update_full")


def _section(report: dict, name: str, fn, *args, **kw) -> dict | None:
    """Run one section into ``report[name]``; an exception becomes ``{"ok": False, "error"}``."""
    t0 = time.perf_counter()
    try:
        out = fn(*args, **kw)
    except Exception as exc:  # noqa: BLE001 - a check reports every failure, then goes on
        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc(limit=6).splitlines()[-6:]}
    out["seconds"] = time.perf_counter() - t0
    report[name] = out
    return out


def _environment(device) -> dict:
    import torch
    import transformers

    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
           "device": str(device)}
    try:
        import peft

        env["peft"] = peft.__version__
    except ImportError:
        env["peft"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, gpu_mem_gib=props.total_memory / 2**30, gpu_count=torch.cuda.device_count())
    return env


def run(args: argparse.Namespace) -> dict:
    """All sections in order; returns the report (``report["ok"]``: every section ok)."""
    import torch

    import gpu_check_parts as parts
    from agentrl.llm.device import resolve_device

    device = resolve_device(args.device)
    dtype = getattr(torch, args.dtype)
    sizes = dataclasses.replace(parts.PRESETS[args.model], **{k: v for k, v in (
        ("gen_batches", tuple(args.gen_batches) if args.gen_batches else None), ("new_tokens", args.new_tokens),
        ("steps", args.steps)) if v is not None})
    report: dict = {"model": args.model, "dtype": args.dtype, "sizes": dataclasses.asdict(sizes),
                    "environment": _environment(device)}
    only = set(args.only or SECTIONS)
    if "device_paths" in only:
        _section(report, "device_paths", parts.device_paths, args.device, args.dtype)

    t0 = time.perf_counter()
    model = parts.build_model(args.model, device, dtype)
    report["model_params_m"] = sum(p.numel() for p in model.parameters()) / 1e6
    report["model_build_seconds"] = time.perf_counter() - t0
    if "rollout" in only:
        _section(report, "rollout", parts.rollout, model, sizes, device)
    if not only & {"update_lora", "update_full"}:
        return _finish(report)

    # the second engine copy the trainer pushes to: the rollout model, re-wrapped
    from agentrl.llm.hf import HFEngine

    ids = parts.model_ids(model)
    target = HFEngine(model, eos_token_id=ids["eos"], pad_token_id=ids["pad"], num_threads=None)
    try:
        from agentrl.distributed import DistContext

        ctx = DistContext.from_env(device=str(device), init_single=True)
    except Exception as exc:  # noqa: BLE001 - reported, the update sections then fail with it
        report["dist"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        for name in ("update_lora", "update_full"):
            if name in only:
                report[name] = {"ok": False, "error": "no 1-rank process group: see dist.error"}
        return _finish(report)
    report["dist"] = {"backend": ctx.backend, "world_size": ctx.world_size, "device": str(ctx.device)}
    try:
        for name, lora in (("update_lora", True), ("update_full", False)):
            if name in only:
                _section(report, name, parts.fsdp_update, args.model, lora, ctx, sizes, device, dtype, push_to=target)
    finally:
        ctx.close()
    return _finish(report)


def _finish(report: dict) -> dict:
    report["ok"] = all(report[s].get("ok", False) for s in SECTIONS if s in report)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen1.5b", choices=("qwen1.5b", "smollm2", "tiny"),
                    help="random-weight model shape (tiny: the CPU smoke run)")
    ap.add_argument("--device", default="cuda", help="a policy.device form: cuda, cuda:N, cpu (smoke), auto")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32", "float16"))
    ap.add_argument("--gen-batches", type=int, nargs="+", default=None, help="prompts per generate call, one "
                    "measurement each (default 16 64; tiny: 2 4)")
    ap.add_argument("--new-tokens", type=int, default=None, help="tokens sampled per prompt (default 128)")
    ap.add_argument("--steps", type=int, default=None, help="timed optimizer steps after one warm-up (default 3)")
    ap.add_argument("--only", nargs="+", choices=SECTIONS, default=None, help="run only these sections")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)

    import torch

    if args.device != "cpu" and not torch.cuda.is_available() and args.device != "auto":
        report = {"ok": False, "error": f"--device {args.device} but torch sees no CUDA device "
                  f"(torch {torch.__version__}, CUDA build {torch.version.cuda}); on a CPU machine run the smoke "
                  "mode: python scripts/gpu_check.py --device cpu --model tiny"}
        print(json.dumps(report, indent=1))
        return 2
    t0 = time.perf_counter()
    report = run(args)
    report["total_seconds"] = time.perf_counter() - t0
    text = json.dumps(report, indent=1, default=str)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
