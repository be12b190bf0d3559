"""Issue 51's tabular map: ``studies/role_policy.py`` (roles read off a real maze, the shared-skill
logits and their Adam step by hand, the role means and prior) and ``studies/junction_map.py`` (a
seed's arms start paired, the summary's paired differences by hand, a cell that resumes at the next
seed gives the same row as one run straight, the heatmap PNG, the grid on the runner)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from studies import junction_map as jm
from studies.role_policy import ROLES, RolePolicy, action_roles, prior_logits, role_means
from studies.runner import Cell, Study, run_cell, status


def _maze(k: int = 2, exits: int = 2, hinted: int = 0, seed: int = 3, split: str = "train"):
    import gymnasium as gym

    import agentrl_envs  # noqa: F401

    env = gym.make("agentrl/JunctionMaze-v0", k=k, split=split, n_exits=exits, n_hinted=hinted).unwrapped
    env.reset(seed=seed)
    return env.task_graph(), env.unwrapped.maze


def _role(name: str) -> int:
    return ROLES.index(name)


@pytest.mark.parametrize("exits", [2, 3])
def test_roles_on_a_real_maze(exits):
    g, maze = _maze(k=5, exits=exits, hinted=12, seed=1)
    kinds = {"hinted": 0, "plain": 0}
    for s, acts in g.actions.items():
        roles = action_roles(g, s)
        assert roles[acts.index("look")] == _role("look") and roles[acts.index("wait")] == _role("wait")
        exits_of = [i for i, a in enumerate(acts) if a.startswith("go ")]
        if g.kind[s] != "junction":
            assert all(roles[i] == _role("onward") for i in exits_of)
            continue
        j = int(s[1:])
        right = acts.index(f"go {maze.right_exit(j)}")
        if maze.hinted(j):
            kinds["hinted"] += 1
            assert roles[right] == _role("voiced")  # the voice names the right exit
            assert all(roles[i] == _role("unvoiced") for i in exits_of if i != right)
        else:
            kinds["plain"] += 1
            assert all(roles[i] == _role("exit") for i in exits_of)  # no role knows an unhinted cue
    assert kinds["hinted"] + kinds["plain"] == 5


def test_probs_are_the_softmax_of_table_plus_shared_logits_and_one_adam_step_by_hand():
    g, _ = _maze(k=2, exits=2, hinted=24, seed=0)  # every junction hinted
    prior = {"voiced": 1.0, "unvoiced": -1.0, "onward": 0.5, "look": -0.5}
    pol = RolePolicy(lr=0.1, prior=prior)
    pol.prime(g)
    j1 = g.observation["j1"]
    theta0 = np.array([prior.get(r, 0.0) for r in ROLES])
    z = theta0[action_roles(g, "j1")]
    np.testing.assert_allclose(pol.probs(j1, len(g.actions["j1"])), np.exp(z) / np.exp(z).sum(), rtol=1e-12)
    # one ascent step: the table moves lr·sign(g) per entry, θ by lr·sign(Σ g per role) (Adam's first step)
    grads = {j1: np.array([0.3, -0.1, -0.15, -0.05]), g.observation["j2"]: np.array([-0.2, 0.0, 0.1, 0.1])}
    r1, r2 = action_roles(g, "j1"), action_roles(g, "j2")
    per_role = np.bincount(r1, grads[j1], len(ROLES)) + np.bincount(r2, grads[g.observation["j2"]], len(ROLES))
    pol.step(grads)
    np.testing.assert_allclose(pol.logits[j1], 0.1 * np.sign(grads[j1]), atol=1e-7)
    np.testing.assert_allclose(pol.theta, theta0 + 0.1 * np.sign(per_role), atol=1e-7)
    assert pol.theta[_role("exit")] == 0.0 and per_role[_role("exit")] == 0.0  # no unhinted junction here
    frozen = RolePolicy(lr=0.1, prior=prior, shared=False)
    frozen.prime(g)
    frozen.step(grads)
    np.testing.assert_array_equal(frozen.theta, theta0)  # shared=False: θ stays the prior
    np.testing.assert_allclose(frozen.logits[j1], pol.logits[j1])


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown roles"):
        RolePolicy(prior={"follow": 1.0})
    g, _ = _maze()
    with pytest.raises(KeyError, match="not primed"):
        RolePolicy().probs(g.observation[g.start], 3)


def test_role_means_and_prior_round_trip():
    g, _ = _maze(k=2, exits=2, hinted=24, seed=0)
    pol = RolePolicy(prior={"voiced": np.log(0.7), "unvoiced": np.log(0.1), "onward": np.log(0.8),
                            "look": np.log(0.1), "wait": np.log(0.1)})
    pol.prime(g)
    means = role_means([g], [pol.state_policy(g)])
    assert set(means) == {"voiced", "unvoiced", "onward", "look", "wait"}  # no unhinted junction: no "exit"
    assert means["voiced"] == pytest.approx(0.7) and means["onward"] == pytest.approx(0.8)
    assert means["look"] == pytest.approx(0.1)
    assert prior_logits(means)["voiced"] == pytest.approx(np.log(0.7))


def test_greedy_success_follows_the_argmax_path():
    g, _ = _maze(k=3, exits=2, hinted=24, seed=2)
    follow = RolePolicy(prior={"voiced": 2.0, "onward": 2.0})
    assert follow.greedy_success(g) is True
    stay = RolePolicy(prior={"wait": 3.0})  # waits until the horizon
    assert stay.greedy_success(g) is False
    wrong = RolePolicy(prior={"unvoiced": 3.0, "onward": 2.0})  # the first junction's wrong exit is a dead end
    assert wrong.greedy_success(g) is False


def _cfg(**over) -> dict:
    cfg = {"k": 1, "exits": 2, "hinted": 12, "groups": 2, "size": 4, "seeds": 3, "iterations": 8,
           "arms": list(jm.ARMS), "eval_mazes": 4, "lr": 0.7}
    return {**cfg, **over}


PRIOR = {"voiced": np.log(0.6), "unvoiced": np.log(0.15), "exit": np.log(0.35), "onward": np.log(0.6),
         "look": np.log(0.15), "wait": np.log(0.15)}


def test_a_seed_pairs_its_arms_and_reports_every_checkpoint():
    cfg = _cfg()
    evals = jm.eval_graphs(1, 2, 12, 4)
    rec = jm.run_seed(cfg, 0, PRIOR, evals)
    first = {arm: rec[arm]["train"][0] for arm in jm.ARMS}
    assert len(set(first.values())) == 1  # iteration 1: same initial policy, mazes and sampling seed
    for arm in jm.ARMS:
        r = rec[arm]
        assert len(r["train"]) == 8 and all(0.0 <= x <= 1.0 for x in r["train"])
        assert sorted(r["greedy"]) == [0, 8] and sorted(r["v"]) == [0, 8]  # 16, 30, 50 lie past 8 iterations
        assert r["greedy"][0] == rec["grpo"]["greedy"][0] and r["v"][0] == rec["grpo"]["v"][0]
    assert 0.0 < rec["v0"] < 1.0


def test_summary_differences_by_hand():
    def rec(seed, grpo, oracle):
        mk = lambda x: {"train": [x] * 50, "greedy": {str(n): x for n in (0, *jm.CHECKPOINTS)},  # noqa: E731
                        "v": {str(n): x for n in (0, *jm.CHECKPOINTS)}}
        return {"seed": seed, "v0": 0.1, "grpo": mk(grpo), "g2po": mk(grpo), "oracle": mk(oracle)}

    seeds = [rec(0, 0.5, 0.6), rec(1, 0.5, 0.8), rec(2, 0.4, 0.4)]
    row = jm.summarize(_cfg(iterations=50), seeds)
    d = row["diff"]["oracle"]["greedy"]["50"]
    diffs = np.array([10.0, 30.0, 0.0])
    h = 1.96 * diffs.std(ddof=1) / np.sqrt(3)
    assert d["mean"] == pytest.approx(diffs.mean()) and d["sd"] == pytest.approx(diffs.std(ddof=1))
    assert d["ci95"] == pytest.approx([diffs.mean() - h, diffs.mean() + h])
    assert row["diff"]["g2po"]["auc"]["8"]["mean"] == 0.0 and row["arms"]["oracle"]["auc"]["8"] == pytest.approx(0.6)
    assert row["seeds"] == 3 and row["v0"] == pytest.approx(0.1)


def test_a_cell_resumes_at_the_next_seed_and_plots(tmp_path):
    prior = tmp_path / "prior.json"
    prior.write_text(json.dumps({"prior": {"2": PRIOR}}))
    cell = Cell("junction_map", "k1-x2-h12-2x4", _cfg(seeds=2))
    straight = jm.run_cell(cell, tmp_path / "a", prior)
    log = tmp_path / "b" / "seeds.jsonl"
    log.parent.mkdir()
    log.write_text((tmp_path / "a" / "seeds.jsonl").read_text().splitlines()[0] + "\n")  # killed after seed 0
    resumed = jm.run_cell(cell, tmp_path / "b", prior)
    assert len(log.read_text().splitlines()) == 2
    for key in ("arms", "diff", "v0", "seeds"):
        assert resumed[key] == straight[key]
    results = [{"key": cell.key, "config": cell.config, "row": straight},
               {"key": "k1-x2-h12-2x4b", "config": cell.config, "row": resumed}]
    png = jm.plot(results, tmp_path / "map.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = jm.summary(results)
    assert text.count(f"| {cell.key} |") == 1 and straight["checkpoints"] == [8]  # 8 iterations reach n = 8 only


def test_the_grid_is_on_the_runner(tmp_path):
    keys = [c.key for c in jm.grid()]
    assert len(keys) == len(set(keys)) == len(jm.CONDITIONS) and keys[0] == f"k5-x2-h0-4x8-lr{jm.LR:g}"
    rows = status(tmp_path, [jm.STUDY])
    assert {r[1] for r in rows} == set(keys) and all(r[2] == "left" for r in rows)


def test_a_missing_calibration_says_how_to_make_it(tmp_path):
    from studies.junction_prior import load_prior

    with pytest.raises(FileNotFoundError, match="python -m studies.junction_prior"):
        load_prior(tmp_path / "none.json")
    cell = Cell("junction_map", "k1-x2-h12-2x4", _cfg(seeds=1))
    with pytest.raises(FileNotFoundError):
        run_cell(Study("junction_map", lambda root: [cell], lambda c, d: jm.run_cell(c, d, tmp_path / "none.json")),
                 cell, tmp_path)


def test_the_step_size_is_matched_to_the_llm_pilots_gain(tmp_path):
    prior = tmp_path / "prior.json"
    prior.write_text(json.dumps({"prior": {"2": PRIOR}}))
    data = jm.calibrate_lr([0.02, 0.7], seeds=8, prior_path=prior)
    assert data["llm_seeds"] == 3 and len(data["llm_pilot"]["grpo"]) == len(data["llm_pilot"]["oracle"]) == 8
    slow, fast = data["rows"]
    assert slow["grpo"][0] == fast["grpo"][0]  # iteration 1: the same initial policy and episodes
    assert jm._gain(fast["grpo"]) > jm._gain(slow["grpo"])  # a larger step learns faster
    want = jm._gain(data["llm_pilot"]["grpo"])
    assert data["chosen"] == min(data["rows"], key=lambda r: abs(jm._gain(r["grpo"]) - want))["lr"]
    assert jm._gain([0.1, 0.2, 0.3]) == pytest.approx(0.1)
