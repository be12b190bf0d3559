"""Fixtures for the WebShop tests: the kept data folder, the cached world, a fresh env and
hand-built products/goals for reward fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("bm25s", reason="needs the webshop extra: pip install 'agentrl[webshop]'")
pytest.importorskip("thefuzz", reason="needs the webshop extra: pip install 'agentrl[webshop]'")
pytest.importorskip("Stemmer", reason="needs the webshop extra: pip install 'agentrl[webshop]'")

from agentrl_envs.webshop.data import DOCS_FILE, default_data_dir  # noqa: E402
from agentrl_envs.webshop.data import Product  # noqa: E402
from agentrl_envs.webshop.goals import Goal  # noqa: E402


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The project's kept WebShop data (ENVIRONMENTS.md §3.2)."""
    d = default_data_dir()
    if not (d / DOCS_FILE).is_file():
        pytest.skip(f"kept WebShop data not found at {d} (see ENVIRONMENTS.md §3.2)")
    return d


@pytest.fixture(scope="session")
def world(data_dir):
    from agentrl_envs.webshop.world import get_world

    return get_world(data_dir, "synthetic", 0)


@pytest.fixture
def env(data_dir):
    from agentrl_envs.webshop.env import WebShopEnv

    e = WebShopEnv(data_dir=data_dir)
    yield e
    e.close()


def make_product(**kw) -> Product:
    """A hand-built product; keyword arguments override the defaults."""
    base = dict(
        asin="B000TEST01", name="Acme Wireless Bluetooth Headphones", title="Acme Wireless Bluetooth Headphones",
        description="Noise cancelling over-ear headphones.", bullets=("Long battery life", "Foldable design"),
        price_text="$25.0", pricing=(25.0,),
        options=(("color", ("black", "washed black")), ("size", ("small", "large"))),
        attributes=("noise cancelling", "wireless"), category="electronics", query="headphones",
        product_category="Electronics › Headphones › Over-Ear",
    )
    base.update(kw)
    return Product(**base)


def make_goal(**kw) -> Goal:
    """A hand-built synthetic goal for ``make_product()``; keyword arguments override."""
    base = dict(
        mode="synthetic", index=0, asin="B000TEST01", name="Acme Wireless Bluetooth Headphones", query="headphones",
        category="electronics", product_category="Electronics › Headphones › Over-Ear",
        instruction_text="i want wireless headphones with color: black, and price lower than 30.00 dollars",
        attributes=("wireless", "battery life"), option_values=("black",), option_names=("color",),
        price_upper=30.0, weight=1.0,
    )
    base.update(kw)
    return Goal(**base)


@pytest.fixture
def mk_product():
    """Factory of hand-built products (``make_product``)."""
    return make_product


@pytest.fixture
def mk_goal():
    """Factory of hand-built goals (``make_goal``)."""
    return make_goal
