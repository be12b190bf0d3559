"""Text-mode page rendering (ENVIRONMENTS.md §3.3) and the WebShop ``anchor_obs`` (ALGORITHMS.md §0.4).

A page is a list of text pieces (upstream: the visible HTML text nodes, stripped) joined
with ``" [SEP] "``, plus its clickables: lower-cased button/link texts and option values,
in page order, each mapped to the option name it sets (``None`` for buttons and links).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentrl_envs.webshop.data import Product

SEP = " [SEP] "
PRODUCT_WINDOW = 10
BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")


@dataclass(frozen=True)
class Page:
    """A rendered page.

    Attributes:
        kind: ``"search" | "results" | "item" | "sub" | "done"``.
        pieces: the text pieces (non-empty, stripped), in page order.
        clickables: lower-cased clickable text → option name it sets (``None`` for buttons/links).
        has_search_bar: whether ``search[...]`` is available (search page only).
    """

    kind: str
    pieces: tuple[str, ...]
    clickables: dict[str, str | None]
    has_search_bar: bool = False

    @property
    def text(self) -> str:
        """The observation: ``pieces`` joined with ``" [SEP] "``."""
        return SEP.join(self.pieces)


def _clean(pieces: Sequence[str]) -> tuple[str, ...]:
    return tuple(s for s in (p.strip() for p in pieces) if s)


def _buttons(*labels: str) -> dict[str, str | None]:
    return {label.lower(): None for label in labels}


def search_page(instruction: str) -> Page:
    """``WebShop [SEP] Instruction: [SEP] {instruction} [SEP] Search``; clickables ``['search']``."""
    return Page("search", _clean(["WebShop", "Instruction:", instruction, "Search"]), {"search": None}, True)


def results_page(instruction: str, products: Sequence[Product], page: int, total: int) -> Page:
    """Results page ``page`` (1-based) showing ``products`` (≤ 10) of ``total`` results.
    ``< Prev`` appears on pages > 1; ``Next >`` always (upstream)."""
    buttons = [BACK_TO_SEARCH] + ([PREV_PAGE] if page > 1 else []) + [NEXT_PAGE]
    pieces = ["Instruction:", instruction, BACK_TO_SEARCH, f"Page {page} (Total results: {total})"]
    pieces += buttons[1:]
    clickables = _buttons(*buttons)
    for p in products:
        pieces += [p.asin, p.title, p.price_text]
        clickables[p.asin.lower()] = None
    return Page("results", _clean(pieces), clickables)


def item_page(instruction: str, product: Product) -> Page:
    """Item page: option names and values, Title, Price, Rating, the three sub-page buttons and
    Buy Now. Nothing marks the selected options (text mode)."""
    pieces = ["Instruction:", instruction, BACK_TO_SEARCH, PREV_PAGE]
    for name, values in product.options:
        pieces += [name, *values]
    pieces += [product.title, f"Price: {product.price_text}", f"Rating: {product.rating}", *SUB_PAGES, BUY_NOW]
    clickables = _buttons(BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, BUY_NOW)
    for name, values in product.options:
        for v in values:
            clickables[v] = name  # a value shared by two options sets the later one (upstream dict)
    return Page("item", _clean(pieces), clickables)


def sub_page(instruction: str, product: Product, which: str) -> Page:
    """Description (full description), Features (one piece per bullet) or Reviews (none kept)."""
    body: list[str] = {"description": [product.description], "features": list(product.bullets), "reviews": []}[which]
    pieces = ["Instruction:", instruction, BACK_TO_SEARCH, PREV_PAGE, *body]
    return Page("sub", _clean(pieces), _buttons(BACK_TO_SEARCH, PREV_PAGE))


def done_page(reward: float) -> Page:
    """After Buy Now: ``Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] {R}``
    (upstream's hidden debug fields, which reveal the target, are left out)."""
    return Page("done", _clean(["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", str(reward)]), {})


def anchor_obs(observation: str, instruction: str) -> str:
    """ALGORITHMS.md §0.4 / verl-agent ``format_obs``: the pieces after the first piece equal to
    the instruction, each single-quoted, re-joined with ``" [SEP] "``; the raw observation if the
    instruction is not on the page (done page)."""
    parts = observation.split(SEP)
    try:
        i = parts.index(instruction.strip())
    except ValueError:
        return observation
    return SEP.join(f"'{p}'" for p in parts[i + 1:])


def page_slice(results: Sequence[int], page: int) -> Sequence[int]:
    """The result indices shown on ``page`` (1-based, 10 per page)."""
    return results[(page - 1) * PRODUCT_WINDOW: page * PRODUCT_WINDOW]
