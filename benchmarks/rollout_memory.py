"""Rollout and update memory before and after issue 36, side by side in one run.

Rollout rows: one ``HFEngine.generate`` of B prompts (chat prompts of varied lengths) × N new
tokens on the packaged SmolLM2-135M-Instruct (fp32, CPU), for free, trie-constrained and
grammar rows, with the **old** path (``generate(output_logits=True)``, the (B, T, V) logits
stacked and log-softmaxed: ``_rollmem_reference``) and the **new** one (one (B, V) row per
step: ``agentrl.llm.step_logprobs``). Every variant runs in a fresh process: model loaded,
inputs built, one warm-up call, then the peak RSS of the measured call (Linux ``VmHWM``, reset
through ``/proc/self/clear_refs`` just before it) minus the RSS just before it, and minus the
KV cache of the batch (2 × layers × B × KV heads × head dim × (prompt width + T − 1) × 4 bytes,
from the config). Every row runs exactly N steps: the engine's stop id is an id outside the
vocabulary (a stop that never fires), the trie's allowed completions are longer than N, and the
grammar (a JSON array of ≥ 200 integers) cannot close within N. The stored logprobs of old and
new (same seed) are compared bit for bit in the parent. The prefix KV cache is off (its copies
of the keys/values would add the same to both).

Allocators: each variant runs under glibc's default malloc and with ``MALLOC_MMAP_THRESHOLD_``
pinned to 128 KiB (``mmap-128k``). By default glibc raises its mmap threshold up to 32 MiB
after large frees, so the decode loop's blocks (each step's (B, V) rows, the KV cache that
``DynamicCache`` regrows by concatenation every step: ~20 MB per layer here) come from the
heap, whose freed holes the next, larger blocks do not fit: the RSS then grows well above the
live tensors, most with the constrained rows' many small per-row tensors in between. The
pinned threshold returns every large block to the system on free, so its RSS follows what the
code keeps alive.

Update row: ``forward_token_stats`` + backward on a multi-turn batch of B rows (prompts of
different lengths, short completions; LoRA r16 on the top 6 layers, as the main job), the old
union-of-columns path vs the new per-row chunked head; peak RSS above the RSS before the
forward; max |Δ| of logprobs / entropy and the LoRA gradients' relative difference.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rollout_memory.py [--batch 64] [--new-tokens 128]
        [--out benchmarks/results/rollout_memory.json]   # --smoke: tiny model, tiny sizes
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import queue as queue_mod
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MB = 1 << 20
KINDS = ("free", "trie", "grammar")
#: Child-process environments: glibc's default malloc, and the mmap threshold pinned at 128 KiB.
ALLOCATORS = {"glibc-default": {}, "mmap-128k": {"MALLOC_MMAP_THRESHOLD_": "131072"}}
SCHEMA = {"type": "array", "items": {"type": "integer"}, "minItems": 200}  # cannot close within 128 tokens
WORDS = ["north", "lamp", "door", "key", "river", "stone", "table", "window", "garden", "coin"]


def _status(key: str) -> int:
    """``/proc/self/status`` field in bytes (VmRSS, VmHWM)."""
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_peak() -> int:
    """Reset the peak RSS (VmHWM) to the current RSS; return the current RSS in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status("VmRSS")


def _load(args):
    import torch

    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.hf import HFEngine

    torch.set_num_threads(args.threads)
    if args.smoke:
        from agentrl.llm.tiny import tiny_model_dir

        path = tiny_model_dir(Path(tempfile.gettempdir()) / "agentrl-test-cache")
    else:
        from agentrl.llm.models import resolve_model

        path = resolve_model("smollm2-135m-instruct")
    plain = HFEngine.from_pretrained(path, num_threads=args.threads, prefix_cache_mb=0)
    from transformers import AutoTokenizer

    renderer = ChatRenderer(AutoTokenizer.from_pretrained(path))
    never = int(plain.model.config.vocab_size)  # an id outside the vocabulary: a stop that never fires
    engine = HFEngine(plain.model, eos_token_id=never, pad_token_id=plain.pad_token_id, num_threads=args.threads,
                      prefix_cache_mb=0)
    return engine, renderer


def prompts(renderer, n: int, seed: int = 0) -> list[np.ndarray]:
    """n chat prompts of varied lengths (1–40 short sentences of a text game)."""
    from agentrl.types import Message

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(1, 41))
        text = " ".join(f"You see a {WORDS[int(a)]} near the {WORDS[int(b)]}." for a, b in rng.integers(0, 10, (k, 2)))
        out.append(np.asarray(renderer.render_ids([Message("user", text + " What do you do?")]), np.int64))
    return out


def _constraints(kind: str, engine, renderer, n: int, new_tokens: int):
    """``generate`` keywords of a variant: tries of long allowed completions, or a grammar."""
    if kind == "trie":
        long = " and then ".join(f"go to the {w}" for w in WORDS * (new_tokens // 20 + 2))
        seqs = [np.r_[renderer.encode(f"{w}: {long}"), engine.eos_token_id].astype(np.int64) for w in WORDS[:6]]
        assert min(s.size for s in seqs) > new_tokens
        return {"allowed": [seqs] * n}
    if kind == "grammar":
        from agentrl.llm.grammar import GrammarSpec, compiler_for

        g = compiler_for(renderer).compile(GrammarSpec.json_schema(SCHEMA))
        return {"grammars": [g] * n}
    return {}


def _kv_bytes(config, batch: int, width: int, steps: int) -> int:
    """Keys + values of the batch's cache after ``steps`` decoding steps, bytes (fp32)."""
    heads = getattr(config, "num_key_value_heads", config.num_attention_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * batch * heads * head_dim * (width + steps - 1) * 4


def rollout_variant(kind: str, old: bool, args, queue) -> None:
    """Measure one rollout variant in this (fresh) process; put a result dict on ``queue``."""
    from _rollmem_reference import captured_generate, old_completion_logprobs

    from agentrl.llm.base import SamplingParams

    engine, renderer = _load(args)
    rows = prompts(renderer, args.batch)
    kw = _constraints(kind, engine, renderer, args.batch, args.new_tokens)
    sampling = SamplingParams(temperature=1.0, max_tokens=args.new_tokens, seed=args.seed)
    engine.generate(rows[:1], SamplingParams(max_tokens=2, seed=0))  # warm-up: lazy imports, kernels
    before = _reset_peak()
    t0 = time.perf_counter()
    if old:
        with captured_generate(engine.model) as calls:
            comps = engine.generate(rows, sampling, **kw)
        stored = [lp for lp, _, _ in old_completion_logprobs(engine, rows, sampling, calls,
                                                             allowed=kw.get("allowed"))]
        del calls
    else:
        comps = engine.generate(rows, sampling, **kw)
        stored = [c.logprobs for c in comps]
    wall = time.perf_counter() - t0
    peak = _status("VmHWM")
    width = max(r.size for r in rows)
    kv = _kv_bytes(engine.model.config, len(rows), width, args.new_tokens)
    queue.put({"kind": kind, "path": "old" if old else "new", "peak_above_mb": round((peak - before) / MB, 1),
               "kv_cache_mb": round(kv / MB, 1), "above_model_kv_mb": round((peak - before - kv) / MB, 1),
               "rss_before_mb": round(before / MB, 1), "wall_s": round(wall, 1), "prompt_width": width,
               "prompt_tokens": [int(min(r.size for r in rows)), int(max(r.size for r in rows))],
               "completion_tokens": [int(min(c.token_ids.size for c in comps)), int(max(c.token_ids.size for c in comps))],
               "token_ids": [c.token_ids.tolist() for c in comps], "logprobs": [s.tolist() for s in stored],
               "logprobs_f32": [s.astype(np.float32).tobytes().hex() for s in stored]})


def update_batch(renderer, args, seed: int = 1):
    """A multi-turn update batch: B turns with prompts of different lengths, short completions."""
    from agentrl.update import build_batch

    rng = np.random.default_rng(seed)
    lo, hi = args.update_prompt
    ps, cs = [], []
    vocab = len(renderer.tokenizer)
    for _ in range(args.update_rows):
        ps.append(rng.integers(3, vocab, size=int(rng.integers(lo, hi + 1))).astype(np.int64))
        cs.append(rng.integers(3, vocab, size=int(rng.integers(4, 25))).astype(np.int64))
    return build_batch(ps, cs, [np.zeros(c.size) for c in cs], np.ones(len(cs)), pad_id=0)


def update_variant(old: bool, args, queue) -> None:
    """``forward_token_stats`` + backward of one update micro-batch in this process."""
    import torch
    from _rollmem_reference import old_forward_token_stats

    from agentrl.config import LoraSpec, UpdateConfig
    from agentrl.update import prepare_policy
    from agentrl.update.logprobs import forward_token_stats

    engine, renderer = _load(args)
    torch.manual_seed(0)
    layers = engine.model.config.num_hidden_layers
    model = prepare_policy(engine.model, UpdateConfig(), LoraSpec(rank=16, alpha=32.0, top_n_layers=min(6, layers)))
    model.train()
    b = update_batch(renderer, args)
    fn = old_forward_token_stats if old else forward_token_stats
    before = _reset_peak()
    t0 = time.perf_counter()
    out = fn(model, b.input_ids, b.attention_mask, with_entropy=True, entropy_grad=True, token_mask=b.loss_mask > 0)
    ((out.logprobs + 0.01 * out.entropy) * b.loss_mask).sum().backward()
    wall = time.perf_counter() - t0
    peak = _status("VmHWM")
    m = b.loss_mask > 0
    cols = int(m[:, 1:].any(0).sum())
    queue.put({"path": "old" if old else "new", "peak_above_mb": round((peak - before) / MB, 1), "wall_s": round(wall, 1),
               "rows": b.num_rows, "width": int(b.input_ids.shape[1]), "trained_tokens": int(m.sum()),
               "union_columns": cols, "logprobs": out.logprobs[m].tolist(), "entropy": out.entropy[m].tolist(),
               "grads": {n: p.grad.flatten().tolist() for n, p in model.named_parameters() if p.grad is not None}})


def _spawn(env: dict, target, *a) -> dict:
    """Run ``target(*a, queue)`` in a fresh spawned process with ``env`` added to its environment."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*a, queue))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # glibc reads MALLOC_* at start-up: the child inherits it
    try:
        proc.start()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    try:
        while True:
            try:
                return queue.get(timeout=5)
            except queue_mod.Empty:
                if not proc.is_alive():
                    raise RuntimeError(f"{target.__name__}{a[:2]} exited with code {proc.exitcode} (see its traceback above)")
    finally:
        proc.join()


def _ratio(old: float, new: float) -> float:
    return round(old / max(new, 1e-3), 2)


def _rollout_rows(args, env: dict) -> dict:
    rows = {}
    for kind in KINDS:
        old, new = _spawn(env, rollout_variant, kind, True, args), _spawn(env, rollout_variant, kind, False, args)
        same_tokens = old.pop("token_ids") == new.pop("token_ids")
        bits = old.pop("logprobs_f32") == new.pop("logprobs_f32")
        lo, ln = old.pop("logprobs"), new.pop("logprobs")
        gap = max((float(np.max(np.abs(np.subtract(a, b)))) for a, b in zip(lo, ln) if len(a) == len(b) and a),
                  default=0.0)
        rows[kind] = {"old": old, "new": new, "same_tokens": same_tokens, "logprobs_bit_identical": bits,
                      "max_abs_logprob_diff": gap,
                      "ratio_above_model_kv_old_over_new": _ratio(old["above_model_kv_mb"], new["above_model_kv_mb"]),
                      "ratio_peak_above_old_over_new": _ratio(old["peak_above_mb"], new["peak_above_mb"])}
        print(kind, {k: v for k, v in rows[kind].items() if k not in ("old", "new")},
              old["above_model_kv_mb"], new["above_model_kv_mb"], flush=True)
    return rows


def _update_row(args, env: dict) -> dict:
    old, new = _spawn(env, update_variant, True, args), _spawn(env, update_variant, False, args)
    diff = lambda k: float(np.max(np.abs(np.subtract(old.pop(k), new.pop(k)))))  # noqa: E731
    lp, ent = diff("logprobs"), diff("entropy")
    go, gn = old.pop("grads"), new.pop("grads")
    grad = max(float(np.max(np.abs(np.subtract(go[n], gn[n])))) / (float(np.max(np.abs(go[n]))) or 1.0) for n in go)
    return {"old": old, "new": new, "max_abs_logprob_diff": lp, "max_abs_entropy_diff": ent, "max_rel_grad_diff": grad,
            "ratio_peak_above_old_over_new": _ratio(old["peak_above_mb"], new["peak_above_mb"])}


def conditions(args) -> dict:
    import torch
    import transformers

    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "host": platform.node(),
            "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "load_avg_start": os.getloadavg()[0], "threads": args.threads, "dtype": "float32", "device": "cpu",
            "python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "model": "tiny random Qwen3 (vocab 2048)" if args.smoke else "SmolLM2-135M-Instruct (vocab 49152)"}


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--update-rows", type=int, default=8)
    ap.add_argument("--update-prompt", type=int, nargs=2, default=(200, 1000), help="min max prompt tokens")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--allocators", default=",".join(ALLOCATORS), help=f"comma-separated, from {list(ALLOCATORS)}")
    ap.add_argument("--smoke", action="store_true", help="tiny model, tiny sizes, mmap-128k only (the test)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.smoke:
        args.batch, args.new_tokens, args.update_rows, args.update_prompt = 4, 8, 3, (20, 60)
        args.allocators = "mmap-128k"
    args.allocators = args.allocators.split(",")
    if set(args.allocators) - set(ALLOCATORS):
        ap.error(f"unknown allocators {sorted(set(args.allocators) - set(ALLOCATORS))}; choose from {list(ALLOCATORS)}")
    if args.out is None:
        args.out = str(Path(tempfile.gettempdir()) / "rollout_memory-smoke.json") if args.smoke \
            else str(HERE / "results" / "rollout_memory.json")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    sys.path.insert(0, str(HERE))
    t0 = time.perf_counter()
    result = {"benchmark": "rollout_memory", "run": "smoke" if args.smoke else "default",
              "command": " ".join(["benchmarks/rollout_memory.py", *(argv if argv is not None else sys.argv[1:])]),
              "conditions": conditions(args),
              "workload": {"batch": args.batch, "new_tokens": args.new_tokens, "sampling": "T=1, seeded",
                           "prefix_cache": "off", "update_rows": args.update_rows,
                           "update_prompt_tokens": list(args.update_prompt), "update_completion_tokens": [4, 24],
                           "update_model": "LoRA r16 alpha 32 on the top 6 layers, entropy in the loss"},
              "allocators": {a: ALLOCATORS[a] for a in args.allocators}, "rollout": {}, "update": {}}
    for alloc in args.allocators:
        print("allocator", alloc, flush=True)
        result["rollout"][alloc] = _rollout_rows(args, ALLOCATORS[alloc])
        result["update"][alloc] = _update_row(args, ALLOCATORS[alloc])
    result["conditions"].update(load_avg_end=os.getloadavg()[0], total_s=round(time.perf_counter() - t0, 1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    drop = ("old", "new")
    print(json.dumps({a: {k: {kk: vv for kk, vv in v.items() if kk not in drop} for k, v in rows.items()}
                      for a, rows in result["rollout"].items()}, indent=1))
    print(json.dumps({a: {k: v for k, v in u.items() if k not in drop} for a, u in result["update"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
