"""``studies/runner.py``: a toy study of 2 cells on the tiny model through the real trainer — one
runs to its result file; the other is interrupted after its first checkpoint, shows as left (stale
marker, resumes from that checkpoint) and, run again, resumes instead of restarting. Then the
states from the files alone (a live marker: running and refused) and ``--status`` on the studies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from studies import runner
from studies.runner import Cell, CellBusy, Study, result_path, run_cell, run_path, status, status_table

pytest.importorskip("torch")


def _toy(tiny_dir) -> Study:
    """2 cells (seeds 0 and 1) of 2 iterations of GRPO on Toy-v0 with the tiny model, float32."""

    def run(cell: Cell, run_dir: Path) -> dict:
        from agentrl.config import config_from_dict
        from agentrl.train import train

        cfg = config_from_dict({
            "run": {"name": run_dir.name, "out_dir": str(run_dir.parent), "seed": cell.seed,
                    "iterations": cell.config["iterations"], "eval_every": 0, "save_every": 1},
            "env": {"id": "agentrl/Toy-v0", "max_turns": 4, "split": "train", "eval_split": "eval"},
            "policy": {"model": str(tiny_dir), "dtype": "float32", "max_tokens": 6, "action_format": "whole",
                       "action_constraint": "admissible"},
            "rollout": {"groups_per_iteration": 1, "group_size": 2, "num_workers": 1},
            "algorithm": {"estimator": "grpo"}, "update": {"lr": 1e-3, "micro_batch": 2}, "log": {"console": False}})
        result = train(cfg, resume=True)
        return {"iterations": result.state.iteration, "episodes": result.state.episodes_stored}

    cells = [Cell("toy", f"toy-s{s}", {"iterations": 2}, s) for s in (0, 1)]
    return Study("toy", lambda root: cells, run)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_cell_runs_and_an_interrupted_one_resumes_from_its_checkpoint(tiny_dir, tmp_path, monkeypatch):
    import agentrl.train.loop as loop
    from agentrl.store import TurnStore

    study = _toy(tiny_dir)
    done, cut = study.grid(tmp_path)
    assert status(tmp_path, [study]) == [("toy", "toy-s0", "left", "not started"), ("toy", "toy-s1", "left", "not started")]

    record = run_cell(study, done, tmp_path)
    saved = json.loads(result_path(tmp_path, done).read_text())
    assert saved == json.loads(json.dumps(record)) and saved["row"] == {"iterations": 2, "episodes": 4}
    assert (saved["study"], saved["key"], saved["seed"], saved["config"]) == ("toy", "toy-s0", 0, {"iterations": 2})
    assert saved["cpu"]["avx512_bf16"] == ("avx512_bf16" in Path("/proc/cpuinfo").read_text())
    assert saved["torch_dtype"] == "float32" and saved["seconds"] > 0 and saved["started"] <= saved["finished"]
    assert len(saved["git_commit"]) == 40 and [x["resumed_from"] for x in saved["launches"]] == [None]
    assert saved["launches"][0]["started"] >= saved["started"][:10]
    assert not runner.marker_path(run_path(tmp_path, done)).exists()

    real = loop.run_iteration

    def second_fails(parts, cfg, it, *a, **kw):
        if it == 1:
            raise KeyboardInterrupt("killed in iteration 2")
        return real(parts, cfg, it, *a, **kw)

    monkeypatch.setattr(loop, "run_iteration", second_fails)
    with pytest.raises(KeyboardInterrupt):
        run_cell(study, cut, tmp_path)
    monkeypatch.setattr(loop, "run_iteration", real)
    run_dir = run_path(tmp_path, cut)
    ckpt = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert ckpt.startswith("iter_") and not result_path(tmp_path, cut).exists()
    assert status(tmp_path, [study])[1] == ("toy", "toy-s1", "left", f"resumes from {ckpt}")

    pid = _dead_pid()  # as a killed session leaves it
    runner.marker_path(run_dir).write_text(json.dumps({"pid": pid, "host": runner.socket.gethostname(), "started": "x"}))
    assert status(tmp_path, [study]) == [
        ("toy", "toy-s0", "done", f"{saved['finished']}, 0 min, float32"),
        ("toy", "toy-s1", "left", f"interrupted (pid {pid} gone), resumes from {ckpt}")]

    resumed = run_cell(study, cut, tmp_path)
    assert resumed["row"] == {"iterations": 2, "episodes": 4}
    assert [x["resumed_from"] for x in resumed["launches"]] == [None, f"checkpoints/{ckpt}"]
    with TurnStore(run_dir / "store.sqlite", readonly=True) as st:
        table = st.table("toy-s1")
        assert len(st.episodes("toy-s1")) == 4  # 2 iterations x 2 episodes: iteration 1's were not played again
    assert sorted(set(zip(table.episode.tolist(), table.policy_version.tolist()))) == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert not list(run_dir.parent.glob("*.prev-*"))  # never set aside: a resume, not a fresh start
    assert [r[2] for r in status(tmp_path, [study])] == ["done", "done"]
    assert run_cell(study, cut, tmp_path) == json.loads(json.dumps(resumed))  # done: read back, not trained


def test_a_live_marker_is_running_and_refused_and_cells_outside_the_grid_are_listed(tmp_path):
    calls = []
    cells = [Cell("stub", "a", {}, 0), Cell("stub", "b", {}, 0)]
    study = Study("stub", lambda root: cells, lambda cell, run_dir: calls.append(cell.key) or {"dtype": "bfloat16"},
                  historical=lambda cell: "old.json" if cell.key == "b" else None)
    run_path(tmp_path, cells[0]).mkdir(parents=True)
    runner.marker_path(run_path(tmp_path, cells[0])).write_text(json.dumps(
        {"pid": runner.os.getpid(), "host": runner.socket.gethostname(), "started": "t0"}))
    with pytest.raises(CellBusy, match="running in pid"):
        run_cell(study, cells[0], tmp_path)
    assert calls == []
    extra = Cell("stub", "c-smoke", {}, 0)
    record = run_cell(study, extra, tmp_path)  # a cell outside the grid (e.g. --smoke)
    assert calls == ["c-smoke"] and record["torch_dtype"] == "bfloat16"  # no config.yaml: the row's dtype
    rows = status(tmp_path, [study])
    assert rows[:2] == [("stub", "a", "running", f"pid {runner.os.getpid()} since t0"), ("stub", "b", "done", "old.json")]
    assert rows[2][:3] == ("stub", "c-smoke", "done")
    assert status_table(rows).splitlines()[-1] == "2 done, 1 running, 0 left"


def test_left_cells_follow_a_growing_grid_and_pass_over_a_running_cell(tmp_path, monkeypatch):
    """Several ``--left`` processes share a study: a cell another live process holds is not offered; the grid is
    re-read after each cell (here b appears once a is done); a marker created between the look and the start
    (two processes racing) refuses the second."""
    a, b, c = (Cell("stub", key, {}, 0) for key in ("a", "b", "c"))
    study = Study("stub", lambda root: [a, c] + ([b] if result_path(root, a).is_file() else []),
                  lambda cell, run_dir: {"dtype": "float32"})
    run_path(tmp_path, c).mkdir(parents=True)
    runner.marker_path(run_path(tmp_path, c)).write_text(json.dumps(
        {"pid": runner.os.getpid(), "host": runner.socket.gethostname(), "started": "t0"}))
    cells = runner.left_cells(study, tmp_path)
    first = next(cells)
    assert first.key == "a"
    run_cell(study, first, tmp_path)
    assert [x.key for x in cells] == ["b"]  # c is running elsewhere; b came with a's result
    monkeypatch.setattr(runner, "marker", lambda run_dir: None)  # the look saw no marker, then c's was written
    with pytest.raises(CellBusy, match="taken by another process"):
        run_cell(study, c, tmp_path)
    assert json.loads(runner.marker_path(run_path(tmp_path, c)).read_text())["started"] == "t0"  # not overwritten


def test_status_of_the_studies_on_a_clean_root(tmp_path, capsys):
    """No runs and no cell results under the root: the pilot's cells are done from its merged JSON."""
    runner.main(["--status", "--study", "junction_llm", "--root", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["| study | cell | state | note |", "|---|---|---|---|",
                       "| junction_llm | k5-grpo-bf16-s0 | done | junction_llm.json (before the runner) |"]
    assert out[-1] == "24 done, 0 running, 0 left"
    runner.main(["--root", str(tmp_path)])  # every study: only the cells with no result anywhere are left
    fresh = sum(len(runner.load_study(name).grid(tmp_path))  # results live under the root, none here; the older
                for name in ("expert_fidelity", "overlap_fidelity", "paraphrase_learning", "junction_map",
                             "junction_llm_v2", "harness_learning"))  # studies: merged JSONs
    assert capsys.readouterr().out.splitlines()[-1].endswith(f"done, 0 running, {fresh} left")
    assert not list(tmp_path.iterdir())


def test_the_marker_survives_a_fresh_start_that_sets_the_folder_aside(tmp_path):
    """A launch killed in its first iteration leaves a store but no checkpoint; the next launch's trainer starts
    fresh and renames that folder to ``<key>.prev-<stamp>`` (``agentrl.train.run_dir.set_aside``). The cell must
    stay marked running meanwhile (the marker lived inside the folder and went with it, 2026-12-07)."""
    from agentrl.train.run_dir import set_aside

    cell = Cell("stub", "a", {}, 0)
    seen = []

    def run(c, run_dir):
        moved = set_aside(run_dir)  # what train() does on a fresh start in a used folder
        seen.append((moved is not None and moved.name.startswith("a.prev-"), runner.marker(run_dir)[0],
                     [r[2] for r in status(tmp_path, [study])]))
        return {"dtype": "float32"}

    study = Study("stub", lambda root: [cell], run)
    run_dir = run_path(tmp_path, cell)
    run_dir.mkdir(parents=True)
    (run_dir / "store.sqlite").write_bytes(b"")
    run_cell(study, cell, tmp_path)
    assert seen == [(True, "running", ["running"])]
    assert runner.marker(run_dir) is None and [r[2] for r in status(tmp_path, [study])] == ["done"]
