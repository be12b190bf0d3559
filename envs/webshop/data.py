"""WebShop data: locating the data folder and loading the 1000-product catalogue.

Two sources, both ending in the same immutable ``Product`` records (ENVIRONMENTS.md §3.2, §3.5):

- the kept, already-preprocessed ``resources_1k_documents.jsonl`` (offline default), and
- the official raw ``items_shuffle_1000.json``, run through ``load_products`` (WebShop's
  preprocessing: ASIN filter, dedupe, price parsing, option normalisation).

The folder comes from the ``data_dir`` argument, else ``$AGENTRL_WEBSHOP_DATA``, else the copy
``agentrl data prepare webshop`` installed (``agentrl.env.data_home``), else the project's kept copy ``../shared/data/webshop/``. A missing or empty folder is a
``DataMissingError`` naming the folder and the fix (PITFALLS P9).
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from agentrl.env import DataMissingError
from agentrl.env.data_home import prepared_dir

DATA_ENV_VAR = "AGENTRL_WEBSHOP_DATA"
DOCS_FILE = "resources_1k_documents.jsonl"
ATTRS_FILE = "items_ins_v2_1000.json"
RAW_PRODUCTS_FILE = "items_shuffle_1000.json"
HUMAN_INS_FILE = "items_human_ins.json"
DEFAULT_PRICE = 100.0
DATA_NAME = "webshop"  # agentrl.env.data_home: the prepared copy lives in data_home()/webshop


def default_data_dir() -> Path:
    """The project's kept copy: ``<project root>/../shared/data/webshop``."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data" / "webshop"


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """``data_dir`` if given, else ``$AGENTRL_WEBSHOP_DATA`` if set, else the copy
    ``agentrl data prepare webshop`` installed, else ``default_data_dir()``."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        return Path(env).expanduser()
    return prepared_dir(DATA_NAME) or default_data_dir()


def _fix_hint(folder: Path) -> str:
    return (
        f"Fix: `agentrl data prepare webshop --from DIR` checks a folder holding {DOCS_FILE} and {ATTRS_FILE} "
        f"and installs it where every run finds it; or pass data_dir=... (or set ${DATA_ENV_VAR}) to such a "
        f"folder; a checkout of this repository keeps them at {default_data_dir()} (ENVIRONMENTS.md §3.2). "
        f"Human-goal mode also needs "
        f"{HUMAN_INS_FILE} from WebShop's `setup.sh -d small`. Looked in: {folder}"
    )


def check_data_dir(folder: Path, goal_mode: str) -> None:
    """Raise ``DataMissingError`` unless ``folder`` holds the files ``goal_mode`` needs.

    Args:
        folder: the WebShop data folder.
        goal_mode: ``"synthetic"`` (needs the attributes file and a catalogue: the kept
            jsonl or the raw ``items_shuffle_1000.json``) or ``"human"`` (also ``items_human_ins.json``).
    Raises:
        DataMissingError: the folder is missing or empty, or a needed file is absent or empty.
    """
    if not folder.is_dir() or not any(folder.iterdir()):
        raise DataMissingError(f"WebShop data folder {folder} is missing or empty. {_fix_hint(folder)}")
    needed = [ATTRS_FILE]
    if not _nonempty(folder / RAW_PRODUCTS_FILE):
        needed.append(DOCS_FILE)
    if goal_mode == "human":
        needed.append(HUMAN_INS_FILE)
    missing = [name for name in needed if not _nonempty(folder / name)]
    if missing:
        raise DataMissingError(f"WebShop data folder {folder} lacks {', '.join(missing)}. {_fix_hint(folder)}")


def _nonempty(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


@dataclass(frozen=True)
class Product:
    """One catalogue product after WebShop's ``load_products`` preprocessing.

    Attributes:
        asin: upper-case Amazon id (≤ 10 chars), e.g. ``"B09QKP7XQL"``.
        name: raw product name (equals ``title`` for this catalogue); used by the type reward.
        title, description: page text.
        bullets: the "Features" bullet points.
        price_text: display price, ``"$a"`` or ``"$a to $b"``.
        pricing: ``(a,)`` or ``(a, b)`` in dollars.
        options: ``((option name, (value, ...)), ...)`` in page order; names and values lower-case.
        attributes: product attributes (``("DUMMY_ATTR",)`` when unknown).
        category, query, product_category: category metadata (type reward).
        rating: display rating (``"N.A."`` here).
        instruction: the synthetic goal text (``None`` for products without one).
        instruction_attributes: the synthetic goal's attributes.
    """

    asin: str
    name: str
    title: str
    description: str
    bullets: tuple[str, ...]
    price_text: str
    pricing: tuple[float, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    attributes: tuple[str, ...]
    category: str
    query: str
    product_category: str
    rating: str = "N.A."
    instruction: str | None = None
    instruction_attributes: tuple[str, ...] = ()

    @property
    def options_dict(self) -> dict[str, tuple[str, ...]]:
        """Option name → values (page order)."""
        return dict(self.options)


@dataclass(frozen=True)
class Catalogue:
    """The loaded products, their BM25 document texts and where they came from.

    Attributes:
        products: products in load order (the BM25 doc index order).
        contents: BM25 document text per product, aligned with ``products``.
        source: the file the products were read from.
        human_instructions: ASIN → raw human goal records (``items_human_ins.json`` in human-goal
            mode; the 13 embedded in the kept jsonl otherwise).
        by_asin: ASIN → product (computed).
    """

    products: tuple[Product, ...]
    contents: tuple[str, ...]
    source: Path
    human_instructions: Mapping[str, tuple[Mapping[str, object], ...]] = field(default_factory=dict)
    by_asin: Mapping[str, Product] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_asin", {p.asin: p for p in self.products})

    def __len__(self) -> int:
        return len(self.products)

    def get(self, asin: str) -> Product:
        """The product with this upper-case ASIN. Raises ``KeyError`` if unknown."""
        return self.by_asin[asin]


def document_text(product: Product) -> str:
    """BM25 document of a product, as WebShop's ``convert_product_file_format.py`` builds it:
    ``lower(Title + ' ' + Description + ' ' + BulletPoints[0] + ' ' + options text)``."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options)
    first_bullet = product.bullets[0] if product.bullets else ""
    return " ".join([product.title, product.description, first_bullet, option_text]).lower()


def _product_from_clean(p: Mapping, attrs: Mapping[str, Mapping]) -> Product:
    info = attrs.get(p["asin"], {})
    return Product(
        asin=p["asin"], name=p["name"], title=p["Title"], description=p["Description"],
        bullets=tuple(p["BulletPoints"]), price_text=p["Price"], pricing=tuple(float(x) for x in p["pricing"]),
        options=tuple((k, tuple(v)) for k, v in p["options"].items()),
        attributes=tuple(p["Attributes"]) or ("DUMMY_ATTR",), category=p["category"], query=p["query"],
        product_category=p["product_category"], rating=p.get("Rating", "N.A."),
        instruction=info.get("instruction"), instruction_attributes=tuple(info.get("instruction_attributes") or ()),
    )


def load_documents(path: Path, attrs: Mapping[str, Mapping]) -> Catalogue:
    """Load the kept ``resources_1k_documents.jsonl`` (products already preprocessed).

    Raises:
        DataMissingError: the file holds no products.
    """
    products, contents, human = [], [], {}
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            doc = json.loads(line)
            product = _product_from_clean(doc["product"], attrs)
            products.append(product)
            contents.append(doc["contents"])
            if doc["product"].get("instructions"):
                human[product.asin] = tuple(doc["product"]["instructions"])
    if not products:
        raise DataMissingError(f"{path} holds no products. {_fix_hint(path.parent)}")
    return Catalogue(tuple(products), tuple(contents), path, human)


def parse_pricing(pricing: str | None) -> tuple[tuple[float, ...], str]:
    """WebShop price parsing: ``"$a"`` → ``((a,), "$a")``; ``"$a - $b"`` → ``((a, b), "$a to $b")``;
    missing/empty → ``((100.0,), "$100.0")``."""
    if not pricing:
        return (DEFAULT_PRICE,), f"${DEFAULT_PRICE}"
    values = [float(Decimal(re.sub(r"[^\d.]", "", part))) for part in pricing.split("$")[1:]]
    if len(values) == 1:
        return (values[0],), f"${values[0]}"
    return (values[0], values[1]), f"${values[0]} to ${values[1]}"


def _raw_options(customization: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(customization, Mapping):
        return ()
    out = []
    for name, contents in customization.items():
        if contents is None:
            continue
        values = tuple(c["value"].strip().replace("/", " | ").lower() for c in contents)
        out.append((name.lower(), values))
    return tuple(out)


def load_products(raw: Sequence[Mapping], attrs: Mapping[str, Mapping]) -> list[Product]:
    """WebShop's ``load_products`` on raw ``items_shuffle`` records (ENVIRONMENTS.md §3.5).

    Skips ASIN ``"nan"`` or longer than 10 characters and duplicate ASINs; ``Title = name``,
    ``Description = full_description``, ``BulletPoints = small_description`` (as a list), prices
    via ``parse_pricing``, options lower-cased with ``/`` → ``" | "``, ``Attributes`` from
    ``attrs`` or ``("DUMMY_ATTR",)``; ``query`` lower-cased and stripped.
    """
    seen: set[str] = set()
    out = []
    for p in raw:
        asin = p["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        small = p.get("small_description")
        bullets = tuple(small) if isinstance(small, list) else (small,)
        pricing, price_text = parse_pricing(p.get("pricing"))
        info = attrs.get(asin, {})
        out.append(Product(
            asin=asin, name=p["name"], title=p["name"], description=p["full_description"], bullets=bullets,
            price_text=price_text, pricing=pricing, options=_raw_options(p.get("customization_options")),
            attributes=tuple(info.get("attributes") or ("DUMMY_ATTR",)), category=p["category"],
            query=p["query"].lower().strip(), product_category=p["product_category"],
            instruction=info.get("instruction"), instruction_attributes=tuple(info.get("instruction_attributes") or ()),
        ))
    return out


def load_catalogue(folder: Path, goal_mode: str = "synthetic") -> Catalogue:
    """Load the catalogue the data folder offers: the raw official products when present
    (preprocessed by ``load_products``), else the kept jsonl. In ``"human"`` mode the human
    instructions come from ``items_human_ins.json``.

    Raises:
        DataMissingError: see ``check_data_dir``.
    """
    check_data_dir(folder, goal_mode)
    attrs = json.loads((folder / ATTRS_FILE).read_text(encoding="utf-8"))
    raw_path = folder / RAW_PRODUCTS_FILE
    if _nonempty(raw_path):
        products = load_products(json.loads(raw_path.read_text(encoding="utf-8")), attrs)
        cat = Catalogue(tuple(products), tuple(document_text(p) for p in products), raw_path)
    else:
        cat = load_documents(folder / DOCS_FILE, attrs)
    if goal_mode == "human":
        human = json.loads((folder / HUMAN_INS_FILE).read_text(encoding="utf-8"))
        cat = Catalogue(cat.products, cat.contents, cat.source,
                        {a: tuple(v) for a, v in human.items() if a in cat.by_asin})
    return cat


def draw_prices(products: Iterable[Product], rng: random.Random) -> dict[str, float]:
    """Actual price per ASIN (dollars): ``a`` for a single price, ``rng.uniform(a, b)`` for a
    range, drawn in catalogue order (upstream ``generate_product_prices``, but seeded)."""
    prices = {}
    for p in products:
        if not p.pricing:
            prices[p.asin] = DEFAULT_PRICE
        elif len(p.pricing) == 1:
            prices[p.asin] = p.pricing[0]
        else:
            prices[p.asin] = rng.uniform(p.pricing[0], p.pricing[1])
    return prices
