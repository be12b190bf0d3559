"""``agentrl view STORE [--port 8765] [--host 127.0.0.1] [--tokenizer PATH]``: a local web replay viewer.

Serves pages over the turn store, read-only (one fresh connection per request, so it can be
opened while a training run is still writing): runs → iterations (metric charts) → groups →
episodes → turns (observation, tokens coloured by advantage, logprobs on hover, anchor
groups, each advantage broken into the estimator's terms, branch trees), a group's episodes
sorted by advantage and side by side, text search over observations and actions. Filters:
env, task, success, estimator, iteration, policy version.
It never writes the store: the indexes its pages use are in the store schema; on a store
written before them it warns (pages correct, slower on large stores; `agentrl store index`
adds them).
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    """Add the ``view`` sub-command to ``subparsers``."""
    p = subparsers.add_parser("view", help="browse a turn store in a local web viewer",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", metavar="STORE", help="SQLite turn store file")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8765,
                   help="TCP port (default: 8765; 0 picks a free one, and the printed URL names it)")
    p.add_argument("--tokenizer", default=None,
                   help="tokenizer.json or model folder to decode token ids (default: the run's config.yaml beside STORE)")
    p.add_argument("--page-size", type=int, default=50, help="rows per page of runs, iterations, groups, episodes")
    p.add_argument("--turns-per-page", type=int, default=10, help="turns per page of an episode (default: 10)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``agentrl view``: serves until interrupted; returns the exit code (0).

    Raises:
        FileNotFoundError: no store at STORE (or no tokenizer at --tokenizer).
        ValueError: page sizes < 1, or the file is not a store of this schema version.
        ImportError: the view extra is missing (``pip install 'agentrl[view]'``).
    """
    from pathlib import Path

    if args.page_size < 1 or args.turns_per_page < 1:
        raise ValueError("--page-size and --turns-per-page must be ≥ 1")
    if args.tokenizer is not None:
        from agentrl.view.tokens import load_decoder

        load_decoder(args.tokenizer)  # fail now with the path in the message
    try:
        import uvicorn
    except ImportError as exc:
        raise ImportError("agentrl view needs uvicorn: pip install 'agentrl[view]'") from exc
    from rich.console import Console

    from agentrl.cli._text import markup_safe
    from agentrl.view import ViewerOptions, create_app

    app = create_app(ViewerOptions(store=Path(args.store), tokenizer=args.tokenizer, page_size=args.page_size,
                                   turns_per_page=args.turns_per_page))
    console = Console()
    for w in app.state.warnings:
        console.print(f"[yellow]warning:[/] {markup_safe(w)}", highlight=False)
    sock = bind(args.host, args.port)  # bound here, so --port 0 prints the port the OS picked
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    console.print(f"agentrl view: http://{shown}:{port}/  (Ctrl-C stops)", highlight=False)
    sys.stdout.flush()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0


def bind(host: str, port: int):
    """A listening TCP socket on ``host:port`` (``port`` 0: a free one, read back with
    ``getsockname``).

    Raises:
        ValueError: the address cannot be bound (port taken, no such interface), naming it
            (the CLI prints it and exits 2).
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port (0: any free one)"
                         ) from None
    sock.set_inheritable(True)
    return sock
