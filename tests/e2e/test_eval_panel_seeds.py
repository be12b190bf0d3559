"""Evaluation you can trust (issue 21), end to end with the tiny random model on the toy env:
explicit evaluation seeds (``agentrl eval --sampled --seed S``: another seed draws anew, the
same seed repeats), the seed in the output, the JSON and every stored eval episode, and the
trainer's before → after evaluation on one panel, stored under its own run ids."""

from __future__ import annotations

import json

import pytest
import yaml

pytest.importorskip("torch")

from agentrl.store import TurnStore  # noqa: E402


def _raw(tiny_dir, out_dir, name="evalrun"):
    return {
        "run": {"name": name, "out_dir": str(out_dir), "iterations": 1, "eval_every": 1, "save_every": 1, "seed": 3},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 4, "split": "train", "eval_split": "eval", "eval_panel_size": 7},
        "policy": {"model": str(tiny_dir), "max_tokens": 6, "action_format": "whole", "temperature": 1.0},
        "rollout": {"groups_per_iteration": 2, "group_size": 2, "num_workers": 1},
        "algorithm": {"estimator": "grpo"},
        "update": {"lr": 1e-2, "micro_batch": 4, "epochs": 1},
        "log": {"console": False},
    }


def _eval(main, cfg_path, tmp_path, seed: int, tag: str, capsys):
    out, db = tmp_path / f"{tag}.json", tmp_path / "evals.sqlite"
    assert main(["eval", str(cfg_path), "--sampled", "--seed", str(seed), "--store", str(db), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    body = json.loads(out.read_text())
    with TurnStore(db, readonly=True) as store:
        episodes = store.load_episodes(body["run_id"])
    return printed, body, episodes


def _draw(episodes):
    return [(e.task_id, [t.completion_ids.tolist() for t in e.turns]) for e in episodes]


def test_cli_eval_seeds_differ_repeat_and_are_recorded(tiny_dir, tmp_path, capsys):
    from agentrl.cli import main

    cfg_path = tmp_path / "eval.yaml"
    cfg_path.write_text(yaml.safe_dump(_raw(tiny_dir, tmp_path)))
    out1, body1, eps1 = _eval(main, cfg_path, tmp_path, 1, "s1", capsys)
    out1b, body1b, eps1b = _eval(main, cfg_path, tmp_path, 1, "s1b", capsys)
    out2, body2, eps2 = _eval(main, cfg_path, tmp_path, 2, "s2", capsys)

    assert "sampled success" in out1 and "seed 1" in out1 and "seed 2" in out2
    assert body1["seed"] == 1 and body2["seed"] == 2 and body1["mode"] == "sampled"
    assert body1["panel_sha256"] == body2["panel_sha256"] and body1["panel_size"] == 7
    # stored under their own run ids, one episode per distinct panel task
    assert body1["run_id"] == "evalrun/eval-sampled-s1" and body1b["run_id"] == "evalrun/eval-sampled-s1-2"
    assert len(eps1) == 7 and len({e.task_id for e in eps1}) == 7
    assert {e.task_id for e in eps1} == {t for t, _ in body1["outcomes"]}
    for eps, seed in ((eps1, 1), (eps2, 2)):
        assert all(t.info["eval"] == {"seed": seed, "mode": "sampled", "panel": body1["panel_sha256"]}
                   for e in eps for t in e.turns)
    # the same seed repeats the draw, another seed draws anew (same panel, same tasks)
    assert _draw(eps1) == _draw(eps1b) and body1["outcomes"] == body1b["outcomes"]
    assert [t for t, _ in _draw(eps1)] == [t for t, _ in _draw(eps2)]
    assert _draw(eps1) != _draw(eps2)


def test_train_evaluates_before_and_after_on_one_panel(tiny_dir, tmp_path, capsys):
    from agentrl.cli import main

    raw = _raw(tiny_dir, tmp_path, name="ba")
    raw["run"].update({"eval_before": True, "eval_seed": 5})
    cfg_path = tmp_path / "ba.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    assert main(["train", str(cfg_path), "--no-resume"]) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "ba"
    panel = json.loads((run_dir / "eval_panel.json").read_text())
    assert len(panel["entries"]) == 7 and len({e["digest"] for e in panel["entries"]}) == 7
    sha = panel["sha256"]
    assert "eval before: " in out and "eval iter 1: " in out and "seed 5" in out
    assert f"held-out before -> after (iter 1, same panel {sha[:12]})" in out and "paired 95% bootstrap" in out
    with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
        assert {"ba", "ba/eval-before", "ba/eval-iter1"} <= set(store.runs())
        for run_id in ("ba/eval-before", "ba/eval-iter1"):
            eps = store.load_episodes(run_id)
            assert len(eps) == 7 and {t.info["eval"]["panel"] for e in eps for t in e.turns} == {sha}
            assert {t.info["eval"]["seed"] for e in eps for t in e.turns} == {5}
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert rows[0]["step"] == 0 and "eval/greedy_success" in rows[0].get("metrics", rows[0])
