"""Issue 37: the packed update (``update.micro_batch_tokens``) on 2 gloo FSDP2 ranks equals the
padded update in 1 process within 1e-6 (fp32): every step's loss and statistics, and every
parameter after two SGD-with-momentum steps, in every loss-aggregation mode, with LoRA, with
the rollout correction's π_old recomputed packed and sharded over the ranks, and with a
minibatch of one row (one rank runs the two-token zero-weight pass), and with ``share_prefix``
(turns of one task in one pack, their shared prefix once: 3 tasks × 3 episodes sharing their
first prompt; the 1-process side is the plain padded update).

The ranks get their rows from ``agentrl.update.packing.rank_bins`` (the same number of packed
micro-batches each, about equal tokens), not the padded path's ``r, r + N, …``; the loss
denominators are still counted over the whole minibatch. Runs ``dp_worker.py`` (the worker of
test_dp_update.py) under ``torchrun --nproc-per-node 2``.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from agentrl.config import LoraSpec, UpdateConfig
from agentrl.update import apply_rollout_correction, batch_logprobs, build_batch, prepare_policy, train_on_batch
from agentrl.update.lora import apply_lora

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "update"))
from update_fixtures import PAD, grouped_batch, random_turns, sgd, tiny_model  # noqa: E402

WORKER = Path(__file__).with_name("dp_worker.py")
TOL = 1e-6
BASE = UpdateConfig(lr=0.1, grad_clip=0.0, micro_batch=2, minibatch=5, epochs=1, sum_norm_tokens=8,
                    rollout_correction="none")
LORA = LoraSpec(rank=4, alpha=8.0)
CASES = {  # name: (config changes, LoRA)
    "token-mean": (dict(aggregation="token-mean"), None),
    "seq-mean-token-mean": (dict(aggregation="seq-mean-token-mean"), None),
    "seq-mean-token-sum-norm": (dict(aggregation="seq-mean-token-sum-norm"), None),
    "episode-mean-token-mean": (dict(aggregation="episode-mean-token-mean"), None),
    "gspo+entropy/lora": (dict(loss="gspo", aggregation="seq-mean-token-mean", clip_low=3e-4, clip_high=4e-4,
                               entropy_coef=0.01), LORA),
    "tis-sequence/lora": (dict(aggregation="seq-mean-token-mean", rollout_correction="tis",
                               correction_level="sequence"), LORA),
    "one-row-minibatches": (dict(aggregation="token-mean", minibatch=4), None),  # 9 rows: 4, 4, 1
    # rows of one task in one pack, their shared prefix laid down once (the grouped batch)
    "share-prefix/token-mean": (dict(aggregation="token-mean", share_prefix=True, minibatch=9), None),
    "share-prefix+tis/lora": (dict(aggregation="episode-mean-token-mean", share_prefix=True, minibatch=0,
                                   rollout_correction="tis"), LORA),
}
BUDGET = 40  # tokens per packed micro-batch: 2-3 rows of the batch's 10-25-token rows


def _batch(name: str):
    if name.startswith("share-prefix"):
        return grouped_batch()
    prompts, comps, _, adv = random_turns(11, (3, 1, 2, 1, 2))
    b = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], adv, pad_id=PAD,
                    episodes=[0, 0, 0, 1, 2, 2, 3, 4, 4])
    lp = batch_logprobs(tiny_model(0), b)
    noise = 0.3 * torch.randn(lp.shape, generator=torch.Generator().manual_seed(0))
    return b.with_(old_logprobs=(lp + noise) * b.loss_mask)


def _model(lora):
    model = tiny_model(0)
    return apply_lora(model, lora) if lora is not None else model


def _padded_single(cfg: UpdateConfig, lora, init: dict, batch) -> dict:
    model = _model(lora)
    model.load_state_dict(init)
    model = prepare_policy(model, cfg)
    opt = sgd(model, cfg.lr, momentum=0.9)  # as dp_worker
    batch, _ = apply_rollout_correction(model, batch, cfg)
    stats = train_on_batch(model, opt, batch, cfg, seed=5)
    return {"stats": [s.__dict__ for s in stats], "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "old": batch.old_logprobs}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("dp_packing")
    cases, init, single = [], {}, {}
    for name, (changes, lora) in CASES.items():
        cfg, batch = dataclasses.replace(BASE, **changes), _batch(name)
        init[name] = {k: v.clone() for k, v in _model(lora).state_dict().items()}
        single[name] = _padded_single(dataclasses.replace(cfg, share_prefix=False), lora, init[name], batch)
        cases.append({"name": name, "cfg": dataclasses.replace(cfg, micro_batch_tokens=BUDGET), "lora": lora,
                      "per_rank": False, "batch": batch})
    torch.save({"init": init, "batch": None, "cases": cases, "chunk_bytes": 64 << 20}, folder / "cases.pt")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(WORKER),
           str(folder)]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return single, torch.load(folder / "out.pt", weights_only=False), init


@pytest.mark.parametrize("name", list(CASES))
def test_packed_two_ranks_equal_padded_one_process(runs, name):
    single, dist, init = runs
    a, b = single[name], dist[name]
    assert len(a["stats"]) == len(b["stats"]) >= 1
    for sa, sb in zip(a["stats"], b["stats"]):
        assert sa["tokens"] == sb["tokens"]
        for f in ("loss", "pg_loss", "clip_frac", "approx_kl", "entropy", "grad_norm"):
            assert abs(sa[f] - sb[f]) <= TOL, (f, sa[f], sb[f])
    assert a["params"].keys() == b["params"].keys()
    gap = max(float((a["params"][k] - b["params"][k]).abs().max()) for k in a["params"])
    moved = max(float((a["params"][k] - init[name][k]).abs().max()) for k in a["params"])
    assert gap <= TOL and moved > 1e-4, (gap, moved)
    if CASES[name][0].get("rollout_correction", "none") != "none":  # π_old recomputed packed, sharded by bins
        assert float((b["old_sharded"] - a["old"]).abs().max()) <= TOL
