"""Where a harness program is (``rollout.harness.command``): relative paths are read against the
config file's folder, then the working directory; a program found in neither stops the run at
start with one line naming both places (issue 53: a harness path that resolved against the
working directory aborted every episode of a run that still exited 0). Layer: ``agentrl.config``
(standard library only)."""

from __future__ import annotations

import shutil
from pathlib import Path

from agentrl.config.errors import ConfigError

__all__ = ["resolve_harness_command", "check_harness_program"]


def _program_index(command: tuple[str, ...]) -> int | None:
    """Index of the program in ``command``: the script after ``{python}`` (None for ``-m``/``-c``
    forms, which name no file), else the first element."""
    if command[0] != "{python}":
        return 0
    if len(command) < 2:
        raise ConfigError("rollout.harness.command: '{python}' needs a script after it, e.g. ['{python}', 'agent.py']")
    return None if command[1].startswith("-") else 1


def resolve_harness_command(command: tuple[str, ...], config_dir: str | Path) -> tuple[str, ...]:
    """``command`` with a relative program path made absolute: beside the config file first
    (``config_dir``), else in the working directory; anything else unchanged (a bare name is
    looked up on ``PATH`` by ``check_harness_program`` when a run starts).

    Raises:
        ConfigError: a relative program path that is in neither place.
    """
    i = _program_index(command)
    if i is None:
        return command
    prog = Path(command[i]).expanduser()
    if prog.is_absolute() or (i == 0 and "/" not in command[i]):
        return command  # checked with the run's config (``check_harness_program``)
    for base in (Path(config_dir), Path.cwd()):
        if (base / prog).exists():
            return command[:i] + (str((base / prog).resolve()),) + command[i + 1:]
    raise ConfigError(f"rollout.harness.command: the harness program {command[i]!r} is neither beside the config "
                      f"({Path(config_dir).resolve() / prog}) nor in the working directory ({Path.cwd() / prog}); "
                      "give its path relative to the config file, or an absolute one")


def check_harness_program(command: tuple[str, ...]) -> None:
    """Raise ``ConfigError`` (one line naming the path) when ``command``'s program does not
    exist: a path that is not a file, or a bare name not on ``PATH``."""
    i = _program_index(command)
    if i is None:
        return
    prog = command[i]
    if i == 0 and "/" not in prog:
        if shutil.which(prog) is None:
            raise ConfigError(f"rollout.harness.command: the harness program {prog!r} is not on PATH; give its path")
        return
    path = Path(prog).expanduser()
    if not path.is_file():
        raise ConfigError(f"rollout.harness.command: the harness program {str(path.resolve())!r} does not exist; "
                          "give its path relative to the config file, or an absolute one")
