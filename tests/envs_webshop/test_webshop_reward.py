"""WebShop reward (``agentrl_envs.webshop.reward``) against hand-computed cases (ENVIRONMENTS.md §3.7)."""

from __future__ import annotations

import importlib.util

import pytest

from agentrl_envs.webshop.reward import (COLOR_SET, attribute_matches, get_reward, name_nouns, normalize_color,
                                 option_matches, type_reward)

GREEK20 = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
           "upsilon")


@pytest.mark.parametrize("value,want", [
    ("", ""), ("black forest", "black"), ("violet lavender", "lavender"), ("steelivy fuchsia", "fuchsia"),
    ("123alabaster", "alabaster"), ("webshop", "webshop"), ("washed black", "ash"), ("natural black", "black"),
])
def test_normalize_color_first_listed_colour_substring(value, want):
    # upstream test suite cases plus two showing the list order wins over position in the string
    assert normalize_color(value) == want


def test_normalize_color_on_pairs_is_membership():
    assert normalize_color(("color", "black")) == "black"
    assert normalize_color(("color", "natural black")) == ("color", "natural black")
    assert COLOR_SET.index("ash") < COLOR_SET.index("black") < COLOR_SET.index("natural")


def test_full_match_is_exactly_one(mk_product, mk_goal):
    # attrs: 'wireless' fuzzy==100 with a product attribute; 'battery life' substring of the bullets
    r = get_reward(mk_product(), mk_goal(), 25.0, ["black"])
    assert (r.n_attr, r.n_opt, r.price_ok, r.r_type) == (2, 1, True, 1.0)
    assert r.reward == 1.0


@pytest.mark.parametrize("price,options,want", [
    (35.0, ["black"], 3 / 4),          # price above the bound: (2 + 1 + 0) / 4
    (25.0, [], 3 / 4),                 # no option selected: (2 + 0 + 1) / 4
    (25.0, ["washed black"], 3 / 4),   # 'washed black' → 'ash' does not match 'black'
    (25.0, ["small", "black"], 1.0),   # extra selections do not hurt
    (35.0, [], 2 / 4),
])
def test_partial_credit_hand_computed(mk_product, mk_goal, price, options, want):
    assert get_reward(mk_product(), mk_goal(), price, options).reward == pytest.approx(want, abs=1e-12)


def test_attribute_matching_paths(mk_product):
    p = mk_product()
    assert attribute_matches(p, ["wireless"]) == 1            # fuzzy against Attributes
    assert attribute_matches(p, ["battery life"]) == 1        # substring of bullets
    assert attribute_matches(p, ["over-ear"]) == 1            # substring of the description
    assert attribute_matches(p, ["gluten free"]) == 0
    assert attribute_matches(p, ["wireless", "gluten free", "foldable"]) == 2


def test_upstream_option_quirk_vs_values(mk_product, mk_goal):
    goal = mk_goal(option_values=("washed black",), option_names=("color",))
    # values mode: both sides normalise to 'ash' → match
    assert option_matches(["washed black"], goal, "values") == 1
    # upstream: the goal side is the pair ('color', 'washed black'), left unnormalised → miss
    assert option_matches(["washed black"], goal, "upstream") == 0
    r = get_reward(mk_product(), goal, 25.0, ["washed black"], option_match="upstream")
    assert r.reward == pytest.approx(3 / 4)
    # an exact colour is still found by membership in the pair; other values match the pair's text
    assert option_matches(["black"], mk_goal(), "upstream") == 1
    assert option_matches(["small"], mk_goal(option_values=("small",), option_names=("size",)), "upstream") == 1
    # human goals have no option names: both modes compare plain values
    human = mk_goal(mode="human", option_values=("washed black",), option_names=())
    assert option_matches(["washed black"], human, "upstream") == 1


def test_type_reward_levels(mk_product, mk_goal):
    goal = mk_goal(name="Alpha Beta Gamma Delta Epsilon")
    other = dict(query="wallets", product_category="Fashion › Wallets")
    # 1 of 5 goal nouns shared → title_score 0.2, no query/category match → 0.5
    t = type_reward(mk_product(name="Alpha Zeta", **other), goal)
    assert (t.title_score, t.r_type, t.query_match, t.category_match) == (0.2, 0.5, False, False)
    assert get_reward(mk_product(name="Alpha Zeta", **other), goal, 25.0, ["black"]).reward == 0.5
    # same title overlap but the same query → 1.0
    assert type_reward(mk_product(name="Alpha Zeta"), goal).r_type == 1.0
    # 1 of 20 nouns → title_score 0.05 < 0.1 → 0.1 (even with query match)
    t = type_reward(mk_product(name="Alpha Leather"), mk_goal(name=GREEK20))
    assert (t.title_score, t.r_type) == (0.05, 0.1)
    # no shared noun → 0: the whole reward is 0 despite matching attributes/options/price
    r = get_reward(mk_product(name="Leather Wallet for Men"), mk_goal(), 25.0, ["black"])
    assert (r.title_score, r.r_type, r.reward) == (0.0, 0.0, 0.0)


def test_title_score_denominator_counts_repeats(mk_product, mk_goal):
    t = type_reward(mk_product(name="Jeans"), mk_goal(name="Jeans Jeans Shorts"))
    assert t.title_score == pytest.approx(1 / 3)
    t = type_reward(mk_product(name="Blue"), mk_goal(name="the of and"))   # no goal nouns → 0.2
    assert (t.title_score, t.query_match, t.r_type) == (0.2, True, 1.0)
    t = type_reward(mk_product(name="Blue", query="x", product_category="A › B"), mk_goal(name="the of and"))
    assert (t.title_score, t.query_match, t.category_match, t.r_type) == (0.2, False, False, 0.5)


def test_name_nouns_heuristic():
    assert name_nouns("Women's High Waisted Jeans for Women, 2 Pack") == [
        "women", "high", "waisted", "jeans", "women", "pack"]
    assert name_nouns("The and of") == []


def test_bad_modes_raise(mk_product, mk_goal):
    with pytest.raises(ValueError, match="option_match"):
        get_reward(mk_product(), mk_goal(), 1.0, [], option_match="fuzzy")
    with pytest.raises(ValueError, match="type_matcher"):
        get_reward(mk_product(), mk_goal(), 1.0, [], type_matcher="nltk")


@pytest.mark.slow  # importing spaCy takes ~6 s
@pytest.mark.skipif(importlib.util.find_spec("en_core_web_sm") is not None, reason="the spaCy model is installed")
def test_spacy_matcher_without_model_names_the_fix(mk_product, mk_goal):
    pytest.importorskip("spacy")
    with pytest.raises(RuntimeError, match="en_core_web_sm"):
        get_reward(mk_product(), mk_goal(), 1.0, [], type_matcher="spacy")
