"""``update.share_prefix`` (shared prompt prefix + identical rows run once) through the whole
training loop on the toy env, float32 and bfloat16: the same seed gives the same rollouts, and
the first update with the shared forward logs the same loss and gradient norm as the plain
forward (to the dtype's rounding; compared before Adam, whose first step is ≈ lr · sign(g) and
turns rounding noise in near-zero gradients into lr-sized weight differences). The groups' turn-0 prompts are identical, so the deduplication runs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from agentrl.config import config_from_dict  # noqa: E402


def _cfg(tiny_dir, out_dir, share: bool, dtype: str):
    return config_from_dict({
        "run": {"name": "sp", "out_dir": str(out_dir), "iterations": 1, "eval_every": 0, "save_every": 1, "seed": 3},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 16, "split": "train", "eval_split": "eval", "eval_panel_size": 2},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole", "action_constraint": "admissible",
                   "dtype": dtype},
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1},
        "algorithm": {"estimator": "grpo"},
        "update": {"lr": 1e-2, "micro_batch": 8, "epochs": 1, "share_prefix": share},
        "log": {"console": False}})


@pytest.mark.parametrize("dtype,rtol", [("float32", 1e-4), ("bfloat16", 5e-2)])
def test_shared_forward_steps_like_the_plain_forward_through_the_loop(tiny_dir, tmp_path, dtype, rtol, monkeypatch):
    import json

    from agentrl.store import TurnStore
    from agentrl.train import train
    from agentrl.update import logprobs

    copies = []
    real = logprobs.duplicate_rows

    def counting(*a, **k):
        got = real(*a, **k)
        copies.append(0 if got is None else a[0].shape[0] - got[0].numel())
        return got

    monkeypatch.setattr(logprobs, "duplicate_rows", counting)
    logged, tables = {}, {}
    for share in (False, True):
        result = train(_cfg(tiny_dir, tmp_path / str(share), share, dtype), resume=False)
        logged[share] = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[0])
        with TurnStore(result.store_path, readonly=True) as store:
            tables[share] = store.table(run_id=result.run_id)
        assert result.state.optimizer_steps == 1  # the step ran (some group had contrast)
    assert (tables[False].turn_id == tables[True].turn_id).all() and (tables[False].reward == tables[True].reward).all()
    assert sum(copies) > 0  # identical rows were found and ran once
    for key in ("update/loss", "update/grad_norm", "update/entropy"):
        a, b = logged[False][key], logged[True][key]
        assert a != 0 and abs(a - b) <= rtol * abs(a), (key, a, b)
