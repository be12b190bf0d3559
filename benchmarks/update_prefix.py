"""Update speed: the shared-prefix forward (``update.share_prefix``) off vs on, on real turns.

``--baseline prefix-only`` compares instead the shared prefix without vs with the
deduplication of identical rows (``agentrl.update.shared_prefix.duplicate_rows``, part of
``share_prefix`` since it exists): the "off" runs then keep the shared prefix and switch only
the deduplication off.

Takes the first ``--episodes`` episodes of a run's store (e.g. the main job's
``runs/main/store.sqlite``, or any ``agentrl train`` run of ``examples/gigpo_textworld.yaml``),
builds the update batch as the trainer does (stored behaviour logprobs, the admissible-command
masks, ``build_batch``) and times one optimizer step of the config's policy (SmolLM2-135M,
LoRA on the top 6 layers, ``update.micro_batch``) with the shared prefix off and on,
alternating in ``--pairs`` pairs in one process from the same initial weights, so a load
change on the shared machine hits both modes alike. The advantages are seeded normal draws
(the step's cost does not depend on their values). Reported: seconds per step and their
ratio, the share of the batch's tokens that the sorted micro-batches share, and the largest
difference between the two modes' stepped parameters and losses (float rounding).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/update_prefix.py --store runs/main/store.sqlite \\
        [--episodes 16] [--pairs 2] [--out benchmarks/results/update_prefix.json] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def _shared_share(batch, micro_batch: int) -> float:
    """Share of the batch's attended tokens that the sorted micro-batches do not recompute."""
    from agentrl.update.shared_prefix import common_prefix, prefix_order

    order = prefix_order(batch.input_ids, batch.attention_mask)
    saved = 0
    for k in range(0, len(order), micro_batch):
        idx = order[k:k + micro_batch]
        saved += common_prefix(batch.input_ids[idx], batch.attention_mask[idx]) * (len(idx) - 1)
    return saved / float(batch.attention_mask.sum())


def _duplicate_share(batch, micro_batch: int) -> float:
    """Share of the batch's rows that are copies of an earlier row of their sorted micro-batch."""
    from agentrl.update.shared_prefix import duplicate_rows, prefix_order

    order = prefix_order(batch.input_ids, batch.attention_mask)
    copies = 0
    for k in range(0, len(order), micro_batch):
        idx = order[k:k + micro_batch]
        allowed = None if batch.allowed_ids is None else batch.allowed_ids[idx]
        d = duplicate_rows(batch.input_ids[idx], batch.attention_mask[idx], allowed)
        copies += 0 if d is None else len(idx) - d[0].numel()
    return copies / batch.num_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--run", default=None, help="run id in the store (default: every run, in order)")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--config", type=Path, default=ROOT / "examples" / "gigpo_textworld.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "update_prefix.json")
    ap.add_argument("--baseline", choices=["off", "prefix-only"], default="off",
                    help="what the 'off' runs are: share_prefix false, or the shared prefix without deduplication")
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. update.micro_batch=16")
    args = ap.parse_args()

    from agentrl.llm.constrained import constraint_masks
    from agentrl.llm.policy import load_policy
    from agentrl.store import TurnStore
    from agentrl.train.checks import load_checked_config
    from agentrl.update import build_batch, make_optimizer, prepare_policy, update
    from agentrl.update import logprobs as lp_mod

    cfg = load_checked_config(args.config, ["policy.dtype=float32", *args.overrides])
    torch.manual_seed(0)
    policy = load_policy(cfg.policy)
    model = prepare_policy(policy.model, cfg.update, cfg.policy.lora)
    eps = [e for e in TurnStore(args.store, readonly=True).load_episodes(args.run) if e.turns][:args.episodes]
    turns = [t for e in eps for t in e.turns if t.completion_ids is not None and len(t.completion_ids)]
    adv = np.random.default_rng(0).normal(size=len(turns))
    batch = build_batch([t.prompt_ids for t in turns], [t.completion_ids for t in turns],
                        [t.completion_logprobs for t in turns], adv, pad_id=policy.pad_id,
                        allowed=constraint_masks(turns, policy.renderer), episodes=[t.episode_id for t in turns])
    start = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    rows, stepped, dedupe = [], {}, lp_mod.duplicate_rows
    load0 = os.getloadavg()
    for r in range(args.pairs):
        for share in ((False, True) if r % 2 == 0 else (True, False)):
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if n in start:
                        p.copy_(start[n])
            ucfg = dataclasses.replace(cfg.update, share_prefix=share or args.baseline == "prefix-only")
            lp_mod.duplicate_rows = dedupe if share or args.baseline == "off" else (lambda *a, **k: None)
            opt = make_optimizer(model, ucfg.lr, ucfg.weight_decay)
            t0 = time.perf_counter()
            stats = update(model, opt, batch, ucfg, temperature=1.0)
            rows.append({"pair": r, "share_prefix": share, "update_s": time.perf_counter() - t0,
                         "loss": stats.loss, "grad_norm": stats.grad_norm, "load": os.getloadavg()[0]})
            stepped[share] = {n: p.detach().clone() for n, p in model.named_parameters() if n in start}
            print(rows[-1], flush=True)
    off = sum(x["update_s"] for x in rows if not x["share_prefix"])
    on = sum(x["update_s"] for x in rows if x["share_prefix"])
    loss = {s: [x["loss"] for x in rows if x["share_prefix"] == s] for s in (False, True)}
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "store": str(args.store),
        "config": str(args.config.relative_to(ROOT)) if args.config.is_relative_to(ROOT) else str(args.config),
        "overrides": args.overrides, "episodes": len(eps), "turns": len(turns), "rows": batch.num_rows,
        "tokens": int(batch.attention_mask.sum()), "micro_batch": cfg.update.micro_batch,
        "baseline": args.baseline, "shared_token_share": _shared_share(batch, cfg.update.micro_batch),
        "duplicate_row_share": _duplicate_share(batch, cfg.update.micro_batch),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "load_before": load0, "load_after": os.getloadavg(),
        "steps": rows, "update_s_off": off / args.pairs, "update_s_on": on / args.pairs, "ratio": off / on,
        "max_abs_param_diff": max(float((stepped[False][n] - stepped[True][n]).abs().max()) for n in start),
        "max_abs_loss_diff": max(abs(a - b) for a, b in zip(loss[False], loss[True])),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"update off {report['update_s_off']:.1f} s / on {report['update_s_on']:.1f} s = {report['ratio']:.2f}x; "
          f"shared tokens {report['shared_token_share']:.0%}, duplicate rows {report['duplicate_row_share']:.0%}; param diff {report['max_abs_param_diff']:.1e}")


if __name__ == "__main__":
    main()
