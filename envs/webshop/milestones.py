"""WebShop's milestones for BEACON (ALGORITHMS.md §15.2, decision D-15): four sequential phases.

Paper: BEACON, arXiv 2605.06078; upstream ``ZJU-REAL/BEACON`` ``migpo/webshop_milestone_detector.py``
(not vendored: this detector is written from the spec's description, so its details are ours).

A product is *goal-consistent* when it satisfies every goal constraint the purchase reward checks
(``reward.get_reward``): all goal attributes (``attribute_matches``), every goal option value
offered among its option values (``option_matches`` against all it offers, so option
*availability*), and its actual price within ``goal.price_upper``. The phases, each completed
once and only in this order (a step completes at most one, the next one):

1. SEARCH: a results page shows a goal-consistent product;
2. DETAIL: the item page of a goal-consistent product is open;
3. OPTIONS: on a goal-consistent item, every goal option is selected (``option_matches`` of the
   selected values); skipped for a goal that names no option (then 3 milestones);
4. PURCHASE: a goal-consistent product is bought.

The env publishes ``info["milestone"]`` per step and ``info["n_milestones"]`` (4, or 3 without
options); BEACON applies the dynamic (WebShop) segment rule whatever the count.
"""

from __future__ import annotations

from agentrl_envs.webshop.data import Catalogue, Product
from agentrl_envs.webshop.goals import Goal
from agentrl_envs.webshop.pages import page_slice
from agentrl_envs.webshop.reward import attribute_matches, option_matches
from agentrl_envs.webshop.session import WebShopSession

SEARCH, DETAIL, OPTIONS, PURCHASE = "search", "detail", "options", "purchase"


class MilestoneDetector:
    """Tracks one episode's phases (module docstring).

    Args:
        goal: the episode's goal. catalogue: the products. prices: ASIN → actual price (dollars).
        option_match: ``reward.OPTION_MATCH_MODES`` value, as the env's reward uses.
    Attributes:
        phases: the phase names of this goal, in order (``OPTIONS`` only when the goal names options).
        reached: how many phases are completed (0..len(phases)).
    """

    def __init__(self, goal: Goal, catalogue: Catalogue, prices: dict[str, float], option_match: str = "values"):
        self.goal, self.catalogue, self.prices, self.option_match = goal, catalogue, prices, option_match
        self.phases = (SEARCH, DETAIL, OPTIONS, PURCHASE) if goal.option_values else (SEARCH, DETAIL, PURCHASE)
        self.reached = 0
        self._consistent: dict[str, bool] = {}

    @property
    def n_milestones(self) -> int:
        """Number of phases of this goal (4, or 3 without required options)."""
        return len(self.phases)

    def consistent(self, product: Product) -> bool:
        """Whether ``product`` satisfies every goal constraint (attributes, option availability, price)."""
        hit = self._consistent.get(product.asin)
        if hit is None:
            g = self.goal
            offered = [v for _, values in product.options for v in values]
            hit = (attribute_matches(product, g.attributes) == len(g.attributes)
                   and option_matches(offered, g, self.option_match) == len(g.option_values)
                   and self.prices[product.asin] <= g.price_upper)
            self._consistent[product.asin] = hit
        return hit

    def _done(self, phase: str, session: WebShopSession, bought: bool) -> bool:
        page = session.page
        if phase == SEARCH:
            return page.kind == "results" and any(
                self.consistent(self.catalogue.products[i]) for i in page_slice(session.results, session.page_no))
        if session.asin is None or not self.consistent(self.catalogue.get(session.asin)):
            return False
        if phase == DETAIL:
            return page.kind == "item"
        if phase == OPTIONS:
            selected = list(session.options.values())
            return option_matches(selected, self.goal, self.option_match) == len(self.goal.option_values)
        return bought  # PURCHASE

    def update(self, session: WebShopSession, bought: bool) -> bool:
        """After a valid step: True when it completed the next phase (then ``reached`` advances).

        Args:
            session: the session after the step. bought: the step clicked Buy Now.
        """
        if self.reached < len(self.phases) and self._done(self.phases[self.reached], session, bought):
            self.reached += 1
            return True
        return False
