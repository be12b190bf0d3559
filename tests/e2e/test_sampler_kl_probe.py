"""``update.sampler_kl_every`` through ``agentrl.train.train`` on the toy env with the tiny fp32
model: with ``rollout_correction: none`` the probe only measures (π_old stays the sampler's), so a
run that probes every other iteration — or never — trains to the *same* weights bit for bit as one
that probes every iteration, while ``correction/*`` appears only on the probed iterations; the
config refuses the knob where the probe is the correction (tis/mis/icepop, or auto resolving to one).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_train_loop import _cfg, _weights  # noqa: E402

from agentrl.config import ConfigError, UpdateConfig, config_from_dict  # noqa: E402
from agentrl.train.plan import probes_sampler  # noqa: E402


def _run(tiny_dir, tmp_path, name, every):
    """3 iterations of groups of 8 (the first two update: their groups have contrast); returns the
    result and, per iteration, (whether it updated, whether it logged the probe's metrics)."""
    from agentrl.train import train

    cfg = _cfg(tiny_dir, tmp_path, name=name, iterations=3, run__eval_every=0, policy__dtype="float32",
               rollout__group_size=8, update__sampler_kl_every=every)
    assert cfg.update.rollout_correction == "none"  # fp32 in-process HF: the sampler is the trained model
    result = train(cfg, resume=False)
    rows = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return result, rows


def test_skipping_the_probe_changes_no_weight_and_logs_only_probed_iterations(tiny_dir, tmp_path):
    torch.set_num_threads(1)
    every, m1 = _run(tiny_dir, tmp_path, "every", 1)
    second, m2 = _run(tiny_dir, tmp_path, "second", 2)
    never, m0 = _run(tiny_dir, tmp_path, "never", 0)
    for rows in (m1, m2, m0):
        assert len(rows) == 3 and ["update/loss" in r for r in rows][:2] == [True, True]
    updated = ["update/loss" in r for r in m1]
    assert [("correction/kl" in r) for r in m1] == updated
    assert [("correction/kl" in r) for r in m2] == [u and i % 2 == 0 for i, u in enumerate(updated)]  # iteration 2 skips
    assert not any("correction/kl" in r for r in m0)
    assert all(abs(r["correction/kl"]) < 1e-6 for r in m1 if "correction/kl" in r)  # the sampler is the trainer
    w1, _ = _weights(every.run_dir)
    for other, rows in ((second, m2), (never, m0)):
        w, _ = _weights(other.run_dir)
        assert w.keys() == w1.keys() and all(torch.equal(w[k], w1[k]) for k in w1)
        assert [r.get("update/loss") for r in rows] == [r.get("update/loss") for r in m1]


def test_which_phases_probe():
    none = UpdateConfig(rollout_correction="none", sampler_kl_every=3)
    assert [probes_sampler(none, i) for i in range(7)] == [True, False, False, True, False, False, True]
    assert not any(probes_sampler(UpdateConfig(rollout_correction="none", sampler_kl_every=0), i) for i in range(4))
    assert all(probes_sampler(UpdateConfig(rollout_correction="tis"), i) for i in range(4))


@pytest.mark.parametrize("update, match", [
    ({"sampler_kl_every": -1}, r"update\.sampler_kl_every"),
    ({"sampler_kl_every": 0, "rollout_correction": "tis"}, r"sampler_kl_every: 0 with rollout_correction: tis"),
    ({"sampler_kl_every": 2, "rollout_correction": "icepop"}, r"leave sampler_kl_every at 1"),
])
def test_bad_values_are_refused(update, match):
    with pytest.raises(ConfigError, match=match):
        UpdateConfig(**update)


def test_auto_resolving_to_a_correcting_mode_is_refused(tiny_dir, tmp_path):
    raw = {"run": {"name": "x", "out_dir": str(tmp_path)}, "env": {"id": "agentrl/Toy-v0"},
           "policy": {"model": str(tiny_dir), "dtype": "bfloat16"}, "update": {"sampler_kl_every": 0}}
    with pytest.raises(ConfigError, match="sampler_kl_every: 0 with rollout_correction: tis"):  # auto resolved
        config_from_dict(raw)
    raw["policy"]["dtype"] = "float32"
    assert config_from_dict(raw).update.sampler_kl_every == 0
