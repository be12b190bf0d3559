"""bf16 full fine-tuning with and without float32 master weights (issue 37): the fraction of
weight entries that change, as the engines see them (bf16), after each AdamW step at lr 1e-5.

One process, the policy's own update path (``agentrl.update.train_on_batch``): **plain** =
bf16 parameters stepped by ``torch.optim.AdamW`` (``update.master_weights: off``); **masters** =
float32 parameters computing in bf16 under autocast (``keep_master_weights``, what
``update.master_weights: on`` does in one process; FSDP2 casts instead, measured in
tests/distributed/test_master_weights_dp.py), their bf16 rounding compared. Rows are random
token ids (8 rows × 96 tokens, the last 32 trained) with random ±1 advantages, the same every
step: the question is only whether AdamW's ~lr-sized steps survive the rounding. ``parameters``:
the fraction of the parameters themselves that differ from the start (the masters, float32).

Usage: ``python benchmarks/master_weights.py [--model smollm2-135m-instruct] [--steps 5]
[--out benchmarks/results/master_weights.json]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import numpy as np
import torch

from agentrl.config import UpdateConfig
from agentrl.llm.models import resolve_model
from agentrl.update import build_batch, make_optimizer, train_on_batch
from agentrl.update.master_weights import keep_master_weights


def _batch(vocab: int, rows: int = 8, prompt: int = 64, completion: int = 32):
    rng = np.random.default_rng(0)
    prompts = [rng.integers(10, vocab, prompt).astype(np.int32) for _ in range(rows)]
    comps = [rng.integers(10, vocab, completion).astype(np.int32) for _ in range(rows)]
    lps = [np.full(completion, -3.0, np.float32) for _ in range(rows)]
    return build_batch(prompts, comps, lps, rng.choice([-1.0, 1.0], rows), pad_id=0)


def _moved(before: dict, model) -> dict[str, float]:
    now = {n: p.detach().to(torch.bfloat16) for n, p in model.named_parameters()}
    out = {}
    for kind, keys in (("all", list(before)), ("matrices", [k for k in before if before[k].ndim >= 2]),
                       ("norms", [k for k in before if before[k].ndim < 2])):
        out[kind] = sum(int((now[k] != before[k]).sum()) for k in keys) / sum(before[k].numel() for k in keys)
    params = dict(model.named_parameters())  # the parameters themselves: bf16, or the float32 masters
    out["parameters"] = sum(int((params[k].detach() != before[k].to(params[k].dtype)).sum()) for k in before) / \
        sum(v.numel() for v in before.values())
    return out


def run(model_name: str, steps: int, lr: float) -> dict:
    from transformers import AutoModelForCausalLM

    path = resolve_model(model_name)
    cfg = UpdateConfig(lr=lr, grad_clip=1.0, micro_batch=4)
    out = {}
    for mode in ("plain", "masters"):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).train()
        batch = _batch(model.config.vocab_size)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        if mode == "masters":
            keep_master_weights(model, torch.bfloat16, autocast=True)
        opt = make_optimizer(model, lr)
        per_step, t0 = [], time.perf_counter()
        for i in range(steps):
            train_on_batch(model, opt, batch, cfg, seed=i)
            per_step.append(_moved(before, model))
        out[mode] = {"moved_after_step": per_step, "seconds": time.perf_counter() - t0}
        print(mode, json.dumps(per_step[-1]), f"{out[mode]['seconds']:.1f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--out", default="benchmarks/results/master_weights.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
              "model": args.model, "lr": args.lr, "steps": args.steps, "torch": torch.__version__,
              **run(args.model, args.steps, args.lr)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
