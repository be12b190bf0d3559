"""Data-parallel scaling: 1 vs 2 ranks update step time and weight-push time vs model size.

For each model size (random weights from a config written in code, no downloads):

1. **Update step** — the same global minibatch (synthetic multi-turn rows: episodes whose
   next prompt is the previous prompt + completion + an observation) through
   ``agentrl.update.step.update(..., dp=ctx)``, LoRA (r16 on q/k/v/o of the top 6 layers, as
   the examples) and full fine-tuning, under ``torchrun --standalone --nproc-per-node N
   benchmarks/_scale_worker.py``: on CPU 1 rank × 1 thread, 1 rank × 2 threads, 2 gloo ranks
   × 1 thread (FSDP2) — on a 2-core machine 2 ranks can only beat 1 rank × 1 thread; 1 rank ×
   2 threads is the other fair baseline. Warm-up step excluded, median of the timed steps.
2. **Weight push** — (a) the data-parallel sync of the same runs: ``agentrl.distributed.
   inference_state`` (gather to rank 0, LoRA merged) + ``HFEngine.update_weights`` on a second
   engine copy, 1 vs 2 ranks; (b) the rollout engine-worker push:
   ``open_engine_workers("local", 1 or 2, ...).push_weights`` (``rollout.weight_transport:
   auto``: shared memory for these local workers — issue 52; the broadcast group from issue 37
   until then), with the worker start time.

Ratios come from one run, side by side; absolute seconds depend on the machine and its load
(recorded: load average before/after each run, threads, torch version, date).

Usage: ``python benchmarks/scale.py [--quick | --smoke] [--models tiny,smollm2-135m]
[--device cpu|cuda] [--out benchmarks/results/scale.json]``. Default (CPU): tiny,
SmolLM2-135M and SmolLM2-360M shapes in fp32 (~10 min on 2 cores); ``--quick``: tiny + 135M
(~3 min); ``--smoke``: tiny, 1 step, 1 push (the test). ``--device cuda``: bf16, NCCL, 2 ranks
when 2 GPUs are visible (1-rank figures only on one GPU), the Qwen2.5-1.5B shape added.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
WORKER = Path(__file__).with_name("_scale_worker.py")

_SMOL = dict(vocab_size=49152, head_dim=64, max_position_embeddings=2048, rope_theta=100000.0,
             tie_word_embeddings=True, rms_norm_eps=1e-5)
#: name → (config class, published shape, default timed steps, default data-parallel pushes, default modes)
_BOTH = ("lora", "full")
SHAPES = {
    "tiny": ("tiny", {}, 5, 3, _BOTH),  # agentrl.llm.tiny: Qwen3, hidden 64, 2 layers, vocab 2048 (the unit tier)
    "smollm2-135m": ("LlamaConfig", dict(_SMOL, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                         num_attention_heads=9, num_key_value_heads=3), 2, 2, _BOTH),
    "smollm2-360m": ("LlamaConfig", dict(_SMOL, hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                                         num_attention_heads=15, num_key_value_heads=5), 1, 2, ("lora",)),  # CPU time budget
    "qwen2.5-1.5b": ("Qwen2Config", dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                                         max_position_embeddings=32768, rope_theta=1e6, rms_norm_eps=1e-6,
                                         tie_word_embeddings=True), 3, 2, _BOTH),
}
DEFAULT_MODELS = {"cpu": "tiny,smollm2-135m,smollm2-360m", "cuda": "tiny,smollm2-135m,smollm2-360m,qwen2.5-1.5b"}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def write_folder(name: str, tmp: Path) -> Path:
    """A model folder for ``name``: the tiny unit-tier folder itself, or its tokenizer + a
    random-weight model of the published shape (fp32 safetensors; seed 0)."""
    import shutil

    import torch
    import transformers

    from agentrl.llm.tiny import tiny_model_dir

    tiny = Path(tiny_model_dir(tmp / "tiny"))
    if name == "tiny":
        return tiny
    cls, spec = SHAPES[name][:2]
    out = tmp / name
    out.mkdir()
    for f in tiny.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(f, out / f.name)
    cfg = getattr(transformers, cls)(**spec, bos_token_id=None, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(out)
    return out


def workload(args, vocab: int):
    """The global minibatch: ``episodes`` × ``turns`` rows, prompt of turn t+1 = prompt + completion
    + ``observation`` new ids (append-only, as multi-turn agents), advantages ±1."""
    import numpy as np

    from agentrl.update import build_batch

    rng = np.random.default_rng(0)
    prompts, comps = [], []
    for _ in range(args.episodes):
        prompt = rng.integers(3, vocab - 8, size=args.first_prompt)
        for _ in range(args.turns):
            comp = rng.integers(3, vocab - 8, size=args.completion)
            prompts.append(prompt)
            comps.append(comp)
            prompt = np.concatenate([prompt, comp, rng.integers(3, vocab - 8, size=args.observation)])
    adv = np.where(np.arange(len(prompts)) % 2 == 0, 1.0, -1.0)
    return build_batch(prompts, comps, [np.zeros(c.size, np.float32) for c in comps], adv, pad_id=0)


def prepare(name: str, args, tmp: Path) -> tuple[Path, Path, dict]:
    """Write the folder and the batch (old logprobs = the initial model's, so PPO ratios start
    at 1); returns (folder, batch file, model facts)."""
    import torch
    from transformers import AutoModelForCausalLM

    from agentrl.update import batch_logprobs

    t0 = time.perf_counter()
    folder = write_folder(name, tmp)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    batch = workload(args, model.config.vocab_size)
    if args.device == "cpu":  # on a GPU the old logprobs only set the ratio; skip the CPU forward of a 1.5B
        batch = batch.with_(old_logprobs=batch_logprobs(model, batch, micro_batch=args.micro_batch) * batch.loss_mask)
    path = tmp / f"{name}-batch.pt"
    torch.save(batch, path)
    facts = {"params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
             "rows": batch.num_rows, "seq_len": int(batch.input_ids.shape[1]),
             "tokens": int(batch.attention_mask.sum()), "trained_tokens": int(batch.num_tokens),
             "prepare_s": round(time.perf_counter() - t0, 1)}
    del model
    return folder, path, facts


def torchrun(nproc: int, threads: int, folder: Path, batch: Path, plan: dict, args, tmp: Path) -> dict:
    """One ``_scale_worker.py`` run under torchrun (``plan``: steps, pushes, modes); its JSON
    plus wall time and load."""
    out = tmp / f"r-{folder.name}-{nproc}x{threads}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), str(WORKER),
           "--folder", str(folder), "--batch", str(batch), "--threads", str(threads), "--device", args.device,
           "--dtype", args.dtype, "--steps", str(plan["steps"]), "--pushes", str(plan["dp_pushes"]),
           "--micro-batch", str(args.micro_batch), "--out", str(out), "--modes", *plan["modes"]]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    load0, t0 = _load(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun {nproc}x{threads} on {folder.name} failed (rc {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    result = json.loads(out.read_text())
    result.update(wall_s=round(time.perf_counter() - t0, 1), load_before=load0, load_after=_load())
    return result


def engine_push(folder: Path, n: int, pushes: int, args) -> dict:
    """Start ``n`` local engine workers on ``folder``'s weights, push them ``pushes`` times
    (versions 1..pushes); seconds per push, MB (tied weights once), MB/s, start seconds, and
    whether every worker then reports the last version."""
    import torch

    from agentrl.llm.hf import HFEngine
    from agentrl.rollout.engines.interface import EngineSpec
    from agentrl.rollout.engines.factory import open_engine_workers

    state = dict(HFEngine.from_pretrained(folder, dtype=args.dtype, device=args.device).model.state_dict())
    mb = sum({(t.data_ptr(), t.dtype): t.numel() * t.element_size() for t in state.values()}.values()) / 1e6
    spec = EngineSpec(model=str(folder), dtype=args.dtype, device=args.device, num_threads=1)
    load0, t0 = _load(), time.perf_counter()
    workers = open_engine_workers("local", n, spec, state, 0)
    start = time.perf_counter() - t0
    try:
        times = []
        for v in range(1, pushes + 1):
            if args.device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            workers.push_weights(state, v)
            times.append(time.perf_counter() - t0)
        versions = [s.policy_version for s in workers.score([5, 6, 7], [8, 9])]
    finally:
        workers.close()
    med = statistics.median(times)
    return {"workers": n, "start_s": round(start, 2), "push_s": times, "push_s_median": med, "state_mb": round(mb, 1),
            "mb_per_s": round(mb / med, 1), "versions_after": versions, "versions_ok": versions == [pushes] * n,
            "load_before": load0, "load_after": _load()}


def rank_configs(args) -> list[tuple[int, int]]:
    """(ranks, threads per rank) to compare (``--ranks``, else: on CPU 1×1, 1×2, 2×1; on CUDA
    1 and, with ≥ 2 visible GPUs, 2 ranks — threads do not matter there)."""
    if args.ranks:
        return [tuple(int(x) for x in r.split("x")) for r in args.ranks]
    if args.device == "cpu":
        return [(1, 1), (1, 2), (2, 1)]
    import torch

    return [(1, 1), (2, 1)] if torch.cuda.device_count() >= 2 else [(1, 1)]


def measure_model(name: str, args, tmp: Path) -> dict:
    """Every rank configuration and both engine-worker counts for one model size."""
    import shutil

    folder, batch, facts = prepare(name, args, tmp)
    plan = {"steps": args.steps if args.steps is not None else SHAPES[name][2],
            "dp_pushes": args.pushes if args.pushes is not None else SHAPES[name][3],
            "modes": list(args.modes or SHAPES[name][4])}
    entry: dict = {**facts, **plan, "updates": {}, "engine_push": {}}
    for nproc, threads in rank_configs(args):
        key = f"{nproc}x{threads}"
        print(f"[scale] {name} {key} ...", flush=True)
        entry["updates"][key] = torchrun(nproc, threads, folder, batch, plan, args, tmp)
    for n in args.workers:
        print(f"[scale] {name} engine workers {n} ...", flush=True)
        entry["engine_push"][str(n)] = engine_push(folder, n, args.engine_pushes, args)
    if name != "tiny":
        shutil.rmtree(folder, ignore_errors=True)
    return entry


def _ratio(a, b) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def ratios(entry: dict) -> dict:
    """2-rank over 1-rank step and sync-push medians (vs 1×1 and vs 1×2), 2 over 1 engine workers."""
    ups, out = entry["updates"], {}
    two = ups.get("2x1")
    for mode in next(iter(ups.values()))["modes"]:
        r = {}
        for base in ("1x1", "1x2"):
            if two and base in ups:
                b, t = ups[base]["modes"][mode], two["modes"][mode]
                r[f"step_2x1_over_{base}"] = _ratio(t["step_s_median"], b["step_s_median"])
                r[f"sync_push_2x1_over_{base}"] = _ratio(t["push_s_median"], b["push_s_median"])
        if "1x2" in ups:
            r["step_1x2_over_1x1"] = _ratio(ups["1x2"]["modes"][mode]["step_s_median"],
                                            ups["1x1"]["modes"][mode]["step_s_median"])
        out[mode] = r
    eng = entry["engine_push"]
    if "1" in eng and "2" in eng:
        out["engine_push_2_over_1"] = _ratio(eng["2"]["push_s_median"], eng["1"]["push_s_median"])
        out["engine_start_2_over_1"] = _ratio(eng["2"]["start_s"], eng["1"]["start_s"])
    return out


def table(result: dict) -> str:
    """Markdown rows: size, mode, 1×1 / 1×2 / 2×1 step s, ratios, sync-push s, engine push."""
    lines = ["| model | params M | mode | 1r×1t step s | 1r×2t step s | 2r×1t step s | 2r/1r×1t | 2r/1r×2t "
             "| sync push s 1r / 2r | engine push s 1w / 2w (MB, MB/s 1w) |", "|" + "---|" * 10]
    for name, e in result["models"].items():
        ups, eng, rat = e["updates"], e["engine_push"], result["ratios"][name]
        for mode in next(iter(ups.values()))["modes"]:
            s = {k: ups[k]["modes"][mode] for k in ups}
            cell = lambda k, f: f"{s[k][f]:.3g}" if k in s else "–"  # noqa: E731
            e1, e2 = eng.get("1"), eng.get("2")
            push = (f"{e1['push_s_median']:.3g} / {e2['push_s_median']:.3g} ({e1['state_mb']:.0f}, {e1['mb_per_s']:.0f})"
                    if e1 and e2 else "–")
            lines.append(f"| {name} | {e['params_m']} | {mode} | {cell('1x1', 'step_s_median')} | "
                         f"{cell('1x2', 'step_s_median')} | {cell('2x1', 'step_s_median')} | "
                         f"{rat[mode].get('step_2x1_over_1x1')} | {rat[mode].get('step_2x1_over_1x2')} | "
                         f"{cell('1x1', 'push_s_median')} / {cell('2x1', 'push_s_median')} | {push} |")
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny + smollm2-135m only (~3 min on 2 CPU cores)")
    ap.add_argument("--smoke", action="store_true", help="tiny only, 1 step, 1 push, runs 1x1 and 2x1, 1 engine "
                    "worker (the test; < 1 min on an idle machine)")
    ap.add_argument("--models", default=None, help=f"comma-separated, of {','.join(SHAPES)}")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default=None, help="float32 (CPU default) | bfloat16 (CUDA default)")
    ap.add_argument("--modes", nargs="+", default=None, choices=("lora", "full"),
                    help="default: both, LoRA only for smollm2-360m on CPU (time budget)")
    ap.add_argument("--ranks", nargs="+", default=None, help="RANKSxTHREADS runs, e.g. 1x1 2x1 (default per device)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per run (default per model, after 1 warm-up)")
    ap.add_argument("--pushes", type=int, default=None, help="data-parallel syncs per run (default per model)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="engine-worker counts")
    ap.add_argument("--engine-pushes", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=None, help="episodes in the minibatch (CPU 4, CUDA 8)")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--first-prompt", type=int, default=None, help="first prompt tokens (CPU 64, CUDA 200)")
    ap.add_argument("--completion", type=int, default=None, help="completion tokens per turn (CPU 24, CUDA 48)")
    ap.add_argument("--observation", type=int, default=None, help="observation tokens per turn (CPU 16, CUDA 32)")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--run-timeout", type=float, default=900.0, help="seconds per torchrun")
    ap.add_argument("--out", default=None, help="default benchmarks/results/scale.json (--smoke: a temp file)")
    args = ap.parse_args(argv)
    gpu = args.device == "cuda"
    for k, cpu, cuda in (("episodes", 4, 8), ("first_prompt", 64, 200), ("completion", 24, 48),
                         ("observation", 16, 32)):
        if getattr(args, k) is None:
            setattr(args, k, cuda if gpu else cpu)
    args.dtype = args.dtype or ("bfloat16" if gpu else "float32")
    if args.smoke:
        args.models, args.steps, args.pushes, args.engine_pushes = args.models or "tiny", 1, 1, 1
        args.ranks, args.workers = args.ranks or ["1x1", "2x1"], [1]
    args.models = (args.models or ("tiny,smollm2-135m" if args.quick else DEFAULT_MODELS[args.device])).split(",")
    unknown = [m for m in args.models if m not in SHAPES]
    if unknown:
        ap.error(f"unknown models {unknown}; choose from {list(SHAPES)}")
    if args.out is None:
        args.out = (str(Path(tempfile.gettempdir()) / "scale-smoke.json") if args.smoke
                    else str(Path(__file__).parent / "results" / "scale.json"))
    return args


def conditions(args) -> dict:
    import torch
    import transformers

    c = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "cpus": os.cpu_count(),
         "load_avg_start": _load(), "python": platform.python_version(), "torch": torch.__version__,
         "transformers": transformers.__version__, "device": args.device, "dtype": args.dtype,
         "threads": "per run: ranks x threads per rank in each key (1x1, 1x2, 2x1); engine workers 1 thread each",
         "backend": "gloo" if args.device == "cpu" else "nccl"}
    if args.device == "cuda":
        c.update(gpu=torch.cuda.get_device_name(0), gpus=torch.cuda.device_count(), cuda=torch.version.cuda)
    return c


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": f"--device cuda but torch sees no CUDA device (torch "
                          f"{torch.__version__}, CUDA build {torch.version.cuda}); run on CPU: "
                          "python benchmarks/scale.py [--quick]"}))
        return 2
    torch.set_num_threads(2 if args.device == "cpu" else 1)  # the parent only builds models and batches
    mode = "smoke" if args.smoke else "quick" if args.quick else "custom" if argv and "--models" in argv else "default"
    result = {"benchmark": "scale", "run": mode, "command": " ".join(["benchmarks/scale.py", *(argv or sys.argv[1:])]),
              "conditions": conditions(args), "workload": {k: getattr(args, k) for k in (
                  "episodes", "turns", "first_prompt", "completion", "observation", "micro_batch")},
              "lora": "r16 alpha 32 on q/k/v/o of the top 6 layers (tiny: its 2)", "models": {}}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentrl-scale-") as tmp:
        for name in args.models:
            result["models"][name] = measure_model(name, args, Path(tmp))
    result["ratios"] = {name: ratios(e) for name, e in result["models"].items()}
    result["conditions"].update(load_avg_end=_load(), total_s=round(time.perf_counter() - t0, 1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(json.dumps(result["ratios"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
