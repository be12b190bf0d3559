"""``studies/junction_llm.py`` and ``oracle_arm.py`` (issue 38's LLM comparison): the primary
endpoint on hand-built episodes, the oracle's advantages equal the exact ones ``llm_maze.map_batch``
computes for the same batch, the oracle arm through the real trainer (tiny random model, one
iteration: prompts rebuilt = prompts sampled, advantages stored), and the pre-registered rule's
arithmetic. Files only under tmp_path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import agentrl  # noqa: E402,F401
from agentrl.llm.chat import ChatRenderer  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402
from agentrl.types import Episode, EpisodeStatus, Turn  # noqa: E402
from agentrl_envs.junction.maze import split_mazes  # noqa: E402
from studies.junction_llm import paired, seeds_needed, summary  # noqa: E402
from studies.llm_maze import PolicyTables, map_batch, markov_loop, sample_batch  # noqa: E402
from studies.oracle_arm import junction_stats, oracle_advantages  # noqa: E402

MAZE = split_mazes(2, 24, 2, "train", 20)[0]  # k2x2c24h20-ss11-wn19: r1.1 -> r1.2 -> j1 -> r2.1 -> r2.2 -> j2


def _episode(eid: int, actions: list[str], status=EpisodeStatus.OK) -> Episode:
    g = MAZE.graph(24)
    turns, s = [], g.start
    for t, a in enumerate(actions):
        nxt = g.next_state[(s, a)]
        turns.append(Turn(run_id="r", episode_id=eid, group_id=0, t=t, observation="", anchor_obs="", action=a,
                          action_valid=True, reward=g.reward[(s, a)], info={"won": g.kind[nxt] == "goal"}))
        s = nxt
    return Episode(episode_id=eid, group_id=0, env_id="agentrl/JunctionMaze-v0", task_id=MAZE.task_id, seed=0,
                   status=status, turns=turns)


def test_junction_stats_by_hand():
    walk = MAZE.walkthrough()
    g = MAZE.graph(24)
    wrong1 = [a for a in g.actions["j1"] if a.startswith("go ") and a != walk[2]][0]
    wrong2 = [a for a in g.actions["j2"] if a.startswith("go ") and a != walk[5]][0]
    eps = [_episode(0, walk),                                     # right at j1 and j2, won
           _episode(1, walk[:2] + ["look", "wait", walk[2]] + walk[3:5] + [wrong2]),  # no-ops, then right; dies at j2
           _episode(2, walk[:2] + [wrong1]),                      # wrong at j1
           _episode(3, ["look"] * 4),                             # never reaches j1 (not chosen, not right)
           _episode(4, walk, status=EpisodeStatus.ENV_ERROR)]     # failed: never counted as right
    st = junction_stats(eps, 24)
    assert st["episodes"] == 5 and st["failed"] == 1
    assert st["success"] == pytest.approx(2 / 5)  # episode 4 ended won before its env error: counted as the env says
    assert st["first_junction_right"] == pytest.approx(2 / 5)
    assert st["first_junction_chosen"] == pytest.approx(3 / 5)
    assert st["junction_accuracy"] == pytest.approx(3 / 5)  # j1 right, j2 right (ep 0); j1 right, j2 wrong; j1 wrong


def test_oracle_advantages_equal_the_exact_ones_of_map_batch(tiny_dir, tiny_engine, tiny_tokenizer, tmp_path):
    torch.set_num_threads(1)
    renderer = ChatRenderer(tiny_tokenizer)
    store = TurnStore(tmp_path / "t.sqlite")
    eps = sample_batch(tiny_engine, renderer, store, "r", k=2, seed=7, n_tasks=2, group=3)
    tables = PolicyTables(tiny_engine.model, renderer, markov_loop(24), tiny_engine.pad_token_id)
    mb = map_batch(store, "r", eps, tables)
    adv, checks = oracle_advantages(store.table("r"), eps, PolicyTables(tiny_engine.model, renderer, markov_loop(24),
                                                                        tiny_engine.pad_token_id), 24)
    assert checks["prompt_mismatch"] == 0 and checks["logp_gap"] < 1e-5 and checks["forwards"] > 0
    np.testing.assert_allclose(adv, mb.a_true, rtol=0, atol=1e-12)
    assert np.abs(adv).max() > 0


def test_oracle_arm_trains_through_the_real_trainer(tiny_dir, tmp_path):
    from studies.oracle_arm import LIVE
    from studies.junction_llm import run_cell

    row = run_cell("oracle", 1, 0, 1, tmp_path, "float32",
                   [f"policy.model={tiny_dir}", "policy.lora=null", "rollout.groups_per_iteration=2",
                    "rollout.group_size=3", "rollout.num_workers=1", "update.micro_batch=4"])
    assert len(row["per_iter"]) == 1 and row["per_iter"][0]["episodes"] == 6
    (checks,) = row["oracle_checks"]
    assert checks["prompt_mismatch"] == 0 and checks["logp_gap"] < 1e-4  # the rebuilt prompts are the sampled ones
    assert 0.0 <= row["primary"] <= 1.0 and row["update_steps"] == 1 and row["zero_adv"][0] < 1.0
    with TurnStore(Path(row["run_dir"]) / "store.sqlite", readonly=True) as store:
        stored = store.advantages("jllm-k1-oracle-s0", estimator="exact_oracle")
    assert len(stored) > 6 and any(r.value != 0 for r in stored)
    assert LIVE.policy is not None  # captured from start_run; the patches are undone on exit
    import agentrl.train.loop as loop_mod

    assert loop_mod.collect_iteration.__module__ == "agentrl.train.steps"
    from agentrl.credit import list_estimators

    assert "exact_oracle" not in list_estimators()  # unregistered with the cell: no stale LIVE reader left behind
    from studies.junction_llm import evaluate_row

    ev = evaluate_row(row, 2)  # the checkpoint on 2 eval mazes under the run's own config (it names exact_oracle)
    assert ev["n"] == 2 and 0 <= ev["successes"] <= 2 and len(ev["outcomes"]) == 2
    assert "exact_oracle" not in list_estimators()


def test_oracle_arm_at_paraphrase_1_maps_every_sampled_prompt(tiny_dir, tmp_path):
    # paraphrased rooms: the oracle's π per (first wording, member), and every sampled prompt is one it rebuilt
    from studies.junction_llm import run_cell

    row = run_cell("oracle", 1, 0, 1, tmp_path, "float32",
                   [f"policy.model={tiny_dir}", "policy.lora=null", "rollout.groups_per_iteration=2",
                    "rollout.group_size=3", "rollout.num_workers=1", "update.micro_batch=4",
                    "env.kwargs.paraphrase=1"])
    (checks,) = row["oracle_checks"]
    assert checks["prompt_mismatch"] == 0 and checks["logp_gap"] < 1e-4 and row["update_steps"] == 1
    with TurnStore(Path(row["run_dir"]) / "store.sqlite", readonly=True) as store:
        eps = store.load_episodes("jllm-k1-oracle-s0")
    firsts = {(e.group_id, e.turns[0].anchor_obs) for e in eps}
    assert len(firsts) == len(eps)  # no two members of a group saw the entrance worded alike


def test_the_pre_registered_rule_and_paired_differences():
    rows = [{"arm": arm, "k": 5, "seed": s, "primary": p, "success_mean": 0.1, "seconds": 1.0}
            for arm, ps in (("grpo", (0.50, 0.60, 0.55)), ("g2po", (0.60, 0.62, 0.70))) for s, p in enumerate(ps)]
    p = paired(rows, "g2po", 5)
    assert p["diffs"] == pytest.approx([10.0, 2.0, 15.0])
    assert p["mean"] == pytest.approx(9.0) and p["sd"] == pytest.approx(np.std([10, 2, 15], ddof=1))
    half = 4.303 * p["sd"] / np.sqrt(3)
    assert p["ci95"] == pytest.approx((9.0 - half, 9.0 + half))
    assert seeds_needed(p["sd"]) == 4  # (2.8 · 6.56 / 10)^2 = 3.37 → 4
    assert seeds_needed(1.0) == 3 and seeds_needed(20.0) == 32  # at least 3; > 20 is reported as underpowered
    assert "4 seeds in all" in summary(rows) and paired(rows, "gigpo", 5) is None


def test_the_cli_runs_its_cells_on_the_runner_and_summary_reads_them(tiny_dir, tmp_path, capsys):
    """``junction_llm.py --ks 1 --arms grpo``: the cell trains in ROOT/runs/junction_llm/<key> and its
    result file lands in ROOT/results/junction_llm/<key>.json; ``--summary`` reads it with the merged JSON."""
    import json

    from studies import junction_llm

    extra = [f"policy.model={tiny_dir}", "policy.lora=null", "rollout.groups_per_iteration=2", "rollout.group_size=3",
             "rollout.num_workers=1", "update.micro_batch=4"]
    junction_llm.main(["--ks", "1", "--seeds", "0", "--arms", "grpo", "--iterations", "2", "--dtype", "float32",
                       "--root", str(tmp_path), "--out", str(tmp_path / "none.json"), "--set", *extra])
    cell = junction_llm.make_cell("grpo", 1, 0, 2, "float32", tuple(extra))
    assert cell.key.startswith("k1-grpo-fp32-s0-i2-x")
    record = json.loads((tmp_path / "results" / "junction_llm" / f"{cell.key}.json").read_text())
    run_dir = tmp_path / "runs" / "junction_llm" / cell.key
    assert record["torch_dtype"] == "float32" and record["row"]["run_dir"] == str(run_dir)
    assert [p["episodes"] for p in record["row"]["per_iter"]] == [6, 6]  # from the run folder's junction_iters.jsonl
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("iter_*")) == ["iter_000001", "iter_000002"]
    capsys.readouterr()
    assert junction_llm.all_rows(tmp_path / "none.json", tmp_path) == []  # a cell with --set overrides: not a grid row


def test_the_paraphrase_learning_cells(tmp_path):
    from studies.junction_llm import config_for
    from studies.paraphrase_learning import grid

    cells = grid()
    assert [c.key for c in cells[:5]] == ["k5-grpo-fp32-s0", "k5-gigpo-fp32-s0", "k5-beacon-fp32-s0",
                                          "k5-oprl-fp32-s0", "k5-oracle-fp32-s0"] and len(cells) == 15
    for arm, est in (("oprl", "oprl"), ("beacon", "beacon"), ("gigpo", "gigpo")):
        cfg = config_for(arm, 5, 0, 8, tmp_path, "float32", cells[0].config["extra"])
        assert cfg.algorithm.estimator == est and cfg.env.kwargs == {"k": 5, "paraphrase": 1}
    assert config_for("beacon", 5, 0, 8, tmp_path, "float32").algorithm.kwargs["milestone_reward"] == 1.0
