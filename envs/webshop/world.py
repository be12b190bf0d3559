"""The process-wide WebShop world: catalogue, actual prices, goals and BM25 index, built once
per ``(data folder, goal mode, price seed)`` and shared by every env instance of the process
(so ``reset`` is cheap)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from agentrl_envs.webshop.data import Catalogue, draw_prices, load_catalogue
from agentrl_envs.webshop.goals import Goal, build_goals
from agentrl_envs.webshop.search import SearchEngine, get_engine


@dataclass(frozen=True)
class World:
    """Everything a session needs that does not change between episodes.

    Attributes:
        catalogue: the products.
        prices: ASIN → actual price in dollars (ranges drawn from ``price_seed``).
        goals: all goals of ``goal_mode``, shuffled (index = position).
        engine: BM25 index over ``catalogue.contents``.
        goal_mode: ``"synthetic"`` or ``"human"``.
        price_seed: seed of the price draws and goal price bounds (recorded for reproduction).
    """

    catalogue: Catalogue
    prices: dict[str, float]
    goals: tuple[Goal, ...]
    engine: SearchEngine
    goal_mode: str
    price_seed: int

    def goal(self, task_id: str) -> Goal:
        """The goal named ``"<mode>/<index>"``.

        Raises:
            ValueError: malformed id, another goal mode, or an index out of range.
        """
        mode, _, idx = task_id.partition("/")
        if mode != self.goal_mode or not idx.isdigit() or int(idx) >= len(self.goals):
            raise ValueError(
                f"unknown WebShop task_id {task_id!r}: expected '{self.goal_mode}/<index>' "
                f"with index < {len(self.goals)}"
            )
        return self.goals[int(idx)]


@lru_cache(maxsize=8)
def _cached(folder: str, goal_mode: str, price_seed: int) -> World:
    catalogue = load_catalogue(Path(folder), goal_mode)
    rng = random.Random(price_seed)
    prices = draw_prices(catalogue.products, rng)
    goals = build_goals(catalogue, prices, goal_mode, rng)
    return World(catalogue, prices, goals, get_engine(catalogue.contents), goal_mode, price_seed)


def get_world(folder: Path, goal_mode: str = "synthetic", price_seed: int = 0) -> World:
    """The cached world for this data folder (resolved path), goal mode and price seed.

    Raises:
        DataMissingError: the folder lacks the data (PITFALLS P9).
        MissingExtraError: ``bm25s``/``PyStemmer`` missing (extra ``webshop``).
        ValueError: unknown goal mode or no goals.
    """
    return _cached(str(folder.resolve()), goal_mode, int(price_seed))
