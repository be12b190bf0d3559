"""Checkpoints through torch.distributed.checkpoint in one process: a save/load round trip
continues bit-identically, and a checkpoint that does not fit the model (other LoRA rank,
LoRA on/off, a missing shard) is a ``CheckpointError`` naming the fix, not a raw traceback; a
signal during a save or load is raised as itself, not wrapped by DCP."""

from __future__ import annotations

import pytest
import torch

from agentrl.config import LoraSpec, UpdateConfig
from agentrl.update import build_batch, make_optimizer, update
from agentrl.update.checkpoint import CheckpointError, TrainState, checkpoint_weights, load_checkpoint, save_checkpoint
from agentrl.update.lora import apply_lora
from update_fixtures import PAD, random_turns, tiny_model

CFG = UpdateConfig(lr=1e-2, grad_clip=1.0, micro_batch=2)


def _setup(rank: int | None):
    torch.set_num_threads(1)
    model = tiny_model(0)
    if rank is not None:
        model = apply_lora(model, LoraSpec(rank=rank, alpha=8.0))
    return model, make_optimizer(model, CFG.lr)


def _batch():
    prompts, comps, lps, adv = random_turns(3, (2, 1))
    return build_batch(prompts, comps, lps, adv, pad_id=PAD)


def _trainable(model) -> dict:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_round_trip_continues_bit_identically(tmp_path):
    model, opt = _setup(4)
    update(model, opt, _batch(), CFG)
    folder = save_checkpoint(tmp_path, model, opt, TrainState(iteration=1, optimizer_steps=1, policy_version=1))
    assert (folder / "dcp" / ".metadata").is_file() and (tmp_path / "checkpoints" / "latest").read_text() == folder.name
    saved = checkpoint_weights(folder)
    assert saved.keys() == _trainable(model).keys()
    assert all(torch.equal(saved[k], v) for k, v in _trainable(model).items())
    fresh, fresh_opt = _setup(4)
    state = load_checkpoint(folder, fresh, fresh_opt)
    assert state == TrainState(iteration=1, optimizer_steps=1, policy_version=1)
    update(model, opt, _batch(), CFG)  # one more step on both: the same weights to the bit
    update(fresh, fresh_opt, _batch(), CFG)
    a, b = _trainable(model), _trainable(fresh)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_saving_before_the_first_step_does_not_touch_the_optimizer(tmp_path):
    model, opt = _setup(4)
    save_checkpoint(tmp_path, model, opt, TrainState())
    assert not opt.state  # DCP's optimizer state dict would have run a fake step (step = 1)


@pytest.mark.parametrize("rank, match", [(8, "cannot be loaded into this model"), (None, "does not match")])
def test_other_lora_settings_are_a_clear_error(tmp_path, rank, match):
    model, opt = _setup(4)
    update(model, opt, _batch(), CFG)
    folder = save_checkpoint(tmp_path, model, opt, TrainState(iteration=1))
    other, other_opt = _setup(rank)
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(folder, other, other_opt)


def test_a_missing_shard_is_a_clear_error(tmp_path):
    model, opt = _setup(None)
    update(model, opt, _batch(), CFG)
    folder = save_checkpoint(tmp_path, model, opt, TrainState(iteration=1))
    shards = sorted((folder / "dcp").glob("*.distcp"))
    assert shards
    shards[0].unlink()
    fresh, fresh_opt = _setup(None)
    with pytest.raises(CheckpointError, match="--no-resume"):
        load_checkpoint(folder, fresh, fresh_opt)


class _Interrupt(KeyboardInterrupt):
    """Stands for ``agentrl.cli.train.Terminated`` (SIGTERM), a ``KeyboardInterrupt``."""


def test_a_signal_during_a_save_is_raised_as_itself_and_latest_stays(tmp_path, monkeypatch):
    """A fresh-clone run, 2026-12-07: SIGTERM landed inside ``dcp.save``, DCP wrapped it in its
    ``CheckpointException`` and ``agentrl train`` failed with a traceback (exit 1, not 143)."""
    from torch.distributed.checkpoint import FileSystemWriter

    model, opt = _setup(4)
    update(model, opt, _batch(), CFG)
    first = save_checkpoint(tmp_path, model, opt, TrainState(iteration=1, optimizer_steps=1, policy_version=1))

    def interrupted(self, plan, planner):
        raise _Interrupt("signal 15")

    monkeypatch.setattr(FileSystemWriter, "write_data", interrupted)
    with pytest.raises(_Interrupt, match="signal 15"):
        save_checkpoint(tmp_path, model, opt, TrainState(iteration=2, optimizer_steps=2, policy_version=2))
    assert (tmp_path / "checkpoints" / "latest").read_text() == first.name


def test_a_signal_during_a_load_is_raised_as_itself(tmp_path, monkeypatch):
    from torch.distributed.checkpoint import FileSystemReader

    model, opt = _setup(4)
    folder = save_checkpoint(tmp_path, model, opt, TrainState(iteration=1))

    def interrupted(self, plan, planner):
        raise _Interrupt("signal 15")

    monkeypatch.setattr(FileSystemReader, "read_data", interrupted)
    fresh, fresh_opt = _setup(4)
    with pytest.raises(_Interrupt, match="signal 15"):
        load_checkpoint(folder, fresh, fresh_opt)


def test_other_save_failures_still_raise_dcps_exception(tmp_path, monkeypatch):
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.api import CheckpointException

    def broken(self, plan, planner):
        raise OSError("disk full")

    monkeypatch.setattr(FileSystemWriter, "write_data", broken)
    model, opt = _setup(4)
    with pytest.raises(CheckpointException, match="disk full"):
        save_checkpoint(tmp_path, model, opt, TrainState(iteration=1))
    assert not (tmp_path / "checkpoints" / "latest").exists()
