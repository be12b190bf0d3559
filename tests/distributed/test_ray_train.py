"""Issue 17, several nodes: ``agentrl train CFG --ray-ranks 2`` on a local 2-CPU Ray (actors
that form the gloo process group, ``agentrl.distributed.ray_launch``) is the same run as ``torchrun
--standalone --nproc-per-node 2``: same episodes, TurnTable, advantages and final weights; a
rank that fails ends the launch at once with its error (the other rank is killed, not left in
a collective).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")
ray = pytest.importorskip("ray")

from agentrl.store import TurnStore  # noqa: E402
from dist_fixtures import tiny_config  # noqa: E402
from agentrl.update.checkpoint import checkpoint_weights  # noqa: E402


def _train(cfg_path, out_dir, launcher: list[str], extra: list[str], cwd) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *launcher, "-m", "agentrl", "train", str(cfg_path), f"run.out_dir={out_dir}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=cwd)


def _run_record(run_dir):
    with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
        eps = sorted(store.load_episodes("dp"), key=lambda e: e.episode_id)
        table = store.table(run_id="dp")
        adv = [(a.turn_id, a.iteration, a.estimator, a.value) for a in store.advantages("dp")]
    return eps, table, adv


def test_ray_run_equals_torchrun_run(tiny_dir, tmp_path):
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_config(tiny_dir, tmp_path / "unused", lora=True)))
    t0 = time.monotonic()
    proc = _train(cfg_path, tmp_path / "ray", [], ["--ray-ranks", "2"], cwd=tmp_path)
    t_ray = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "replay: agentrl replay" in proc.stdout  # rank 0's TrainResult came back to the driver
    t0 = time.monotonic()
    ref = _train(cfg_path, tmp_path / "torchrun", ["-m", "torch.distributed.run", "--standalone",
                                                    "--nproc-per-node", "2"], [], cwd=tmp_path)
    t_torchrun = time.monotonic() - t0
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-4000:]
    print(f"ray launch {t_ray:.1f} s, torchrun {t_torchrun:.1f} s")

    ray_dir, tr_dir = tmp_path / "ray" / "dp", tmp_path / "torchrun" / "dp"
    eps, table, adv = _run_record(ray_dir)
    eps_ref, table_ref, adv_ref = _run_record(tr_dir)
    assert len(eps) == 2 * 2 * 4 and len({e.episode_id for e in eps}) == len(eps)  # every episode stored once
    assert [e.episode_id for e in eps] == [e.episode_id for e in eps_ref]
    for e, r in zip(eps, eps_ref):
        assert [(t.action, t.reward, t.policy_version) for t in e.turns] == \
               [(t.action, t.reward, t.policy_version) for t in r.turns]
        for t, u in zip(e.turns, r.turns):
            np.testing.assert_array_equal(t.completion_ids, u.completion_ids)
            np.testing.assert_array_equal(t.completion_logprobs, u.completion_logprobs)
    for col in ("group", "episode", "t", "reward", "action_key", "anchor_key", "episode_ok"):
        np.testing.assert_array_equal(getattr(table, col), getattr(table_ref, col), err_msg=col)
    assert adv and adv == adv_ref  # (turn id, iteration, estimator, value), bit for bit
    assert (ray_dir / "checkpoints" / "latest").read_text() == "iter_000002"
    w, w_ref = (checkpoint_weights(d / "checkpoints" / "iter_000002") for d in (ray_dir, tr_dir))
    assert w and sorted(w) == sorted(w_ref)
    for name in w:  # the same run: equal bit for bit (gloo reduces in a fixed order)
        assert torch.equal(w[name], w_ref[name]), (name, (w[name] - w_ref[name]).abs().max())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.yaml", "ray", "torchrun"]  # nothing else written


def _fail_on_rank_1():
    """Both ranks join the group; rank 1 then raises while rank 0 waits in a barrier (it would
    wait for torch's 30-minute timeout if the launcher did not kill it)."""
    from agentrl.distributed import DistContext

    ctx = DistContext.from_env("cpu")
    if ctx.rank == 1:
        raise RuntimeError("injected failure on rank 1")
    ctx.barrier()
    return "rank 0 should never get here"


def test_failing_rank_ends_the_launch_with_its_error(monkeypatch):
    from agentrl.distributed.ray_launch import RayLaunchError, launch

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not ray.is_initialized()
    t0 = time.monotonic()
    with pytest.raises(RayLaunchError, match=r"rank 1 of 2 failed: RuntimeError: injected failure on rank 1") as info:
        launch(_fail_on_rank_1, ranks=2, start_timeout_s=120, timeout_s=300)
    elapsed = time.monotonic() - t0
    print(f"failure reported after {elapsed:.1f} s")
    assert info.value.rank == 1
    assert elapsed < 120, f"the launch took {elapsed:.0f} s to report the failure"
    assert not ray.is_initialized()  # the local Ray it started is shut down


def test_ray_options_are_checked_before_any_launch(tmp_path, tiny_dir, capsys):
    from agentrl.cli import main

    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_config(tiny_dir, tmp_path / "runs", lora=True)))
    assert main(["train", str(cfg_path), "--gpus-per-rank", "1"]) == 2
    assert "need --ray-ranks" in capsys.readouterr().err
    assert main(["train", str(cfg_path), "--ray-ranks", "0"]) == 2
    assert "--ray-ranks must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and not ray.is_initialized()


def test_trainer_resources_reach_the_ray_launch(tmp_path, tiny_dir, monkeypatch, capsys):
    """``rollout.placement.trainer_resources`` is what ``--ray-ranks`` asks Ray for per rank (the
    launch itself is faked: it records its arguments and fails)."""
    from agentrl.cli import main
    from agentrl.distributed import ray_launch

    seen = {}

    def fake_launch(fn, args=(), kwargs=None, **options):
        seen.update(options)
        raise ray_launch.RayLaunchError("stopped by the test")

    monkeypatch.setattr(ray_launch, "launch", fake_launch)
    raw = tiny_config(tiny_dir, tmp_path / "runs", lora=True)
    raw["rollout"]["placement"] = {"trainer_resources": {"trainer_node": 1}}
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    assert main(["train", str(cfg_path), "--ray-ranks", "2", "--cpus-per-rank", "0.5"]) == 1
    assert "stopped by the test" in capsys.readouterr().err
    assert seen["resources"] == {"trainer_node": 1} and seen["ranks"] == 2 and seen["cpus_per_rank"] == 0.5
