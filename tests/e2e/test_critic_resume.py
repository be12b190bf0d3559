"""turn-PPO's critic in checkpoints: an interrupted-then-resumed run continues the same critic
(weights and optimizer state, bf16 masters included) and ends where an uninterrupted one does
(PITFALLS P7); a checkpoint without a critic, or with another critic's, is handled."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentrl.store import TurnStore  # noqa: E402
from test_train_loop import _cfg, _weights  # noqa: E402


def _critic_cfg(tiny_dir, out, name, iterations, dtype):
    return _cfg(tiny_dir, out, name=name, iterations=iterations, algorithm__estimator="turn_ppo",
                run__eval_every=0, update__critic_lr=1e-2, update__critic_minibatch=3, policy__dtype=dtype)


def _critic_file(run_dir):
    folder = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text()
    return torch.load(folder / "critic.pt", weights_only=False)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_resumed_turn_ppo_equals_uninterrupted(tiny_dir, tmp_path, dtype):
    from agentrl.train import train

    ref = train(_critic_cfg(tiny_dir, tmp_path / "ref", "tppo", 3, dtype), resume=False)
    train(_critic_cfg(tiny_dir, tmp_path / "split", "tppo", 2, dtype), resume=False)
    resumed = train(_critic_cfg(tiny_dir, tmp_path / "split", "tppo", 3, dtype), resume=True)
    assert resumed.state == ref.state and ref.state.iteration == 3
    for k, v in _weights(ref.run_dir)[0].items():
        assert torch.equal(v, _weights(resumed.run_dir)[0][k]), k
    a, b = _critic_file(ref.run_dir), _critic_file(resumed.run_dir)
    assert a["weights"].keys() == b["weights"].keys() and "head.weight" in a["weights"]
    assert float(a["weights"]["head.weight"].abs().sum()) > 0  # the zero-initialised head trained
    for k in a["weights"]:
        assert torch.equal(a["weights"][k], b["weights"][k]), k
    with TurnStore(ref.store_path, readonly=True) as x, TurnStore(resumed.store_path, readonly=True) as y:
        va = np.array([r.value for r in x.advantages(ref.run_id, estimator="turn_ppo")])
        vb = np.array([r.value for r in y.advantages(resumed.run_id, estimator="turn_ppo")])
    assert va.size > 0 and np.array_equal(va, vb)  # iteration 3's advantages use the resumed critic's values


def test_old_checkpoint_without_critic_warns_and_another_critic_is_refused(tiny_dir, tmp_path, caplog):
    from agentrl.train import train
    from agentrl.train.critic import load_critic, make_critic
    from agentrl.update.checkpoint import CheckpointError

    first = train(_critic_cfg(tiny_dir, tmp_path, "tppo", 1, "float32"), resume=False)
    folder = first.run_dir / "checkpoints" / (first.run_dir / "checkpoints" / "latest").read_text()
    cfg = _critic_cfg(tiny_dir, tmp_path, "tppo", 1, "float32")
    top1 = dataclasses.replace(cfg, update=dataclasses.replace(cfg.update, critic_top_n_layers=1))
    with pytest.raises(CheckpointError, match="does not match this run's critic"):
        load_critic(folder, make_critic(top1))
    (folder / "critic.pt").unlink()
    with caplog.at_level("WARNING"):
        assert load_critic(folder, make_critic(cfg)) is False
    assert "starts afresh" in caplog.text
