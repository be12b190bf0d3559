"""WebShop's purchase reward (``get_reward``, ENVIRONMENTS.md §3.7)::

    R = r_type * (n_attr_match + n_opt_match + 1[price <= price_upper]) / (|attrs| + |opts| + 1)

Paper: Yao et al., "WebShop: Towards Scalable Real-World Web Interaction with Grounded
Language Agents", arXiv:2207.01206.

Deviations (both selectable; see README.md):

- ``option_match="values"`` (default) matches the goal's option *values* against the
  purchased values. ``"upstream"`` reproduces upstream's synthetic-goal quirk: the goal side
  is the ``(name, value)`` pair, ``normalize_color`` tests tuple membership and fuzzy
  matching compares against the pair's string form.
- ``type_matcher="heuristic"`` (default) replaces spaCy's noun tagging of product names
  with a deterministic content-word heuristic (``name_nouns``); ``"spacy"`` uses spaCy's
  ``en_core_web_sm`` when the user has it installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from agentrl.env import require_module
from agentrl_envs.webshop.data import Product
from agentrl_envs.webshop.goals import Goal

#: WebShop's 100-colour list (``web_agent_site/engine/normalize.py``), in upstream order.
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite",
    "grass", "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon",
    "leopard", "light", "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink",
    "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver",
    "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise",
    "violet", "walnut", "wheat", "white", "wine", "yellow",
)
FUZZ_THRESHOLD = 85
OPTION_MATCH_MODES = ("values", "upstream")
TYPE_MATCHERS = ("heuristic", "spacy")

#: Closed-class English words (determiners, pronouns, prepositions, conjunctions, auxiliaries)
#: that spaCy never tags NOUN/PROPN; the heuristic counts every other alphabetic token.
_FUNCTION_WORDS = frozenset("""
a an the this that these those my your his her its our their i me we you he she it they them us
and or but nor so yet if then than as of in on at by for with without within into onto from to up down
over under about above below between among through during before after against per via out off
is are was were be been being am do does did has have had will would can could shall should may might must
not no all any each every both either neither some such own same other another more most less few very
too also just only s t x
""".split())
_WORD = re.compile(r"[A-Za-z]+")


def normalize_color(value: str | tuple[str, ...]) -> str | tuple[str, ...]:
    """The first ``COLOR_SET`` colour contained in ``value``, else ``value`` unchanged.

    For a ``str`` this is a substring test (``"natural black"`` → ``"black"``); for a tuple it
    is element membership, as in upstream when it is handed ``(name, value)`` pairs.
    """
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def _fuzz() -> object:
    return require_module("thefuzz.fuzz", "webshop")


def fuzzy(a: object, b: object) -> int:
    """``thefuzz.fuzz.token_set_ratio(a, b)`` in [0, 100] (non-strings go through ``str``)."""
    return int(_fuzz().token_set_ratio(a, b))  # type: ignore[attr-defined]


def attribute_matches(product: Product, goal_attrs: Sequence[str]) -> int:
    """Number of goal attributes matched: fuzzy score > 85 against a product attribute, else a
    substring of lower(Title), lower(bullets joined by spaces) or lower(Description)."""
    texts = (product.title.lower(), " ".join(product.bullets).lower(), product.description.lower())
    n = 0
    for g in goal_attrs:
        if any(fuzzy(p, g) > FUZZ_THRESHOLD for p in product.attributes) or any(g in t for t in texts):
            n += 1
    return n


def option_matches(purchased: Sequence[str], goal: Goal, mode: str = "values") -> int:
    """Number of goal options matched by some purchased option value (after ``normalize_color``,
    fuzzy score > 85). ``mode="upstream"`` compares against synthetic goals' ``(name, value)`` pairs.

    Raises:
        ValueError: unknown ``mode``.
    """
    if mode not in OPTION_MATCH_MODES:
        raise ValueError(f"option_match {mode!r} is not one of {OPTION_MATCH_MODES}")
    upstream_pairs = mode == "upstream" and goal.option_names
    goal_side: Sequence[object] = goal.option_pairs if upstream_pairs else goal.option_values
    bought = [normalize_color(v) for v in purchased]
    wanted = [normalize_color(g) for g in goal_side]  # type: ignore[arg-type]
    return sum(1 for g in wanted if any(fuzzy(p, g) > FUZZ_THRESHOLD for p in bought))


def name_nouns(name: str) -> list[str]:
    """Deterministic stand-in for spaCy's NOUN/PROPN tokens of a product name: lower-cased
    alphabetic tokens that are not closed-class English words (see README: deviation)."""
    return [w for w in (m.group(0).lower() for m in _WORD.finditer(name)) if w not in _FUNCTION_WORDS]


@lru_cache(maxsize=1)
def _spacy_nlp() -> Callable:
    spacy = require_module("spacy", "webshop")
    try:
        return spacy.load("en_core_web_sm")
    except OSError as exc:
        raise RuntimeError(
            "type_matcher='spacy' needs spaCy's en_core_web_sm model, which is not installed and not on PyPI; "
            "install it from https://github.com/explosion/spacy-models or use type_matcher='heuristic'"
        ) from exc


def spacy_nouns(name: str) -> list[str]:
    """Upstream's tokens: lower-cased text of spaCy tokens tagged NOUN/PROPN (``en_core_web_sm``)."""
    return [t.text.lower() for t in _spacy_nlp()(name) if t.pos_ in ("PNOUN", "NOUN", "PROPN")]


@dataclass(frozen=True)
class TypeMatch:
    """Type-reward parts: ``r_type`` in {0, 0.1, 0.5, 1}, ``title_score`` in [0, 1]."""

    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def type_reward(product: Product, goal: Goal, nouns: Callable[[str], list[str]] = name_nouns) -> TypeMatch:
    """Upstream ``get_type_reward``: ``title_score = |set(bought nouns) ∩ set(goal nouns)| /
    len(goal nouns)`` (0.2 with no goal nouns); r_type 1 → 0.5 without query/category (≥ 2
    shared ``›`` levels)/title (> 0.2) match → 0.1 if title_score < 0.1 → 0 if it is 0."""
    query_match = product.query == goal.query
    bought_cat = {x.strip() for x in product.product_category.split("›")}
    goal_cat = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(bought_cat & goal_cat) >= 2
    want = nouns(goal.name)
    have = set(nouns(product.name))
    title_score = 0.2 if not want else len(have & set(want)) / len(want)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeMatch(r_type, query_match, category_match, title_score)


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward and its parts (upstream's ``verbose`` info).

    Attributes:
        reward: R in [0, 1]; 1.0 means success.
        r_type: type factor; n_attr / n_attr_total, n_opt / n_opt_total: match counts;
        price_ok: price <= price_upper; title_score, query_match, category_match: type parts.
    """

    reward: float
    r_type: float
    n_attr: int
    n_attr_total: int
    n_opt: int
    n_opt_total: int
    price_ok: bool
    title_score: float
    query_match: bool
    category_match: bool


def get_reward(product: Product, goal: Goal, price: float, options: Sequence[str], *,
               option_match: str = "values", type_matcher: str = "heuristic") -> RewardBreakdown:
    """Reward for buying ``product`` at ``price`` (dollars) with selected option values ``options``.

    Raises:
        ValueError: unknown ``option_match`` or ``type_matcher``.
    """
    if type_matcher not in TYPE_MATCHERS:
        raise ValueError(f"type_matcher {type_matcher!r} is not one of {TYPE_MATCHERS}")
    t = type_reward(product, goal, name_nouns if type_matcher == "heuristic" else spacy_nouns)
    n_attr = attribute_matches(product, goal.attributes)
    n_opt = option_matches(options, goal, option_match)
    price_ok = price <= goal.price_upper
    total = (n_attr + n_opt + int(price_ok)) / (len(goal.attributes) + len(goal.option_values) + 1)
    return RewardBreakdown(total * t.r_type, t.r_type, n_attr, len(goal.attributes), n_opt, len(goal.option_values),
                           price_ok, t.title_score, t.query_match, t.category_match)
