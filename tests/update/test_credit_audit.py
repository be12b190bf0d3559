"""The credit audit (agentrl.update.audit, issue 49): it passes on every batch layout the update
builds (padded, chains packed, token-budget packs, shared-prefix packs, span masks, shuffled
minibatches), and each placement mutation — injected in the padding, mask, packing, sharding and
selection code the update really runs, never in an estimator — stops the step with one line."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from agentrl.config import UpdateConfig
from agentrl.update import packing, step
from agentrl.update.audit import CreditAudit, CreditAuditError, TurnExpectation, audit_micro_batch
from agentrl.update.batch import TrainBatch, build_batch
from update_fixtures import PAD, random_turns, sgd, tiny_model


def _turns(seed: int, spans: bool):
    prompts, comps, lps, adv = random_turns(seed, episodes=(3, 2, 1, 2))
    rng = np.random.default_rng(seed + 100)
    episodes = [e for e, n in enumerate((3, 2, 1, 2)) for _ in range(n)]
    keys = list(range(1000, 1000 + len(prompts)))
    masks = None
    per_token = adv
    if spans:  # a span estimator: per-token advantages, some tokens untrained (never all)
        masks = [rng.random(c.size) < 0.7 for c in comps]
        for m in masks:
            m[0] = True
        per_token = [rng.normal(size=c.size) for c in comps]
    expected = {}
    for i, k in enumerate(keys):
        a = np.broadcast_to(np.asarray(per_token[i], dtype=np.float64), comps[i].shape).copy()
        trained = np.ones(comps[i].size, bool) if masks is None else masks[i]
        expected[k] = TurnExpectation(episodes[i], int(prompts[i].size), comps[i].astype(np.int64), a, trained)
    return prompts, comps, lps, per_token, masks, episodes, keys, expected


def _batch(seed=0, spans=False, pack=False) -> tuple[TrainBatch, dict]:
    prompts, comps, lps, adv, masks, episodes, keys, expected = _turns(seed, spans)
    batch = build_batch(prompts, comps, lps, adv, pad_id=PAD, pack=pack, episodes=episodes, token_mask=masks,
                        turn_keys=keys)
    return batch, expected


LAYOUTS = {
    "padded": ({}, False),
    "padded, 1-row micro-batches": ({"micro_batch": 1}, False),
    "chains packed": ({}, True),
    "token-budget packs": ({"micro_batch_tokens": 40}, False),
    "shared-prefix packs": ({"micro_batch_tokens": 64, "share_prefix": True}, False),
    "chains and token packs": ({"micro_batch_tokens": 48}, True),
}


@pytest.mark.parametrize("spans", [False, True], ids=["per-row", "spans"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_audit_passes_every_layout_the_update_builds(layout, spans):
    extra, pack = LAYOUTS[layout]
    batch, expected = _batch(seed=3, spans=spans, pack=pack)
    cfg = UpdateConfig(lr=1e-3, **extra)
    model = tiny_model()
    audit = CreditAudit(expected)
    order = torch.randperm(batch.num_rows, generator=torch.Generator().manual_seed(0))
    for rows in (order[: batch.num_rows // 2], order[batch.num_rows // 2:]):  # two shuffled minibatches
        step.update(model, sgd(model), batch.select(rows), cfg, audit=audit)
    assert audit.tokens == sum(e.n_trained for e in expected.values()) and audit.rows >= 1
    assert audit.seconds > 0 and set(audit.as_metrics()) == {"audit/rows", "audit/tokens", "audit/seconds"}


def test_hand_built_micro_batch_counts_and_messages():
    # one row: prompt [5, 6], completion [7, 8] of turn 42 (episode 3), advantage 0.5 on both
    mb = build_batch([np.array([5, 6])], [np.array([7, 8])], [np.zeros(2)], np.array([0.5]), pad_id=PAD,
                     turn_keys=[42])
    exp = {42: TurnExpectation(3, 2, np.array([7, 8]), np.array([0.5, 0.5]), np.array([True, True]))}
    assert audit_micro_batch(mb, exp) == {42: 2}
    wrong = {42: dataclasses.replace(exp[42], advantages=np.array([0.5, 0.25]))}
    with pytest.raises(CreditAuditError, match=r"row 0, episode 3, turn 42: completion token 1 carries advantage "
                                               r"0\.5, the estimator gave 0\.25"):
        audit_micro_batch(mb, wrong)
    with pytest.raises(CreditAuditError, match="estimator gave it no advantage"):
        audit_micro_batch(mb, {})
    with pytest.raises(CreditAuditError, match="no turn keys"):
        audit_micro_batch(dataclasses.replace(mb, turn_key=None), exp)
    audit = CreditAudit(exp)
    audit.begin_step()
    with pytest.raises(CreditAuditError, match=r"episode 3, turn 42: 0 trained token\(s\).*trains 2 \(dropped\)"):
        audit.end_step(mb.turn_key)


# --------------------------------------------------------------------------- mutations
# Each wraps a real function of the update path and corrupts what it returns, the way a
# placement bug in that code would. The estimator and the expectations are never touched.

def _last_prompt_col(b: TrainBatch) -> tuple[int, int]:
    r = int(b.turn_row[0])
    return r, int(torch.nonzero(b.turn_ids[r] == 0)[0]) - 1


def _advantage_on_the_prompt(b: TrainBatch) -> TrainBatch:  # padding/template code writes past the completion
    adv = b.advantages.clone()
    adv[_last_prompt_col(b)] = 1.0
    return b.with_(advantages=adv)


def _prompt_token_trained(b: TrainBatch) -> TrainBatch:  # the loss mask starts one token early
    mask, adv = b.loss_mask.clone(), b.advantages.clone()
    mask[_last_prompt_col(b)], adv[_last_prompt_col(b)] = 1.0, 1.0
    return b.with_(loss_mask=mask, advantages=adv)


def _eos_untrained(b: TrainBatch) -> TrainBatch:  # the loss mask drops each turn's last token (EOS)
    mask, adv = b.loss_mask.clone(), b.advantages.clone()
    for k in range(b.num_turns):
        r = int(b.turn_row[k])
        c = int(torch.nonzero(b.turn_ids[r] == k)[-1])
        mask[r, c], adv[r, c] = 0.0, 0.0
    return b.with_(loss_mask=mask, advantages=adv)


def _advantages_of_two_turns_swapped(b: TrainBatch) -> TrainBatch:  # a turn-index lookup off by one
    adv = b.advantages.clone()
    a, c = (b.turn_ids == 0), (b.turn_ids == 1)
    va, vc = b.advantages[a][0].item(), b.advantages[c][0].item()
    adv[a], adv[c] = vc, va
    return b.with_(advantages=adv)


def _shifted_one_column(p: packing.Packed) -> packing.Packed:  # packing moves the advantages right by one
    b = p.batch
    adv = torch.roll(b.advantages, 1, dims=1) * (b.loss_mask != 0)
    return dataclasses.replace(p, batch=b.with_(advantages=adv))


def _positions_off_by_one(p: packing.Packed) -> packing.Packed:  # packed positions restart at 1
    return dataclasses.replace(p, batch=p.batch.with_(position_ids=p.batch.position_ids + 1))


MUTATIONS = {
    "padding: advantage on a prompt token": ("build", _advantage_on_the_prompt, "outside the loss mask"),
    "mask: a prompt token trained": ("build", _prompt_token_trained, "belongs to no turn"),
    "mask: the EOS token untrained": ("build", _eos_untrained, "has loss mask 0.0, the turn trains it: True"),
    "select: two turns' advantages swapped": ("select", _advantages_of_two_turns_swapped, "the estimator gave"),
    "packing: advantages one column right": ("pack", _shifted_one_column, "carries advantage|outside the loss mask"),
    "packing: positions off by one": ("pack", _positions_off_by_one, "starts at position"),
    "sharding: a row dropped": ("shard", "drop", r"\(dropped\)"),
    "sharding: a row trained twice": ("shard", "twice", "trained more than once"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_placement_mutation_is_caught(name, monkeypatch):
    where, mutate, message = MUTATIONS[name]
    batch, expected = _batch(seed=5)
    cfg = UpdateConfig(lr=1e-3, micro_batch_tokens=40 if where == "pack" else 0, micro_batch=2)
    if where == "build":
        batch = mutate(batch)
    elif where == "select":
        real_select = TrainBatch.select
        monkeypatch.setattr(TrainBatch, "select", lambda self, rows: mutate(real_select(self, rows)))
    elif where == "pack":
        real_pack = packing.pack_rows
        monkeypatch.setattr(step, "pack_rows", lambda mb, prefix=0: mutate(real_pack(mb, prefix)))
    else:
        real_micro = step._my_micro_batches

        def sharded(*args, **kwargs):
            mine, chunks = real_micro(*args, **kwargs)
            if mutate == "drop":
                chunks = [chunks[0][:-1], *chunks[1:]]
            else:
                chunks = [*chunks, chunks[0][:1]]
            return mine, chunks

        monkeypatch.setattr(step, "_my_micro_batches", sharded)
    model = tiny_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(CreditAuditError, match=message):
        step.update(model, sgd(model), batch, cfg, audit=CreditAudit(expected))
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # stopped before the step


def test_without_the_audit_a_mutation_trains_silently(monkeypatch):
    """The control: the same corruption goes unnoticed by the update itself."""
    batch, _ = _batch(seed=5)
    model = tiny_model()
    stats = step.update(model, sgd(model), _advantages_of_two_turns_swapped(batch), UpdateConfig(lr=1e-3))
    assert np.isfinite(stats.loss) and stats.tokens == int(batch.loss_mask.sum())
