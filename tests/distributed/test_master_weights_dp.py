"""Issue 37: float32 master weights under FSDP2 on 2 gloo ranks (``MixedPrecisionPolicy``: bf16
compute, float32 reduce, float32 shards stepped by a plain AdamW).

bf16 full fine-tuning at lr 1e-5 moves most weights with masters and few without (the measured
fractions are printed), the engines are streamed bf16 weights equal to the rounded masters, and a
DCP checkpoint after k steps, loaded into a fresh sharded model and optimizer, continues m steps
bit-exactly like the uninterrupted run (parameters and optimizer state, ``torch.equal``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentrl.config import UpdateConfig
from agentrl.update import build_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "update"))
from test_master_weights_policy import _same, moved_fractions  # noqa: E402
from update_fixtures import PAD, random_turns, tiny_model  # noqa: E402

WORKER = Path(__file__).with_name("masters_worker.py")
STEPS, K, M = 10, 2, 2


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("masters")
    prompts, comps, lps, adv = random_turns(3, (2, 1, 2))
    batch = build_batch(prompts, comps, lps, adv, pad_id=PAD)  # 5 rows: 3 on rank 0, 2 on rank 1
    init = tiny_model(0).to(torch.bfloat16).state_dict()
    cfg = UpdateConfig(lr=1e-5, grad_clip=1.0, micro_batch=2)
    torch.save({"init": init, "batch": batch, "cfg": cfg, "steps": STEPS, "k": K, "m": M}, folder / "setup.pt")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(WORKER),
           str(folder)]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return torch.load(folder / "out.pt", weights_only=False), init


def test_masters_move_the_weights_under_fsdp2(out, capsys):
    res, init = out
    assert res["world_size"] == 2
    moved = {name: moved_fractions(init, res[name]["streamed"]) for name in ("plain", "masters")}
    with capsys.disabled():
        print(f"\n2 ranks FSDP2, bf16, lr 1e-5, {STEPS} AdamW steps, fraction of entries moved: {moved}")
    assert moved["masters"]["all"] > 0.8 and moved["plain"]["all"] < 0.25 * moved["masters"]["all"]
    assert moved["plain"]["norms"] == 0.0
    plain, masters = res["plain"], res["masters"]
    assert plain["param_dtypes"] == plain["grad_dtypes"] == plain["compute_dtypes"] == {torch.bfloat16}
    assert masters["param_dtypes"] == masters["grad_dtypes"] == {torch.float32}  # float32 shards and reduce
    assert masters["compute_dtypes"] == {torch.bfloat16}  # MixedPrecisionPolicy(param_dtype=bf16)
    norms = [k for k in init if init[k].ndim < 2]
    assert all(bool((masters["params"][k] != 1.0).all()) for k in norms)  # the gains' masters moved
    streamed = masters["streamed"]  # what every rank's engine loads: the masters rounded to bf16
    assert {t.dtype for t in streamed.values()} == {torch.bfloat16}
    assert all(torch.equal(t, masters["params"][k].to(torch.bfloat16)) for k, t in streamed.items())


def test_dcp_resume_on_two_ranks_is_bit_exact(out):
    res, _ = out
    assert res["state"].optimizer_steps == K
    (pa, oa), (pb, ob) = res["uninterrupted"], res["resumed"]
    assert {v.dtype for v in pa.values()} == {torch.float32} and _same(pa, pb)
    assert oa["state"]["model.norm.weight"]["exp_avg"].dtype == torch.float32
    assert int(oa["state"]["model.norm.weight"]["step"]) == K + M and _same(oa, ob)


def test_two_rank_bf16_run_trains_float32_masters(tiny_dir, tmp_path):
    """``torchrun --nproc-per-node 2 -m agentrl train`` in bf16 without LoRA: the run completes with
    every rank's bf16 engine copy probed after each sync (the probe stops a run whose gap exceeds
    its tolerance) and checkpoints float32 weights."""
    import json

    import yaml

    from agentrl.update.checkpoint import checkpoint_weights
    from dist_fixtures import tiny_config

    raw = tiny_config(tiny_dir, tmp_path / "runs", lora=False)
    raw["policy"]["dtype"], raw["update"]["lr"], raw["run"]["eval_every"] = "bfloat16", 1e-5, 0
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(raw))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "agentrl",
           "train", str(tmp_path / "cfg.yaml")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    run_dir = tmp_path / "runs" / "dp"
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["update"]["master_weights"] == "on"
    weights = checkpoint_weights(run_dir / "checkpoints" / "iter_000002")
    assert weights and {w.dtype for w in weights.values()} == {torch.float32}
    lines = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum("sync/probe_max_abs_diff" in ln for ln in lines) == 2
