"""Evaluation panels for ``agentrl/ALFWorld-v0`` (see ``agentrl.env.panels``).

Shipped manifests: ``envs/alfworld/manifests/alfworld-{train,eval_seen,eval_unseen}.json``
(200 / 140 / 134 entries, one seed per game, ``base_seed=0``, digests = SHA-256 of each
``game.tw-pddl``). The ``train`` manifest covers the kept games only; a panel including
generated games is built with ``alfworld_panel("train", generated_dir=...)``.

Regenerate: ``python -m agentrl_envs.alfworld.panels`` (fails if train and eval overlap).
"""

from __future__ import annotations

import os
from pathlib import Path

from agentrl.env.panels import Panel, assert_disjoint, build_panel, load_panel, save_panel
from agentrl_envs.alfworld.data import SPLITS, content_digest, list_games

ENV_ID = "agentrl/ALFWorld-v0"
PANEL_DIR = Path(__file__).parent / "manifests"


def alfworld_panel(split: str, data_dir: str | os.PathLike | None = None,
                   generated_dir: str | os.PathLike | None = None, base_seed: int = 0) -> Panel:
    """Build the panel of one split from the game files (one entry per game).

    Raises ``ValueError`` (unknown split) or ``DataMissingError`` (no data), as ``list_games``.
    """
    games = list_games(split, data_dir, generated_dir if split == "train" else None)
    return build_panel(f"alfworld-{split}", env_id=ENV_ID, split=split, task_ids=[g.task_id for g in games],
                       digests={g.task_id: content_digest(g.path) for g in games}, base_seed=base_seed)


def all_panels(data_dir: str | os.PathLike | None = None, generated_dir: str | os.PathLike | None = None,
               base_seed: int = 0) -> dict[str, Panel]:
    """Panels of every split, keyed by split; asserts train is disjoint from both eval
    splits by task id and content digest (``ValueError`` otherwise)."""
    panels = {s: alfworld_panel(s, data_dir, generated_dir, base_seed) for s in SPLITS}
    assert_disjoint([panels["train"]], [panels["eval_seen"], panels["eval_unseen"]])
    return panels


def shipped_panel(split: str) -> Panel:
    """The manifest committed with the code (hash re-verified on load).
    Raises ``FileNotFoundError`` for an unknown split."""
    return load_panel(PANEL_DIR / f"alfworld-{split}.json")


def main() -> int:
    """Rebuild the shipped manifests from the kept data and print their hashes."""
    for split, panel in all_panels().items():
        save_panel(panel, PANEL_DIR / f"alfworld-{split}.json")
        print(f"{split:12s} {len(panel):4d} {panel.sha256}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
