"""``crash_before_checkpoint``: make ``agentrl.train.loop`` die before saving a given iteration's checkpoint."""

from __future__ import annotations


def crash_before_checkpoint(monkeypatch, iteration: int):
    """Patch ``agentrl.train.loop.save_checkpoint`` to raise ``KeyboardInterrupt`` at ``iteration``
    (the run is killed after that iteration's turns are stored, before its checkpoint). Returns the
    real ``save_checkpoint``, to put back with ``monkeypatch.setattr`` before resuming."""
    import agentrl.train.loop as train_mod

    real_save = train_mod.save_checkpoint

    def dies(run_dir, model, optimizer, state, dp=None, **kw):
        if state.iteration == iteration:
            raise KeyboardInterrupt("killed before the checkpoint")
        return real_save(run_dir, model, optimizer, state, dp=dp, **kw)

    monkeypatch.setattr(train_mod, "save_checkpoint", dies)
    return real_save
