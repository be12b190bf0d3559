"""``serve_env``: run an agentrl env id as a protocol server with uvicorn until stopped.

Binds the socket itself (port 0 = a free port) and calls ``on_ready(url)`` once it listens,
so a caller (the CLI, a test) learns the real port before the first request.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Callable

from agentrl.env.guards import DEFAULT_MAX_OBSERVATION_CHARS
from agentrl.serve_limits import ServeLimits, limit_body, uvicorn_limits

PROTOCOLS = ("openenv",)
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ServeOptions:
    """What and how to serve.

    Attributes:
        env_id: registered env id.
        protocol: one of ``PROTOCOLS``.
        host / port: bind address (loopback by default; port 0 picks a free port).
        slots: most sessions at once (one ``EnvPool`` slot each).
        env_kwargs: constructor kwargs of the env.
        token: optional shared secret required on every request but ``/health``.
        session_timeout_s: idle seconds before a session is closed (None: never).
        step_timeout_s / reset_timeout_s: the pool's deadlines per env call, seconds.
        max_observation_chars: the longest observation the env may answer (longer: an
            EXECUTION_ERROR reply, cause ``observation_too_large``).
        limits: the HTTP server's body cap, header deadline and connection cap
            (``agentrl.serve_limits``).
    """

    env_id: str
    protocol: str = "openenv"
    host: str = LOOPBACK
    port: int = 8000
    slots: int = 4
    env_kwargs: dict | None = None
    token: str | None = None
    session_timeout_s: float | None = 600.0
    step_timeout_s: float = 30.0
    reset_timeout_s: float = 120.0
    max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS
    limits: ServeLimits = ServeLimits()


def check_options(opts: ServeOptions) -> None:
    """Raise ``ValueError`` (one line naming the fix) for a bad protocol, port or slot count."""
    if opts.protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {opts.protocol!r}; agentrl serves: {', '.join(PROTOCOLS)}")
    if not 0 <= opts.port <= 65535:
        raise ValueError(f"port {opts.port} is out of range; use 0..65535 (0 picks a free port)")
    if opts.slots < 1:
        raise ValueError(f"--slots must be >= 1, got {opts.slots}")
    if opts.session_timeout_s is not None and opts.session_timeout_s <= 0:
        raise ValueError("--session-timeout must be > 0 seconds (or 0 on the command line for none)")
    if opts.max_observation_chars < 1:
        raise ValueError(f"--max-observation-chars must be >= 1, got {opts.max_observation_chars}")


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``. Raises ``ValueError`` when it cannot bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port or --host") from exc
    sock.listen(128)
    return sock


def serve_env(opts: ServeOptions, on_ready: Callable[[str], None] = print) -> None:
    """Serve ``opts.env_id`` until interrupted (SIGINT/SIGTERM), then stop the env workers.

    Raises:
        ValueError: bad options or address. KeyError: unknown env id.
        MissingExtraError: openenv-core (or uvicorn) is not installed.
        EnvPoolError: the env cannot be built.
    """
    check_options(opts)
    from agentrl.env.contract import require_module
    from agentrl.envserve.dispatch import PoolHub
    from agentrl.envserve.openenv_app import build_openenv_app

    uvicorn = require_module("uvicorn", "hubs")
    sock = bind(opts.host, opts.port)
    hub = PoolHub(opts.env_id, opts.slots, env_kwargs=opts.env_kwargs, step_timeout_s=opts.step_timeout_s,
                  reset_timeout_s=opts.reset_timeout_s, max_observation_chars=opts.max_observation_chars)
    try:
        app = limit_body(build_openenv_app(hub, session_timeout_s=opts.session_timeout_s, token=opts.token),
                         opts.limits.max_body_bytes)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_ping_interval=20.0, ws_ping_timeout=20.0,
                                               ws_max_size=opts.limits.max_body_bytes, **uvicorn_limits(opts.limits)))
        host, port = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        on_ready(f"http://{shown}:{port}")
        server.run(sockets=[sock])
    finally:
        hub.close()
        sock.close()
