"""Console summary printed at the end of ``agentrl train``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence


def print_run_summary(console, run_dir: Path, run_id: str, evals: Sequence) -> None:
    """A table of per-iteration metrics (from metrics.jsonl), the eval results (with the
    paired before → after difference when the run evaluated before training) and the
    replay command."""
    from rich.table import Table

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    cols = [("iter", "step"), ("success", "rollout/success_rate"), ("return", "rollout/mean_return"),
            ("turns", "rollout/mean_turns"), ("invalid", "rollout/invalid_rate"), ("adv std", "adv/std"),
            ("adv=0", "adv/zero_frac"), ("clip", "update/clip_frac"), ("kl", "update/approx_kl"),
            ("entropy", "update/entropy"), ("eval", "eval/greedy_success")]
    table = Table(title=f"run {run_id}", title_justify="left")
    for name, _ in cols:
        table.add_column(name, justify="right")
    for r in rows:
        vals = r.get("metrics", r)
        table.add_row(*[_fmt(r.get("step") if key == "step" else vals.get(key)) for _, key in cols])
    console.print(table)
    for e in evals:
        when = f"eval {e.label}" if e.label else "eval"
        console.print(f"{when}: {e.success_rate:.1%} ({e.successes}/{e.n}) Wilson 95% [{e.wilson[0]:.1%}, "
                      f"{e.wilson[1]:.1%}] seed {e.seed} panel {e.panel_sha256[:12]}", highlight=False)
    before = next((e for e in evals if e.label == "before"), None)
    if before is not None and evals[-1] is not before:
        from agentrl.eval import compare

        after = evals[-1]
        console.print(f"held-out before -> after ({after.label}, same panel {after.panel_sha256[:12]}): "
                      f"{compare(before, after).line()}", highlight=False)
    console.print(f"replay: agentrl replay {run_dir / 'store.sqlite'} --run {run_id} [--episode N]", highlight=False, soft_wrap=True,
                  markup=False)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)
