"""``update.share_prefix`` (shared prompt prefix + identical rows run once) through the whole
training loop on the toy env, float32 and bfloat16: the same seed gives the same rollouts, and
the first update with the shared forward logs the same loss and gradient norm as the plain
forward (to the dtype's rounding; compared before Adam, whose first step is ≈ lr · sign(g) and
turns rounding noise in near-zero gradients into lr-sized weight differences). The groups' turn-0 prompts are identical, so the deduplication runs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from agentrl.config import config_from_dict  # noqa: E402


def _cfg(tiny_dir, out_dir, share: bool, dtype: str, estimator: str = "grpo"):
    return config_from_dict({
        "run": {"name": "sp", "out_dir": str(out_dir), "iterations": 1, "eval_every": 0, "save_every": 1, "seed": 3},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 16, "split": "train", "eval_split": "eval", "eval_panel_size": 2},
        "policy": {"model": str(tiny_dir), "max_tokens": 8, "action_format": "whole", "action_constraint": "admissible",
                   "dtype": dtype},
        "rollout": {"groups_per_iteration": 2, "group_size": 4, "num_workers": 1},
        "algorithm": {"estimator": estimator},
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


@pytest.mark.parametrize("dtype,atol,rtol", [("float32", 1e-6, 1e-5), ("bfloat16", 2e-2, 5e-2)])
def test_turn_ppo_critic_shares_prompts_through_the_loop(tiny_dir, tmp_path, monkeypatch, dtype, atol, rtol):
    """turn-PPO with ``update.share_prefix``: the critic values each distinct prompt once (the
    groups' turn-0 prompts are identical) and gives the same values — so the same stored
    advantages — and logs the same loss, gradient norm and explained variance as the plain path.
    The value head starts from seeded nonzero weights here (the trainer's starts at 0, which
    would read 0 on both paths and make the comparison trivial)."""
    import json

    import numpy as np

    from agentrl.store import TurnStore
    from agentrl.train import train
    from agentrl.update import critic

    seen = []
    real = critic.value_rows

    def counting(batch, distinct=False, **kw):  # kw: HiPER's low_pos (None here)
        got = real(batch, distinct, **kw)
        seen.append((batch.num_turns, got.num_prompts))
        return got

    monkeypatch.setattr(critic, "value_rows", counting)

    class SeededHead(critic.TurnCritic):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            torch.nn.init.normal_(self.head.weight, std=0.5, generator=torch.Generator().manual_seed(0))

    from agentrl.train import critic as train_critic

    monkeypatch.setattr(train_critic, "TurnCritic", SeededHead)
    logged, adv = {}, {}
    for share in (False, True):
        result = train(_cfg(tiny_dir, tmp_path / str(share), share, dtype, "turn_ppo"), resume=False)
        logged[share] = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[0])
        with TurnStore(result.store_path, readonly=True) as store:
            adv[share] = np.array([a.value for a in store.advantages(result.run_id, estimator="turn_ppo")])
    n_turns = adv[False].size
    assert n_turns >= 8 and np.abs(adv[False]).max() > 0 and np.abs(adv[False] - adv[True]).max() <= atol * np.abs(adv[False]).max()
    # plain run: the value pass, then the critic step's step unit (distinct prompts) and its rows;
    # shared run: the value pass and the critic step, both on distinct prompts
    plain, shared = seen[:3], seen[3:]
    assert plain[0] == plain[2] == (n_turns, n_turns) and plain[1] == shared[0] and len(shared) == 2
    assert all(n == n_turns and u <= n_turns - 6 for n, u in shared)  # 2 groups x 3 repeated first prompts at least
    for key in ("critic/loss", "critic/grad_norm", "critic/explained_var"):
        a, b = logged[False][key], logged[True][key]
        assert a != 0 and abs(a - b) <= rtol * abs(a), (key, a, b)
