"""ALFWorld game files: locate the data dir, list the games of a split, load one game.

Layout (ENVIRONMENTS.md §2.2): ``<data_dir>/json_2.1.1/{valid_train,valid_seen,valid_unseen}/
<task_type>-<Obj>-<MRecep>-<Recep>-<scene>/<trial_id>/{game.tw-pddl,traj_data.json}``.
Generated games (``agentrl_envs.alfworld.generate``) use the same ``<task dir>/<trial>/`` layout
under their own root and join the ``train`` split.

Task ids are machine-independent: the game folder relative to ``json_2.1.1``
(``"valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/trial_T20190908_222917_366542"``),
or ``"generated/<task dir>/<trial>"`` for generated games.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from agentrl.env.contract import DataMissingError
from agentrl.env.data_home import prepared_dir

ENV_VAR = "AGENTRL_ALFWORLD_DATA"
GEN_ENV_VAR = "AGENTRL_ALFWORLD_GENERATED"
GAME_FILE = "game.tw-pddl"
SPLITS = {"train": "valid_train", "eval_seen": "valid_seen", "eval_unseen": "valid_unseen"}
GRAMMARS = ("native", "0.4.2")
TASK_TYPES = (
    "pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place",
)
_TASK_RE = re.compile(r'"rhs": "Your task is to: (.*?)"')
_HOW_TO_GET = (
    "Provide the ALFWorld game files (json_2.1.1 layout): `agentrl data prepare alfworld --from DIR` checks a "
    "folder of them and installs it where every run finds it (where the network reaches GitHub, "
    "`alfworld-download` fetches the official files first; ENVIRONMENTS.md §2.2); or point the env at a copy "
    f"with the env kwarg data_dir=... or the environment variable {ENV_VAR}=...; a checkout of this repository "
    "keeps a copy at ../shared/data/alfworld."
)
DATA_NAME = "alfworld"  # agentrl.env.data_home: the prepared copy lives in data_home()/alfworld


@dataclass(frozen=True)
class GameRef:
    """One playable game.

    Attributes:
        task_id: machine-independent id (see module docstring).
        path: absolute path of its ``game.tw-pddl``.
        task_type: one of ``TASK_TYPES``.
    """

    task_id: str
    path: Path
    task_type: str


def default_data_dir() -> Path:
    """``../shared/data/alfworld`` relative to the repository root (the kept data)."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data" / "alfworld"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The data dir: the ``data_dir`` argument, else ``$AGENTRL_ALFWORLD_DATA``, else the copy
    ``agentrl data prepare alfworld`` installed, else the kept data. Accepts the folder holding
    ``json_2.1.1`` or ``json_2.1.1`` itself.

    Raises:
        DataMissingError: the chosen folder is missing or holds no ``game.tw-pddl`` (P9).
    """
    if data_dir is not None:
        chosen, how = Path(data_dir), "data_dir argument"
    elif os.environ.get(ENV_VAR):
        chosen, how = Path(os.environ[ENV_VAR]), f"${ENV_VAR}"
    elif prepared_dir(DATA_NAME) is not None:
        chosen, how = prepared_dir(DATA_NAME), "prepared with agentrl data prepare"
    else:
        chosen, how = default_data_dir(), "default location"
    root = chosen / "json_2.1.1" if (chosen / "json_2.1.1").is_dir() else chosen
    if not root.is_dir() or next(root.rglob(GAME_FILE), None) is None:
        state = "does not exist" if not chosen.exists() else "holds no ALFWorld games (no game.tw-pddl found)"
        raise DataMissingError(f"ALFWorld data dir {chosen} ({how}) {state}. {_HOW_TO_GET}")
    return root


def _scan(root: Path, prefix: str) -> list[GameRef]:
    """Games under ``root`` (sorted by task id), with alfworld's own filter: solvable,
    no ``movable``/``Sliced`` in the path, ``traj_data.json`` present."""
    refs = []
    for game in sorted(root.rglob(GAME_FILE)):
        rel = game.parent.relative_to(root).as_posix()
        if "movable" in rel or "Sliced" in rel or not (game.parent / "traj_data.json").is_file():
            continue
        task_type = rel.split("/")[0].split("-")[0]
        if task_type not in TASK_TYPES or not _solvable(game):
            continue
        refs.append(GameRef(task_id=f"{prefix}/{rel}", path=game, task_type=task_type))
    return refs


def _solvable(game: Path) -> bool:
    with open(game, encoding="utf-8") as fh:
        return bool(json.load(fh).get("solvable", False))


def list_games(split: str, data_dir: str | os.PathLike | None = None,
               generated_dir: str | os.PathLike | None = None) -> list[GameRef]:
    """Games of one split, sorted by task id. ``train`` = ``valid_train`` plus the games
    under ``generated_dir`` (default ``$AGENTRL_ALFWORLD_GENERATED``, else none).

    Raises:
        ValueError: unknown split (lists the known ones).
        DataMissingError: missing/empty data dir, or the split folder has no games.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; choose one of {sorted(SPLITS)}")
    root = resolve_data_dir(data_dir)
    refs = list(_kept_games(str(root), SPLITS[split]))
    generated = (generated_dir or os.environ.get(GEN_ENV_VAR)) if split == "train" else None
    if generated:
        gen = Path(generated)
        if not gen.is_dir():
            raise DataMissingError(f"generated ALFWorld games dir {gen} does not exist; create it with "
                                   "`agentrl generate alfworld --n 12 --seed 0 --out DIR`")
        refs += _scan(gen, "generated")  # not cached: the folder may grow between calls
    if not refs:
        raise DataMissingError(f"ALFWorld split {split!r}: no games in {root / SPLITS[split]}. {_HOW_TO_GET}")
    return refs


def check_data(split: str = "train", data_dir: str | os.PathLike | None = None,
               generated_dir: str | os.PathLike | None = None) -> None:
    """Cheap pre-flight of ``list_games(split, data_dir, generated_dir)`` (no game is parsed):
    the data dir holds games, the split folder (or the generated dir, for train) holds one.

    Raises:
        ValueError: unknown split. DataMissingError: as ``list_games``.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown ALFWorld split {split!r}; choose one of {sorted(SPLITS)}")
    root = resolve_data_dir(data_dir)
    generated = (generated_dir or os.environ.get(GEN_ENV_VAR)) if split == "train" else None
    if generated and not Path(generated).is_dir():
        raise DataMissingError(f"generated ALFWorld games dir {generated} does not exist; create it with "
                               "`agentrl generate alfworld --n 12 --seed 0 --out DIR`")
    folder = root / SPLITS[split]
    if not generated and (not folder.is_dir() or next(folder.rglob(GAME_FILE), None) is None):
        raise DataMissingError(f"ALFWorld split {split!r}: no games in {folder}. {_HOW_TO_GET}")


@lru_cache(maxsize=32)
def _kept_games(root: str, folder: str) -> tuple[GameRef, ...]:
    """The kept games of one split folder (scanned once per process)."""
    return tuple(_scan(Path(root) / folder, folder)) if (Path(root) / folder).is_dir() else ()


def content_digest(path: Path) -> str:
    """Hex SHA-256 of a ``game.tw-pddl`` file's bytes (the panel digest); cached per
    (path, size, modification time), so a changed file is read again."""
    st = Path(path).stat()
    return _digest(str(path), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=8192)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def task_refs(split: str, data_dir: str | os.PathLike | None = None,
              generated_dir: str | os.PathLike | None = None):
    """``agentrl.env.tasks.TaskRef`` (task id, game-file digest) of every game of a split,
    in task-id order. Raises as ``list_games``."""
    from agentrl.env.tasks import TaskRef

    return [TaskRef(g.task_id, content_digest(g.path)) for g in list_games(split, data_dir, generated_dir)]


def goal_text(grammar: str) -> str:
    """The task sentence from a game grammar's ``task`` rule, without the trailing period,
    e.g. ``"examine the alarmclock with the desklamp"``. Raises ``ValueError`` if absent."""
    m = _TASK_RE.search(grammar)
    if not m:
        raise ValueError("game grammar has no 'Your task is to: ...' rule")
    return m.group(1).rstrip(".")


@lru_cache(maxsize=1)
def wheel_logic() -> tuple[str, str]:
    """``(pddl_domain, grammar_template)`` shipped in the alfworld 0.4.2 wheel; the grammar
    holds the literal ``UNKNOWN GOAL``. Raises ``MissingExtraError`` without alfworld."""
    from agentrl.env.contract import require_module

    info = require_module("alfworld.info", "alfworld")
    with open(info.ALFRED_PDDL_PATH, encoding="utf-8") as d, open(info.ALFRED_TWL2_PATH, encoding="utf-8") as g:
        return d.read(), g.read()


def load_game(path: Path, grammar: str = "native") -> dict[str, object]:
    """Read a ``game.tw-pddl`` as the dict ``PddlEnv.load`` takes.

    ``grammar="native"`` plays the file as stored (the kept games: 0.2-era ``put X in/on Y``);
    ``"0.4.2"`` re-skins it with the wheel's domain and grammar (``move X to Y``, ``help``),
    keeping the file's ``pddl_problem`` and its goal sentence verbatim (so both wordings ask
    the same task). Raises ``ValueError`` for an unknown grammar.
    """
    if grammar not in GRAMMARS:
        raise ValueError(f"unknown ALFWorld grammar {grammar!r}; choose one of {GRAMMARS}")
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if grammar == "0.4.2":
        domain, template = wheel_logic()
        data = {**data, "pddl_domain": domain,
                "grammar": template.replace("UNKNOWN GOAL", goal_text(data["grammar"]))}
    return data
