"""``agentrl proxy serve --policy NAME --store PATH [--port P]``: the recording proxy.

Serves an OpenAI-compatible endpoint per episode (``/e/{key}/v1``) in front of the policy
and records every call as a token-faithful turn; closed episodes go to the turn store
(``agentrl replay PATH`` shows them, ``info`` included: segment, fork, drift). Episodes are
created and closed on the admin routes with the printed admin token, e.g.::

    curl -H "Authorization: Bearer $TOKEN" -d '{"env_id": "agentrl/Toy-v0", "seed": 0}' \\
         http://127.0.0.1:8000/admin/episodes
    # → {"episode_id": 0, "key": ..., "base_url": "http://127.0.0.1:8000/e/<key>/v1", ...}
    curl -H "Authorization: Bearer $TOKEN" -d '{"reward": 1.0}' http://127.0.0.1:8000/admin/episodes/0/reward
    curl -H "Authorization: Bearer $TOKEN" -d '{}' http://127.0.0.1:8000/admin/episodes/0/close

Ctrl-C or SIGTERM stops the server; episodes still open are stored with status ``aborted``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Iterator


def register(subparsers) -> None:
    """Add ``proxy serve`` to ``subparsers``."""
    p = subparsers.add_parser("proxy", help="recording OpenAI-compatible proxy for external agent harnesses",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="proxy_command", metavar="SUBCOMMAND", required=True)
    s = sub.add_parser("serve", help="serve the policy and record calls into a turn store")
    s.add_argument("--policy", required=True, help="packaged model name (e.g. smollm2-135m-instruct) or HF folder")
    s.add_argument("--store", required=True, help="SQLite turn store file (created when missing)")
    s.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    s.add_argument("--port", type=int, default=8000, help="port (0: a free one; default 8000)")
    s.add_argument("--run", default=None, help="run id in the store (default: proxy-<unix time>)")
    s.add_argument("--mode", choices=("tito", "retokenize", "strict"), default="tito",
                   help="prompt continuation: token-in/token-out (default), re-render every call, or refuse drift")
    s.add_argument("--unknown-fields", choices=("ignore", "refuse"), default=None,
                   help="request keys the proxy does not know: ignore and record them in the turn's info, or "
                        "refuse with 400 (default: refuse in strict mode, else ignore; null values always pass)")
    s.add_argument("--admin-token", default=None, help="bearer token of /admin (default: random, printed)")
    s.add_argument("--max-tokens", type=int, default=256, help="default max_tokens when a request omits it")
    s.add_argument("--max-batch", type=int, default=32, help="most prompts per engine call")
    s.add_argument("--while-paused", choices=("hold", "reject"), default="hold",
                   help="a call that arrives during a weight update (POST /admin/pause) waits (default) or gets "
                        "429 with Retry-After")
    s.add_argument("--retry-after", type=float, default=1.0, help="seconds of Retry-After in reject mode")
    s.add_argument("--tool-schemas", type=Path, default=None, metavar="FILE",
                   help="JSON file {tool name: JSON schema}: a forced call of that tool decodes its arguments under "
                        "this schema instead of the harness's (rollout.harness.tool_schemas)")
    s.add_argument("--force-tools", action="store_true",
                   help="every request that offers tools decodes a call of one of them (rollout.harness.force_tool_call)")
    s.add_argument("--only-tools", nargs="+", default=None, metavar="NAME",
                   help="a forced tool call may call only these of the offered tools (rollout.harness.only_tools)")
    s.add_argument("--resends", choices=("retry", "new_call"), default="retry",
                   help="an exact resend of an episode's last call: retry (replaces it; default) or new_call (its own "
                        "turn, for stateless agents that repeat themselves; rollout.harness.resends)")
    s.set_defaults(func=serve)


def load_tool_schemas(path: Path | None) -> dict | None:
    """``--tool-schemas``: the JSON object {tool name: JSON schema object} in ``path`` (None: none).

    Raises:
        ValueError: unreadable, not JSON, or not an object of objects (one line naming the file and the fix).
    """
    if path is None:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--tool-schemas {path}: cannot read it as JSON ({exc}); give a JSON file like "
                         '{"act": {"type": "object", "properties": {...}}}') from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, dict) for k, v in data.items()):
        raise ValueError(f"--tool-schemas {path}: expected an object mapping each tool name to a JSON schema object, "
                         f'e.g. {{"act": {{"type": "object"}}}}; got {type(data).__name__}')
    return data


def check_port(host: str, port: int) -> None:
    """Fail fast, before the model loads, when ``host:port`` cannot be bound.

    Raises:
        ValueError: the address is in use or cannot be bound (one line: which and the fix).
    """
    if port == 0:
        return
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as RecordingProxy.start binds
            sock.bind((host, port))
    except OSError as exc:
        raise ValueError(f"cannot listen on {host}:{port}: {_reason(exc)}; stop the other server or pick another "
                         "--port (0 = a free one)") from None


def _reason(exc: OSError) -> str:
    import errno

    return "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))


#: Seconds the shutdown waits for an episode's call in flight before leaving it unstored.
CLOSE_TIMEOUT_S = 60.0


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event, signals=(signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """While inside, ``signals`` set ``stop`` (instead of KeyboardInterrupt or death), so SIGTERM
    shuts down as cleanly as Ctrl-C. Outside the main thread (no signal handlers there) a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.set()) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(args: argparse.Namespace, *, ready: threading.Event | None = None,
          stop: threading.Event | None = None) -> int:
    """Handler of ``agentrl proxy serve``; blocks until Ctrl-C or SIGTERM (or ``stop`` is
    set), then stores the open episodes as ``aborted``. Returns 0.

    Raises:
        FileNotFoundError / KeyError: unknown or unprepared policy. ValueError: the port
        cannot be bound (in use); a bad ``--tool-schemas`` file.
    """
    from rich.console import Console

    from agentrl.llm.base import SamplingParams
    from agentrl.llm.hf import load_hf_policy
    from agentrl.proxy import RecordingProxy
    from agentrl.store import TurnStore

    check_port(args.host, args.port)
    tool_schemas = load_tool_schemas(getattr(args, "tool_schemas", None))
    console = Console()
    engine, renderer = load_hf_policy(args.policy)
    run_id = args.run or f"proxy-{int(time.time())}"
    stop = stop or threading.Event()
    with TurnStore(args.store) as store, stop_on_signals(stop):
        proxy = RecordingProxy(engine, renderer, sink=store, run_id=run_id, mode=args.mode,
                               admin_token=args.admin_token, sampling=SamplingParams(max_tokens=args.max_tokens),
                               max_batch=args.max_batch, model_name=args.policy,
                               unknown_fields=getattr(args, "unknown_fields", None),
                               while_paused=getattr(args, "while_paused", "hold"),
                               retry_after_s=getattr(args, "retry_after", 1.0), tool_schemas=tool_schemas,
                               force_tools=getattr(args, "force_tools", False),
                               only_tools=getattr(args, "only_tools", None),
                               resends=getattr(args, "resends", "retry"))
        try:
            url = proxy.start(args.host, args.port)
        except OSError as exc:  # lost a race for the port since check_port
            proxy.stop()
            raise ValueError(f"cannot listen on {args.host}:{args.port}: {_reason(exc)}; pick another --port") from None
        console.print(f"recording proxy at [bold]{url}[/] · run {run_id} · store {args.store} · mode {args.mode}\n"
                      f"admin token: {proxy.admin_token}\ncreate episodes: POST {url}/admin/episodes", highlight=False)
        if ready is not None:
            ready.set()
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:  # a SIGINT before the handler was installed
            pass
        finally:
            # a call held by a pause keeps its episode busy, and closing waits for it: admit it
            proxy.core.gate.resume()
            try:
                for s in proxy.list_episodes():
                    if s.status != "open":
                        continue
                    try:
                        proxy.registry.close(s.episode_id, "aborted", "proxy stopped while the episode was open",
                                             timeout_s=CLOSE_TIMEOUT_S)
                    except TimeoutError as exc:  # one stuck call must not lose the other episodes
                        console.print(f"episode {s.episode_id} not stored: {exc}", highlight=False, markup=False)
            finally:
                proxy.stop()
    return 0
