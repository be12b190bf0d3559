"""Evaluation panels for ``agentrl/WebShop-v0`` (see ``agentrl.env.panels``).

Task ids are ``"<goal mode>/<shuffled goal index>"``; splits follow upstream's index ranges
(test 0–499, eval 500–1499, train 1500+); digests are ``Goal.digest()`` (target ASIN,
instruction, attributes, options, price bound), so a panel also pins the ``price_seed``.

Shipped manifests (synthetic goals, ``price_seed=0``, ``base_seed=0``, one seed per goal):
``envs/webshop/panels/webshop-synthetic-{test,eval}.json`` (500 / 1000 entries). The train
panel (5,410 goals) is the complement and is built on demand with ``webshop_panel("train")``.

Regenerate: ``python -m agentrl_envs.webshop.panels`` (fails if train and the eval splits overlap).
"""

from __future__ import annotations

import os
from pathlib import Path

from agentrl.env.panels import Panel, assert_disjoint, build_panel, load_panel, save_panel
from agentrl_envs.webshop.data import resolve_data_dir
from agentrl_envs.webshop.goals import split_goals
from agentrl_envs.webshop.world import World, get_world

ENV_ID = "agentrl/WebShop-v0"
PANEL_DIR = Path(__file__).parent / "panels"
SHIPPED_SPLITS = ("test", "eval")
PANEL_SPLITS = ("train", "eval", "test")


def webshop_panel(split: str, data_dir: str | os.PathLike | None = None, goal_mode: str = "synthetic",
                  price_seed: int = 0, base_seed: int = 0) -> Panel:
    """Panel of one split (one entry per goal).

    Raises:
        ValueError: unknown split; DataMissingError: no data (as ``WebShopEnv``).
    """
    world = get_world(resolve_data_dir(data_dir), goal_mode, price_seed)
    goals = split_goals(world.goals, split)
    return build_panel(f"webshop-{goal_mode}-{split}", env_id=ENV_ID, split=split,
                       task_ids=[g.task_id for g in goals], digests={g.task_id: g.digest() for g in goals},
                       base_seed=base_seed)


def all_panels(data_dir: str | os.PathLike | None = None, goal_mode: str = "synthetic",
               price_seed: int = 0, base_seed: int = 0) -> dict[str, Panel]:
    """Panels of train/eval/test keyed by split; ``ValueError`` if train overlaps an eval split."""
    panels = {s: webshop_panel(s, data_dir, goal_mode, price_seed, base_seed) for s in PANEL_SPLITS}
    assert_disjoint([panels["train"]], [panels["eval"], panels["test"]])
    return panels


def shipped_panel(split: str, goal_mode: str = "synthetic") -> Panel:
    """A manifest committed with the code (hash re-verified on load).
    Raises ``FileNotFoundError`` for a split that is not shipped."""
    return load_panel(PANEL_DIR / f"webshop-{goal_mode}-{split}.json")


def verify_panel(panel: Panel, world: World) -> None:
    """Check that every task id resolves to the same goal content in ``world``
    (``ValueError`` listing mismatches, e.g. another ``price_seed`` or other data)."""
    panel.verify_digests(lambda task_id: world.goal(task_id).digest())


def main() -> int:
    """Rebuild the shipped manifests from the kept data and print their hashes."""
    panels = all_panels()
    for split in SHIPPED_SPLITS:
        save_panel(panels[split], PANEL_DIR / f"webshop-synthetic-{split}.json")
    for split, panel in panels.items():
        print(f"{split:6s} {len(panel):5d} {panel.sha256}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
