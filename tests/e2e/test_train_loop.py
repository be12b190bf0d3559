"""End-to-end: the training loop with the tiny random model on the toy env.

Covers the issue-5 "must show" items that need the whole loop: a 2-iteration run stores
every turn with its advantage, same seed → identical TurnTable / advantages / first
update, and the resume edge cases of PITFALLS P7.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from e2e_crash import crash_before_checkpoint  # noqa: E402

from agentrl.config import config_from_dict  # noqa: E402
from agentrl.store import TurnStore  # noqa: E402


def _cfg(tiny_dir, out_dir, name="run", iterations=2, **extra):
    raw = {
        "run": {"name": name, "out_dir": str(out_dir), "iterations": iterations, "eval_every": 2, "save_every": 1,
                "seed": 3},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 8, "split": "train", "eval_split": "eval",
                "eval_panel_size": 3},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole",
                   "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1},
        "algorithm": {"estimator": "gigpo"},
        "update": {"lr": 1e-2, "micro_batch": 4, "epochs": 1},
        "log": {"console": False},
    }
    for key, value in extra.items():
        section, field = key.split("__")
        raw[section][field] = value
    return config_from_dict(raw)


def _weights(run_dir):
    from agentrl.update.checkpoint import checkpoint_weights

    folder = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text()
    return checkpoint_weights(folder), torch.load(folder / "state.pt", weights_only=False)["state"]


@pytest.fixture(scope="module")
def finished_run(tiny_dir, tmp_path_factory):
    from agentrl.train import train

    out = tmp_path_factory.mktemp("runs")
    return train(_cfg(tiny_dir, out), resume=False), out


def test_two_iterations_store_every_turn_with_advantage(finished_run):
    result, _ = finished_run
    assert result.state.iteration == 2 and result.state.policy_version == 2
    assert result.state.episodes_stored == 2 * 2 * 4
    with TurnStore(result.store_path, readonly=True) as store:
        eps = store.episodes(result.run_id)
        assert len(eps) == 16
        table = store.table(run_id=result.run_id)
        adv = store.advantages(result.run_id)
        assert store.tokenizer(result.run_id) is not None  # replay / the viewer decode the ids with it
    assert len(adv) == len(table) > 0  # one advantage per stored turn
    assert set(int(i) for i in table.turn_id) == {int(a.turn_id) for a in adv}
    assert table.action_valid.all()  # constrained decoding only emits admissible actions
    assert len({int(g) for g in table.group}) == 4  # fresh tasks each iteration, ids unique over the run
    lines = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]
    for key in ("rollout/success_rate", "rollout/invalid_rate", "adv/std", "adv/zero_frac",
                "adv/anchor_singleton_rate", "time/rollout_s"):
        assert key in lines[0]
    assert "eval/greedy_success" in lines[1] and len(result.evals) == 1 and result.evals[0].n == 3


def test_one_iteration_numbering_everywhere(finished_run):
    """Issue 23 item 3: console/metrics.jsonl steps, the store's advantages and metrics, and the
    checkpoint names all call the two iterations 1 and 2 (policy versions 0 and 1 sampled them)."""
    result, _ = finished_run
    lines = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    with TurnStore(result.store_path, readonly=True) as store:
        adv_iters = sorted({a.iteration for a in store.advantages(result.run_id)})
        metric_iters = sorted({m.iteration for m in store.metrics(result.run_id)})
        versions = sorted({t.policy_version for e in store.load_episodes(result.run_id) for t in e.turns})
    checkpoints = sorted(p.name for p in (result.run_dir / "checkpoints").glob("iter_*"))
    assert [x["step"] for x in lines] == adv_iters == metric_iters == [1, 2]
    assert checkpoints == ["iter_000001", "iter_000002"] and versions == [0, 1]


def test_signal_reaches_the_update(finished_run):
    result, _ = finished_run
    lines = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    # random layouts and sampled admissible actions: some episodes win, some do not
    assert any(x["adv/zero_frac"] < 1.0 for x in lines)
    assert result.state.optimizer_steps >= 1
    assert any(x.get("update/grad_norm", 0) > 0 for x in lines)


def test_resume_at_final_iteration_trains_nothing(finished_run, tiny_dir):
    from agentrl.train import train

    result, out = finished_run
    latest = result.run_dir / "checkpoints" / "latest"
    before = (latest.read_text(), latest.stat().st_mtime_ns, sorted(p.name for p in latest.parent.iterdir()))
    again = train(_cfg(tiny_dir, out), resume=True)
    assert again.state == result.state
    assert (latest.read_text(), latest.stat().st_mtime_ns, sorted(p.name for p in latest.parent.iterdir())) == before
    with TurnStore(result.store_path, readonly=True) as store:
        assert len(store.episodes(result.run_id)) == 16


def test_same_seed_same_run_and_resume_equals_uninterrupted(tiny_dir, tmp_path, finished_run):
    """Same seed → identical turns, advantages and weights; an interrupted run (1 iteration,
    then resumed to 2) performs the same optimizer steps and ends with the same weights."""
    from agentrl.train import train

    reference, _ = finished_run
    first = train(_cfg(tiny_dir, tmp_path, name="split", iterations=1), resume=False)
    assert first.state.iteration == 1
    resumed = train(_cfg(tiny_dir, tmp_path, name="split", iterations=2), resume=True)
    assert resumed.state == reference.state
    w_ref, _ = _weights(reference.run_dir)
    w_new, _ = _weights(resumed.run_dir)
    assert w_ref.keys() == w_new.keys()
    for k in w_ref:
        assert torch.equal(w_ref[k], w_new[k]), k
    with TurnStore(reference.store_path, readonly=True) as a, TurnStore(resumed.store_path, readonly=True) as b:
        ta, tb = a.table(run_id=reference.run_id), b.table(run_id=resumed.run_id)
        for col in ("group", "episode", "t", "reward", "action_valid", "anchor_key", "action_key"):
            assert np.array_equal(getattr(ta, col), getattr(tb, col)), col
        va = np.array([x.value for x in a.advantages(reference.run_id)])
        vb = np.array([x.value for x in b.advantages(resumed.run_id)])
        assert np.array_equal(va, vb)


def test_turn_ppo_trains_a_critic(tiny_dir, tmp_path):
    """turn-PPO: the critic fills the value column, its loss is logged, advantages are stored."""
    from agentrl.train import train

    result = train(_cfg(tiny_dir, tmp_path, name="tppo", iterations=1, algorithm__estimator="turn_ppo",
                        run__eval_every=0), resume=False)
    line = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert line["critic/loss"] >= 0 and "critic/explained_var" in line
    with TurnStore(result.store_path, readonly=True) as store:
        n_turns = len(store.table(run_id=result.run_id))
        assert len(store.advantages(result.run_id, estimator="turn_ppo")) == n_turns


def test_episode_weighting_options_through_the_loop(tiny_dir, tmp_path):
    """Issue 19 item 10 through the whole loop: the episode-normalised aggregation trains (its
    steps see real tokens) and both weighting choices are recorded in the run's config.yaml."""
    import yaml

    from agentrl.train import train

    result = train(_cfg(tiny_dir, tmp_path, name="epw", iterations=2, run__eval_every=0,
                        update__aggregation="episode-mean-token-mean",
                        algorithm__kwargs={"stats_over": "episodes"}), resume=False)
    lines = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    stepped = [x for x in lines if "update/grad_norm" in x]
    assert result.state.optimizer_steps >= 1 and stepped
    assert all(x["update/steps"] >= 1 and np.isfinite(x["update/loss"]) for x in stepped)
    assert any(x["update/grad_norm"] > 0 for x in stepped)
    recorded = yaml.safe_load((result.run_dir / "config.yaml").read_text())
    assert recorded["update"]["aggregation"] == "episode-mean-token-mean"
    assert recorded["algorithm"]["kwargs"]["stats_over"] == "episodes"


def test_cli_eval_checkpoint_and_train_summary(finished_run, tmp_path, capsys):
    """`agentrl eval RUN/config.yaml --checkpoint ...` reads the run's own config (every default
    in effect was written there) and the trained adapters; `agentrl train` prints the summary
    table and the replay command."""
    from agentrl.cli import main

    result, _ = finished_run
    ckpt = result.run_dir / "checkpoints" / (result.run_dir / "checkpoints" / "latest").read_text()
    assert main(["eval", str(result.run_dir / "config.yaml"), "--checkpoint", str(ckpt)]) == 0
    out = capsys.readouterr().out
    assert "greedy success" in out and result.evals[0].panel_sha256[:12] in out
    assert main(["train", str(result.run_dir / "config.yaml"), f"run.out_dir={tmp_path}", "run.name=cli",
                 "run.iterations=1", "run.eval_every=0"]) == 0
    out = capsys.readouterr().out
    assert "run cli" in out and f"agentrl replay {tmp_path / 'cli' / 'store.sqlite'} --run cli" in out
    assert main(["train", str(result.run_dir / "config.yaml"), "updat.lr=1"]) == 2
    assert "did you mean 'update'" in capsys.readouterr().err
    # overrides may follow options; iterations=0 trains nothing and still prints the summary
    assert main(["train", str(result.run_dir / "config.yaml"), "--no-resume", f"run.out_dir={tmp_path}",
                 "run.name=zero", "run.iterations=0"]) == 0
    assert "run zero" in capsys.readouterr().out
    assert main(["train", str(result.run_dir / "config.yaml"), "update.loss=ppo"]) == 2
    assert "did you mean 'gspo' or 'ppo_clip'" in capsys.readouterr().err


def test_harness_config_trains_on_proxy_recorded_episodes(tiny_dir, tmp_path):
    """examples/harness_toy.yaml: an external `openai`-SDK agent plays through the recording
    proxy; the trainer stores its token-faithful turns and computes advantages on them."""
    from pathlib import Path

    from agentrl.config import load_config
    from agentrl.train import train

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "examples" / "harness_toy.yaml", [
        f"policy.model={tiny_dir}", f"run.out_dir={tmp_path}", "run.iterations=1", "log.console=false",
        "policy.lora=null", "policy.dtype=float32",
        "rollout.groups_per_iteration=2", "rollout.group_size=2", "run.eval_before=true", "run.eval_every=1",
        "env.eval_panel_size=2",
        f"rollout.harness.command=['{{python}}', '{root / 'examples' / 'harness_agent.py'}', '--max-turns', '3', "
        "'--max-tokens', '8']"])
    result = train(cfg, resume=False)
    # the held-out panel is played by the harness itself (through the proxy), task by task, greedy
    panel = json.loads((result.run_dir / "eval_panel.json").read_text())
    with TurnStore(result.store_path, readonly=True) as store:
        for run in (f"{result.run_id}/eval-before", f"{result.run_id}/eval-iter1"):
            evals = store.episodes(run)
            assert sorted(e.task_id for e in evals) == sorted(x["task_id"] for x in panel["entries"])
            turns = [t for e in evals for t in store.turns(e.episode_id, run_id=run)]
            assert turns and all("prompt_source" in t.info and t.info["sampling"]["greedy"] for t in turns)
    with TurnStore(result.store_path, readonly=True) as store:
        eps = store.episodes(result.run_id)
        assert len(eps) == 4
        table = store.table(run_id=result.run_id)
        assert len(table) >= 4 and len(store.advantages(result.run_id)) == len(table)
        turns = store.turns(eps[0].episode_id, run_id=result.run_id)
    assert all(t.prompt_ids.size > 0 and t.completion_ids.size == t.completion_logprobs.size for t in turns)
    row = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[-1])  # iteration 1 (the first line is the eval before)
    assert row["proxy/segments_per_episode"] >= 1.0 and row["proxy/forks"] >= 0.0  # fidelity counts reach the run
    assert "proxy/drift_rate" in row


@pytest.mark.slow
def test_ray_backend_trains_like_local(tiny_dir, tmp_path, finished_run):
    """rollout.backend=ray (Ray actors as env workers) gives the same first iteration as the
    local EnvPool with the same seed."""
    import ray

    from agentrl.train import train

    reference, _ = finished_run
    try:
        ray_run = train(_cfg(tiny_dir, tmp_path, name="ray", iterations=1, rollout__backend="ray"), resume=False)
    finally:  # the pool started a local Ray and left it running (RayEnvPool.close keeps Ray): stop it, as the
        ray.shutdown()  # tests/rollout_ray files do; else test_ray_train.py, if next on this xdist worker, finds it
    with TurnStore(reference.store_path, readonly=True) as a, TurnStore(ray_run.store_path, readonly=True) as b:
        first = [e.episode_id for e in a.episodes(reference.run_id) if e.group_id < 2]
        ta, tb = a.table(run_id=reference.run_id, episode_ids=first), b.table(run_id=ray_run.run_id)
        for col in ("group", "episode", "t", "reward", "action_key", "anchor_key"):
            assert np.array_equal(getattr(ta, col), getattr(tb, col)), col


def test_one_env_pool_serves_every_iteration_and_is_closed(tiny_dir, tmp_path, monkeypatch):
    """The trainer opens the chain-rollout pool once (not per iteration) and closes it at the end."""
    import agentrl.train.steps as steps
    from agentrl.train import train

    opened = []
    real = steps.make_env_pool

    def counting(*args, **kwargs):
        opened.append(real(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(steps, "make_env_pool", counting)
    result = train(_cfg(tiny_dir, tmp_path, iterations=3, run__eval_every=0), resume=False)
    assert result.state.iteration == 3 and result.state.episodes_stored == 3 * 2 * 4
    assert len(opened) == 1
    assert opened[0].closed


def test_fresh_start_in_a_used_run_folder_sets_the_old_run_aside(tiny_dir, tmp_path):
    """--no-resume twice in one folder: the second run starts fresh (its explicit episode ids
    would collide in the append-only store) and the first run's store is kept beside it."""
    from agentrl.train import train

    cfg = _cfg(tiny_dir, tmp_path, iterations=1, run__eval_every=0)
    first = train(cfg, resume=False)
    second = train(cfg, resume=False)
    (old,) = [p for p in tmp_path.iterdir() if p.name.startswith("run.prev-")]
    for path in (second.store_path, old / "store.sqlite"):
        with TurnStore(path, readonly=True) as store:
            assert len(store.episodes(first.run_id)) == 2 * 4
    assert second.state.iteration == 1


def test_resume_after_a_crash_between_storing_and_checkpointing(tiny_dir, tmp_path, finished_run, monkeypatch,
                                                                capsys):
    """PITFALLS P7: the run dies after iteration 1's episodes are stored but before its checkpoint
    is written. Resuming re-plays iteration 1 from the iteration-0 checkpoint: the interrupted
    attempt's episodes are moved (not deleted) to the run ``<name>.interrupted-<time>`` of the
    same store, and the resumed run equals an uninterrupted one (weights, turns, advantages)."""
    import agentrl.train.loop as train_mod

    reference, _ = finished_run
    real_save = crash_before_checkpoint(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        train_mod.train(_cfg(tiny_dir, tmp_path, name="crash"), resume=False)
    monkeypatch.setattr(train_mod, "save_checkpoint", real_save)
    resumed = train_mod.train(_cfg(tiny_dir, tmp_path, name="crash"), resume=True)
    assert resumed.state == reference.state
    w_ref, _ = _weights(reference.run_dir)
    w_new, _ = _weights(resumed.run_dir)
    for k in w_ref:
        assert torch.equal(w_ref[k], w_new[k]), k
    with TurnStore(reference.store_path, readonly=True) as a, TurnStore(resumed.store_path, readonly=True) as b:
        ta, tb = a.table(run_id=reference.run_id), b.table(run_id="crash")
        for col in ("turn_id", "group", "episode", "t", "reward", "action_key", "parent"):
            assert np.array_equal(getattr(ta, col), getattr(tb, col)), col
        assert [x.value for x in a.advantages(reference.run_id)] == [x.value for x in b.advantages("crash")]
        (lost,) = [r for r in b.runs() if r.startswith("crash.interrupted-")]
        lost_eps = b.episodes(lost)
        assert [e.episode_id for e in lost_eps] == list(range(8, 16))  # iteration 1: 2 groups x 4
        lost_table = b.table(run_id=lost)
        again = ta.episode >= 8
        assert np.array_equal(lost_table.turn_id, ta.turn_id[again])  # same turns as the re-played iteration
        assert np.array_equal(lost_table.action_key.size, int(again.sum()))
        assert len(b.advantages(lost)) == int(again.sum())  # its advantages moved with it
    from agentrl.cli import main

    capsys.readouterr()
    assert main(["replay", str(resumed.store_path)]) == 0  # the default run is the resumed one
    out = capsys.readouterr().out
    assert "showing run crash," in out and "run crash: 16 episodes" in out


def test_a_second_job_on_the_same_run_folder_is_refused(tiny_dir, tmp_path):
    """Two jobs on one run would resume from each other's checkpoints and interleave their
    episodes (found by a tester under torchrun); the second is refused at once, nothing of
    the first is touched, and the lock goes with the process that held it."""
    from agentrl.train import train
    from agentrl.train.run_dir import RunLock

    cfg = _cfg(tiny_dir, tmp_path, name="locked", iterations=1, run__eval_every=0)
    run_dir = tmp_path / "locked"
    with RunLock(run_dir):  # another job holds the run
        with pytest.raises(ValueError, match=f"pid {__import__('os').getpid()}"):
            train(cfg, resume=True)
        assert not run_dir.exists()  # refused before any folder was made or set aside
    assert train(cfg, resume=True).state.iteration == 1  # released: the run goes ahead
