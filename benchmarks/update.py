"""Policy update speed and memory: packed vs unpacked turns on the tiny model.

Writes ``benchmarks/results/update.json``. Usage:
``python benchmarks/update.py [--episodes 8] [--turns 4] [--repeats 5] [--micro-batch 4]``.

Workload: ``episodes`` append-only episodes of ``turns`` turns (first prompt 120 tokens,
each next prompt adds the previous completion + a 40-token observation, completions of
16-32 tokens), on the MODELS.md unit-tier model (Qwen3 config, vocab 2,048, hidden 64,
2 layers, fp32, one thread). Each configuration runs in a fresh process, so its peak RSS
(``ru_maxrss``) is its own; ``rss_delta_mb`` subtracts the RSS measured after building the
model and the batch, before any forward pass (the forward/backward/AdamW peak). Throughput
counts trained (loss-mask) tokens.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import resource
import statistics
import time
from pathlib import Path

import numpy as np


def _workload(episodes: int, turns: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    prompts, comps = [], []
    for _ in range(episodes):
        prompt = rng.integers(5, 2048, size=120).astype(np.int32)
        for _ in range(turns):
            comp = rng.integers(5, 2048, size=int(rng.integers(16, 33))).astype(np.int32)
            prompts.append(prompt)
            comps.append(comp)
            prompt = np.concatenate([prompt, comp, rng.integers(5, 2048, size=40).astype(np.int32)])
    return prompts, comps, rng.normal(size=len(prompts))


def _run(pack: bool, args: argparse.Namespace, queue: mp.Queue) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from agentrl.config import UpdateConfig
    from agentrl.update import batch_logprobs, build_batch, make_optimizer, update

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=2048, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=2048, tie_word_embeddings=True))
    prompts, comps, adv = _workload(args.episodes, args.turns)
    t0 = time.perf_counter()
    batch = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], adv, pad_id=0, pack=pack)
    build_s = time.perf_counter() - t0
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    batch = batch.with_(old_logprobs=batch_logprobs(model, batch, micro_batch=args.micro_batch))
    cfg = UpdateConfig(lr=1e-4, micro_batch=args.micro_batch)
    opt = make_optimizer(model, cfg.lr)
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        stats = update(model, opt, batch, cfg)
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    queue.put({
        "pack": pack, "rows": batch.num_rows, "padded_tokens": int(batch.input_ids.numel()),
        "real_tokens": int(batch.attention_mask.sum()), "trained_tokens": batch.num_tokens,
        "build_batch_s": round(build_s, 5), "update_s_median": round(step_s, 4),
        "update_s_all": [round(t, 4) for t in times],
        "trained_tokens_per_s": round(batch.num_tokens / step_s, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_delta_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss_before, 1),
        "last_loss": stats.loss,
    })


def _measure(pack: bool, args: argparse.Namespace) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_run, args=(pack, args, queue))
    proc.start()
    result = queue.get(timeout=1800)
    proc.join()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "update.json"))
    args = ap.parse_args()
    unpacked, packed = _measure(False, args), _measure(True, args)
    result = {
        "benchmark": "update", "machine": platform.processor() or platform.machine(), "threads": 1,
        "model": "Qwen3 tiny: vocab 2048, hidden 64, 2 layers, fp32",
        "workload": {"episodes": args.episodes, "turns_per_episode": args.turns, "micro_batch": args.micro_batch,
                     "first_prompt": 120, "observation": 40, "completion": "16-32"},
        "unpacked": unpacked, "packed": packed,
        "ratios_packed_over_unpacked": {
            "padded_tokens": round(packed["padded_tokens"] / unpacked["padded_tokens"], 3),
            "update_s": round(packed["update_s_median"] / unpacked["update_s_median"], 3),
            "trained_tokens_per_s": round(packed["trained_tokens_per_s"] / unpacked["trained_tokens_per_s"], 3),
            "rss_delta_mb": round(packed["rss_delta_mb"] / max(unpacked["rss_delta_mb"], 1e-9), 3),
        },
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["ratios_packed_over_unpacked"], indent=2))


if __name__ == "__main__":
    main()
