"""WebShop smoke of the model-based step credit (issue 50): ``oprl`` and ``stepopsd`` train a
few iterations on ``agentrl/WebShop-v0`` from an SFT warm start, so the groups have mixed
outcomes and the step scorers have something to learn from.

SmolLM2-135M as packaged wins no WebShop episode (0 of 32 at 15 turns, 0 of 8 at 6), so no
group holds a (success, failure) pair: OPRL's PRM takes no DPO step and the hindsight teacher
scores no row (both estimators are GRPO's zeros there). This script first runs
``agentrl.sft.train_sft`` on training-split WebShop oracle walkthroughs rendered exactly as
the RL prompts of ``examples/grpo_webshop.yaml`` (admissible-constrained decoding), then
trains each estimator from that folder with its step scorer on (``prm`` at ``prm_lr`` null =
2 × update.lr, ``score_after_update``; ``hindsight`` with the stale teacher at λ 1, α 0.5).

What it records per estimator and iteration (from the run's store): rollout success, the
scorer's metrics (``prm/pairs``, ``prm/steps``, ``prm/loss``, ``prm/loss_after``, ``prm/logratio_abs_mean``, ``prm/grad_norm``;
``hindsight/rows_scored``, ``hindsight/gap_abs_mean``), the stored advantages' count, the
number that are non-finite and the max |A|; over the run the ok episodes, successes and mixed
groups, and the wall seconds. The claim it supports is
mechanical — they train, every value is finite, the PRM moves (loss_after < loss, |ℓ| > 0 on
the next iteration) — not learning: a few iterations of 16 episodes say nothing about success.

Usage::

    .venv/bin/python -m studies.webshop_scorers [--iterations 3] [--sft-episodes 48] \
        [--out-dir runs/webshop_scorers] [--out studies/results/webshop_scorers.json]
    # smoke: --iterations 1 --sft-episodes 2 --sft-epochs 1 --groups 1 --out /tmp/ws.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "webshop_scorers.json"
EXAMPLE = Path(__file__).parents[1] / "examples" / "grpo_webshop.yaml"
#: Each arm's estimator, its kwargs and its step scorer (``algorithm.scorers``).
ARMS = {
    "oprl": ("oprl", "{beta: 0.05, step_advantage_w: 1.0, mode: mean_std_norm}",
             "{prm: {prm_lr: null, traj_aggregate: sum, score_after_update: true}}"),
    "stepopsd": ("stepopsd", "{lambda_mix: 1.0, alpha_clip: 0.5}",
                 "{hindsight: {teacher: stale, teacher_refresh: 10, segment: action_only}}"),
}
KEEP = ("rollout/success_rate", "prm/pairs", "prm/steps", "prm/loss", "prm/loss_after", "prm/logratio_abs_mean",
        "prm/grad_norm", "prm/seconds", "hindsight/rows_scored", "hindsight/gap_abs_mean", "hindsight/seconds",
        "adv/std", "adv/zero_frac")


def config_for(model: str, name: str, args, extra: tuple = ()):
    """``examples/grpo_webshop.yaml`` at this script's budget, policy ``model``, fp32 (the scorers'
    forwards on either CPU kind), run ``name`` under ``args.out_dir``, plus ``extra`` overrides."""
    from agentrl.train.checks import load_checked_config

    overrides = [f"run.name={name}", f"run.out_dir={args.out_dir}", "run.seed=0", f"run.iterations={args.iterations}",
                 "run.eval_every=0", f"run.save_every={args.iterations}", "run.eval_before=false",
                 f"env.max_turns={args.max_turns}", f"rollout.groups_per_iteration={args.groups}",
                 "rollout.group_size=4", f"policy.model={model}", "policy.dtype=float32", "log.console=false", *extra]
    return load_checked_config(EXAMPLE, overrides)


def store_rows(store_path: Path) -> tuple[list[dict], dict]:
    """Per iteration: the KEEP metrics and the advantages stored / non-finite / max |A|; and over
    the run: ok episodes, groups, mixed groups (a success and a failure among the ok episodes)."""
    from agentrl.store import TurnStore

    store = TurnStore(store_path, readonly=True)
    try:
        metrics: dict[int, dict] = {}
        for m in store.metrics():
            if m.name in KEEP:
                metrics.setdefault(m.iteration, {})[m.name] = m.value
        advs: dict[int, list[float]] = {}
        for a in store.advantages():
            advs.setdefault(a.iteration, []).append(a.value)
        episodes = store.episodes()
    finally:
        store.close()
    rows = []
    for it in sorted(set(metrics) | set(advs)):
        values = advs.get(it, [])
        finite = [v for v in values if math.isfinite(v)]
        rows.append({"iteration": it, **metrics.get(it, {}), "advantages": len(values),
                     "non_finite": len(values) - len(finite), "max_abs_adv": max(map(abs, finite), default=0.0)})
    groups: dict[int, set] = {}
    ok = [e for e in episodes if e.status.value == "ok"]
    for e in ok:
        groups.setdefault(e.group_id, set()).add(bool(e.success))
    run = {"episodes": len(episodes), "ok_episodes": len(ok), "successes": sum(bool(e.success) for e in ok),
           "groups": len(groups), "mixed_groups": sum(len(s) == 2 for s in groups.values())}
    return rows, run


def run(args) -> dict:
    """SFT once (reused when its folder exists), then every arm; rewrites ``args.out`` after each stage."""
    from agentrl.sft import SFTConfig, train_sft
    from agentrl.train import train

    out_dir, out = Path(args.out_dir), Path(args.out)
    report: dict = {"iterations": args.iterations, "groups": args.groups, "group_size": 4, "max_turns": args.max_turns,
                    "dtype": "float32", "arms": {}}

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1, default=float))

    sft_dir = out_dir / "sft"
    if not (sft_dir / "config.json").is_file():
        t0 = time.perf_counter()
        base = config_for("smollm2-135m-instruct", "sft_base", args)
        res = train_sft(base, SFTConfig(episodes=args.sft_episodes, epochs=args.sft_epochs, lr=args.sft_lr, seed=0,
                                        micro_batch=4, out=str(sft_dir)), log=lambda *a, **k: None)
        report["sft"] = {"episodes": res.episodes, "turns": res.turns, "won": res.won, "steps": res.steps,
                         "first_epoch_loss": res.first_epoch_loss, "last_epoch_loss": res.last_epoch_loss,
                         "seconds": time.perf_counter() - t0, "lr": args.sft_lr, "epochs": args.sft_epochs}
        save()
        print(f"sft: loss {res.first_epoch_loss:.3f} -> {res.last_epoch_loss:.3f} nats/token, {res.turns} turns, "
              f"{report['sft']['seconds']:.0f} s", flush=True)
    for arm in args.arms:
        est, kwargs, scorers = ARMS[arm]
        cfg = config_for(str(sft_dir), arm, args, (f"algorithm.estimator={est}", f"algorithm.kwargs={kwargs}",
                                                   f"algorithm.scorers={scorers}"))
        t0 = time.perf_counter()
        result = train(cfg, resume=False)
        rows, totals = store_rows(result.store_path)
        report["arms"][arm] = {"estimator": est, "kwargs": kwargs, "scorers": scorers,
                               "seconds": time.perf_counter() - t0, "run": totals, "iterations": rows}
        save()
        for r in rows:
            print(f"{arm} it {r['iteration']}: success {r.get('rollout/success_rate', float('nan')):.2f}, pairs {r.get('prm/pairs', '-')}, steps {r.get('prm/steps', '-')}, loss "
                  f"{r.get('prm/loss', '-')} -> {r.get('prm/loss_after', '-')}, |l| {r.get('prm/logratio_abs_mean', '-')}, "
                  f"hindsight rows {r.get('hindsight/rows_scored', '-')}, non-finite {r['non_finite']}", flush=True)
    return report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--groups", type=int, default=4, help="groups per iteration (4 episodes each)")
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--sft-episodes", type=int, default=48)
    ap.add_argument("--sft-epochs", type=int, default=2)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=tuple(ARMS))
    ap.add_argument("--out-dir", default="runs/webshop_scorers")
    ap.add_argument("--out", default=str(OUT))
    run(ap.parse_args(argv))


if __name__ == "__main__":
    main()
