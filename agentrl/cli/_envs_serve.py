"""``agentrl envs serve ID --protocol openenv``: an env id as an OpenEnv server (the handler
and its options; ``agentrl/cli/envs.py`` adds the sub-command)."""

from __future__ import annotations

import argparse
import json
import os
import sys

TOKEN_ENV = "AGENTRL_SERVE_TOKEN"


def add_serve_parser(sub) -> None:
    """Add ``serve`` to the ``envs`` sub-parsers ``sub``."""
    p = sub.add_parser("serve", help="serve an env id over OpenEnv (loopback by default) until Ctrl-C")
    p.add_argument("env_id", metavar="ID", help="registered env id, e.g. agentrl/TextWorld-CU1-v0")
    p.add_argument("--protocol", default="openenv", help="wire protocol (openenv)")
    p.add_argument("--host", default="127.0.0.1", help="bind address; anything but loopback exposes the env "
                   "(use --token)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (0 picks a free one; the URL is printed)")
    p.add_argument("--slots", type=int, default=4, help="most sessions at once (one env worker slot each)")
    p.add_argument("--env-kwargs", default="{}", help="JSON object of env constructor kwargs, e.g. "
                   "'{\"split\": \"eval_unseen\", \"expert\": true}'")
    p.add_argument("--token", default=None, help=f"require Authorization: Bearer TOKEN on every request but "
                   f"/health (default: ${TOKEN_ENV} when set; prefer the variable: a command line is visible "
                   f"to every user of the machine in ps)")
    p.add_argument("--session-timeout", type=float, default=600.0, help="idle seconds before a session is "
                   "closed and its slot freed (0: never)")
    p.add_argument("--step-timeout", type=float, default=30.0, help="seconds one env step may take (then its "
                   "worker is killed and the client gets an EXECUTION_ERROR)")
    p.add_argument("--max-observation-chars", type=int, default=1_000_000, help="longest observation the env may "
                   "answer, characters (longer: the client gets an EXECUTION_ERROR naming observation_too_large)")
    p.add_argument("--max-body-bytes", type=int, default=64 << 20, help="largest HTTP request body or "
                   "WebSocket message, bytes (larger: 413)")
    p.add_argument("--header-timeout", type=float, default=10.0, help="seconds a connection has to complete a "
                   "request's headers (then it is closed: a slow client cannot hold it)")
    p.add_argument("--max-connections", type=int, default=256, help="connections served at once (more: 503)")
    p.set_defaults(func=serve_env_cmd)


def _env_kwargs(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--env-kwargs is not JSON ({exc.msg} at char {exc.pos}); pass an object, "
                         f"e.g. '{{\"split\": \"train\"}}'") from None
    if not isinstance(value, dict):
        raise ValueError(f"--env-kwargs must be a JSON object, got {type(value).__name__}; e.g. '{{\"split\": \"train\"}}'")
    return value


def serve_env_cmd(args: argparse.Namespace) -> int:
    """Handler of ``agentrl envs serve``: prints ``serving ID over PROTOCOL at URL`` once listening,
    serves until interrupted, returns 0. Raises ``ValueError``/``KeyError`` for bad options or id."""
    from agentrl.env.preflight import check_env_kwargs
    from agentrl.envserve import ServeOptions, serve_env
    from agentrl.serve_limits import ServeLimits

    kwargs = _env_kwargs(args.env_kwargs)
    check_env_kwargs(args.env_id, kwargs)
    opts = ServeOptions(env_id=args.env_id, protocol=args.protocol, host=args.host, port=args.port,
                        slots=args.slots, env_kwargs=kwargs, token=args.token or os.environ.get(TOKEN_ENV) or None,
                        session_timeout_s=args.session_timeout or None, step_timeout_s=args.step_timeout,
                        max_observation_chars=args.max_observation_chars,
                        limits=ServeLimits(args.max_body_bytes, args.header_timeout, args.max_connections))

    if args.token:
        print(f"warning: --token is visible to every user of this machine (ps, /proc/PID/cmdline); pass it as "
              f"${TOKEN_ENV} instead", file=sys.stderr, flush=True)

    def ready(url: str) -> None:
        auth = " (token required)" if opts.token else ""
        print(f"serving {args.env_id} over {args.protocol} at {url}{auth}", flush=True)
        if args.host not in ("127.0.0.1", "localhost", "::1") and not opts.token:
            print(f"warning: {args.host} is not loopback and no --token is set: anyone who can reach "
                  f"this port can play the env", file=sys.stderr, flush=True)

    try:
        serve_env(opts, on_ready=ready)
    except KeyboardInterrupt:
        pass
    return 0
