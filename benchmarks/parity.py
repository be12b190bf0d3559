"""Sampler vs trainer logprobs per dtype, and the first-update PPO ratio with and without the
off-policy correction (issue 19 item 2, issue 18).

For each dtype (fp32, bf16) the packaged SmolLM2-135M-Instruct (``agentrl models prepare
smollm2``) samples completions at T = 1 with ``HFEngine.generate`` (KV-cache decoding; the
stored logprobs are the raw-logit log-softmax of each sampled token), then the trainer's
own full forward (``agentrl.update.logprobs.batch_logprobs``, the same model object, no
weight change) scores the same tokens. Reported over the completion tokens: mean and max
|Δ logprob|, and the fraction of tokens whose ratio exp(Δ) lies outside [0.98, 1.02] — the
PPO ratio of the first update with ``update.rollout_correction: none`` (π_old = the stored
behaviour logprobs). With ``tis`` / ``mis`` / ``icepop`` the trainer recomputes π_old, so the
first-update ratio is exactly 1 by construction; the correction weights (ρ = π_old/π_behav,
truncated/masked) are reported instead (``correction/kl``, capped and masked fractions).

Usage: ``python benchmarks/parity.py [--prompts 8] [--tokens 24] [--dtypes float32,bfloat16]
[--model smollm2-135m-instruct] [--out benchmarks/results/parity.json]``. bf16 on a CPU
without AVX-512-BF16 is ~13x slower than fp32 (a few minutes here).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["You are in a kitchen. There is a fridge and a counter. What do you do?",
         "Write one command to open the wooden door.", "Name a fruit that is yellow.",
         "You see a key on the table. Your task: unlock the chest.", "Say hello in French.",
         "List two colours of the rainbow.", "What is 7 plus 5?", "Describe a cat in three words."]


def run_dtype(dtype: str, args) -> dict:
    """Sample, recompute, compare for one dtype; the correction of every mode on that batch."""
    import torch

    from agentrl.config import UpdateConfig
    from agentrl.llm.base import SamplingParams
    from agentrl.llm.hf import HFEngine
    from agentrl.llm.models import resolve_model
    from agentrl.update import build_batch
    from agentrl.update.correction import apply_rollout_correction
    from agentrl.update.logprobs import batch_logprobs

    torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    eng = HFEngine.from_pretrained(path, dtype=dtype)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                                  tokenize=False), add_special_tokens=False)
               for t in (TASKS * ((args.prompts + len(TASKS) - 1) // len(TASKS)))[: args.prompts]]
    t0 = time.perf_counter()
    comps = eng.generate(prompts, SamplingParams(max_tokens=args.tokens, temperature=1.0, seed=0))
    gen_s = time.perf_counter() - t0
    batch = build_batch([np.asarray(p) for p in prompts], [c.token_ids for c in comps], [c.logprobs for c in comps],
                        np.ones(len(comps)), pad_id=eng.pad_token_id)
    t1 = time.perf_counter()
    train = batch_logprobs(eng.model, batch, micro_batch=4, loss_only=True)
    score_s = time.perf_counter() - t1
    m = batch.loss_mask > 0
    delta = (train - batch.old_logprobs)[m].double()
    ratio = torch.exp(delta)
    out = {"dtype": dtype, "tokens": int(m.sum()), "generate_s": gen_s, "recompute_s": score_s,
           "mean_abs_delta": float(delta.abs().mean()), "max_abs_delta": float(delta.abs().max()),
           "ratio_outside_2pct": float(((ratio < 0.98) | (ratio > 1.02)).double().mean()),
           "ratio_quantiles": {q: float(torch.quantile(ratio, q)) for q in (0.01, 0.1, 0.5, 0.9, 0.99)},
           "corrections": {}}
    for mode in ("tis", "mis", "icepop"):
        _, corr = apply_rollout_correction(eng.model, batch, UpdateConfig(rollout_correction=mode))
        out["corrections"][mode] = corr.as_metrics()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "parity.json")
    args = ap.parse_args(argv)
    rows = [run_dtype(d, args) for d in args.dtypes.split(",")]
    res = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": platform.processor()
           or platform.machine(), "model": args.model, "prompts": args.prompts, "max_tokens": args.tokens,
           "threads": args.threads, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    for r in rows:
        print(f"{r['dtype']:9s} tokens {r['tokens']:4d}  mean|Δ| {r['mean_abs_delta']:.2e}  max|Δ| "
              f"{r['max_abs_delta']:.2e}  ratio outside [0.98,1.02] {r['ratio_outside_2pct']:.1%}  "
              f"tis capped {r['corrections']['tis']['correction/capped_frac']:.1%}  "
              f"icepop masked {r['corrections']['icepop']['correction/masked_frac']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
