"""agentrl.cli — the ``agentrl`` command (L5).

Each sub-command lives in its own module ``agentrl/cli/<name>.py`` exposing
``register(subparsers) -> None``, which adds an ``argparse`` sub-parser whose ``func``
default is the handler ``(args) -> int``. Handlers import heavy libraries lazily so that
``agentrl --help`` stays fast. Errors that are the user's (``KeyError``, ``ValueError``,
``FileNotFoundError``, ``FileExistsError``, ``ImportError``, ``PermissionError``) print one red line and exit 2;
a failed weight-sync check (``agentrl.train.sync.SyncError``) prints one red line and exits 1.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentrl", description="Multi-turn RL for LLM agents.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
        importlib.import_module(f"{__name__}.{mod}").register(sub)
    from agentrl.cli._help import polish

    polish(parser)  # plain-text docstrings, defaults shown
    return parser


def main(argv: list[str] | None = None) -> int:
    import os

    # transformers' / huggingface_hub's own tqdm bars (e.g. "Loading weights") clutter logs; ours report progress
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # `key=value` overrides may also follow options (`train CFG --no-resume run.seed=1`)
        bad = [e for e in extra if e.startswith("-") or not ("=" in e or e.startswith("~"))]
        if hasattr(args, "overrides") and not bad:
            args.overrides = [*args.overrides, *extra]
        elif hasattr(args, "overrides") and not any(e.startswith("-") for e in bad):
            parser.error(f"{bad[0]!r} is not an override: write key.sub=value (e.g. update.lr=1e-5), "
                         f"+key.sub=value, or ~key.sub to reset a key to its default")
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    _show_agentrl_logs()
    try:
        return int(args.func(args) or 0)
    except (KeyError, ValueError, FileNotFoundError, FileExistsError, ImportError, PermissionError) as exc:
        from rich.console import Console

        from agentrl.cli._text import markup_safe

        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)  # may quote stored text
        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {markup_safe(msg)}", highlight=False)
        return 2
    except RuntimeError as exc:
        if type(exc).__name__ not in ("SyncError", "RolloutFailedError"):  # agentrl.train's (lazy: they need torch)
            raise
        from rich.console import Console

        from agentrl.cli._text import markup_safe

        Console(stderr=True, soft_wrap=True).print(f"[bold red]error:[/] {markup_safe(str(exc))}", highlight=False)
        return 1


def _show_agentrl_logs() -> None:
    """agentrl's own INFO/WARNING lines (resume, data-parallel set-up, run folder moved aside)
    go to stderr as ``[agentrl] ...``; other libraries' loggers are left as they are."""
    import logging

    class _CurrentStderr(logging.StreamHandler):
        def emit(self, record: logging.LogRecord) -> None:
            self.stream = sys.stderr  # the stderr of now (a test harness may have swapped it)
            super().emit(record)

    log = logging.getLogger("agentrl")
    if not any(isinstance(h, _CurrentStderr) or type(h).__name__ == "_CurrentStderr" for h in log.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("[agentrl] %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
