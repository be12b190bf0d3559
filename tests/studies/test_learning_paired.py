"""``studies/learning_paired.py`` and ``learning.py``'s group-size cells: paired differences
of hand-built grid rows (per-task outcomes), their bootstrap interval, pairing rules, and the
config of a groups-of-8 cell (pure functions, no model, no files)."""

from __future__ import annotations

import sys

import pytest

from studies.learning import EPISODES, config_for, merge, row_key
from studies.learning_paired import pair_rows, paired_difference, paired_summary

TASKS = ["t0", "t1", "t2", "t3"]


def _eval(solved: set[str], tasks=TASKS) -> dict:
    return {"outcomes": [[t, 1.0 if t in solved else 0.0] for t in tasks], "successes": len(solved & set(tasks)),
            "success_rate": len(solved & set(tasks)) / len(tasks)}


def _row(est: str, seed: int, greedy: set[str], sampled: set[str] | None = None, dtype="float32", **kw) -> dict:
    r = {"env": "cu1", "estimator": est, "seed": seed, "iterations": 8, "panel": 4,
         "after": {"greedy": _eval(greedy), "sampled": _eval(sampled if sampled is not None else greedy)},
         "config": {"policy": {"dtype": dtype}}}
    r.update(kw)
    return r


def test_paired_difference_hand_built():
    pairs = [(_row("gigpo", 0, {"t0", "t1"}), _row("grpo", 0, {"t1", "t2"})),   # per task +1, 0, -1, 0: 0 points
             (_row("gigpo", 1, set(TASKS)), _row("grpo", 1, {"t0", "t3"}))]     # 0, +1, +1, 0: +50 points
    d = paired_difference(pairs, "greedy", draws=2000)
    assert d["per_seed"] == [0.0, 50.0] and d["mean"] == 25.0
    assert (d["wins"], d["losses"], d["tasks"]) == (3, 1, [4, 4])
    lo, hi = d["ci95"]
    # resampled tasks of seed 0 alone reach -50 points: the interval holds task spread, not only the 2 seed means
    assert -100.0 <= lo < 0.0 < 25.0 < hi <= 100.0
    assert paired_difference(pairs, "greedy", draws=2000) == d  # seeded: reproducible


def test_identical_differences_give_a_point_interval():
    pairs = [(_row("gigpo", s, set(TASKS)), _row("grpo", s, set())) for s in (0, 1, 2)]
    d = paired_difference(pairs, draws=500)
    assert d["mean"] == 100.0 and d["ci95"] == [100.0, 100.0] and d["wins"] == 12 and d["losses"] == 0


def test_one_seed_has_no_interval_and_rates_only_rows_have_none():
    one = [(_row("gigpo", 0, {"t0"}), _row("grpo", 0, set()))]
    assert paired_difference(one)["ci95"] is None and paired_difference(one)["mean"] == 25.0
    old = _row("grpo", 1, {"t0"})
    old["after"]["greedy"] = {"success_rate": 0.5, "successes": 2}  # a row written before outcomes were kept
    d = paired_difference(one + [(_row("gigpo", 1, {"t0"}), old)])
    assert d["per_seed"] == [25.0, -25.0] and d["ci95"] is None and d["wins"] is None


def test_pairing_rules():
    rows = [_row("grpo", 0, set()), _row("grpo", 1, set()), _row("gigpo", 0, {"t0"}), _row("gigpo", 2, {"t0"}),
            _row("hgpo", 0, {"t0"}, dtype="bfloat16"),            # no bf16 baseline: unpaired
            _row("gigpo", 0, {"t1"}, group_size=8)]              # no groups-of-8 baseline: unpaired
    got = pair_rows(rows, "grpo")
    assert list(got) == [("cu1", 4, 8, 4, "float32", "", "")]
    assert [(r["seed"], b["seed"]) for r, b in got[("cu1", 4, 8, 4, "float32", "", "")]["gigpo"]] == [(0, 0)]
    table = paired_summary(rows, "grpo").splitlines()
    assert len(table) == 3 and "| cu1 | float32 | 4 | gigpo | 0 | +25.0 |" in table[2]


def test_bad_outcomes_are_refused():
    a, b = _row("gigpo", 0, {"t0"}), _row("grpo", 0, set())
    with pytest.raises(ValueError, match="mode must be"):
        paired_difference([(a, b)], "best")
    a["after"]["greedy"]["successes"] = 3
    with pytest.raises(ValueError, match="successes"):
        paired_difference([(a, b)])
    c = _row("gigpo", 0, {"t0"})
    c["after"]["greedy"] = _eval({"x"}, ["x", "y"])
    with pytest.raises(ValueError, match="share no evaluated task"):
        paired_difference([(c, b)])


def test_group_size_cells_play_the_same_episodes(tmp_path):
    for g in (4, 8):
        cfg = config_for("cc3", "gigpo", 0, 8, 24, tmp_path, dtype="float32", group_size=g)
        assert cfg.rollout.group_size == g and cfg.rollout.groups_per_iteration * g == EPISODES
    assert config_for("cc3", "grpo", 1, 8, 24, tmp_path, group_size=8).run.name == "learning-cc3-grpo-s1-g8"
    assert config_for("cc3", "grpo", 1, 8, 24, tmp_path).run.name == "learning-cc3-grpo-s1"
    for bad in (1, 5):
        with pytest.raises(ValueError, match="divide the 24 episodes"):
            config_for("cc3", "grpo", 0, 8, 24, tmp_path, group_size=bad)
    assert not list(tmp_path.iterdir())


def test_rows_without_group_size_are_groups_of_4():
    old, new4, new8 = _row("grpo", 0, set()), _row("grpo", 0, {"t0"}, group_size=4), _row("grpo", 0, set(), group_size=8)
    assert row_key(old) == row_key(new4) != row_key(new8)
    assert merge([old, new8], new4) == [new8, new4]


def test_merge_takes_the_rows_of_parallel_cells(tmp_path, monkeypatch):
    import json

    from studies import learning

    base, other = tmp_path / "base.json", tmp_path / "other.json"
    old, new, extra = _row("grpo", 0, set()), _row("grpo", 0, {"t0"}), _row("gigpo", 1, {"t1"})
    base.write_text(json.dumps({"runs": [old]}))
    other.write_text(json.dumps({"runs": [new, extra], "unfinished": [_row("turn_ppo", 0, set())]}))
    monkeypatch.setattr(sys, "argv", ["learning.py", "--out", str(base), "--merge", str(other)])
    learning.main()
    got = json.loads(base.read_text())
    assert got["runs"] == [new, extra]  # the same key is replaced, a new one added
    assert [r["estimator"] for r in got["unfinished"]] == ["turn_ppo"]


def test_a_float32_rerun_does_not_replace_a_bf16_row():
    from studies.learning_tables import label

    bf16, fp32 = _row("grpo", 0, set(), dtype="bfloat16"), _row("grpo", 0, {"t0"})
    assert row_key(bf16) != row_key(fp32) and merge([bf16], fp32) == [bf16, fp32]
    assert label(bf16) == "grpo (bfloat16)" and label(fp32) == "grpo"
    assert label(_row("grpo", 0, set(), dtype="bfloat16", group_size=8)) == "grpo (groups of 8, bfloat16)"


def test_rows_of_another_panel_are_neither_replaced_paired_nor_averaged():
    """A run on today's panel must not replace a row of an older panel of the same size (the ‡
    panels of repeated tasks), nor pair with it, nor share its mean."""
    from studies.learning_tables import summary

    def on(row, sha):
        for mode in ("greedy", "sampled"):
            row["after"][mode]["panel_sha256"] = sha
        return row

    extra = {"before": {m: {**_eval(set()), "wilson": [0.0, 0.5], "n": 4, "mean_turns": 8.0} for m in ("greedy", "sampled")},
             "seconds": {"train": 1.0, "eval_after": 1.0}}
    old = on(_row("grpo", 0, set(), **extra), "aaaa" * 16)
    new = on(_row("grpo", 0, {"t0", "t1"}, **extra), "bbbb" * 16)
    gigpo_new = on(_row("gigpo", 0, {"t0", "t1", "t2"}, **extra), "bbbb" * 16)
    for r in (old, new, gigpo_new):
        for m in ("greedy", "sampled"):
            r["after"][m].update(wilson=[0.0, 1.0], n=4, mean_turns=4.0)
    assert row_key(old) != row_key(new) and merge([old], new) == [old, new]
    got = pair_rows([old, new, gigpo_new], "grpo")
    assert [(r["estimator"], b["after"]["greedy"]["success_rate"]) for r, b in
            next(iter(got.values()))["gigpo"]] == [("gigpo", 0.5)]  # paired with the same panel's baseline
    table = summary([old, new, gigpo_new]).splitlines()
    means = table[table.index("") + 3:]  # after the per-run table and the means' header
    assert [m.split(" | ")[:4] for m in means] == [["| cu1 (panel aaaaaaaa)", "grpo", "1", "0.0%"],
                                                   ["| cu1 (panel bbbbbbbb)", "gigpo", "1", "75.0%"],
                                                   ["| cu1 (panel bbbbbbbb)", "grpo", "1", "50.0%"]]
    assert table[2].startswith("| cu1 (panel aaaaaaaa) | grpo | 0 |")  # per-run rows name their panel too


def test_turn_ppo_critic_settings_are_separate_cells():
    """A turn-PPO row with another critic (lr, prompts per step) is its own cell: merged, paired
    and labelled apart from the old one, whose row is kept."""
    from studies.learning_tables import label

    def tppo(seed, lr, k=None, won=frozenset()):
        r = _row("turn_ppo", seed, set(won), dtype="bfloat16")
        r["config"]["update"] = {"critic_lr": lr, **({} if k is None else {"critic_minibatch": k})}
        return r

    old, new, new1 = tppo(0, 1e-5), tppo(0, 1e-4, 16, {"t0"}), tppo(1, 1e-4, 16)
    assert row_key(old) != row_key(new) and merge([old], new) == [old, new]
    assert label(old) == "turn_ppo (critic lr 1e-05, bfloat16)"
    assert label(new) == "turn_ppo (critic lr 0.0001, 16 prompts/step, bfloat16)"
    grpo = [_row("grpo", s, set(), dtype="bfloat16") for s in (0, 1)]
    by_est = pair_rows([*grpo, old, new, new1], "grpo")[("cu1", 4, 8, 4, "bfloat16", "", "")]
    assert sorted(by_est) == ["turn_ppo (critic lr 0.0001, 16 prompts/step)", "turn_ppo (critic lr 1e-05)"]
    assert [r["seed"] for r, _ in by_est["turn_ppo (critic lr 0.0001, 16 prompts/step)"]] == [0, 1]
    assert label(_row("grpo", 0, set(), dtype="bfloat16")) == "grpo (bfloat16)"  # other rows: no critic part


def test_tagged_control_cells_are_their_own_cells(tmp_path):
    """``learning.py --tagged``: GRPO under HiPER's tagged decoding has exactly HiPER's policy and env
    sections (same prompt, decoding and before-evaluation), its own run name, and its rows are merged,
    labelled and paired apart from the plain-format rows: HiPER pairs with the tagged GRPO only."""
    from studies.learning_tables import label

    from agentrl.config import to_dict

    tagged = config_for("jm5", "grpo", 1, 8, 24, tmp_path, group_size=8, tagged=True)
    hiper = config_for("jm5", "hiper", 1, 8, 24, tmp_path, group_size=8)
    plain = config_for("jm5", "grpo", 1, 8, 24, tmp_path, group_size=8)
    assert to_dict(tagged)["policy"] == to_dict(hiper)["policy"] != to_dict(plain)["policy"]
    assert to_dict(tagged)["env"] == to_dict(hiper)["env"] == to_dict(plain)["env"]
    assert (tagged.policy.action_format, tagged.policy.action_constraint, tagged.algorithm.estimator) == (
        "hiper", "admissible", "grpo")
    assert tagged.policy.hiper_subgoals == ("reach the next junction", "take the exit the sign names")
    assert tagged.run.name == "learning-jm5-grpo-s1-g8-tagged" and plain.run.name == "learning-jm5-grpo-s1-g8"
    assert to_dict(config_for("jm5", "hiper", 1, 8, 24, tmp_path, group_size=8, tagged=True)) == to_dict(hiper) | {
        "run": to_dict(hiper)["run"] | {"name": "learning-jm5-hiper-s1-g8-tagged"}}  # hiper is tagged already
    with pytest.raises(ValueError, match="junction maze only"):
        config_for("cc3", "grpo", 0, 8, 24, tmp_path, tagged=True)
    assert not list(tmp_path.iterdir())

    def cell(est, seed, won, fmt):
        r = _row(est, seed, won, dtype="bfloat16", env="jm5", group_size=8)
        r["config"]["policy"]["action_format"] = fmt
        return r

    g_plain, g_tag = cell("grpo", 0, {"t0", "t1"}, "tag:action"), cell("grpo", 0, set(), "hiper")
    h0, h1, g_tag1 = cell("hiper", 0, {"t2"}, "hiper"), cell("hiper", 1, set(), "hiper"), cell("grpo", 1, {"t3"}, "hiper")
    assert row_key(g_plain) != row_key(g_tag) and merge([g_plain], g_tag) == [g_plain, g_tag]
    assert label(g_tag) == "grpo (hiper tags, groups of 8, bfloat16)" and label(g_plain) == "grpo (groups of 8, bfloat16)"
    got = pair_rows([g_plain, g_tag, h0, h1, g_tag1], "grpo")
    assert list(got) == [("jm5", 8, 8, 4, "bfloat16", "", "hiper tags")]  # the plain grpo row pairs with nothing
    pairs = got[("jm5", 8, 8, 4, "bfloat16", "", "hiper tags")]["hiper"]
    assert [(r["seed"], b["seed"], b["config"]["policy"]["action_format"]) for r, b in pairs] == [(0, 0, "hiper"), (1, 1, "hiper")]
    assert paired_difference(pairs)["per_seed"] == [25.0, -25.0]
    assert "| jm5 | bfloat16, hiper tags | 8 | hiper | 0, 1 | +25.0, -25.0 |" in paired_summary([g_plain, g_tag, h0, h1, g_tag1])
