"""Your own step scorer and a span estimator that reads it, trained from outside the package.

A **step scorer** is a torch pass after the rollout that fills ``TurnTable`` columns before the
estimator runs (``agentrl.train.scorers``): here ``surprise``, the policy's own mean negative
log-probability of each turn's completion (one forward pass per turn), written to
``table.scores["surprise"]``. It also learns nothing but counts its calls, and saves/loads that
count with every checkpoint, so a resumed run continues it.

A **span estimator** returns one advantage per named token span of a turn
(``agentrl.credit.declarations.SpanAdvantages``). ``split_grpo`` trains the first completion token
with the turn's GRPO advantage and the rest of the completion with
``beta * (group mean surprise - surprise)``; its per-row output (stored, logged, used to pick the
trained rows) is the sum of both. It *declares* what it needs — the scorer, the column, the spans —
and the trainer serves the declaration: nothing in agentrl names it.

Run it as a script::

    python examples/custom_scorer.py MODEL_DIR [OUT]   # 1 training iteration on agentrl/Toy-v0
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Mapping

import numpy as np

from agentrl.credit import list_estimators, register_estimator
from agentrl.credit.declarations import SpanAdvantages
from agentrl.types import Turn, TurnTable

NAME, SCORER, COLUMN = "split_grpo", "surprise", "surprise"
SPANS = ("first", "rest")
BUILT: list = []  # every SurpriseScorer the trainer built, newest last (the tests read them)


class SurpriseScorer:
    """The step scorer ``surprise`` (``agentrl.train.scorers.StepScorer``)."""

    FILE = "surprise_scorer.json"

    def __init__(self, model) -> None:
        self.model = model
        self.calls = {"score": 0, "learn": 0}
        self.last_table: TurnTable | None = None  # what ``score`` returned (tests read it)

    @classmethod
    def build(cls, ctx) -> "SurpriseScorer":
        """The factory ``register_scorer`` takes: ``ctx`` is an ``agentrl.train.scorers.ScorerContext``."""
        BUILT.append(cls(ctx.policy.model))
        return BUILT[-1]

    def score(self, table: TurnTable, episodes, iteration: int) -> TurnTable:
        """``table`` with ``scores["surprise"]`` (float64[N]): −mean log π(completion | prompt)."""
        import dataclasses

        import torch

        turns = {t.turn_id: t for ep in episodes for t in ep.turns}
        device = next(self.model.parameters()).device
        out = np.zeros(len(table))
        with torch.no_grad():
            for i, turn_id in enumerate(table.turn_id):
                t = turns[int(turn_id)]
                ids = torch.as_tensor(np.concatenate([t.prompt_ids, t.completion_ids]), dtype=torch.long, device=device)
                logits = self.model(input_ids=ids[None]).logits[0, t.prompt_ids.size - 1:-1].float()  # (C, V)
                lp = torch.log_softmax(logits, -1).gather(-1, ids[t.prompt_ids.size:, None])[:, 0]  # (C,)
                out[i] = -float(lp.mean())
        self.calls["score"] += 1
        self.last_table = dataclasses.replace(table, scores={**table.scores, COLUMN: out})
        return self.last_table

    def learn(self, table: TurnTable, advantages: np.ndarray, episodes, iteration: int) -> dict[str, float]:
        """No parameters to train; count the call and report the mean surprise."""
        self.calls["learn"] += 1
        return {"surprise/mean": float(np.mean(table.scores[COLUMN])) if len(table) else 0.0}

    def save(self, folder: Path) -> None:
        """Write the call counts into the checkpoint folder."""
        (Path(folder) / self.FILE).write_text(json.dumps(self.calls))

    def load(self, folder: Path) -> bool:
        """Read them back (False when the checkpoint has none)."""
        path = Path(folder) / self.FILE
        if not path.is_file():
            return False
        self.calls = json.loads(path.read_text())
        return True


def _grpo(table: TurnTable) -> np.ndarray:
    """Episode return minus its task group's mean return over eligible rows; 0 elsewhere."""
    ok = table.episode_ok & table.trainable
    ret = np.zeros(len(table))
    for e in np.unique(table.episode):
        rows = table.episode == e
        ret[rows] = table.reward[rows].sum()
    out = np.zeros(len(table))
    for g in np.unique(table.group[ok]):
        rows = ok & (table.group == g)
        out[rows] = ret[rows] - ret[rows].mean()
    return out


def _surprise_term(table: TurnTable, beta: float) -> np.ndarray:
    ok = table.episode_ok & table.trainable
    s, out = table.scores[COLUMN], np.zeros(len(table))
    for g in np.unique(table.group[ok]):
        rows = ok & (table.group == g)
        out[rows] = beta * (s[rows].mean() - s[rows])
    return out


def span_advantages(table: TurnTable, rows: np.ndarray, turns: list[Turn], kwargs: Mapping) -> tuple[list, list]:
    """Per-token advantages of the trained ``rows``: the first completion token carries GRPO's
    advantage, the others the surprise term; every token trains (mask None)."""
    first, rest = _grpo(table), _surprise_term(table, kwargs["beta"])
    advs = []
    for row, turn in zip(rows, turns):
        adv = np.full(turn.completion_ids.size, rest[row])
        adv[:1] = first[row]
        advs.append(adv)
    return advs, [None] * len(advs)


def split_grpo(table: TurnTable, *, beta: float = 0.5) -> np.ndarray:
    """Per-row advantage: GRPO's (episode return minus the group mean) plus
    ``beta * (group mean surprise − surprise)`` (the sum of the two spans' advantages).

    Args:
        table: N turns with ``scores["surprise"]`` (float64[N], from the ``surprise`` scorer).
        beta: weight of the surprise term, ≥ 0.
    Returns:
        float64[N]; 0 on failed-episode and non-trainable rows.
    """
    return _grpo(table) + _surprise_term(table, beta)


def register() -> None:
    """Register the scorer and the estimator (once; importing twice registers nothing twice)."""
    from agentrl.train.scorers import list_scorers, register_scorer

    if SCORER not in list_scorers():
        register_scorer(SCORER, SurpriseScorer.build)
    if NAME not in list_estimators():
        register_estimator(NAME, requires=(COLUMN,), scorers=(SCORER,), ranges={"beta": (0.0, None)},
                           spans=SpanAdvantages(SPANS, span_advantages))(split_grpo)


register()


def train_config(model_dir: str | Path, out_dir: str | Path, *, iterations: int = 1, seed: int = 3):
    """A small ``Config``: the toy env, 2 groups of 3 episodes, ``split_grpo``, a checkpoint every iteration."""
    from agentrl.config import config_from_dict

    return config_from_dict({
        "run": {"name": "custom-scorer", "out_dir": str(out_dir), "iterations": iterations,
                "eval_every": 0, "save_every": 1, "seed": seed},
        "env": {"id": "agentrl/Toy-v0", "max_turns": 8, "split": "train"},
        "policy": {"model": str(model_dir), "max_tokens": 8, "action_format": "whole",
                   "action_constraint": "admissible"},
        "rollout": {"groups_per_iteration": 2, "group_size": 3, "num_workers": 1},
        "algorithm": {"estimator": NAME, "kwargs": {"beta": 0.5}},
        "update": {"lr": 1e-3, "micro_batch": 4, "epochs": 1},
        "log": {"console": False},
    })


if __name__ == "__main__":
    from agentrl.train import train

    result = train(train_config(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "runs"), resume=False)
    print(f"trained {result.state.iteration} iteration(s), {result.state.optimizer_steps} optimizer step(s); "
          f"store: {result.store_path}")
