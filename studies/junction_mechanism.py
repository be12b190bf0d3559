"""What each arm of issue 51's study learned, turn by turn: the mechanism behind its numbers.

The primary endpoint (exact held-out success) says *whether* an arm learned; this module says *what*:
read from a study cell's run folder (its store and ``metrics.jsonl``), per training iteration,

* ``voiced_right`` — share of the exits taken at junctions whose sign comes with a voice (``A voice says:
  go east.``) that are the right exit: "follow the voice", the skill the shared LoRA can learn once;
* ``unvoiced_right`` — the same at junctions without a voice (the cue word must be learned per sign);
* ``noop_share`` — share of all turns that are ``look`` / ``wait`` (no-ops in this maze: the state, and
  the text shown, stay the same, and a turn of the budget is spent);
* ``entropy`` — the update's mean token entropy (``update/entropy``; None where no update ran) and
  ``updated`` — whether the iteration updated the policy at all (no update: every advantage was 0, e.g.
  every episode of every group identical).

Counts are over the iteration's ok episodes (failed episodes are flagged by the trainer and left out
here). ``summary`` averages them over thirds of the run (pooled counts, not a mean of shares).

Usage::

    .venv/bin/python -m studies.junction_mechanism            # every study cell whose run folder exists
    .venv/bin/python -m studies.junction_mechanism --table    # print the committed JSON as a table
    .venv/bin/python -m studies.junction_mechanism --table --plot   # + results/junction_llm_v2_mechanism.png

The JSON (``studies/results/junction_llm_v2_mechanism.json``, ``out_path``) keeps the entry of a cell whose run folder is
gone (run folders are git-ignored), so it only grows.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentrl.types import Episode, EpisodeStatus
from agentrl_envs.junction.maze import EXITS
from studies.oracle_arm import turn_roles
from studies.runner import ROOT

STUDY = "junction_llm_v2"

COUNTS = ("voiced_exits", "voiced_right_exits", "unvoiced_exits", "unvoiced_right_exits", "noop_turns", "turns",
          *(f"exit_{d}" for d in EXITS))
CREDIT = ("credit_abs", "credit_abs_exits", "credit_right", "credit_wrong", *(f"credit_{d}" for d in EXITS))


def episode_counts(episode: Episode, horizon: int, advantage: dict[int, float] | None = None) -> dict[str, float]:
    """Junction choices, no-ops and the credit they got in one episode.

    Args:
        episode: an episode of ``agentrl/JunctionMaze-v0`` (its ``task_id`` a ``Maze.task_id``).
        horizon: the run's ``env.max_turns``.
        advantage: turn id -> the advantage the update used (None or a missing turn: 0).
    Returns:
        ``COUNTS`` (ints): exits taken / right at voiced and at unvoiced junctions, no-op turns, turns, junction
        exits per direction (``exit_north`` …); ``CREDIT`` (floats): Σ|A| over all turns and over junction exits,
        Σ A at right and at wrong exits, Σ A at exits per direction (``credit_north`` …).
    Raises:
        ValueError: the task id is not a junction maze's, or an action is not admissible where taken.
    """
    c: dict[str, float] = dict.fromkeys(COUNTS, 0) | dict.fromkeys(CREDIT, 0.0)
    for turn, (_, role, voiced, right) in zip(episode.turns, turn_roles(episode, horizon)):
        a = (advantage or {}).get(turn.turn_id, 0.0)
        c["turns"] += 1
        c["credit_abs"] += abs(a)
        if role == "noop":
            c["noop_turns"] += 1
        elif role.startswith("exit_"):
            c[f"{voiced}_exits"] += 1
            c[f"{voiced}_right_exits"] += right
            c[role] += 1
            c["credit_abs_exits"] += abs(a)
            c["credit_right" if right else "credit_wrong"] += a
            c[f"credit_{role[5:]}"] += a
    return c


def shares(c: dict[str, int]) -> dict[str, float | None]:
    """Shares of pooled ``COUNTS`` and ``CREDIT`` (None where the denominator is 0):

    ``voiced_right``, ``unvoiced_right``, ``noop_share``; ``top_exit``: the junction exit direction taken most
    and its share of all junction exits (a policy that ignores the sign and the voice and always takes one
    direction: near 1); ``exit_credit_share``: the share of Σ|A| that sits on junction exits (the only turns
    where a choice decides the outcome); ``right_credit``: (Σ A at right exits − Σ A at wrong ones) / Σ|A| at
    exits, in [−1, 1] (1: every right exit pushed up, every wrong one down); ``top_credit``: the direction, of those
    taken, whose exits got the largest net Σ A and that sum / Σ|A| at exits (a pull toward one direction whatever
    is right)."""
    def div(a: int, b: int) -> float | None:
        return a / b if b else None
    top = max(EXITS, key=lambda d: c[f"exit_{d}"])
    pull = max([d for d in EXITS if c[f"exit_{d}"]] or EXITS, key=lambda d: c[f"credit_{d}"])  # of exits taken
    return {"voiced_right": div(c["voiced_right_exits"], c["voiced_exits"]),
            "unvoiced_right": div(c["unvoiced_right_exits"], c["unvoiced_exits"]),
            "noop_share": div(c["noop_turns"], c["turns"]),
            "top_exit": [top, div(c[f"exit_{top}"], c["voiced_exits"] + c["unvoiced_exits"])],
            "exit_credit_share": div(c["credit_abs_exits"], c["credit_abs"]),
            "right_credit": div(c["credit_right"] - c["credit_wrong"], c["credit_abs_exits"]),
            "top_credit": [pull, div(c[f"credit_{pull}"], c["credit_abs_exits"])]}


def per_iteration(episodes: list[Episode], iteration: dict[int, int], metrics: list[dict], horizon: int,
                  advantage: dict[int, float] | None = None) -> list[dict]:
    """One record per training iteration: pooled ``COUNTS`` and ``CREDIT`` of its ok episodes, their
    ``shares``, ``entropy`` and ``updated`` from that iteration's metrics row.

    Args:
        episodes: the run's episodes.
        iteration: episode id -> the 1-based iteration that stored it (``TurnStore.episode_iterations``);
            episodes not in it (eval episodes) are left out.
        metrics: the rows of ``metrics.jsonl`` (``step`` = iteration).
        horizon: the run's ``env.max_turns``.
        advantage: turn id -> the advantage its iteration's update used (``stored_advantages``)."""
    by: dict[int, dict[str, float]] = {}
    for ep in episodes:
        it = iteration.get(ep.episode_id)
        if it is None or ep.status != EpisodeStatus.OK:
            continue
        acc = by.setdefault(it, dict.fromkeys(COUNTS, 0) | dict.fromkeys(CREDIT, 0.0))
        for k, v in episode_counts(ep, horizon, advantage).items():
            acc[k] += v
    mrow = {int(m["step"]): m for m in metrics}
    out = []
    for it in sorted(by):
        m = mrow.get(it, {})
        out.append({"iteration": it, **by[it], **shares(by[it]), "entropy": m.get("update/entropy"),
                    "updated": "update/steps" in m})
    return out


def summary(per_iter: list[dict], parts: int = 3) -> list[dict]:
    """``per_iter`` cut into ``parts`` consecutive spans of iterations: pooled shares, mean entropy over the
    updated iterations, and how many iterations updated."""
    n = len(per_iter)
    out = []
    for p in range(parts):
        span = per_iter[p * n // parts:(p + 1) * n // parts]
        if not span:
            continue
        pooled = {k: sum(r[k] for r in span) for k in COUNTS + CREDIT}
        ent = [r["entropy"] for r in span if r["entropy"] is not None]
        out.append({"iterations": [span[0]["iteration"], span[-1]["iteration"]], **shares(pooled),
                    "entropy": sum(ent) / len(ent) if ent else None,
                    "updated": sum(r["updated"] for r in span), "of": len(span)})
    return out


def stored_advantages(records: list, episodes: list[Episode], iteration: dict[int, int]) -> dict[int, float]:
    """turn id -> the advantage the update of the turn's own iteration used (``AdvantageRecord``s of one run;
    a record of another iteration — a resumed run recomputes some — is passed over)."""
    it_of_turn = {t.turn_id: iteration[e.episode_id] for e in episodes if e.episode_id in iteration for t in e.turns}
    return {r.turn_id: float(r.value) for r in records if it_of_turn.get(r.turn_id) == r.iteration}


def cell_mechanism(run_dir: Path) -> dict:
    """``per_iter`` and ``summary`` of one study cell's run folder (``store.sqlite``, ``metrics.jsonl``,
    ``config.yaml``); the run is the one named after the folder.

    Raises:
        FileNotFoundError: the folder lacks the store or the metrics."""
    import yaml

    from agentrl.store import TurnStore

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
        eps, its = store.load_episodes(run_dir.name), store.episode_iterations(run_dir.name)
        adv = stored_advantages(store.advantages(run_dir.name), eps, its)
    per = per_iteration(eps, its, metrics, int(cfg["env"]["max_turns"]), adv)
    return {"per_iter": per, "summary": summary(per)}


def out_path(root: Path = ROOT) -> Path:
    """The committed JSON: ``<root>/results/junction_llm_v2_mechanism.json``."""
    return Path(root) / "results" / f"{STUDY}_mechanism.json"


def collect(root: Path = ROOT) -> dict:
    """Every study cell with a committed result row (``<root>/results/junction_llm_v2/k*.json``) and a run folder
    (``<root>/runs/junction_llm_v2/<key>``): its ``cell_mechanism``, merged into ``out_path(root)``'s entries
    (kept where the folder is gone), written back (one line per cell); returns them."""
    out = out_path(root)
    have = json.loads(out.read_text()) if out.exists() else {}
    for row in sorted((Path(root) / "results" / STUDY).glob("k*.json")):
        run_dir = Path(root) / "runs" / STUDY / row.stem
        if (run_dir / "store.sqlite").exists() and (run_dir / "metrics.jsonl").exists():
            have[row.stem] = cell_mechanism(run_dir)
    out.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(have.items())) + "\n}\n")
    return have


def _signed(x: float | None) -> str:
    return "    —" if x is None else f"{x:+.2f}"


def table(cells: dict) -> str:
    """One line per cell and third of the run: voiced / unvoiced right %, no-op %, entropy, updates."""
    def pct(x: float | None) -> str:
        return "  —" if x is None else f"{100 * x:3.0f}"
    lines = ["cell                         iters   voiced unvoiced noop  top exit    entropy updated  |A| at exits "
             "right credit  pull"]
    for key, m in cells.items():
        for s in m["summary"]:
            ent = "    —" if s["entropy"] is None else f"{s['entropy']:.3f}"
            lines.append(f"{key:28s} {s['iterations'][0]:2d}-{s['iterations'][1]:2d}    {pct(s['voiced_right'])} %"
                         f"   {pct(s['unvoiced_right'])} %  {pct(s['noop_share'])} %  {s['top_exit'][0]:5s} {pct(s['top_exit'][1])} %"
                         f"  {ent}   {s['updated']:2d}/{s['of']}     {pct(s['exit_credit_share'])} %"
                         f"       {_signed(s['right_credit'])}   {s['top_credit'][0]:5s} {_signed(s['top_credit'][1])}")
    return "\n".join(lines)


def arm_of(key: str) -> tuple[str, str]:
    """(condition, arm) of a study cell key, e.g. ``k5-x2-h12-4x8-g2po-s3`` -> (``k5-x2-h12-4x8``, ``g2po``)."""
    head, arm, _seed = key.rsplit("-", 2)
    return head, arm


def plot(cells: dict, out: Path) -> Path:
    """Per condition, per arm (mean over seeds, min–max band): voiced-exit accuracy, no-op share, the
    update's entropy and the right credit at exits (``shares``) per iteration (a missing value — no update, no voiced exit — carried from the iteration before).
    PNG at ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from studies.junction_llm_v2_report import COLORS, curve

    conds = sorted({arm_of(k)[0] for k in cells}, reverse=True)
    names = (("voiced_right", "voiced exits right (%)", 100), ("noop_share", "look / wait turns (%)", 100),
             ("entropy", "update entropy (nats / token)", 1), ("right_credit", "right credit at exits (−1 … 1)", 1))
    fig, axes = plt.subplots(len(conds), len(names), figsize=(18, 3.4 * len(conds)), squeeze=False)
    for i, cond in enumerate(conds):
        for arm, color in COLORS.items():
            runs = [m["per_iter"] for k, m in cells.items() if arm_of(k) == (cond, arm)]
            if not runs:
                continue
            n = min(len(r) for r in runs)
            for j, (field, _, scale) in enumerate(names):
                ys = np.array([_carried([p[field] for p in r[:n]]) for r in runs], dtype=float)
                curve(axes[i][j], list(range(1, n + 1)), scale * ys, color, arm)
        for j, (_, title, _) in enumerate(names):
            axes[i][j].set_title(f"{cond}: {title}", fontsize=9)
            axes[i][j].set_xlabel("iteration")
            axes[i][j].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _carried(xs: list[float | None]) -> list[float]:
    """None replaced by the last value before it (NaN before the first)."""
    out, last = [], float("nan")
    for x in xs:
        last = last if x is None else x
        out.append(last)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", action="store_true", help="print the committed JSON; read no run folder")
    p.add_argument("--plot", action="store_true", help="also write results/junction_llm_v2_mechanism.png")
    p.add_argument("--root", type=Path, default=ROOT, help="folder of runs/ and results/ (default: studies/)")
    a = p.parse_args(argv)
    cells = json.loads(out_path(a.root).read_text()) if a.table else collect(a.root)
    print(table(cells))
    if a.plot:
        print(plot(cells, out_path(a.root).with_suffix(".png")))


if __name__ == "__main__":
    main()
