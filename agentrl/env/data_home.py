"""Where env data a user prepared lives, so a pip-installed agentrl finds ALFWorld / WebShop
files without the ``../shared/data`` folder of this repository.

``agentrl data prepare NAME --from DIR`` validates ``DIR`` with the env's own data check and
copies it to ``data_home()/NAME`` (``$AGENTRL_DATA_HOME``, else ``$XDG_CACHE_HOME/agentrl/data``,
else ``~/.cache/agentrl/data``), marked by a ``PREPARED.json`` (source, files, bytes, time).
The env loaders look, in order: their ``data_dir`` argument, their environment variable
(``$AGENTRL_ALFWORLD_DATA``, ``$AGENTRL_WEBSHOP_DATA``), ``prepared_dir(NAME)``, then the kept
copy beside the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DATA_HOME_ENV", "MARKER", "PreparedData", "data_home", "prepared_dir", "install_prepared"]

DATA_HOME_ENV = "AGENTRL_DATA_HOME"
MARKER = "PREPARED.json"


def data_home() -> Path:
    """The root of prepared data: ``$AGENTRL_DATA_HOME``, else ``$XDG_CACHE_HOME/agentrl/data``,
    else ``~/.cache/agentrl/data`` (not created here)."""
    if os.environ.get(DATA_HOME_ENV):
        return Path(os.environ[DATA_HOME_ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "agentrl" / "data"


def prepared_dir(name: str) -> Path | None:
    """``data_home()/name`` when ``agentrl data prepare`` installed it there, else None."""
    folder = data_home() / name
    return folder if (folder / MARKER).is_file() else None


@dataclass(frozen=True)
class PreparedData:
    """Result of ``install_prepared``: where the data went, from where, ``files`` and ``bytes`` copied."""

    name: str
    path: Path
    source: Path
    files: int
    bytes: int


def install_prepared(name: str, source: str | os.PathLike, *, replace: bool = False) -> PreparedData:
    """Copy the (already validated) folder ``source`` to ``data_home()/name``, atomically: into a
    temporary sibling first, renamed once complete, so a broken copy is never "prepared".

    Raises:
        FileNotFoundError: ``source`` is not a folder.
        FileExistsError: ``name`` is prepared already and ``replace`` is False (nothing changed).
        ValueError: ``source`` is the prepared folder itself, or lies inside it.
    """
    src = Path(source).expanduser().resolve()
    if not src.is_dir():
        raise FileNotFoundError(f"{source} is not a folder; pass the folder that holds the {name} data")
    home = data_home()
    dest = home / name
    if dest.resolve() == src or dest.resolve() in src.parents:
        raise ValueError(f"{source} is the prepared {name} folder itself; pass another source")
    if (dest / MARKER).is_file() and not replace:
        raise FileExistsError(f"{name} is prepared already at {dest}; pass --replace to overwrite it")
    home.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=home))
    try:
        copy = tmp / name
        shutil.copytree(src, copy, symlinks=False)
        files = [p for p in copy.rglob("*") if p.is_file()]
        info = PreparedData(name, dest, src, len(files), sum(p.stat().st_size for p in files))
        (copy / MARKER).write_text(json.dumps({"name": name, "source": str(src), "files": info.files,
                                               "bytes": info.bytes, "prepared_at": time.time()}, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        copy.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info
