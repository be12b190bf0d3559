"""WebShop data loading, preprocessing, goals and the P9 missing-data error."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter

import pytest

from agentrl.env import DataMissingError, make
from agentrl_envs.webshop.data import (ATTRS_FILE, DATA_ENV_VAR, DOCS_FILE, HUMAN_INS_FILE, document_text,
                               draw_prices, load_catalogue, load_products, parse_pricing, resolve_data_dir)
from agentrl_envs.webshop.goals import NO_PRICE_BOUND, build_goals, price_bound, split_goals, synthetic_goals


def test_catalogue_counts_and_document_formula(world):
    cat = world.catalogue
    assert len(cat) == 1000 and len(cat.by_asin) == 1000
    # the documented BM25 text formula reproduces the kept `contents` for every product
    assert all(document_text(p) == c for p, c in zip(cat.products, cat.contents, strict=True))
    assert sum(1 for p in cat.products if p.instruction) == 415
    assert Counter(p.category for p in cat.products)["beauty"] == 238
    assert sum(1 for p in cat.products if p.options) == 423


def test_parse_pricing_cases():
    assert parse_pricing("$19.99") == ((19.99,), "$19.99")
    assert parse_pricing("$19.99 - $27.99") == ((19.99, 27.99), "$19.99 to $27.99")
    assert parse_pricing("$1,299.00") == ((1299.0,), "$1299.0")
    assert parse_pricing("") == ((100.0,), "$100.0")
    assert parse_pricing(None) == ((100.0,), "$100.0")


def test_load_products_on_raw_records():
    raw = [
        {"asin": "B0RAW00001", "name": "Cozy Socks", "full_description": "Warm.", "small_description": "Wool blend",
         "pricing": "$5.00 - $9.50", "category": "fashion", "query": " Socks ", "product_category": "A › B",
         "customization_options": {"Color": [{"value": " Navy/Blue "}, {"value": "Red"}], "Size": None}},
        {"asin": "B0RAW00001", "name": "duplicate", "full_description": "", "small_description": [],
         "pricing": "", "category": "x", "query": "", "product_category": "", "customization_options": ""},
        {"asin": "nan", "name": "bad", "full_description": "", "small_description": [], "pricing": "",
         "category": "x", "query": "", "product_category": "", "customization_options": ""},
        {"asin": "B0TOOLONG123", "name": "bad", "full_description": "", "small_description": [], "pricing": "",
         "category": "x", "query": "", "product_category": "", "customization_options": ""},
    ]
    attrs = {"B0RAW00001": {"attributes": ["wool"], "instruction": "find socks", "instruction_attributes": ["wool"]}}
    (p,) = load_products(raw, attrs)
    assert (p.title, p.description, p.bullets, p.query) == ("Cozy Socks", "Warm.", ("Wool blend",), "socks")
    assert (p.pricing, p.price_text) == ((5.0, 9.5), "$5.0 to $9.5")
    assert p.options == (("color", ("navy | blue", "red")),)
    assert (p.attributes, p.instruction, p.instruction_attributes) == (("wool",), "find socks", ("wool",))
    (q,) = load_products(raw[:1], {})
    assert q.attributes == ("DUMMY_ATTR",) and q.instruction is None


def test_prices_seeded_and_in_range(world):
    cat = world.catalogue
    a = draw_prices(cat.products, random.Random(0))
    assert a == draw_prices(cat.products, random.Random(0)) != draw_prices(cat.products, random.Random(1))
    for p in cat.products:
        lo, hi = min(p.pricing), max(p.pricing)   # a few ranges are listed high-to-low
        assert lo <= a[p.asin] <= hi
    assert world.prices == a   # the world draws prices first from Random(price_seed)


def test_price_bound_cases():
    rng = random.Random(0)
    for _ in range(50):
        upper, text = price_bound(19.99, rng)          # candidates 20, 30, 40, 50 → larger of two
        assert upper in (30.0, 40.0, 50.0)
        assert text == f", and price lower than {upper:.2f} dollars"
    assert price_bound(975.0, rng) == (990.0, ", and price lower than 990.00 dollars")   # only 980, 990
    assert price_bound(985.0, rng) == (NO_PRICE_BOUND, "")                               # only 990
    assert price_bound(10.0, rng)[0] in (30.0, 40.0, 50.0)                               # strictly above


def test_synthetic_goals_count_text_and_weights(world):
    goals = world.goals
    assert len(goals) == 6910
    assert [g.index for g in goals] == list(range(6910))
    g = next(g for g in goals if len(g.option_values) == 2)
    p = world.catalogue.get(g.asin)
    names = sorted(p.options_dict)
    opts = ", and ".join(f"{n}: {v}" for n, v in zip(names, g.option_values, strict=True))
    assert g.option_names == tuple(names)
    assert g.instruction_text.startswith(f"{p.instruction} with {opts}")
    assert g.attributes == p.instruction_attributes and g.name == p.title
    # weight: mean over attributes of 1 / (#goals having that attribute)
    counts = Counter(a for x in goals for a in x.attributes)
    assert g.weight == pytest.approx(sum(1 / counts[a] for a in g.attributes) / len(g.attributes))


def test_goal_order_is_seed_233_shuffle(world):
    cat = world.catalogue
    rng = random.Random(0)
    prices = draw_prices(cat.products, rng)
    raw = synthetic_goals(cat.products, prices, rng)
    random.Random(233).shuffle(raw)
    assert [(r["asin"], r["instruction_text"]) for r in raw] == [(g.asin, g.instruction_text) for g in world.goals]
    rng = random.Random(0)
    again = build_goals(cat, draw_prices(cat.products, rng), "synthetic", rng)
    assert again == world.goals
    rng = random.Random(1)
    assert build_goals(cat, draw_prices(cat.products, rng), "synthetic", rng) != world.goals


def test_splits(world):
    sizes = {s: len(split_goals(world.goals, s)) for s in ("test", "eval", "train", "all")}
    assert sizes["test"] == 500 and sizes["eval"] == 1000 and sizes["all"] == 6910
    held_out = {g.digest() for g in world.goals[:1500]}
    train = split_goals(world.goals, "train")
    assert not {g.digest() for g in train} & held_out
    assert sizes["train"] == 5410 - sum(1 for g in world.goals[1500:] if g.digest() in held_out)
    with pytest.raises(ValueError, match="split"):
        split_goals(world.goals, "valid")


def test_human_goals_from_embedded_instructions(world):
    cat = world.catalogue
    assert len(cat.human_instructions) == 13
    goals = build_goals(cat, world.prices, "human", random.Random(0))
    n = sum(1 for v in cat.human_instructions.values() for ins in v if ins["instruction_attributes"])
    assert len(goals) == n > 0
    for g in goals:
        assert g.weight == 1.0 and g.option_names == () and g.task_id.startswith("human/")
        assert not g.instruction_text.split(", and price lower than")[0].endswith(".")


# ---- P9: missing data is an actionable error at construction --------------------------------

def _assert_actionable(exc: DataMissingError, folder) -> None:
    msg = str(exc)
    assert str(folder) in msg and DATA_ENV_VAR in msg and "data_dir" in msg and DOCS_FILE in msg


def test_empty_dir_raises_naming_path_and_fix(tmp_path):
    with pytest.raises(DataMissingError) as e:
        make("agentrl/WebShop-v0", data_dir=tmp_path)
    _assert_actionable(e.value, tmp_path)


def test_missing_dir_and_missing_file(tmp_path, data_dir):
    with pytest.raises(DataMissingError) as e:
        make("agentrl/WebShop-v0", data_dir=tmp_path / "nope")
    _assert_actionable(e.value, tmp_path / "nope")
    shutil.copy(data_dir / ATTRS_FILE, tmp_path / ATTRS_FILE)
    with pytest.raises(DataMissingError, match=DOCS_FILE) as e:
        make("agentrl/WebShop-v0", data_dir=tmp_path)
    _assert_actionable(e.value, tmp_path)


def test_human_mode_needs_human_file(tmp_path, data_dir):
    for name in (ATTRS_FILE, DOCS_FILE):
        (tmp_path / name).symlink_to(data_dir / name)
    with pytest.raises(DataMissingError, match=HUMAN_INS_FILE):
        make("agentrl/WebShop-v0", data_dir=tmp_path, goal_mode="human")


def test_env_var_selects_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path))
    assert resolve_data_dir() == tmp_path
    assert resolve_data_dir(tmp_path / "x") == tmp_path / "x"
    with pytest.raises(DataMissingError) as e:
        make("agentrl/WebShop-v0")
    _assert_actionable(e.value, tmp_path)


def test_human_mode_end_to_end(tmp_path, data_dir):
    """Human-goal mode on a folder holding an items_human_ins.json made of the 13 embedded goals."""
    for name in (ATTRS_FILE, DOCS_FILE):
        (tmp_path / name).symlink_to(data_dir / name)
    human = {}
    for line in (data_dir / DOCS_FILE).read_text(encoding="utf-8").splitlines():
        p = json.loads(line)["product"]
        if p.get("instructions"):
            human[p["asin"]] = p["instructions"]
    (tmp_path / HUMAN_INS_FILE).write_text(json.dumps(human), encoding="utf-8")
    cat = load_catalogue(tmp_path, "human")
    assert set(cat.human_instructions) == set(human)
    env = make("agentrl/WebShop-v0", data_dir=tmp_path, goal_mode="human")
    obs, info = env.reset(seed=3)
    assert info["task_id"].startswith("human/") and info["goal_mode"] == "human"
    for a in info["walkthrough"]:
        obs, r, term, trunc, info = env.step(a)
    assert term and 0.0 < r <= 1.0
    env.close()
