"""One WebShop shopping session: the page state machine behind ``search[...]`` / ``click[...]``
(upstream ``SimServer.receive`` + ``WebAgentTextEnv.step``, ENVIRONMENTS.md §3.3).

No gymnasium here: ``WebShopSession.act(action)`` returns an ``ActResult``; the env wraps it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from agentrl_envs.webshop.data import Catalogue, Product
from agentrl_envs.webshop.goals import Goal
from agentrl_envs.webshop.pages import (
    BACK_TO_SEARCH, BUY_NOW, NEXT_PAGE, PREV_PAGE, SUB_PAGES, Page, done_page, item_page, page_slice,
    results_page, search_page, sub_page,
)
from agentrl_envs.webshop.reward import RewardBreakdown
from agentrl_envs.webshop.search import SearchEngine

ACTION_RE = re.compile(r"(.+)\[(.+)\]")
#: Scores a purchase: (product, selected option values) → reward breakdown.
Scorer = Callable[[Product, list[str]], RewardBreakdown]


def parse_action(action: str) -> tuple[str, str | None]:
    """Upstream ``parse_action``: ``re.match(r"(.+)\\[(.+)\\]")`` → ``(name, arg)``, else ``(action, None)``."""
    m = ACTION_RE.match(action)
    return (action, None) if m is None else (m.group(1), m.group(2))


@dataclass(frozen=True)
class ActResult:
    """Outcome of one action.

    Attributes:
        valid: the action was executed (else a no-op with ``feedback``).
        feedback: why an invalid action was rejected (``""`` when valid).
        done: Buy Now was clicked; ``purchase`` then holds the reward breakdown.
    """

    valid: bool
    feedback: str = ""
    done: bool = False
    purchase: RewardBreakdown | None = None


@dataclass
class WebShopSession:
    """Page state of one episode for ``goal``.

    Args:
        catalogue: the products; engine: BM25 index over ``catalogue.contents``;
        goal: the task; scorer: reward function called on Buy Now.
    """

    catalogue: Catalogue
    engine: SearchEngine
    goal: Goal
    scorer: Scorer
    results: list[int] = field(default_factory=list)
    page_no: int = 1
    asin: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    page: Page = field(init=False)

    def __post_init__(self) -> None:
        self.page = search_page(self.goal.instruction_text)

    @property
    def instruction(self) -> str:
        return self.goal.instruction_text

    def admissible_actions(self) -> list[str]:
        """verl-agent's list: ``search[<your query>]`` on the search page, else ``click[c]`` per clickable."""
        if self.page.has_search_bar:
            return ["search[<your query>]"]
        return [f"click[{c}]" for c in self.page.clickables]

    def act(self, action: str) -> ActResult:
        """Apply one ``search[...]``/``click[...]`` action; invalid actions change nothing."""
        if self.page.kind == "done":
            return ActResult(False, "the episode is over (Buy Now was clicked); call reset()")
        name, arg = parse_action(action.strip())
        if arg is None:
            return ActResult(False, f"cannot parse {action!r}: use search[<query>] or click[<clickable>]")
        arg = arg.lower()
        if name == "search":
            if not self.page.has_search_bar:
                return ActResult(False, "search is only available on the search page: click[back to search] first")
            return self._search(arg)
        if name == "click":
            if arg == "search" or arg not in self.page.clickables:
                return ActResult(False, f"{arg!r} is not clickable here; clickables: {list(self.page.clickables)}")
            return self._click(arg)
        return ActResult(False, f"unknown action {name!r}: use search[<query>] or click[<clickable>]")

    def _search(self, query: str) -> ActResult:
        self.results = self.engine.search(query)
        self._show_results(1)
        return ActResult(True)

    def _show_results(self, page_no: int) -> None:
        self.page_no, self.options, self.asin = page_no, {}, None
        shown = [self.catalogue.products[i] for i in page_slice(self.results, page_no)]
        self.page = results_page(self.instruction, shown, page_no, len(self.results))

    def _show_item(self) -> None:
        assert self.asin is not None
        self.page = item_page(self.instruction, self.catalogue.get(self.asin))

    def _click(self, target: str) -> ActResult:
        kind = self.page.kind
        if target == BUY_NOW.lower():
            assert self.asin is not None
            purchase = self.scorer(self.catalogue.get(self.asin), list(self.options.values()))
            self.page = done_page(purchase.reward)
            return ActResult(True, done=True, purchase=purchase)
        if target == BACK_TO_SEARCH.lower():
            self.results, self.options, self.asin = [], {}, None
            self.page = search_page(self.instruction)
        elif target == NEXT_PAGE.lower() and kind == "results":
            self._show_results(self.page_no + 1)
        elif target == PREV_PAGE.lower() and kind == "results":
            self._show_results(self.page_no - 1)
        elif target == PREV_PAGE.lower() and kind == "sub":
            self._show_item()
        elif target == PREV_PAGE.lower() and kind == "item":
            self._show_results(self.page_no)
        elif target in (s.lower() for s in SUB_PAGES):
            assert self.asin is not None
            self.page = sub_page(self.instruction, self.catalogue.get(self.asin), target)
        elif kind == "results":
            self.asin = target.upper()
            self._show_item()
        else:  # an option value on the item page
            self.options[self.page.clickables[target] or ""] = target
            self._show_item()
        return ActResult(True)
