"""Free-form actions after an SFT warm-start: invalid-action rate and success, before/after.

Free-form means ``policy.action_constraint=none``: the model writes the command text itself
(the admissible commands are still listed in the prompt) and the env marks a command that is
not admissible with ``action_valid=False``. Zero-shot, the packaged SmolLM2-135M writes
almost no valid command (LEARNING.md), so RL gets no signal. This script measures, on
TextWorld cu1 (8 turns) and the held-out panel of ``studies/learning.py``:

1. ``zero-shot``: the packaged model, free-form, greedy and sampled;
2. ``sft``: after ``agentrl.sft.train_sft`` on training-split walkthroughs (rendered exactly
   as the RL prompts of ``examples/gigpo_textworld.yaml``, free-form; a cu1 walkthrough is one
   turn, so 128 episodes x 4 epochs = 512 turn passes, ~280 s CPU with one thread, loss
   2.2 -> 0.14 nats/token);
3. ``sft+rl``: after free-form GiGPO started from the SFT folder, at the learning.py budget
   (6 groups x 4 episodes per iteration), final checkpoint.

Each stage records success rate with its 95 % Wilson interval, invalid-action rate (fraction
of the panel's turns with ``action_valid`` False, ``agentrl.rollout.stats.rollout_stats``),
mean turns per episode, wall and CPU seconds (``time.process_time``, this process only) and
the exact config; RL also records its per-iteration training success and invalid rate. The
JSON (``--out``) is rewritten after every stage, then a Markdown table is printed.

Usage::

    OMP_NUM_THREADS=2 .venv/bin/python -m studies.sft_freeform \
        [--iterations 6] [--panel 24] [--sft-episodes 128] [--sft-epochs 4] [--sft-lr 1e-3] \
        [--out-dir runs/sft_freeform] [--out studies/results/sft_freeform.json]
    # smoke: --panel 2 --iterations 1 --sft-episodes 4 --sft-epochs 1 --out /tmp/sf.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from studies.learning_tables import pct

ENV_ID, MAX_TURNS = "agentrl/TextWorld-CU1-v0", 8
OUT = Path(__file__).parent / "results" / "sft_freeform.json"
EXAMPLE = Path(__file__).parents[1] / "examples" / "gigpo_textworld.yaml"


def config_for(model: str, iterations: int, panel: int, out_dir: Path, seed: int = 0, extra: tuple = ()):
    """The free-form GiGPO config (the example config + learning.py's budget), policy ``model``,
    plus ``extra`` ``key=value`` overrides."""
    from agentrl.train.checks import load_checked_config

    overrides = ["run.name=rl", f"run.out_dir={out_dir}", f"run.seed={seed}", f"run.iterations={iterations}",
                 "run.eval_every=0", f"run.save_every={iterations}", "run.eval_before=false", f"run.eval_seed={seed}",
                 f"env.id={ENV_ID}", f"env.max_turns={MAX_TURNS}",
                 f"env.eval_panel_size={panel}", "rollout.groups_per_iteration=6", "rollout.group_size=4",
                 "algorithm.estimator=gigpo", "algorithm.kwargs={}", "log.console=false",
                 "policy.action_constraint=none", f"policy.model={model}", *extra]
    return load_checked_config(EXAMPLE, overrides)


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(t: tuple[float, float]) -> dict:
    return {"wall": time.perf_counter() - t[0], "cpu": time.process_time() - t[1]}


def eval_stage(cfg, checkpoint=None) -> dict:
    """Greedy and sampled panel results of ``cfg``'s policy (+ ``checkpoint``): EvalResult
    fields plus ``invalid_rate`` (fraction of turns of ok episodes with action_valid False)."""
    from agentrl.eval import evaluate, load_eval_policy
    from agentrl.rollout.stats import rollout_stats

    t = _clock()
    policy = load_eval_policy(cfg, checkpoint)
    out = {}
    for greedy in (True, False):
        te = _clock()
        result, episodes = evaluate(policy.engine, policy.renderer, cfg, greedy=greedy)
        stats = rollout_stats(episodes)
        out["greedy" if greedy else "sampled"] = {**asdict(result), "invalid_rate": stats.invalid_rate,
                                                  "turns": stats.turns, "seconds": _since(te)}
    out["seconds"] = _since(t)
    return out


def train_metrics(run_dir: Path, since: float) -> list[dict]:
    """Per-iteration rollout success / invalid rate / turns of the training run (metrics.jsonl
    records written after unix time ``since``)."""
    path, keep = run_dir / "metrics.jsonl", ("step", "rollout/success_rate", "rollout/invalid_rate", "rollout/mean_turns")
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: r.get(k) for k in keep} for r in rows if r.get("time", 0) >= since and "rollout/success_rate" in r]


def table(stages: list[dict]) -> str:
    """Markdown: stage | greedy success | greedy invalid rate | sampled success | sampled invalid rate."""
    lines = ["| stage | greedy success | greedy invalid rate | sampled success | sampled invalid rate | "
             "mean turns (greedy / sampled) | stage wall |", "|---|---|---|---|---|---|---|"]
    for s in stages:
        g, p = s["eval"]["greedy"], s["eval"]["sampled"]
        lines.append(f"| {s['stage']} | {pct(g)} | {g['invalid_rate']:.1%} | {pct(p)} | {p['invalid_rate']:.1%} | "
                     f"{g['mean_turns']:.2f} / {p['mean_turns']:.2f} | {s['seconds']['wall']:.0f} s |")
    return "\n".join(lines)


def run(args) -> list[dict]:
    """The three stages; rewrites ``args.out`` after each. Returns the stage records."""
    from agentrl.config import to_dict
    from agentrl.sft import SFTConfig, train_sft
    from agentrl.train import train

    out_dir, out, stages = Path(args.out_dir), Path(args.out), []
    common = {"env": ENV_ID, "max_turns": MAX_TURNS, "panel": args.panel, "iterations": args.iterations,
              "action_constraint": "none", "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}

    def save(stage: dict) -> None:
        stages.append(stage)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**common, "stages": stages}, indent=1, default=float))
        g, p = stage["eval"]["greedy"], stage["eval"]["sampled"]
        print(f"{stage['stage']}: greedy {g['success_rate']:.1%} (invalid {g['invalid_rate']:.1%}), sampled "
              f"{p['success_rate']:.1%} (invalid {p['invalid_rate']:.1%}), {stage['seconds']['wall']:.0f} s wall",
              flush=True)

    base = config_for("smollm2-135m-instruct", args.iterations, args.panel, out_dir)
    if args.reuse_sft:  # the zero-shot and sft stages of an earlier run (same panel), and its SFT folder
        for stage in json.loads(Path(args.reuse_sft).read_text())["stages"][:2]:
            stages.append(stage)
        sft_dir = stages[1]["sft"]["out_dir"]
    else:
        t = _clock()
        ev = eval_stage(base)
        save({"stage": "zero-shot", "eval": ev, "seconds": _since(t), "config": to_dict(base)})

        t = _clock()
        sft = SFTConfig(episodes=args.sft_episodes, epochs=args.sft_epochs, lr=args.sft_lr, seed=0,
                        out=str(out_dir / "sft"))
        res = train_sft(base, sft, log=lambda m: print(m, flush=True))
        train_s = _since(t)
        sft_dir = str(res.out_dir)
        sft_cfg = config_for(sft_dir, args.iterations, args.panel, out_dir)
        ev = eval_stage(sft_cfg)
        save({"stage": "sft", "eval": ev, "seconds": _since(t),
              "sft": {**{k: v for k, v in asdict(res).items() if k != "out_dir"}, "out_dir": sft_dir,
                      "seconds": train_s}, "config": {**to_dict(base), "sft": asdict(sft)}})
    sft_cfg = config_for(sft_dir, args.iterations, args.panel, out_dir)
    rl_cfg = sft_cfg
    if args.rl_tasks:  # RL draws from a larger training pool than the SFT walkthroughs covered
        rl_cfg = config_for(sft_dir, args.iterations, args.panel, out_dir,
                            extra=[f"env.kwargs={{n_tasks: {args.rl_tasks}}}"])

    t = _clock()
    since = time.time()
    result = train(rl_cfg, resume=False)
    train_s = _since(t)
    ckpt_dir = result.run_dir / "checkpoints"
    ckpt = ckpt_dir / (ckpt_dir / "latest").read_text().strip()
    ev = eval_stage(sft_cfg, ckpt)
    save({"stage": "sft+rl", "eval": ev, "seconds": _since(t),
          "rl": {"optimizer_steps": result.state.optimizer_steps, "checkpoint": str(ckpt), "seconds": train_s,
                 "rl_tasks": args.rl_tasks, "iterations": train_metrics(result.run_dir, since)},
          "config": to_dict(rl_cfg)})
    return stages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=6, help="RL iterations (default: 6)")
    ap.add_argument("--panel", type=int, default=24, help="held-out tasks (default: 24)")
    ap.add_argument("--sft-episodes", type=int, default=128, help="training walkthroughs, env seeds 0..N-1 (default: 128)")
    ap.add_argument("--sft-epochs", type=int, default=4, help="SFT passes over the expert turns (default: 4)")
    ap.add_argument("--sft-lr", type=float, default=1e-3, help="SFT AdamW lr on the LoRA adapters (default: 1e-3)")
    ap.add_argument("--rl-tasks", type=int, default=None,
                    help="n_tasks of the RL training pool (default: the env's 64, the pool the SFT walkthroughs "
                         "were drawn from; a larger pool gives RL mostly games SFT never saw)")
    ap.add_argument("--reuse-sft", default=None, metavar="JSON",
                    help="take the zero-shot and sft stages (and the SFT folder) from an earlier run's JSON; "
                         "run only the RL stage")
    ap.add_argument("--out-dir", default="runs/sft_freeform")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t = _clock()
    stages = run(args)
    print(table(stages))
    s = _since(t)
    print(f"total: {s['wall']:.0f} s wall, {s['cpu']:.0f} s CPU (this process)")


if __name__ == "__main__":
    main()
