"""GPU check for a lent accelerator machine (torch + CUDA, transformers, peft; no vLLM, no
network, no model files). Builds random-weight models in memory and measures agentrl's own
code paths, printing one JSON object (also written to ``--out``); exit 0 when every check holds.

Sections of the JSON (each also records its wall-clock ``seconds``, or ``error`` when it
raised; a failed section does not stop the others; a ``skipped`` one does not count):

1. ``device_paths`` — ``policy.device`` end to end on the tiny model (written to a temp
   folder): ``load_policy`` placement and dtype, generate / hidden states / constrained
   decoding / score return CPU numpy, ``batch_logprobs``, ``update``, LoRA
   ``reference_logprobs``, ``sft_update``, the turn critic on the policy's device, and
   ``resolve_device`` rejecting ``cuda:<device count>``.
2. ``rollout`` — ``HFEngine.generate`` tokens/s at each batch size (``--model``, bf16),
   sampled logprobs vs ``score``, seeded repeatability with a cold prefix KV cache (both
   calls start from ``reset_prefix_cache``), peak memory; ``warm_cache_*`` (informational)
   how far the same seeded call moves with the prefix cache warm.
3. ``rollout_peak`` — peak memory of a rollout at the main job's shape (128 prompts × 4096
   tokens, 256 new, per-row seeds, one ``generate``): ``torch.cuda.max_memory_allocated`` vs
   the model's bytes and the KV cache computed from the config, ``above_model_kv_gib`` = peak −
   model − KV (GiB), tokens/s; once with the engine's default prefix cache, once without
   (``nocache_*``).
4. ``update_lora`` / ``update_full`` — the FSDP2 code path with 1 rank (``agentrl.distributed``:
   ``DistContext.from_env(init_single=True)``, ``parallelize``, ``update(..., dp=ctx)``):
   seconds per optimizer step, sequence and trained tokens/s, peak memory
   (``torch.cuda.max_memory_allocated``, GiB), weights and logprobs moved; then the weight
   push to a second ``HFEngine`` copy (gather the full state dict, ``update_weights``) and
   the engine's logprobs vs the trainer's.
5. ``dp2`` — 2 ranks under ``torch.distributed.run`` (``scripts/gpu_check_dp2.py``): FSDP2,
   2 full fine-tuning steps with ``update(..., dp=ctx)``, each rank streaming the trained
   weights into its own engine copy (``iter_inference_weights``), the probe's engine vs trainer
   logprobs per rank; seconds per step, sync seconds, probe gaps (nats). Runs with NCCL when
   torch sees ≥ 2 GPUs, else ``{"skipped": "1 GPU"}``; ``--dp2 cpu`` forces 2 gloo ranks.

``--model qwen1.5b`` (default) is Qwen2.5-1.5B's published config (hidden 1536, 28 layers,
12 heads / 2 KV heads, intermediate 8960, vocab 151,936, rope θ 1e6, tied embeddings);
``smollm2`` the SmolLM2-135M shape; ``tiny`` a 2-layer Qwen2 for the CPU smoke run
(``--device cpu --model tiny``, < 1 min, tested by tests/device/test_gpu_check_smoke.py, with
``rollout_peak`` at 4 prompts × 32 tokens + 8 new).
Budget on an H200 with the default model: ≤ 8 min in all (estimate: device_paths ~15 s,
rollout ~20 s, rollout_peak 2 × ~30 s, each update section ~20 s, dp2 skipped on 1 GPU;
its launch is bounded at ``gpu_check_scale.DP2_TIMEOUT_S`` = 300 s).

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

SECTIONS = ("device_paths", "rollout", "rollout_peak", "update_lora", "update_full", "dp2")


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


def _sizes(args: argparse.Namespace):
    """The preset of ``--model`` with the command line's size overrides."""
    import gpu_check_parts as parts

    over = {"gen_batches": tuple(args.gen_batches) if args.gen_batches else None, "new_tokens": args.new_tokens,
            "steps": args.steps, "peak_batch": args.peak_batch, "peak_prompt": args.peak_prompt,
            "peak_new": args.peak_new_tokens}
    return dataclasses.replace(parts.PRESETS[args.model], **{k: v for k, v in over.items() if v is not None})


def run(args: argparse.Namespace) -> dict:
    """All sections in order; returns the report (``report["ok"]``: every section that ran is ok)."""
    import torch

    import gpu_check_parts as parts
    import gpu_check_scale as scale
    from agentrl.llm.device import resolve_device

    device = resolve_device(args.device)
    dtype = getattr(torch, args.dtype)
    sizes = _sizes(args)
    report: dict = {"model": args.model, "dtype": args.dtype, "sizes": dataclasses.asdict(sizes),
                    "environment": _environment(device)}
    only = set(args.only or SECTIONS)
    if "device_paths" in only:
        _section(report, "device_paths", parts.device_paths, args.device, args.dtype)
    if only & {"rollout", "rollout_peak", "update_lora", "update_full"}:
        t0 = time.perf_counter()
        model = parts.build_model(args.model, device, dtype)
        report["model_params_m"] = sum(p.numel() for p in model.parameters()) / 1e6
        report["model_build_seconds"] = time.perf_counter() - t0
        if "rollout" in only:
            _section(report, "rollout", parts.rollout, model, sizes, device)
        if "rollout_peak" in only:
            _section(report, "rollout_peak", scale.rollout_peak, model, sizes, device)
        if only & {"update_lora", "update_full"}:
            _updates(report, model, args, sizes, device, dtype, only)
        del model
        parts.free_memory(device)
    if "dp2" in only:
        mode, why = _dp2_mode(args.dp2, device)
        if mode is not None:
            _section(report, "dp2", scale.dp2, mode, args.model, sizes, args.dtype)
        else:
            report["dp2"] = {"skipped": why}
    return _finish(report)


def _dp2_mode(choice: str, device) -> tuple[str | None, str]:
    """(``cuda`` | ``cpu``, "") to run the 2-rank section that way, or (None, why it is skipped)."""
    import torch

    if choice in ("cuda", "cpu"):
        return choice, ""
    if choice == "off":
        return None, "--dp2 off"
    if device.type != "cuda":
        return None, "no CUDA device (--dp2 cpu runs 2 gloo ranks)"
    n = torch.cuda.device_count()
    return ("cuda", "") if n >= 2 else (None, f"{n} GPU")


def _updates(report: dict, model, args, sizes, device, dtype, only: set) -> None:
    """The ``update_lora`` / ``update_full`` sections through a 1-rank process group, each
    pushing its trained weights to an engine over ``model`` (the second copy)."""
    import gpu_check_parts as parts
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
        return
    report["dist"] = {"backend": ctx.backend, "world_size": ctx.world_size, "device": str(ctx.device)}
    try:
        for name, lora in (("update_lora", True), ("update_full", False)):
            if name in only:
                _section(report, name, parts.fsdp_update, args.model, lora, ctx, sizes, device, dtype, push_to=target)
    finally:
        ctx.close()


def _finish(report: dict) -> dict:
    """``report["ok"]``: every section that ran is ok (a skipped one does not count)."""
    report["ok"] = all(report[s].get("ok", False) for s in SECTIONS if s in report and "skipped" not in report[s])
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
    ap.add_argument("--peak-batch", type=int, default=None, help="rollout_peak: prompts in the call (default 128; "
                    "tiny: 4)")
    ap.add_argument("--peak-prompt", type=int, default=None, help="rollout_peak: tokens per prompt (default 4096; "
                    "smollm2: 1536; tiny: 32)")
    ap.add_argument("--peak-new-tokens", type=int, default=None, help="rollout_peak: tokens sampled per prompt "
                    "(default 256; tiny: 8)")
    ap.add_argument("--dp2", default="auto", choices=("auto", "cuda", "cpu", "off"), help="the 2-rank section: auto "
                    "runs it with NCCL when torch sees >= 2 GPUs (else it is skipped); cpu forces 2 gloo ranks")
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
