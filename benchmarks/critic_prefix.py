"""turn-PPO critic speed: the plain critic path vs distinct prompts + shared prefixes
(``update.share_prefix``, ``agentrl.update.critic``), on real turns.

Takes the first ``--episodes`` episodes of a run's store (any ``agentrl train`` run of
``examples/gigpo_textworld.yaml``, e.g. a ``studies/learning.py`` cell), builds the batch of
all their turns as the trainer does for the critic, and times what the trainer runs per
iteration for turn-PPO: the value pass (``turn_values``, no gradients) and one critic step
(``critic_update``) of the config's critic (SmolLM2-135M + value head, top
``update.critic_top_n_layers`` layers trained; the learning grid's turn-PPO cell uses 6), with
``share_prefix`` off and on, alternating in ``--pairs`` pairs in one process from the same
initial weights (so a load change on the shared machine hits both modes alike). The value head
starts from seeded normal weights (a zero head reads 0 everywhere) and the returns are seeded
normal draws (the cost does not depend on them). Reported: seconds per value pass and per step,
their ratios, the tokens the backbone ran in each mode (a forward hook on the first layer), the
share of turns whose prompt repeats another's, and the largest difference between the two
modes' values, losses and gradient norms (float rounding).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/critic_prefix.py --store RUN/store.sqlite \\
        [--episodes 24] [--pairs 2] [--out benchmarks/results/critic_prefix.json] [KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--run", default=None, help="run id in the store (default: every run, in order)")
    ap.add_argument("--episodes", type=int, default=24)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--config", type=Path, default=ROOT / "examples" / "gigpo_textworld.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "critic_prefix.json")
    ap.add_argument("overrides", nargs="*", help="config overrides (default adds update.critic_top_n_layers=6)")
    args = ap.parse_args()

    from agentrl.store import TurnStore
    from agentrl.train.checks import load_checked_config
    from agentrl.train.critic import make_critic
    from agentrl.update import build_batch, critic_update, turn_values
    from agentrl.update.critic import value_rows

    cfg = load_checked_config(args.config, ["update.critic_top_n_layers=6", *args.overrides])
    torch.manual_seed(0)
    critic = make_critic(cfg, "cpu")
    torch.nn.init.normal_(critic.model.head.weight, std=0.02, generator=torch.Generator().manual_seed(1))
    eps = [e for e in TurnStore(args.store, readonly=True).load_episodes(args.run) if e.turns][:args.episodes]
    turns = [t for e in eps for t in e.turns]
    batch = build_batch([t.prompt_ids for t in turns], [t.completion_ids for t in turns],
                        [t.completion_logprobs for t in turns], np.zeros(len(turns)), pad_id=0)
    batch = batch.with_(returns=torch.as_tensor(np.random.default_rng(0).normal(size=len(turns)), dtype=torch.float32))
    start = {n: p.detach().clone() for n, p in critic.model.named_parameters() if p.requires_grad}
    seen: list[int] = []
    critic.model.backbone.layers[0].register_forward_hook(
        lambda m, a, kw=None, out=None: seen.append(int(a[0].shape[0]) * int(a[0].shape[1])))
    rows, results = [], {}
    load0 = os.getloadavg()
    for r in range(args.pairs):
        for share in ((False, True) if r % 2 == 0 else (True, False)):
            with torch.no_grad():
                for n, p in critic.model.named_parameters():
                    if n in start:
                        p.copy_(start[n])
            critic.optimizer.state.clear()
            seen.clear()
            t0 = time.perf_counter()
            values = turn_values(critic.model, batch, micro_batch=cfg.update.micro_batch, share_prefix=share)
            t1 = time.perf_counter()
            value_tokens = sum(seen)
            stats = critic_update(critic.model, critic.optimizer, batch.with_(old_values=values),
                                  micro_batch=cfg.update.micro_batch, grad_clip=cfg.update.grad_clip,
                                  value_clip=cfg.update.value_clip, share_prefix=share)
            t2 = time.perf_counter()
            rows.append({"pair": r, "share_prefix": share, "values_s": t1 - t0, "step_s": t2 - t1,
                         "value_pass_tokens": value_tokens, "step_tokens": sum(seen) - value_tokens,
                         "loss": stats.loss, "grad_norm": stats.grad_norm, "load": os.getloadavg()[0]})
            results[share] = values, stats
            print(rows[-1], flush=True)
    mean = {s: {k: float(np.mean([x[k] for x in rows if x["share_prefix"] == s]))
                for k in ("values_s", "step_s", "value_pass_tokens", "step_tokens")} for s in (False, True)}
    distinct = value_rows(batch, distinct=True).num_prompts
    (v0, s0), (v1, s1) = results[False], results[True]
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "store": str(args.store),
        "config": str(args.config.relative_to(ROOT)) if args.config.is_relative_to(ROOT) else str(args.config),
        "overrides": args.overrides, "dtype": cfg.policy.dtype, "critic_top_n_layers": cfg.update.critic_top_n_layers,
        "episodes": len(eps), "turns": len(turns), "distinct_prompts": distinct,
        "prompt_tokens": int(value_rows(batch).attention_mask.sum()), "batch_tokens": int(batch.attention_mask.sum()),
        "micro_batch": cfg.update.micro_batch, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_before": load0, "load_after": os.getloadavg(), "runs": rows, "off": mean[False], "on": mean[True],
        "ratio_values": mean[False]["values_s"] / mean[True]["values_s"],
        "ratio_step": mean[False]["step_s"] / mean[True]["step_s"],
        "ratio_total": (mean[False]["values_s"] + mean[False]["step_s"]) / (mean[True]["values_s"] + mean[True]["step_s"]),
        "max_abs_value_diff": float((v0 - v1).abs().max()), "max_abs_value": float(v0.abs().max()),
        "loss_rel_diff": abs(s0.loss - s1.loss) / abs(s0.loss), "grad_norm_rel_diff": abs(s0.grad_norm - s1.grad_norm) / s0.grad_norm,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"critic values {mean[False]['values_s']:.1f} -> {mean[True]['values_s']:.1f} s ({report['ratio_values']:.2f}x), "
          f"step {mean[False]['step_s']:.1f} -> {mean[True]['step_s']:.1f} s ({report['ratio_step']:.2f}x), "
          f"total {report['ratio_total']:.2f}x; tokens {mean[False]['value_pass_tokens']:.0f} -> {mean[True]['value_pass_tokens']:.0f}; "
          f"{distinct}/{len(turns)} distinct prompts; value diff {report['max_abs_value_diff']:.1e}")


if __name__ == "__main__":
    main()
