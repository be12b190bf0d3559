"""``update.critic_minibatch``: a critic pass split into several optimizer steps — runs of sorted
distinct prompts, in a seeded order, on either path — equals the same steps taken one by one on
the sub-batches of their turns."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from agentrl.update import critic_update, make_optimizer
from agentrl.update.critic import critic_loss, value_rows
from test_critic_prefix import _critic_and_batch


def _sgd(critic) -> torch.optim.Optimizer:
    """Plain SGD for the step-by-step comparisons: its update is linear in the gradient, so the
    float noise of two paths stays noise. AdamW's first steps are ~lr·sign(g): a near-zero
    gradient entry whose sign differs by rounding (AVX2 vs AVX-512 kernels) flips a whole step."""
    return torch.optim.SGD([p for p in critic.parameters() if p.requires_grad], lr=0.5)


def _weights(critic) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in critic.named_parameters() if p.requires_grad}


def _one_by_one(critic, batch, chunks: list[torch.Tensor], value_clip):
    """The reference: one whole-batch critic_update per chunk of turns, on ``batch.select``."""
    opt = _sgd(critic)
    losses, norms, preds = [], [], torch.zeros(batch.num_turns)
    for turns in chunks:
        sub = batch.select(turns)
        with torch.no_grad():  # the values this step starts from, for the pass's explained variance
            v = critic.prompt_values(*value_rows(sub).chunk(torch.arange(len(turns)), torch.device("cpu")))
        preds[turns] = v
        s = critic_update(critic, opt, sub, micro_batch=2, value_clip=value_clip)
        assert s.steps == 1 and s.turns == len(turns)
        losses.append(s.loss * len(turns))
        norms.append(s.grad_norm)
    ev = 1 - float((batch.returns - preds).var(unbiased=False)) / float(batch.returns.var(unbiased=False))
    return sum(losses) / batch.num_turns, float(np.mean(norms)), ev


def _step_turns(batch, minibatch: int, seed: int | None) -> list[torch.Tensor]:
    """The turns of each step, by hand: runs of ``minibatch`` sorted distinct prompts, in the
    order a seeded permutation of the runs gives."""
    rows = value_rows(batch, distinct=True)
    runs = list(torch.arange(rows.num_prompts).split(minibatch))
    if seed is not None:
        runs = [runs[i] for i in torch.randperm(len(runs), generator=torch.Generator().manual_seed(seed))]
    return [torch.nonzero(torch.isin(rows.turn_prompt, r)).squeeze(-1) for r in runs]


@pytest.mark.parametrize("share, value_clip, seed", [(False, None, None), (True, None, None), (False, 0.1, 5),
                                                     (True, 0.1, 5)])
def test_minibatch_steps_equal_one_update_per_run_of_prompts(share, value_clip, seed) -> None:
    critic, batch, _ = _critic_and_batch()
    ref = copy.deepcopy(critic)
    stats = critic_update(critic, _sgd(critic), batch, micro_batch=2, value_clip=value_clip,
                          share_prefix=share, minibatch=2, seed=seed)
    chunks = _step_turns(batch, 2, seed)  # 5 distinct prompts of 9 turns → steps of 2, 2, 1 prompts
    assert value_rows(batch, distinct=True).num_prompts == 5 and stats.steps == len(chunks) == 3 and stats.turns == 9
    assert sorted(int(t) for c in chunks for t in c) == list(range(9))
    loss, norm, ev = _one_by_one(ref, batch, chunks, value_clip)
    assert stats.loss == pytest.approx(loss, rel=1e-5) and stats.grad_norm == pytest.approx(norm, rel=1e-5)
    assert stats.explained_var == pytest.approx(ev, rel=1e-4, abs=1e-6)
    w, w_ref, w0 = _weights(critic), _weights(ref), _weights(_critic_and_batch()[0])
    for n in w:  # SGD: every entry, within 0.1 % of how far the steps moved it (or a few float32 ulps)
        step = float((w_ref[n] - w0[n]).abs().max())
        assert step > 0, n
        gap = float((w[n] - w_ref[n]).abs().max())
        assert gap <= max(1e-3 * step, 1e-6), (n, gap, step)


def test_the_seed_changes_the_order_of_the_steps() -> None:
    orders = {tuple(tuple(c.tolist()) for c in _step_turns(_critic_and_batch()[1], 1, s)) for s in range(6)}
    assert len(orders) > 1  # 5 one-prompt steps: different seeds, different orders
    out = []
    for seed in (0, 1):
        critic, batch, _ = _critic_and_batch()
        critic_update(critic, make_optimizer(critic, 1e-2), batch, minibatch=1, seed=seed)
        out.append(_weights(critic)["head.weight"])
    assert not torch.equal(*out)


def test_more_steps_per_pass_fit_the_returns_faster() -> None:
    fits = {}
    for minibatch in (0, 2):
        critic, batch, _ = _critic_and_batch()
        opt = make_optimizer(critic, 1e-2)
        for _ in range(3):
            critic_update(critic, opt, batch, micro_batch=3, minibatch=minibatch)
        with torch.no_grad():
            v = critic.prompt_values(*value_rows(batch).chunk(torch.arange(batch.num_turns), torch.device("cpu")))
        fits[minibatch] = float(critic_loss(v, batch.returns).mean())
    assert fits[2] < 0.7 * fits[0]


def test_bad_minibatch_is_refused() -> None:
    from agentrl.config import ConfigError, UpdateConfig

    critic, batch, _ = _critic_and_batch()
    with pytest.raises(ValueError, match="minibatch must be >= 0"):
        critic_update(critic, make_optimizer(critic, 1e-2), batch, minibatch=-1)
    assert UpdateConfig(critic_minibatch=8).critic_minibatch == 8 and UpdateConfig().critic_minibatch == 0
    with pytest.raises(ConfigError, match="critic_minibatch must be >= 0"):
        UpdateConfig(critic_minibatch=-2)
