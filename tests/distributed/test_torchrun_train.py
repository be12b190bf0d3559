"""Issue 17: ``torchrun --nproc-per-node 2 -m agentrl train CFG`` on CPU (gloo, FSDP2): the run
completes, rank 0 alone writes the store (every episode once), the checkpoints are DCP, and the
run resumes from its 2-rank checkpoint in one process (``python -m agentrl train``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from agentrl.store import TurnStore  # noqa: E402
from dist_fixtures import tiny_config  # noqa: E402


def _run(args: list[str], nproc: int | None) -> subprocess.CompletedProcess:
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)] if nproc else []
    cmd = [sys.executable, *launcher, "-m", "agentrl", "train", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_two_rank_run_writes_the_store_once_and_resumes_in_one_process(tiny_dir, tmp_path, lora):
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_config(tiny_dir, tmp_path / "runs", lora)))
    proc = _run([str(cfg_path)], nproc=2)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    run_dir = tmp_path / "runs" / "dp"
    assert (run_dir / "checkpoints" / "latest").read_text() == "iter_000002"
    assert (run_dir / "checkpoints" / "iter_000002" / "dcp" / ".metadata").is_file()
    assert proc.stderr.count("[agentrl] data-parallel run: 2 ranks (gloo, FSDP2)") == 1  # said once, by rank 0
    with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
        eps = store.load_episodes("dp")
        assert len(eps) == 2 * 2 * 4  # 2 iterations × 2 groups × 4 episodes, each stored once
        assert len({e.episode_id for e in eps}) == len(eps)
        versions = {(e.episode_id // 8, t.policy_version) for e in eps for t in e.turns}
        assert versions == {(0, 0), (1, 1)}  # iteration k sampled with the weights after k updates
        assert {m.iteration for m in store.metrics("dp")} == {1, 2}  # 1-based, as metrics.jsonl's steps
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2]  # rank 0 logs, once per iteration
    assert sum(x.get("update/steps", 0) for x in lines) >= 1 and any(x.get("update/grad_norm", 0) > 0 for x in lines)
    # the credit audit ran on both ranks' shards: every iteration that trained audited its tokens
    assert all(x.get("audit/tokens", 0) > 0 and x.get("audit/rows", 0) >= 1 for x in lines if x.get("update/steps"))
    # resume the 2-rank checkpoint with one process: one more iteration, same store, same ids
    proc1 = _run([str(cfg_path), "run.iterations=3"], nproc=None)
    assert proc1.returncode == 0, proc1.stdout[-2000:] + proc1.stderr[-4000:]
    assert not list(tmp_path.glob("runs/dp.prev-*"))  # resumed, not set aside
    assert "[agentrl] resuming dp from" in proc1.stderr and "2 iteration(s) done" in proc1.stderr
    with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
        eps = store.load_episodes("dp")
        assert len(eps) == 24 and sorted(e.episode_id for e in eps) == list(range(24))
        third = [t.policy_version for e in eps if e.episode_id >= 16 for t in e.turns]
        assert third and set(third) == {2}
        table = store.table(run_id="dp")
        assert np.isfinite(table.reward).all()
    assert (run_dir / "checkpoints" / "latest").read_text() == "iter_000003"
    if lora:  # and back: the 1-process checkpoint resumes on 2 ranks
        proc2 = _run([str(cfg_path), "run.iterations=4"], nproc=2)
        assert proc2.returncode == 0, proc2.stdout[-2000:] + proc2.stderr[-4000:]
        with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
            assert len(store.load_episodes("dp")) == 32
        assert (run_dir / "checkpoints" / "latest").read_text() == "iter_000004"


def test_two_ranks_roll_out_on_an_engine_worker(tiny_dir, tmp_path):
    """``rollout.engines: 1`` under torchrun: rank 0 starts the worker from its synced engine
    copy and pushes the gathered weights after each update; every turn keeps its version."""
    raw = tiny_config(tiny_dir, tmp_path / "runs", lora=True)
    raw["rollout"]["engines"] = 1
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    proc = _run([str(cfg_path)], nproc=2)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    with TurnStore(tmp_path / "runs" / "dp" / "store.sqlite", readonly=True) as store:
        eps = store.load_episodes("dp")
    assert len(eps) == 16 and all(e.status == "ok" for e in eps)
    assert {(e.episode_id // 8, t.policy_version) for e in eps for t in e.turns} == {(0, 0), (1, 1)}


def test_two_ranks_train_asynchronously_on_an_engine_worker(tiny_dir, tmp_path):
    """``rollout.max_staleness: 1`` under torchrun (refused before issue 36): rank 0's engine
    worker plays ahead while both ranks update; no trained turn is older than 1 version and the
    async and sync metrics are logged (the workers probe each version they load themselves)."""
    raw = tiny_config(tiny_dir, tmp_path / "runs", lora=True)
    raw["run"].update(iterations=3, eval_every=0)
    raw["rollout"].update(engines=1, max_staleness=1)
    cfg_path = tmp_path / "cfg.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    proc = _run([str(cfg_path)], nproc=2)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    run_dir = tmp_path / "runs" / "dp"
    with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
        version = {t.turn_id: t.policy_version for e in store.load_episodes("dp") for t in e.turns}
        trained = [(int(a.iteration), version[int(a.turn_id)]) for a in store.advantages("dp")]
    assert trained and all(0 <= it - 1 - v <= 1 for it, v in trained)  # 1-based iteration k trains at version k − 1
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["async/staleness_max"] <= 1 and "sync/seconds" in r for r in rows)


@pytest.mark.slow
def test_torchrun_main_example_config(tmp_path):
    """The documented command on the packaged SmolLM2: ``torchrun --nproc-per-node 2 -m agentrl
    train examples/gigpo_toy.yaml run.iterations=2`` (smaller groups to fit CI)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = _run([os.path.join(root, "examples", "gigpo_toy.yaml"), "run.iterations=2", f"run.out_dir={tmp_path}",
                 "rollout.groups_per_iteration=1", "rollout.group_size=4", "policy.num_threads=1",
                 "policy.device=cpu"], nproc=2)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    with TurnStore(tmp_path / "gigpo_toy" / "store.sqlite", readonly=True) as store:
        eps = store.load_episodes("gigpo_toy")
    assert len(eps) == 8 and len({e.episode_id for e in eps}) == 8
    assert (tmp_path / "gigpo_toy" / "checkpoints" / "latest").read_text() == "iter_000002"
