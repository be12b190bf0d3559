"""Reference policies for WebShop.

- ``oracle_actions``: search the target product's title, page to it, click it, click the
  goal's option values, Buy Now. Cheap (one BM25 query), so the env exposes it at reset as
  ``info["walkthrough"]``.
- ``random_action``: the random baseline: on the search page search the instruction text
  (WebShop's rule baseline query), elsewhere click a uniformly random clickable.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from agentrl_envs.webshop.data import Catalogue
from agentrl_envs.webshop.goals import Goal
from agentrl_envs.webshop.pages import PRODUCT_WINDOW
from agentrl_envs.webshop.search import SearchEngine

_BRACKETS = re.compile(r"[\[\]]")


def oracle_query(title: str) -> str:
    """The search text for a title: brackets removed (they would break ``search[...]`` parsing),
    whitespace collapsed, lower-cased."""
    return " ".join(_BRACKETS.sub(" ", title).split()).lower()


def oracle_actions(goal: Goal, catalogue: Catalogue, engine: SearchEngine) -> list[str]:
    """Action list that buys ``goal``'s target with its options.

    Only option values the product offers are clicked (human goals may name others). If the
    target is not among the title search's results the list still ends with a purchase
    attempt of the best hit (the reward then shows the miss); pages are turned with
    ``click[next >]`` when the target ranks below 10.
    """
    product = catalogue.get(goal.asin)
    query = oracle_query(product.title)
    hits = [catalogue.products[i].asin for i in engine.search(query)]
    actions = [f"search[{query}]"]
    if not hits:
        return actions
    rank = hits.index(goal.asin) if goal.asin in hits else 0
    actions += ["click[next >]"] * (rank // PRODUCT_WINDOW)
    actions.append(f"click[{hits[rank].lower()}]")
    if hits[rank] == goal.asin:
        offered = {v for _, values in product.options for v in values}
        actions += [f"click[{v}]" for v in goal.option_values if v in offered]
    actions.append("click[buy now]")
    return actions


def random_action(clickables: Sequence[str], instruction: str, rng: random.Random) -> str:
    """One random-baseline action: ``search[<instruction>]`` when the page has the search bar
    (its only clickable is ``"search"``), else ``click[c]`` for a uniformly drawn clickable.

    Raises:
        ValueError: no clickables (the episode is over).
    """
    if list(clickables) == ["search"]:
        return f"search[{oracle_query(instruction)}]"
    if not clickables:
        raise ValueError("no clickables: the episode is over")
    return f"click[{rng.choice(list(clickables))}]"
