"""The Markdown tables of ``studies/learning.py`` (``--summary``): one row per run with its
diagnostics, the means over seeds, and the unfinished cells."""

from __future__ import annotations

from studies.learning_paired import critic_of, dtype_of, env_cell, format_of, group_size_of, panel_of


def unfinished_summary(rows: list[dict]) -> str:
    """Markdown: one line per unfinished cell (no after-evaluation)."""
    lines = ["| env | estimator | seed | iterations done / planned | training success per iteration (sampled) | "
             "turns per iteration | zero adv | anchor groups (≥2 / mean size) | estimator groups per term (≥2 / mean size) "
             "| A > 0 in failed / A < 0 in succeeded | why not finished |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        succ = " ".join(f"{x:.0%}" for x in r["train_success_per_iter"])
        turns = " ".join(f"{x:.0f}" for x in r["diagnostics"]["logged"]["per_iter"]["rollout/turns"])
        lines.append(f"| {r['env']} | {r['estimator']} | {r['seed']} | {r['iterations_done']} / {r['iterations']} | {succ} "
                     f"| {turns} | " + " | ".join(diag_cells(r)) + f" | {r['reason']} |")
    return "\n".join(lines)


def label(row: dict) -> str:
    """The estimator column: the name, plus turn-PPO's critic settings, 'hiper tags' for the tagged
    action format, the group size where it is
    not the default 4 and the dtype where it is not float32 (the means over seeds never mix
    dtypes or critic settings)."""
    g, dtype, critic, fmt = group_size_of(row), dtype_of(row), critic_of(row), format_of(row)
    extra = ([critic] if critic else []) + ([fmt] if fmt else []) + ([f"groups of {g}"] if g != 4 else []) + ([dtype] if dtype != "float32" else [])
    return row["estimator"] + (f" ({', '.join(extra)})" if extra else "")


def pct(r: dict) -> str:
    """'62.5% [43%, 79%] (15/24)': success rate, 95 % Wilson interval, counts of an EvalResult dict."""
    lo, hi = r["wilson"]
    return f"{r['success_rate']:.1%} [{lo:.0%}, {hi:.0%}] ({r['successes']}/{r['n']})"


def _f(x, fmt: str) -> str:
    return "–" if x is None or (isinstance(x, float) and x != x) else format(x, fmt)


def diag_cells(r: dict) -> list[str]:
    """The diagnostics columns of one row: zero-advantage share (logged), anchor groups
    (share of turns in groups >= 2, mean size; from the store), the estimator's own
    comparison groups per term (share >= 2 / mean size), the outcome signs (share of the nonzero
    advantages of below-group-mean episodes that are > 0 / of above-mean ones that are < 0).
    '–' for rows without diagnostics.
    The zero-advantage share is followed by the share of turns in flat task groups."""
    d = r.get("diagnostics")
    if not d:
        return ["–", "–", "–", "–"]
    st = d["store"]["mean"]
    zero = d["logged"]["mean"].get("adv/zero_frac")
    a = st.get("anchor", {})
    terms = "; ".join(f"{name}: {_f(t.get('share_ge2'), '.0%')} / {_f(t.get('mean_size'), '.1f')}"
                      for name, t in st.get("terms", {}).items()) or "–"
    flat = st.get("flat_group_share")
    sg = st.get("signs", {})
    return [f"{_f(zero, '.0%')} (flat groups {_f(flat, '.0%')})", f"{_f(a.get('share_ge2'), '.0%')} / {_f(a.get('mean_size'), '.2f')}", terms,
            f"{_f(sg.get('below_positive'), '.0%')} / {_f(sg.get('above_negative'), '.0%')}"]


def condition_cell(r: dict) -> str:
    """'float32, 1 thr, load 4.1→3.8': dtype, torch threads and 1-min load at start → end of a row."""
    dtype = r.get("config", {}).get("policy", {}).get("dtype", "?")
    c = r.get("condition")
    if not c:
        return f"{dtype}, –"
    return (f"{dtype}, {c['start']['torch_threads']} thr, load {c['start']['loadavg'][0]:.1f}→"
            f"{c['end']['loadavg'][0]:.1f}")


def summary(rows: list[dict]) -> str:
    """Markdown: one line per run (with its diagnostics, where recorded), then mean ± sd of
    the greedy/sampled rise over seeds."""
    import numpy as np

    lines = ["| env (panel) | estimator | seed | greedy before | greedy after | sampled before | sampled after | "
             "turns (greedy) | turns trained | wall (train + after-eval) | condition | zero adv | anchor groups (≥2 / mean size) | "
             "estimator groups per term (≥2 / mean size) | A > 0 in failed / A < 0 in succeeded |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["env"], panel_of(r), label(r), r["seed"])):
        b, a = r["before"], r["after"]
        wall = r["seconds"]["train"] + r["seconds"]["eval_after"]
        lines.append(f"| {env_cell(r['env'], panel_of(r))} | {label(r)} | {r['seed']} | {pct(b['greedy'])} | {pct(a['greedy'])} | "
                     f"{pct(b['sampled'])} | {pct(a['sampled'])} | {b['greedy']['mean_turns']:.2f} → "
                     f"{a['greedy']['mean_turns']:.2f} | {r.get('turns_trained', '–')} | {wall:.0f} s | {condition_cell(r)} | "
                     + " | ".join(diag_cells(r)) + " |")
    lines += ["", "| env (panel) | estimator | seeds | greedy after (mean) | greedy rise (mean ± sd, points) | "
              "sampled rise (mean ± sd, points) |", "|---|---|---|---|---|---|"]
    cells = sorted({(r["env"], panel_of(r), label(r)) for r in rows})  # never a mean over two panels
    for env, panel, est in cells:
        rs = [r for r in rows if r["env"] == env and panel_of(r) == panel and label(r) == est]
        g = np.array([100 * (r["after"]["greedy"]["success_rate"] - r["before"]["greedy"]["success_rate"]) for r in rs])
        s = np.array([100 * (r["after"]["sampled"]["success_rate"] - r["before"]["sampled"]["success_rate"]) for r in rs])
        after = np.mean([r["after"]["greedy"]["success_rate"] for r in rs])
        sd = (lambda x: f"{x.std(ddof=1):.1f}" if x.size > 1 else "–")
        lines.append(f"| {env_cell(env, panel)} | {est} | {len(rs)} | {after:.1%} | {g.mean():+.1f} ± {sd(g)} | {s.mean():+.1f} ± {sd(s)} |")
    return "\n".join(lines)
