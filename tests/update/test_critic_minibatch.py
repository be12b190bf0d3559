"""``update.critic_minibatch``: a critic pass split into several optimizer steps equals the same
steps taken one by one on the sub-batches (plain path), and the distinct-prompt path's steps
equal the plain path's on the same turns."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from agentrl.update import critic_update, make_optimizer
from agentrl.update.critic import critic_loss, value_rows
from test_critic_prefix import _critic_and_batch


def _weights(critic) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in critic.named_parameters() if p.requires_grad}


def _one_by_one(critic, batch, chunks: list[torch.Tensor], value_clip):
    """The reference: one whole-batch critic_update per chunk of turns, on ``batch.select``."""
    opt = make_optimizer(critic, 1e-2)
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


@pytest.mark.parametrize("value_clip", [None, 0.1])
def test_minibatch_steps_equal_one_update_per_chunk(value_clip) -> None:
    critic, batch, _ = _critic_and_batch()
    ref = copy.deepcopy(critic)
    stats = critic_update(critic, make_optimizer(critic, 1e-2), batch, micro_batch=2, value_clip=value_clip,
                          minibatch=4)
    assert stats.steps == 3 and stats.turns == 9  # turns 0-3, 4-7, 8
    loss, norm, ev = _one_by_one(ref, batch, [torch.arange(0, 4), torch.arange(4, 8), torch.arange(8, 9)], value_clip)
    assert stats.loss == pytest.approx(loss, rel=1e-5) and stats.grad_norm == pytest.approx(norm, rel=1e-5)
    assert stats.explained_var == pytest.approx(ev, rel=1e-4, abs=1e-6)
    w, w_ref = _weights(critic), _weights(ref)
    assert all(torch.allclose(w[n], w_ref[n], atol=1e-6) for n in w)
    assert any(not torch.equal(w[n], _weights(_critic_and_batch()[0])[n]) for n in w)  # it did move


def test_distinct_prompt_minibatches_equal_the_plain_path_on_their_turns() -> None:
    critic, batch, _ = _critic_and_batch()
    ref = copy.deepcopy(critic)
    stats = critic_update(critic, make_optimizer(critic, 1e-2), batch, micro_batch=2, share_prefix=True, minibatch=2)
    rows = value_rows(batch, distinct=True)  # 5 distinct prompts of 9 turns → steps of 2, 2, 1 prompts
    assert rows.num_prompts == 5 and stats.steps == 3
    chunks = [torch.nonzero(torch.isin(rows.turn_prompt, p)).squeeze(-1) for p in torch.arange(5).split(2)]
    assert sorted(int(t) for c in chunks for t in c) == list(range(9))
    loss, norm, ev = _one_by_one(ref, batch, chunks, None)
    assert stats.loss == pytest.approx(loss, rel=1e-5) and stats.grad_norm == pytest.approx(norm, rel=1e-5)
    assert stats.explained_var == pytest.approx(ev, rel=1e-4, abs=1e-6)
    w, w_ref = _weights(critic), _weights(ref)
    for n in w:  # AdamW's first steps are ~lr·sign(g): compare where the weights moved clearly
        moved = (w_ref[n] - _weights(_critic_and_batch()[0])[n]).abs() > 1e-3
        assert torch.allclose(w[n][moved], w_ref[n][moved], atol=1e-5), n


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
