"""Paired comparison of learning-grid rows: estimator vs a baseline on the same seeds and tasks.

Two rows of ``results/learning.json`` are a pair when they share env, group size, iterations,
panel (size and content hash), dtype, action format (``format_of``) and seed and differ only in the
estimator. The "before" evaluation is the same model on the same panel for both (greedy decoding:
identical outcomes), so the difference of the "after" success rates is the difference of the rises. Each after-evaluation stores its
per-task outcomes (``EvalResult.outcomes``: ``[task_id, return]``, success = return > 0 for the
0/1 TextWorld rewards), so the pair is compared task by task.

The interval is a two-level bootstrap (seeds resampled with replacement, then the tasks of each
drawn seed): seeds vary more than tasks (a cell's greedy after ranges 58–88 % over seeds), and
resampling (seed, task) pairs as one pool would hide that. With 3 seeds the seed level has only
10 distinct draws; the interval is then wide, as it should be.
"""

from __future__ import annotations

import numpy as np

__all__ = ["critic_of", "dtype_of", "env_cell", "format_of", "group_size_of", "panel_of", "pair_rows", "paired_difference", "paired_summary"]


def group_size_of(row: dict) -> int:
    """The grid's group size of a row (``rollout.group_size`` the benchmark set: rows written
    before ``--group-size`` existed used 4)."""
    return int(row.get("group_size", 4))


def _successes(result: dict) -> dict[str, float]:
    """task id → 1.0 / 0.0 from an EvalResult dict's ``outcomes`` ([task_id, return] pairs).

    Raises:
        ValueError: the outcomes' positive returns do not count the result's ``successes``
            (an env whose return is not 0/1 success: the pairing would be wrong).
    """
    got = {str(t): float(r > 0) for t, r in result["outcomes"]}
    if int(sum(got.values())) != int(result["successes"]):
        raise ValueError(f"{int(sum(got.values()))} positive returns in the outcomes but {result['successes']} "
                         "successes: per-task success cannot be read from this env's returns")
    return got


def dtype_of(row: dict) -> str:
    """The row's ``policy.dtype`` (bf16 and fp32 runs of one seed start from different greedy
    outcomes: they are not paired)."""
    return str(row.get("config", {}).get("policy", {}).get("dtype", "?"))


def critic_of(row: dict) -> str:
    """'critic lr 0.0001, 16 prompts/step': the critic settings of a row whose estimator trains
    a turn-level critic (turn-PPO: ``update.critic_lr``, ``update.critic_minibatch`` when > 0);
    '' for every other row. Two critic settings are two cells: never merged, paired or averaged."""
    if row["estimator"] != "turn_ppo":
        return ""
    u = row.get("config", {}).get("update", {})
    k = int(u.get("critic_minibatch", 0) or 0)
    return f"critic lr {float(u.get('critic_lr', 1e-5)):g}" + (f", {k} prompts/step" if k else "")


def format_of(row: dict) -> str:
    """'hiper tags' for a row trained under HiPER's tagged action format (``policy.action_format:
    hiper``: the HiPER cells, and ``learning.py --tagged`` control cells of other estimators); '' for
    every other row. The format changes the prompt and what is decoded, so two formats are two
    cells: never merged, paired or averaged."""
    return "hiper tags" if row.get("config", {}).get("policy", {}).get("action_format") == "hiper" else ""


def panel_of(row: dict) -> str:
    """The first 12 hex digits of the held-out panel's sha256 (from the row's after-evaluation;
    '' where a row has none, e.g. an unfinished cell). Two panels of one size can differ — the
    panels of repeated tasks that issue 21 replaced (‡ in results/learning.md) against today's distinct
    tasks — and their rows are then neither merged, paired nor averaged together."""
    return str(row.get("after", {}).get("greedy", {}).get("panel_sha256", ""))[:12]


def env_cell(env: str, panel: str) -> str:
    """'cu1 (panel df032635)': the env and the first 8 hex digits of its panel ('cu1' alone for
    a row without a panel hash)."""
    return f"{env} (panel {panel[:8]})" if panel else env


def pair_rows(rows: list[dict], baseline: str) -> dict[tuple, dict[str, list[tuple[dict, dict]]]]:
    """{(env, group size, iterations, panel, dtype, panel hash, format): {estimator: [(row, baseline row),
    ...] by seed}} for every estimator with at least one seed shared with ``baseline`` (a
    turn-PPO estimator's name carries its critic settings, ``critic_of``)."""
    def cond(r):
        return r["env"], group_size_of(r), r["iterations"], r["panel"], dtype_of(r), panel_of(r), format_of(r)

    base = {(cond(r), r["seed"]): r for r in rows if r["estimator"] == baseline}
    out: dict[tuple, dict[str, list]] = {}
    for r in sorted(rows, key=lambda r: (cond(r), r["estimator"], r["seed"])):
        b = base.get((cond(r), r["seed"]))
        if r["estimator"] != baseline and b is not None:
            name = r["estimator"] + (f" ({critic_of(r)})" if critic_of(r) else "")
            out.setdefault(cond(r), {}).setdefault(name, []).append((r, b))
    return out


def paired_difference(pairs: list[tuple[dict, dict]], mode: str = "greedy", draws: int = 10_000,
                      seed: int = 0) -> dict:
    """Estimator minus baseline after-success on the tasks both evaluated, in points.

    Args:
        pairs: (row, baseline row) per seed (``pair_rows``).
        mode: "greedy" or "sampled" after-evaluation.
        draws: bootstrap resamples; seed: their RNG seed (the interval is reproducible).
    Returns:
        {"mean": mean over seeds of the per-seed difference (points), "per_seed": [..],
        "ci95": [lo, hi] two-level bootstrap percentiles (None for fewer than 2 seeds or
        when a row lacks per-task outcomes),
        "tasks": tasks compared per seed, "wins"/"losses": tasks only the estimator / only
        the baseline solved, summed over seeds}. A row written before evaluations kept their
        per-task outcomes contributes its success-rate difference (``tasks`` None for it,
        wins/losses None, no interval).
    Raises:
        ValueError: a pair shares no task (different panels), or ``mode`` is unknown.
    """
    if mode not in ("greedy", "sampled"):
        raise ValueError(f"mode must be 'greedy' or 'sampled', got {mode!r}")
    diffs, wins, losses, tasks = [], 0, 0, []
    for row, base in pairs:
        ra, rb = row["after"][mode], base["after"][mode]
        if "outcomes" not in ra or "outcomes" not in rb:  # rows from before EvalResult kept outcomes: rates only
            diffs.append(np.array([ra["success_rate"] - rb["success_rate"]]))
            wins = losses = None
            tasks.append(None)
            continue
        a, b = _successes(ra), _successes(rb)
        common = sorted(set(a) & set(b))
        if not common:
            raise ValueError(f"{row['estimator']} seed {row['seed']} and its baseline share no evaluated task: "
                             "compare rows of the same --panel")
        diffs.append(np.array([a[t] - b[t] for t in common]))
        if wins is not None:
            wins += int((diffs[-1] > 0).sum())
            losses += int((diffs[-1] < 0).sum())
        tasks.append(len(common))
    per_seed = [100 * float(d.mean()) for d in diffs]
    ci = None
    if len(diffs) >= 2 and None not in tasks:  # rates alone would give a seeds-only interval: too narrow
        rng = np.random.default_rng(seed)
        boot = np.empty(draws)
        for i in range(draws):
            picked = rng.integers(len(diffs), size=len(diffs))
            boot[i] = np.mean([rng.choice(diffs[j], size=diffs[j].size).mean() for j in picked])
        ci = [100 * float(np.percentile(boot, 2.5)), 100 * float(np.percentile(boot, 97.5))]
    return {"mean": float(np.mean(per_seed)), "per_seed": per_seed, "ci95": ci, "tasks": tasks,
            "wins": wins, "losses": losses}


def _anchor(row: dict) -> tuple[float | None, float | None]:
    a = ((row.get("diagnostics") or {}).get("store", {}).get("mean", {}) or {}).get("anchor", {})
    return a.get("share_ge2"), a.get("mean_size")


def paired_summary(rows: list[dict], baseline: str = "grpo") -> str:
    """Markdown: one line per (condition, estimator) paired with ``baseline``: seeds, per-seed
    greedy differences, the mean greedy and sampled differences with their 95 % intervals,
    tasks won/lost, and the estimator's env-state anchor groups (share of turns in groups
    ≥ 2, mean size; mean over its seeds, '–' where the row has no diagnostics)."""
    def fmt(d):
        ci = "–" if d["ci95"] is None else f"[{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"
        return f"{d['mean']:+.1f} {ci}"

    lines = [f"| env | dtype | group size | estimator − {baseline} | seeds | greedy Δ per seed (points) | greedy Δ [95 % CI] | "
             "sampled Δ [95 % CI] | greedy tasks won / lost | anchor groups (≥2 / mean size) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (env, g, _, _, dtype, panel, fmt_), by_est in sorted(pair_rows(rows, baseline).items()):
        dtype = f"{dtype}, {fmt_}" if fmt_ else dtype
        for est, pairs in sorted(by_est.items()):
            gd, sd = paired_difference(pairs, "greedy"), paired_difference(pairs, "sampled")
            anchors = [_anchor(r) for r, _ in pairs]
            share = [s for s, _ in anchors if s is not None]
            size = [m for _, m in anchors if m is not None]
            anchor = f"{np.mean(share):.0%} / {np.mean(size):.2f}" if share and size else "–"
            won = f"{gd['wins']} / {gd['losses']}" if gd["wins"] is not None else "– (rates only)"
            lines.append(f"| {env_cell(env, panel)} | {dtype} | {g} | {est} | {', '.join(str(r['seed']) for r, _ in pairs)} | "
                         f"{', '.join(f'{x:+.1f}' for x in gd['per_seed'])} | {fmt(gd)} | {fmt(sd)} | {won} | {anchor} |")
    return "\n".join(lines)
