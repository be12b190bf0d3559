"""Resumable cells, shared by the studies: run one, see which are done, running or left.

A cell is one (study, config, seed) with a stable ``key``. Running it trains through the real
trainer in a run folder that outlives the session, ``<root>/runs/<study>/<key>/`` (git-ignored),
with ``train(cfg, resume=True)`` and a checkpoint every iteration, so an interrupted cell goes on
from its last ``checkpoints/iter_<k>`` when it is run again. While it runs, ``RUNNING.json`` in
the run folder holds its pid (stale when that pid is dead: the session was killed). When it
ends the cell's result is written to ``<root>/results/<study>/<key>.json`` — one file per finished
cell, so each can be committed on its own::

    {"study", "key", "seed", "config": the cell's parameters,
     "cpu": {"avx512_bf16": bool, "amx_bf16": bool, "model": str}, "torch_dtype": policy.dtype of the run,
     "git_commit", "git_dirty", "started", "finished" (UTC), "seconds" (this session's),
     "launches": [{"started", "resumed_from"}, ...] (the run folder's launches.jsonl), "row": the study's row}

A study is a module of this package with a ``STUDY`` (``Study``: its grid of cells and the
function that runs one in a given run folder); ``STUDIES`` names them.

Usage::

    python -m studies.runner --status [--study learning]   # every cell: done / running / left
    python -m studies.runner --study learning --run cu1-grpo-bf16-s0   # run (or resume) cells by key
    python -m studies.runner --study junction_llm --left     # run every cell without a result, in order
                                                            # (several processes share the cells)
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent  #: studies/: runs/ (git-ignored) and results/
STUDIES = ("learning", "junction_llm", "expert_fidelity", "overlap_fidelity", "paraphrase_learning",
           "junction_map", "junction_llm_v2", "harness_learning")  #: modules of this package with a STUDY
MARKER = "RUNNING.json"  #: a live cell's marker, beside its run folder: ``.<key>.RUNNING.json`` (``marker_path``)


@dataclass(frozen=True)
class Cell:
    """One cell: ``key`` (stable; names its run folder and result file), the study's parameters
    ``config`` (JSON values) and the ``seed``."""

    study: str
    key: str
    config: dict = field(hash=False)
    seed: int = 0


@dataclass(frozen=True)
class Study:
    """A study on the runner: ``grid(root)`` its defined cells (``root``: the runner's folder, where a grid
    that grows with its finished cells reads them; a fixed grid ignores it); ``run(cell, run_dir)`` trains one in
    ``run_dir`` (resuming what is there) and returns its row; ``historical(cell)`` (optional) a
    note when the cell's row is in a merged JSON written before the runner existed."""

    name: str
    grid: Callable[[Path], list[Cell]]
    run: Callable[[Cell, Path], dict]
    historical: Callable[[Cell], str | None] = lambda cell: None


class CellBusy(RuntimeError):
    """The cell is running in another live process."""


def load_study(name: str) -> Study:
    """The ``STUDY`` of ``studies.<name>``."""
    return importlib.import_module(f"studies.{name}").STUDY


def run_path(root: Path, cell: Cell) -> Path:
    """The cell's run folder: ``<root>/runs/<study>/<key>``."""
    return Path(root) / "runs" / cell.study / cell.key


def result_path(root: Path, cell: Cell) -> Path:
    """The cell's result file: ``<root>/results/<study>/<key>.json``."""
    return Path(root) / "results" / cell.study / f"{cell.key}.json"


def utc() -> str:
    """Now, as ``YYYY-mm-ddTHH:MM:SSZ``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def marker_path(run_dir: Path) -> Path:
    """The marker of the cell whose run folder is ``run_dir``: ``<parent>/.<name>.RUNNING.json``. Beside the
    folder, not in it: a trainer's fresh start renames a folder it finds holding a store but no checkpoint (a
    launch killed in its first iteration) to ``<name>.prev-<stamp>``, and a marker inside would go with it,
    leaving the live cell unmarked (seen 2026-12-07)."""
    run_dir = Path(run_dir)
    return run_dir.parent / f".{run_dir.name}.{MARKER}"


def marker(run_dir: Path) -> tuple[str, dict] | None:
    """('running' | 'stale', the marker's content) of a run folder's marker (``marker_path``); None without one.
    Stale: its pid is dead (or it was written on another host: it cannot be checked from here)."""
    path = marker_path(run_dir)
    if not path.is_file():
        return None
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return "stale", {}
    same_host = m.get("host") == socket.gethostname()
    return ("running" if same_host and _alive(int(m.get("pid", 0))) else "stale"), m


@contextmanager
def running(run_dir: Path) -> Iterator[None]:
    """Hold the marker of ``run_dir`` (``marker_path``) while the block runs (a stale one is replaced).

    Raises:
        CellBusy: a live process holds it."""
    state = marker(run_dir)
    if state and state[0] == "running":
        raise CellBusy(f"{run_dir} is running in pid {state[1].get('pid')} since {state[1].get('started')}")
    run_dir.mkdir(parents=True, exist_ok=True)
    path = marker_path(run_dir)
    if state:  # stale: its process is gone
        path.unlink(missing_ok=True)
    try:  # created exclusively: of two processes that found the cell free, one holds it
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        raise CellBusy(f"{run_dir} was taken by another process just now") from None
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": utc()}))
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def cpu_kind() -> dict:
    """The CPU's bf16 support (``avx512_bf16`` / ``amx_bf16`` in /proc/cpuinfo) and model name."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    return {"avx512_bf16": "avx512_bf16" in info, "amx_bf16": "amx_bf16" in info, "model": model}


def git_commit(cwd: Path = ROOT) -> tuple[str | None, bool]:
    """(HEAD's commit, whether tracked files differ from it) of the repository at ``cwd``."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None, False
    return head.stdout.strip(), bool(dirty.stdout.strip())


def _launches(run_dir: Path) -> list[dict]:
    path = run_dir / "launches.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [{k: d.get(k) for k in ("started", "resumed_from")} for d in map(json.loads, filter(str.strip, lines))]


def _dtype(run_dir: Path, row: dict) -> str | None:
    import yaml

    path = run_dir / "config.yaml"
    cfg = yaml.safe_load(path.read_text()) if path.is_file() else {}
    return (cfg.get("policy") or {}).get("dtype") or row.get("dtype")


def run_cell(study: Study, cell: Cell, root: Path = ROOT) -> dict:
    """Run (or resume) ``cell`` in its run folder and write its result file; returns the result
    (read back, without training, when the file exists already).

    Raises:
        CellBusy: the cell is running in another live process."""
    out = result_path(root, cell)
    if out.is_file():
        return json.loads(out.read_text())
    run_dir = run_path(root, cell)
    with running(run_dir):
        started, t0 = utc(), time.perf_counter()
        row = study.run(cell, run_dir)
        seconds = time.perf_counter() - t0
    commit, dirty = git_commit()
    record = {"study": cell.study, "key": cell.key, "seed": cell.seed, "config": cell.config, "cpu": cpu_kind(),
              "torch_dtype": _dtype(run_dir, row), "git_commit": commit, "git_dirty": dirty, "started": started,
              "finished": utc(), "seconds": seconds, "launches": _launches(run_dir), "row": row}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=float))
    tmp.replace(out)
    return record


def finished(root: Path, study: str) -> list[dict]:
    """Every result file of ``study`` under ``root``, by key."""
    folder = Path(root) / "results" / study
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


def _checkpoint(run_dir: Path) -> str | None:
    latest = run_dir / "checkpoints" / "latest"
    return latest.read_text().strip() if latest.is_file() else None


def cell_state(root: Path, cell: Cell, historical: str | None = None) -> tuple[str, str]:
    """('done' | 'running' | 'left', a note) of one cell, from the files under ``root`` alone."""
    out, run_dir = result_path(root, cell), run_path(root, cell)
    if out.is_file():
        r = json.loads(out.read_text())
        return "done", f"{r.get('finished', '?')}, {r.get('seconds', 0) / 60:.0f} min, {r.get('torch_dtype')}"
    m, ckpt = marker(run_dir), _checkpoint(run_dir)
    if m and m[0] == "running":
        return "running", f"pid {m[1].get('pid')} since {m[1].get('started')}" + (f", at {ckpt}" if ckpt else "")
    if historical:
        return "done", historical
    notes = ([f"interrupted (pid {m[1].get('pid')} gone)"] if m else []) + ([f"resumes from {ckpt}"] if ckpt else [])
    return "left", ", ".join(notes) or ("started, no checkpoint yet" if run_dir.is_dir() else "not started")


def status(root: Path, studies: list[Study]) -> list[tuple[str, str, str, str]]:
    """(study, key, state, note) of every cell of the grids of ``studies``, then of any other cell
    with a result file or a live/stale marker under ``root`` (cells run outside the grid)."""
    rows = []
    for study in studies:
        name, grid = study.name, study.grid(root)
        keys = {c.key for c in grid}
        rows += [(name, c.key, *cell_state(root, c, study.historical(c))) for c in grid]
        extra = {p.stem for p in (Path(root) / "results" / name).glob("*.json")} | {
            p.name[1:-len(MARKER) - 1] for p in (Path(root) / "runs" / name).glob(f".*.{MARKER}")}
        rows += [(name, k, *cell_state(root, Cell(name, k, {}))) for k in sorted(extra - keys)]
    return rows


def status_table(rows: list[tuple[str, str, str, str]]) -> str:
    """The Markdown table of ``status`` rows, and a count per state."""
    lines = ["| study | cell | state | note |", "|---|---|---|---|"] + [f"| {' | '.join(r)} |" for r in rows]
    counts = {s: sum(r[2] == s for r in rows) for s in ("done", "running", "left")}
    return "\n".join(lines + ["", ", ".join(f"{n} {s}" for s, n in counts.items())])


def main(argv: list[str] | None = None) -> None:
    """The command line (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--status", action="store_true", help="print every cell's state and exit")
    ap.add_argument("--study", choices=STUDIES, help="one study (default: all, for --status)")
    ap.add_argument("--run", nargs="+", metavar="KEY", help="run (or resume) these cells of --study")
    ap.add_argument("--left", action="store_true", help="run every cell of --study that is left, in grid order")
    ap.add_argument("--root", type=Path, default=ROOT, help="folder of runs/ and results/ (default: studies/)")
    args = ap.parse_args(argv)
    if args.status or not (args.run or args.left):
        print(status_table(status(args.root, [load_study(n) for n in ([args.study] if args.study else STUDIES)])))
        return
    if not args.study:
        ap.error("--run / --left need --study")
    study = load_study(args.study)
    grid = {c.key: c for c in study.grid(args.root)}
    unknown = sorted(set(args.run or ()) - set(grid))
    if unknown:
        ap.error(f"not cells of {args.study}'s grid: {', '.join(unknown)} (see --status)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for cell in (grid[k] for k in args.run) if args.run else left_cells(study, args.root):
        try:
            r = run_cell(study, cell, args.root)
        except CellBusy as e:  # another process took it between the look and the start
            print(f"{args.study} {cell.key}: {e}; passed over", flush=True)
            continue
        print(f"{args.study} {cell.key}: done, {r['seconds']:.0f} s -> {result_path(args.root, cell)}", flush=True)


def left_cells(study: Study, root: Path = ROOT) -> Iterator[Cell]:
    """The cells of ``study`` left to run, in grid order, the grid re-read after each (a study whose grid grows
    with its results, e.g. a seed count read from the first seeds, gets its new cells); a cell another process
    runs is not 'left', so several processes share one study's cells (``main`` passes over one taken between
    the look and the start: ``running`` creates its marker exclusively)."""
    tried: set[str] = set()
    while True:
        cell = next((c for c in study.grid(root) if c.key not in tried
                     and cell_state(root, c, study.historical(c))[0] == "left"), None)
        if cell is None:
            return
        tried.add(cell.key)
        yield cell


if __name__ == "__main__":
    main()
