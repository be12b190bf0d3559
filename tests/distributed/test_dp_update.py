"""Issue 17: a 2-rank gloo FSDP2 update equals the 1-process update — the same loss and the
same parameters after 2 optimizer steps to float noise (fp32) — in every loss-aggregation mode,
for full fine-tuning and LoRA, with uneven rows and tokens per rank (9 rows in minibatches
of 5 and 4: ranks get 3/2 and 2/2 rows, and 2 vs 1 micro-batches of 2 rows). A per-rank
normalisation (each rank dividing by its own token/turn counts) is caught. With a rollout
correction π_old is recomputed through the sharded model, each rank its share of the rows
(all-gathered): equal to every rank recomputing every row within 1e-6. After the steps
every rank streams the inference weights from its shards (``iter_inference_weights``, the
per-rank engine sync): bit-equal on every rank to the 1-process merge of the gathered
parameters.

The steps are SGD with momentum (``update_fixtures.sgd``; its momentum buffer is sharded
optimizer state carried into step 2): linear in the gradient, so the two runs' different
reduction orders stay float noise in the weights. AdamW's first step, lr·g/(|g| + eps), turns the
rounding of a gradient entry near eps = 1e-8 into a good part of lr (at lr 1e-3 the two runs'
weights were 1.3e-6 apart on an AVX2 CPU, 3e-7 on AVX-512; a flipped sign would be 2·lr), and a
gradient scale that is wrong on every rank alike cancels out of it.
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
from agentrl.update import (
    apply_rollout_correction, batch_logprobs, build_batch, make_optimizer, prepare_policy, train_on_batch,
)
from agentrl.update.lora import apply_lora, inference_state_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "update"))
from update_fixtures import PAD, VOCAB, assert_same_step, random_turns, sgd, step_mismatch, tiny_model  # noqa: E402

WORKER = Path(__file__).with_name("dp_worker.py")
BASE = UpdateConfig(lr=0.1, grad_clip=0.0, micro_batch=2, minibatch=5, epochs=1, sum_norm_tokens=8)  # SGD's lr
LORA = LoraSpec(rank=4, alpha=8.0)
CASES = {
    "token-mean": dict(aggregation="token-mean"),
    "seq-mean-token-mean": dict(aggregation="seq-mean-token-mean"),
    "seq-mean-token-sum-norm": dict(aggregation="seq-mean-token-sum-norm"),
    "episode-mean-token-mean": dict(aggregation="episode-mean-token-mean"),  # episodes split over ranks
    "clip+entropy+dual": dict(aggregation="token-mean", entropy_coef=0.01, clip_c=3.0, grad_clip=0.05),
    "gspo": dict(loss="gspo", aggregation="seq-mean-token-mean", clip_low=3e-4, clip_high=4e-4),
    # π_old recomputed on every rank through the sharded model, weights on every rank's rows
    "icepop-sequence": dict(aggregation="seq-mean-token-mean", rollout_correction="icepop", correction_level="sequence"),
    "tis-token": dict(aggregation="token-mean", rollout_correction="tis"),
    # rows sorted, identical rows run once; on 2 ranks without the shared-prefix forward (FSDP2 would
    # free the prefix layers' weights before its backward: that crashed), in 1 process with it
    "share-prefix": dict(aggregation="token-mean", share_prefix=True),
    # the LM head's hooks inside the FSDP2 root's forward under gradient checkpointing
    "checkpointing": dict(aggregation="seq-mean-token-mean", gradient_checkpointing=True, entropy_coef=0.01),
}
#: The LM head runs in chunks of 3 tokens (``agentrl.update.token_head``) in both processes: the
#: backward recomputes each chunk after FSDP2 has resharded the root's parameters.
CHUNK_BYTES = 3 * 4 * VOCAB


def _batch():
    """9 turns of 5 episodes (uneven lengths), old logprobs = current + noise (ratios clip)."""
    prompts, comps, _, adv = random_turns(11, (3, 1, 2, 1, 2))
    model = tiny_model(0)
    b = build_batch(prompts, comps, [np.zeros(c.size) for c in comps], adv, pad_id=PAD,
                    episodes=[0, 0, 0, 1, 2, 2, 3, 4, 4])
    lp = batch_logprobs(model, b)
    noise = 0.3 * torch.randn(lp.shape, generator=torch.Generator().manual_seed(0))
    return b.with_(old_logprobs=(lp + noise) * b.loss_mask)


def _model(lora: LoraSpec | None):
    model = tiny_model(0)
    return apply_lora(model, lora) if lora is not None else model


def _single(cfg: UpdateConfig, lora, init: dict, batch) -> dict:
    model = _model(lora)
    model.load_state_dict(init)
    model = prepare_policy(model, cfg)
    opt = sgd(model, cfg.lr, momentum=0.9)  # as dp_worker
    batch, _ = apply_rollout_correction(model, batch, cfg)  # identity for rollout_correction: none
    stats = train_on_batch(model, opt, batch, cfg, seed=5)
    return {"stats": [s.__dict__ for s in stats], "params": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def _max_param_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every case once in this process and once on 2 gloo ranks (one torchrun for all)."""
    import agentrl.update.token_head as token_head

    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("dp")
    batch = _batch()
    cases, init, single = [], {}, {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(token_head, "CHUNK_BYTES", CHUNK_BYTES)
        for name, changes in CASES.items():
            for lora in (None, LORA):
                key = f"{name}/{'lora' if lora else 'full'}"
                cfg = dataclasses.replace(BASE, **changes)
                init[key] = {k: v.clone() for k, v in _model(lora).state_dict().items()}
                single[key] = _single(cfg, lora, init[key], batch)
                cases.append({"name": key, "cfg": cfg, "lora": lora, "per_rank": False})
    for key in ("token-mean/full", "seq-mean-token-mean/full"):  # the bug the test must catch
        cases.append({**next(c for c in cases if c["name"] == key), "name": key + "/per-rank", "per_rank": True})
        init[key + "/per-rank"] = init[key]
    torch.save({"init": init, "batch": batch, "cases": cases, "chunk_bytes": CHUNK_BYTES}, folder / "cases.pt")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(WORKER), str(folder)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return single, torch.load(folder / "out.pt", weights_only=False), init


@pytest.mark.parametrize("key", [f"{n}/{m}" for n in CASES for m in ("full", "lora")])
def test_two_ranks_equal_one_process(runs, key):
    single, dist, init = runs
    a, b = single[key], dist[key]
    assert len(a["stats"]) == len(b["stats"]) == 2  # 9 rows, minibatch 5: two optimizer steps
    for sa, sb in zip(a["stats"], b["stats"]):
        assert sa["tokens"] == sb["tokens"]
        for f in ("loss", "pg_loss", "clip_frac", "approx_kl", "entropy", "grad_norm"):
            assert abs(sa[f] - sb[f]) <= 1e-5 * max(1.0, abs(sa[f])), (f, sa[f], sb[f])
    # every entry within 0.1 % of its tensor's largest move, and the two steps did move the weights
    assert_same_step(a["params"], b["params"], init[key])


@pytest.mark.parametrize("key", [f"{n}/{m}" for n in ("icepop-sequence", "tis-token") for m in ("full", "lora")])
def test_sharded_recompute_equals_the_replicated_one(runs, key):
    single, dist, _ = runs
    sharded, replicated = dist[key]["old_sharded"], dist[key]["old_replicated"]
    assert sharded.shape == replicated.shape and bool((sharded != 0).any())
    assert float((sharded - replicated).abs().max()) <= 1e-6
    assert not torch.equal(sharded, _batch().old_logprobs)  # recomputed, not the behaviour logprobs passed in


@pytest.mark.parametrize("key", ["token-mean/full", "token-mean/lora"])
def test_every_rank_streams_the_one_process_inference_weights(runs, key):
    """What each rank's engine loads after a sync: the merged weights (trained LoRA adapters
    folded in, plain HF names), gathered one parameter at a time, bit-equal to the 1-process
    merge of the same trained parameters."""
    _, dist, init = runs
    model = _model(LORA if key.endswith("lora") else None)
    model.load_state_dict(dist[key]["params"])
    want = inference_state_dict(model)
    assert not any(".lora_" in n or "base_layer" in n for n in want)
    if key.endswith("lora"):  # the adapters trained: the merge is not the base weight
        base = {n: init[key]["base_model.model." + n.replace("_proj.", "_proj.base_layer.")] for n in want
                if "self_attn" in n and n.endswith("_proj.weight")}
        assert base and all(not torch.equal(want[n], w) for n, w in base.items())
    streams = dist["streams_per_rank"]
    assert len(streams) == 2
    for rank_streams in streams:
        got = rank_streams[key]
        assert list(got) == list(want)  # same names, same order
        assert all(torch.equal(got[n], want[n]) for n in want)


@pytest.mark.parametrize("key", ["token-mean/full", "seq-mean-token-mean/full"])
def test_per_rank_normalisation_is_caught(runs, key):
    """Dividing by each rank's own counts gives another loss and other weights: the
    comparison above would fail for that bug."""
    single, dist, init = runs
    wrong = dist[key + "/per-rank"]
    assert abs(wrong["stats"][0]["loss"] - single[key]["stats"][0]["loss"]) > 1e-4
    assert step_mismatch(wrong["params"], single[key]["params"], init[key]) > 10  # far outside the noise


class _LoneRank:
    """A ``ReduceGroup`` seen from one rank: rank ``rank`` of ``world_size``, whose peers ran
    ``peer_passes`` micro-batches (the ``max`` reduce) and add nothing to the sums."""

    def __init__(self, rank: int, world_size: int, peer_passes: int) -> None:
        self.rank, self.world_size, self.peer_passes = rank, world_size, peer_passes

    def all_reduce(self, values, op="sum"):
        return torch.clamp(values, min=self.peer_passes) if op == "max" else values


def test_a_rank_without_rows_runs_zero_weight_passes():
    """3 ranks, a 1-row minibatch: ranks 1 and 2 get no row (``arange(2, 1, 3)`` raised here
    once) and still run the forward/backward passes FSDP2 needs, with zero gradient."""
    from agentrl.update import update

    torch.set_num_threads(1)
    batch = _batch().select([0])
    model = prepare_policy(tiny_model(0), BASE)
    opt = make_optimizer(model, BASE.lr)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = update(model, opt, batch, BASE, dp=_LoneRank(2, 3, peer_passes=1))
    assert stats.tokens == 1 and stats.loss == 0.0  # no trained token of its own; counts floor at 1
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(float(g.abs().max()) == 0.0 for g in grads)  # the pass ran, its loss weighed 0
    assert _max_param_diff(before, model.state_dict()) == 0.0


def test_the_rollout_correction_changes_the_step(runs):
    """The corrected cases train on other targets than the uncorrected one (so their
    2-rank == 1-process comparison covers the recompute and the weights)."""
    single, _, init = runs
    assert torch.equal(init["tis-token/full"]["model.embed_tokens.weight"], init["token-mean/full"]["model.embed_tokens.weight"])
    tis, plain = single["tis-token/full"]["params"], single["token-mean/full"]["params"]
    assert step_mismatch(tis, plain, init["token-mean/full"]) > 10  # far outside the noise
    assert single["tis-token/full"]["stats"][0]["approx_kl"] < 1e-9 < single["token-mean/full"]["stats"][0]["approx_kl"]
