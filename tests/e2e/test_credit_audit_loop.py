"""The credit audit through the whole loop (issue 49; tiny model, fp32, toy env): runs chosen
pairwise over the sampler (chains, Tree-GRPO trees, RTPO rounds, engine workers, ``max_staleness``
1, an external harness through the recording proxy) and the batch layout (padded, chains packed, token packs with a shared prefix) train with the
audit on (the default), and each iteration's ``audit/tokens`` is exactly the trained tokens of
the turns whose advantage was stored that iteration (every trained token checked once). A
placement mutation in the padding/mask, packing, sharding or selection code stops the run with
``CreditAuditError`` (2 gloo ranks: tests/distributed/test_torchrun_train.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.store import TurnStore  # noqa: E402
from agentrl.update.audit import CreditAuditError  # noqa: E402
from test_train_loop import _cfg  # noqa: E402

TREES = Path(__file__).resolve().parents[1] / "trees"

RUNS = {  # name: overrides (section__field=value)
    "chains, padded": {},
    "chains, packed": {"update__pack": True, "update__micro_batch": 2},
    "chains, token packs + shared prefix": {"update__micro_batch_tokens": 96, "update__share_prefix": True,
                                            "update__epochs": 2},
    "trees, padded": {"rollout__sampler": "tree", "rollout__tree": {"trees": 2, "rounds": 1, "branches": 2},
                      "algorithm__estimator": "tree_grpo"},
    # engine workers sample with per-turn seeds: run seed 0 gives these a group with contrast
    "engine workers, packed": {"rollout__engines": 1, "update__pack": True, "run__seed": 0},
    "max_staleness 1, token packs": {"rollout__engines": 1, "rollout__max_staleness": 1,
                                     "update__micro_batch_tokens": 64, "run__seed": 0},
}


def _trained_tokens(store: TurnStore, run_id: str, epochs: int) -> dict[int, int]:
    """{iteration: completion tokens of the turns with a non-zero stored advantage} × epochs."""
    sizes = {t.turn_id: t.completion_ids.size for e in store.load_episodes(run_id) if e.status.value == "ok"
             for t in e.turns}
    out: dict[int, int] = {}
    for a in store.advantages(run_id):
        if a.value != 0.0 and a.turn_id in sizes:
            out[a.iteration] = out.get(a.iteration, 0) + sizes[a.turn_id] * epochs
    return out


@pytest.mark.parametrize("name", list(RUNS))
def test_every_trained_token_is_audited(name, tiny_dir, tmp_path):
    from agentrl.train import train

    cfg = _cfg(tiny_dir, tmp_path, name="audit", iterations=2, run__eval_every=0, **RUNS[name])
    assert cfg.update.audit is True  # on by default
    _assert_every_token_audited(train(cfg, resume=False), cfg.update.epochs)


def _assert_every_token_audited(result, epochs: int) -> None:
    """Each iteration's ``audit/tokens`` equals the trained tokens of the turns it stored advantages for."""
    lines = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    with TurnStore(result.store_path, readonly=True) as store:
        expected = _trained_tokens(store, result.run_id, epochs)
    assert expected, "no iteration trained: the run shows nothing"
    for line in lines:
        it = line["step"]
        assert line.get("audit/tokens", 0.0) == expected.get(it, 0), (it, line)
        if expected.get(it):
            assert line["audit/rows"] >= 1 and 0 < line["audit/seconds"]


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_harness_turns_through_the_proxy_are_audited(layout, tiny_dir, tmp_path):
    """examples/harness_toy.yaml with tests/e2e/audit_harness_agent.py (the walkthrough with slips
    picked by the model's reply, so outcomes differ): an external agent plays through the recording
    proxy; every token its recorded turns train is audited (its segments are the proxy's, not the
    collector's), padded and packed."""
    from agentrl.config import load_config
    from agentrl.train import train

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "examples" / "harness_toy.yaml", [
        f"policy.model={tiny_dir}", f"run.out_dir={tmp_path}", "run.iterations=2", "log.console=false",
        "policy.lora=null", "policy.dtype=float32", "run.eval_before=false", "run.eval_every=0",
        "rollout.groups_per_iteration=2", "rollout.group_size=4", "env.max_turns=8",
        *(["update.pack=true", "update.micro_batch=2"] if layout == "packed" else []),
        f"rollout.harness.command=['{{python}}', '{Path(__file__).parent / 'audit_harness_agent.py'}', '8']"])
    assert cfg.update.audit is True
    _assert_every_token_audited(train(cfg, resume=False), cfg.update.epochs)


def _advantage_on_a_prompt_token(real):
    def build(*args, **kwargs):
        b = real(*args, **kwargs)
        adv = b.advantages.clone()
        r = int(b.turn_row[-1])
        adv[r, int(b.turn_value_pos[-1])] = 0.25  # the last prompt token of the last turn
        return b.with_(advantages=adv)
    return build


def _shift_packed_advantages(real):
    def pack(mb, prefix=0):
        p = real(mb, prefix)
        b = p.batch
        return type(p)(b.with_(advantages=torch.roll(b.advantages, 1, dims=1) * (b.loss_mask != 0)),
                       p.rows, p.cols, p.shape)
    return pack


def _train_a_row_twice(real):
    def micro(*args, **kwargs):
        mine, chunks = real(*args, **kwargs)
        return mine, [*chunks, chunks[0][:1]]
    return micro


def _copy_a_neighbours_advantage(real):
    def select(self, rows):  # turn 0 gets turn 1's advantage (a lookup off by one; the same after re-selection)
        b = real(self, rows)
        if b.num_turns < 2:
            return b
        adv = b.advantages.clone()
        adv[b.turn_ids == 0] = b.advantages[b.turn_ids == 1][0]
        return b.with_(advantages=adv * (b.loss_mask != 0))
    return select


MUTATIONS = {  # name: (run, module attribute to wrap, wrapper, message)
    "padding: the batch builder": ("chains, padded", "agentrl.train.plan:build_batch", _advantage_on_a_prompt_token,
                                   "outside the loss mask"),
    "packing: pack_rows": ("chains, token packs + shared prefix", "agentrl.update.step:pack_rows",
                           _shift_packed_advantages, "carries advantage|outside the loss mask"),
    "sharding: the micro-batches": ("chains, packed", "agentrl.update.step:_my_micro_batches", _train_a_row_twice,
                                    "trained more than once"),
    "selection: RTPO's rounds": ("rtpo", "agentrl.update.batch:TrainBatch.select",
                                 _copy_a_neighbours_advantage,
                                 "the estimator gave"),
}


def test_rtpo_rounds_are_audited(tiny_dir, tmp_path):
    from agentrl.train import train

    sys.path.insert(0, str(TREES))
    import trees_fake_envs as fake

    fake.register_dense()  # shaping reward: siblings differ, so each round trains
    cfg = _cfg(tiny_dir, tmp_path, name="rtpo", iterations=1, run__eval_every=0, rollout__sampler="rtpo",
               rollout__group_size=2, algorithm__estimator="rtpo", env__id=fake.DENSE_ID)
    result = train(cfg, resume=False)
    (line,) = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert result.state.optimizer_steps >= 2 and line["audit/tokens"] > 0 and line["audit/rows"] >= 2


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_a_placement_mutation_stops_the_run(name, tiny_dir, tmp_path, monkeypatch):
    import importlib

    from agentrl.train import train

    run, target, wrap, message = MUTATIONS[name]
    module, attr = target.split(":")
    owner = importlib.import_module(module)
    if "." in attr:  # a method: TrainBatch.select
        cls_name, meth = attr.split(".")
        owner, attr = getattr(owner, cls_name), meth
    monkeypatch.setattr(owner, attr, wrap(getattr(owner, attr)))
    if run == "rtpo":
        sys.path.insert(0, str(TREES))
        import trees_fake_envs as fake

        fake.register_dense()  # shaping reward: siblings differ, so each round trains
        cfg = _cfg(tiny_dir, tmp_path, name="mut", iterations=1, run__eval_every=0, rollout__sampler="rtpo",
                   rollout__group_size=2, algorithm__estimator="rtpo", env__id=fake.DENSE_ID)
    else:
        cfg = _cfg(tiny_dir, tmp_path, name="mut", iterations=2, run__eval_every=0, **RUNS[run])
    with pytest.raises(CreditAuditError, match=message):
        train(cfg, resume=False)


def test_the_audit_can_be_switched_off(tiny_dir, tmp_path):
    from agentrl.train import train

    cfg = _cfg(tiny_dir, tmp_path, name="off", iterations=2, run__eval_every=0, update__audit=False)
    result = train(cfg, resume=False)
    lines = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert result.state.optimizer_steps >= 1 and not any(k.startswith("audit/") for x in lines for k in x)
    assert np.isfinite([x["update/loss"] for x in lines if "update/loss" in x]).all()
