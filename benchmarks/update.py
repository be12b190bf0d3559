"""Policy update speed and memory: packed vs unpacked turns on the tiny model.

Writes ``benchmarks/results/update.json``. Usage:
``python benchmarks/update.py [--episodes 8] [--turns 4] [--repeats 5] [--micro-batch 4]``.

``--store STORE`` (issue 37) instead times the update on real turns of a run's store (the main
job, ``examples/gigpo_textworld.yaml``: SmolLM2-135M, LoRA on the top 6 layers, the config's
dtype) in several arms, alternating in one process from the same initial weights: padded
micro-batches of ``update.micro_batch`` rows, the same with ``share_prefix`` (what the main job
runs), and padding-free packing (``update.micro_batch_tokens``) at each ``--budgets`` value, without
and with ``share_prefix`` (rows of one task in one pack, their common prefix once). The
batch is the first ``--episodes`` episodes' turns in the trainer's shuffled order (seeded normal
advantages; the cost does not depend on them). Reported: the step's CPU seconds (this process,
one thread: on a shared machine the other jobs' load changes it far less than the wall time)
and wall seconds, medians over ``--rounds`` passes in alternating order, update tokens per CPU
second (real, unpadded tokens) and the ratios to the padded arm, in
``benchmarks/results/update_packing.json`` with the load, threads and date::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/update.py --store runs/main/store.sqlite --episodes 4

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


def _real_turns(args: argparse.Namespace) -> None:
    """The ``--store`` mode (see the module docstring)."""
    import dataclasses
    import os

    import torch

    from agentrl.llm.constrained import constraint_masks
    from agentrl.llm.policy import load_policy
    from agentrl.store import TurnStore
    from agentrl.train.checks import load_checked_config
    from agentrl.update import build_batch, make_optimizer, minibatches, prepare_policy, update

    root = Path(__file__).resolve().parents[1]
    cfg = load_checked_config(root / "examples" / "gigpo_textworld.yaml", list(args.overrides))
    torch.manual_seed(0)
    policy = load_policy(cfg.policy)
    model = prepare_policy(policy.model, cfg.update, cfg.policy.lora)
    eps = [e for e in TurnStore(args.store, readonly=True).load_episodes(None) if e.turns][:args.episodes]
    turns = [t for e in eps for t in e.turns if t.completion_ids is not None and len(t.completion_ids)]
    batch = build_batch([t.prompt_ids for t in turns], [t.completion_ids for t in turns],
                        [t.completion_logprobs for t in turns], np.random.default_rng(0).normal(size=len(turns)),
                        pad_id=policy.pad_id, allowed=constraint_masks(turns, policy.renderer),
                        episodes=[t.episode_id for t in turns])
    batch = batch.select(minibatches(batch.num_rows, 0, seed=0)[0])  # the trainer's shuffled minibatch
    padded = dataclasses.replace(cfg.update, share_prefix=False, micro_batch_tokens=0)
    arms = {"padded": padded, "padded+share_prefix": dataclasses.replace(padded, share_prefix=True),
            **{f"packed-{b}{'+share_prefix' if sh else ''}": dataclasses.replace(padded, micro_batch_tokens=b,
                                                                                  share_prefix=sh)
               for sh in (False, True) for b in args.budgets}}
    start = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    tokens = int(batch.attention_mask.sum())
    load0, out, order = os.getloadavg(), {}, list(arms)
    runs = [(r, name) for r in range(args.rounds) for name in (order if r % 2 == 0 else order[::-1])]
    for r, name in runs:  # alternating order: a load change on the shared machine hits every arm alike
        ucfg = arms[name]
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in start:
                    p.copy_(start[n])
        t0, c0 = time.perf_counter(), time.process_time()
        stats = update(model, make_optimizer(model, ucfg.lr, ucfg.weight_decay), batch, ucfg, temperature=1.0)
        sec, cpu = time.perf_counter() - t0, time.process_time() - c0
        arm = out.setdefault(name, {"cpu_s_all": [], "wall_s_all": [], "load_1min": [], "loss": stats.loss,
                                    "grad_norm": stats.grad_norm})
        arm["cpu_s_all"].append(round(cpu, 2))
        arm["wall_s_all"].append(round(sec, 2))
        arm["load_1min"].append(round(os.getloadavg()[0], 2))
        print(r, name, round(cpu, 2), round(sec, 2), stats.loss, flush=True)
    for arm in out.values():  # CPU seconds of this (one-thread) process: what other jobs' load changes least
        arm["update_cpu_s"] = round(statistics.median(arm["cpu_s_all"]), 2)
        arm["update_wall_s"] = round(statistics.median(arm["wall_s_all"]), 2)
        arm["update_tokens_per_cpu_s"] = round(tokens / arm["update_cpu_s"], 1)
        arm["trained_tokens_per_cpu_s"] = round(batch.num_tokens / arm["update_cpu_s"], 2)
    base = out["padded"]["update_cpu_s"]
    report = {
        "benchmark": "update packing (issue 37)", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "torch_threads": torch.get_num_threads(),
        "load_before": load0, "load_after": os.getloadavg(), "store": str(args.store),
        "config": "examples/gigpo_textworld.yaml", "overrides": list(args.overrides), "dtype": cfg.policy.dtype,
        "episodes": len(eps), "rows": batch.num_rows, "real_tokens": tokens, "trained_tokens": batch.num_tokens,
        "padded_tokens_micro_batch": sum(len(c) * int(batch.attention_mask[c].sum(1).max())
                                         for c in minibatches(batch.num_rows, padded.micro_batch)),
        "micro_batch": padded.micro_batch, "rounds": args.rounds, "arms": out,
        "speedup_over_padded_cpu_s": {k: round(base / v["update_cpu_s"], 3) for k, v in out.items()},
        "speedup_over_padded_wall_s": {k: round(out["padded"]["update_wall_s"] / v["update_wall_s"], 3)
                                       for k, v in out.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("speedup_over_padded_cpu_s", "speedup_over_padded_wall_s")}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=None, help="time packed vs padded on this store's real turns")
    ap.add_argument("--budgets", type=int, nargs="+", default=[1024, 2048], help="--store: micro_batch_tokens arms")
    ap.add_argument("--rounds", type=int, default=3, help="--store: passes over the arms, alternating their order")
    ap.add_argument("overrides", nargs="*", help="--store: config overrides, e.g. policy.dtype=float32")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    results = Path(__file__).parent / "results"
    if args.store is not None:
        args.out = args.out or results / "update_packing.json"
        return _real_turns(args)
    args.out = args.out or results / "update.json"
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
