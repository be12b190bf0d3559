"""Rollout framework overhead: collector tokens/s vs HFEngine.generate on the same prompts.

1. ``collect`` plays ``groups × group_size`` episodes on ``agentrl/Toy-v0`` (all slots at
   once, so round r of the collector is turn t = r of every still-active episode).
2. The same prompts (the stored ``prompt_ids`` of each round) go straight to
   ``HFEngine.generate`` in the same batches with the same sampling parameters.
3. The ratio of generated tokens per second (direct / collector) is the framework
   overhead factor (env steps, rendering, parsing, bookkeeping); 1.0 = no overhead.

Usage: ``python benchmarks/rollout.py [--models tiny,smollm2-135m-instruct] [--groups 4]
[--group-size 4] [--max-turns 4] [--max-tokens 32] [--out benchmarks/results/rollout.json]``
(``--models`` takes packaged names or HF folder paths, comma-separated; one entry per model
in ``runs``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path


def _load(model: str):
    from transformers import AutoTokenizer

    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.hf import HFEngine, load_hf_policy
    from agentrl.llm.tiny import tiny_model_dir

    if model == "tiny":
        d = tiny_model_dir(Path(tempfile.gettempdir()) / "agentrl-test-cache")
        return HFEngine.from_pretrained(d), ChatRenderer(AutoTokenizer.from_pretrained(d))
    return load_hf_policy(model)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny", help="comma-separated: tiny, smollm2-135m-instruct, or HF folders")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "rollout.json"))
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    runs = [run_one(m, args) for m in args.models.split(",")]
    result = {"benchmark": "rollout", "runs": runs,
              "machine": {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
                          "python": platform.python_version(), "torch": torch.__version__, "torch_threads": 1}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


def run_one(model: str, args: argparse.Namespace) -> dict:
    """Collector vs direct generation for one model; returns the numbers as a dict."""
    from agentrl.env.pool import EnvPool
    from agentrl.llm.base import SamplingParams
    from agentrl.rollout.agent_loop import LoopConfig
    from agentrl.rollout.collector import CollectConfig, collect

    engine, renderer = _load(model)
    sampling = SamplingParams(max_tokens=args.max_tokens, seed=0)
    cfg = CollectConfig(env_id="agentrl/Toy-v0", n_groups=args.groups, group_size=args.group_size, seed=0,
                        loop=LoopConfig(context="chat", max_turns=args.max_turns), sampling=sampling, progress=False)
    n = cfg.n_episodes
    with EnvPool(cfg.env_id, n, num_workers=1) as pool:
        collect(engine, renderer, cfg, pool=pool)  # warm-up (allocator, env workers)
        t0 = time.perf_counter()
        eps = collect(engine, renderer, cfg, pool=pool)
        t_collect = time.perf_counter() - t0
    turns = [t for e in eps for t in e.turns]
    tok_collect = sum(t.completion_ids.size for t in turns)
    rounds = [[t.prompt_ids for t in turns if t.t == r] for r in range(args.max_turns)]
    t0, tok_direct = time.perf_counter(), 0
    for r, prompts in enumerate(rounds):
        if prompts:
            comps = engine.generate(prompts, SamplingParams(max_tokens=args.max_tokens, seed=r))
            tok_direct += sum(c.token_ids.size for c in comps)
    t_direct = time.perf_counter() - t0
    rate_c, rate_d = tok_collect / t_collect, tok_direct / t_direct
    return {
        "model": model, "env_id": cfg.env_id, "episodes": n, "turns": len(turns), "max_tokens": args.max_tokens,
        "rounds": sum(1 for r in rounds if r),
        "collector": {"tokens": tok_collect, "seconds": round(t_collect, 3), "tokens_per_s": round(rate_c, 1)},
        "direct_hfengine": {"tokens": tok_direct, "seconds": round(t_direct, 3), "tokens_per_s": round(rate_d, 1)},
        "overhead_ratio_direct_over_collector": round(rate_d / rate_c, 3),
    }


if __name__ == "__main__":
    main()
