"""WebShop goals: synthetic (one per option combination of each instructed product) and
human (from ``items_human_ins.json``), with seeded price bounds (ENVIRONMENTS.md §3.6).

Randomness: upstream draws product prices and price bounds from Python's unseeded global
``random``; here one ``random.Random(price_seed)`` draws the product prices first
(``data.draw_prices``) and then the goals' price bounds, in catalogue order, so a goal set
is a pure function of ``(data, goal mode, price_seed)``. The goal list is then shuffled
with ``random.Random(233)``, exactly as upstream's ``random.seed(233); random.shuffle(goals)``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentrl_envs.webshop.data import Catalogue, Product

PRICE_RANGE = tuple(10.0 * i for i in range(1, 100))
NO_PRICE_BOUND = 1_000_000.0
GOAL_SHUFFLE_SEED = 233
GOAL_MODES = ("synthetic", "human")
#: Upstream's human-goal split by shuffled goal index (also applied to synthetic goals).
SPLITS = {"test": (0, 500), "eval": (500, 1500), "train": (1500, None), "all": (0, None)}


@dataclass(frozen=True)
class Goal:
    """One shopping task.

    Attributes:
        mode: ``"synthetic"`` or ``"human"``.
        index: position in the shuffled goal list (the task id is ``f"{mode}/{index}"``).
        asin: the target product.
        name: the target's name (type reward); synthetic goals use the product Title.
        query, category, product_category: the target's category metadata (type reward).
        instruction_text: the instruction shown on every page.
        attributes: goal attributes (non-empty).
        option_values: requested option values.
        option_names: the option name of each value (synthetic goals), ``()`` for human goals.
        price_upper: price bound in dollars (``1e6`` = none).
        weight: sampling weight (synthetic: mean over attributes of 1 / #goals with it; human: 1).
    """

    mode: str
    index: int
    asin: str
    name: str
    query: str
    category: str
    product_category: str
    instruction_text: str
    attributes: tuple[str, ...]
    option_values: tuple[str, ...]
    option_names: tuple[str, ...]
    price_upper: float
    weight: float

    @property
    def task_id(self) -> str:
        """Machine-independent task id, e.g. ``"synthetic/17"``."""
        return f"{self.mode}/{self.index}"

    @property
    def option_pairs(self) -> tuple[tuple[str, str], ...]:
        """``(name, value)`` pairs of a synthetic goal (upstream's ``goal_options.items()``)."""
        return tuple(zip(self.option_names, self.option_values, strict=True))

    def digest(self) -> str:
        """SHA-256 of the goal's content (target, instruction, attributes, options, price bound)."""
        body = [self.asin, self.instruction_text, list(self.attributes), list(self.option_values),
                list(self.option_names), round(self.price_upper, 6)]
        return hashlib.sha256(json.dumps(body, separators=(",", ":")).encode("utf-8")).hexdigest()


def price_bound(price: float, rng: random.Random) -> tuple[float, str]:
    """``(price_upper, instruction suffix)``: the larger of 2 values sampled from the first 4
    entries of ``[10, 20, …, 990]`` above ``price``; ``(1e6, "")`` if fewer than 2 exist."""
    candidates = [p for p in PRICE_RANGE if p > price][:4]
    if len(candidates) < 2:
        return NO_PRICE_BOUND, ""
    _, upper = sorted(rng.sample(candidates, 2))
    return upper, f", and price lower than {upper:.2f} dollars"


def _base(p: Product) -> dict[str, str]:
    return {"asin": p.asin, "query": p.query, "category": p.category, "product_category": p.product_category}


def synthetic_goals(products: Sequence[Product], prices: Mapping[str, float], rng: random.Random) -> list[dict]:
    """Upstream ``get_synthetic_goals`` (unshuffled, unweighted): one goal per combination of
    option values (option names sorted) of every product with an ``instruction``."""
    goals = []
    for p in products:
        if not p.instruction:
            continue
        upper, price_text = price_bound(prices[p.asin], rng)
        options = p.options_dict
        names = sorted(options)
        for combo in itertools.product(*(options[n] for n in names)):
            option_text = ", and ".join(f"{n}: {v}" for n, v in zip(names, combo, strict=True))
            option_text = f" with {option_text}" if option_text else ""
            goals.append({**_base(p), "name": p.title, "instruction_text": f"{p.instruction}{option_text}{price_text}",
                          "attributes": p.instruction_attributes, "option_values": tuple(combo),
                          "option_names": tuple(names), "price_upper": upper})
    return goals


def human_goals(catalogue: Catalogue, prices: Mapping[str, float], rng: random.Random) -> list[dict]:
    """Upstream ``get_human_goals``: every human instruction with non-empty
    ``instruction_attributes``; text ``instruction.strip('.')`` + price suffix."""
    goals = []
    for p in catalogue.products:
        for ins in catalogue.human_instructions.get(p.asin, ()):
            attributes = tuple(ins["instruction_attributes"])
            if not attributes:
                continue
            upper, price_text = price_bound(prices[p.asin], rng)
            text = str(ins["instruction"]).strip(".") + price_text
            goals.append({**_base(p), "name": p.name, "instruction_text": text,
                          "attributes": attributes, "option_values": tuple(ins["instruction_options"]),
                          "option_names": (), "price_upper": upper})
    return goals


def build_goals(catalogue: Catalogue, prices: Mapping[str, float], mode: str, rng: random.Random) -> tuple[Goal, ...]:
    """Goals of ``mode``, weighted and shuffled with seed 233; ``Goal.index`` = shuffled position.

    Raises:
        ValueError: unknown ``mode`` or no goals (e.g. human mode without instructions).
    """
    if mode not in GOAL_MODES:
        raise ValueError(f"goal mode {mode!r} is not one of {GOAL_MODES}")
    if mode == "synthetic":
        raw = synthetic_goals(catalogue.products, prices, rng)
    else:
        raw = human_goals(catalogue, prices, rng)
    if not raw:
        raise ValueError(f"no {mode} goals in {catalogue.source}; check the data files (ENVIRONMENTS.md §3.6)")
    counts = Counter(a for g in raw for a in g["attributes"])
    for g in raw:
        g["weight"] = 1.0 if mode == "human" else sum(1.0 / counts[a] for a in g["attributes"]) / len(g["attributes"])
    random.Random(GOAL_SHUFFLE_SEED).shuffle(raw)
    return tuple(Goal(mode=mode, index=i, **g) for i, g in enumerate(raw))


def split_goals(goals: Sequence[Goal], split: str) -> tuple[Goal, ...]:
    """Goals of one split by shuffled index: test 0–499, eval 500–1499, train 1500+, all.

    ``train`` leaves out goals whose content (``Goal.digest``) equals a test/eval goal's: a
    product listing the same option value twice yields identical goals under two indices.

    Raises:
        ValueError: unknown split name.
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {sorted(SPLITS)}")
    lo, hi = SPLITS[split]
    chosen = tuple(goals[lo:hi])
    if split == "train":
        held_out = {g.digest() for g in goals[: SPLITS["eval"][1]]}
        chosen = tuple(g for g in chosen if g.digest() not in held_out)
    return chosen
