"""``agentrl replay PATH [--run R] [--episode N]``: show what a turn store holds.

Without ``--run``: the latest run. Without ``--episode``: a table of the run's episodes (id, group, task, status, return,
success, turns). With ``--episode N``: every turn of episode N — observation, action,
reward, validity, token counts and, when the trainer wrote them, the latest advantage of
each estimator. Stored text is printed literally: ``[...]`` is not rich markup, and control
characters other than newline and tab are shown as escapes (``\x1b``), never sent raw.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from agentrl.cli._text import text, visible


def register(subparsers) -> None:
    """Add the ``replay`` sub-command to ``subparsers``."""
    p = subparsers.add_parser("replay", help="show the episodes and turns of a turn store",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", metavar="PATH", help="SQLite turn store file")
    p.add_argument("--run", default=None, help="run id (default: the latest run of the store that is not a resume's <run>.interrupted-<time>)")
    p.add_argument("--episode", type=int, default=None, help="show every turn of this episode id")
    p.add_argument("--limit", type=int, default=200, help="episodes shown in the summary table (default: 200)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``agentrl replay``; returns the exit code (0).

    Raises:
        FileNotFoundError: no store at PATH. KeyError: unknown run or episode.
        SchemaVersionError: the store has another schema version. StoreDamagedError: the
        file fails SQLite's integrity check (at open, or a read fails later).
    """
    from rich.console import Console

    console = Console()
    try:
        _replay(console, args)
    except sqlite3.DatabaseError as exc:  # damage past the open-time check (e.g. a page changed since)
        from agentrl.store.schema import damaged_error

        raise damaged_error(Path(args.store), str(exc), writing=False) from exc
    return 0


def _replay(console, args: argparse.Namespace) -> None:
    from agentrl.store import EVAL_RUN, INTERRUPTED, TurnStore

    with TurnStore(args.store, readonly=True) as store:
        run_id, runs = args.run, store.runs()
        if run_id is None and len(runs) > 1:  # the latest run, not a resume's split-off attempt nor an eval
            run_id = ([r for r in runs if INTERRUPTED not in r and EVAL_RUN not in r] or runs)[-1]
            console.print(text(f"showing run {run_id}, the latest of {len(runs)} runs ({', '.join(runs)}); "
                               f"pick one with --run"), highlight=False)
        if args.episode is None:
            _summary(console, store, run_id, args.limit)
        else:
            _episode(console, store, run_id, args.episode)


def _fmt(x: float | None) -> str:
    return "unscored" if x is None else f"{x:g}"


def _summary(console, store, run_id: str | None, limit: int) -> None:
    from rich.table import Table

    recs = store.episodes(run_id)
    title = f"run {recs[0].run_id}: {len(recs)} episodes" if recs else "no episodes"
    table = Table(title=text(title), title_justify="left")
    for col in ("episode", "group", "task", "status", "return", "success", "turns"):
        table.add_column(col, justify="right" if col in ("episode", "group", "return", "turns") else "left")
    for r in recs[:limit]:
        status = text(r.status.value, "" if r.status.value == "ok" else "red")
        table.add_row(str(r.episode_id), str(r.group_id), text(r.task_id), status, _fmt(r.return_),
                      "yes" if r.success else "no", str(r.n_turns))
    console.print(table)
    if len(recs) > limit:
        console.print(f"… {len(recs) - limit} more episodes (use --limit)", highlight=False)


def _latest_advantages(store, run_id: str) -> dict[int, list[str]]:
    """turn_id → ``["gigpo@3=+0.25", ...]``: the latest iteration of each estimator."""
    latest: dict[tuple[int, str], tuple[int, float]] = {}
    for a in store.advantages(run_id):  # ordered by iteration: later ones overwrite
        latest[(a.turn_id, a.estimator)] = (a.iteration, a.value)
    out: dict[int, list[str]] = {}
    for (tid, est), (it, val) in sorted(latest.items()):
        out.setdefault(tid, []).append(f"{est}@{it}={val:+.4g}")
    return out


def _episode(console, store, run_id: str | None, episode_id: int) -> None:
    from rich.panel import Panel

    recs = store.episodes(run_id, [episode_id])
    if not recs:
        raise KeyError(f"episode {episode_id} is not in run {run_id or store.runs()[0]!r} of {store.path}; "
                       f"run `agentrl replay {store.path}` to list the episodes")
    rec = recs[0]
    head = (f"run {rec.run_id} · episode {rec.episode_id} · group {rec.group_id} · {rec.env_id} task {rec.task_id} "
            f"seed {rec.seed} · status {rec.status.value} · return {_fmt(rec.return_)} · "
            f"success {'yes' if rec.success else 'no'}")
    console.print(text(head, "bold"))
    if rec.error:
        console.print(text(f"error: {rec.error}", "red"))
    adv = _latest_advantages(store, rec.run_id)
    decoder = _decoder(store, rec.run_id)
    for tr in store.turns(episode_id, rec.run_id):
        flags = [f for f, on in (("terminated", tr.terminated), ("truncated", tr.truncated)) if on]
        meta = (f"t={tr.t} turn_id={tr.turn_id} parent={tr.parent_turn_id} reward={_fmt(tr.reward)} "
                f"valid={'yes' if tr.action_valid else 'NO'} tokens={tr.prompt_ids.size}+{tr.completion_ids.size} "
                f"policy_version={tr.policy_version}" + (f" {' '.join(flags)}" if flags else ""))
        if tr.turn_id in adv:
            meta += " advantage " + " ".join(adv[tr.turn_id])
        body = text(tr.observation)
        body.append("\n> ", style="bold green")
        body.append(visible(tr.action), style="bold green")
        if (not tr.action_valid or not tr.action.strip()) and tr.completion_ids.size:
            said = decoder.text(tr.completion_ids) if decoder else f"(no tokenizer recorded) ids {tr.completion_ids.tolist()}"
            body.append("\ncompletion: ", style="yellow")
            body.append(visible(said), style="yellow")
        console.print(text(meta, "cyan"))
        if tr.info:  # e.g. segment / fork / drift fields recorded by the rollout loop or the proxy
            console.print(text("info " + json.dumps(tr.info, sort_keys=True, separators=(",", ":")), "dim"), soft_wrap=True)
        console.print(Panel(body))


def _decoder(store, run_id: str):
    """The run's ``Decoder`` (the store's recorded tokenizer, else the config beside it), or None."""
    from agentrl.view.tokens import load_decoder, run_tokenizer

    path = run_tokenizer(store.path, run_id, store.tokenizer(run_id))
    try:
        return load_decoder(path) if path else None
    except (FileNotFoundError, ImportError):
        return None
