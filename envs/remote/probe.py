"""Checks of a remote env server before any episode: the URL's form, that something answers,
and that it speaks the protocol asked for. Every failure is one ``RemoteEnvError`` line."""

from __future__ import annotations

from urllib.parse import urlsplit

from agentrl.deadline import DeadlineExceeded, call_with_deadline
from agentrl.env.contract import require_module

from agentrl_envs.remote.wire import RemoteEnvError

SCHEMES = ("http", "https", "ws", "wss")


def http_base(base_url: str) -> str:
    """``base_url`` as an ``http(s)://host:port[/prefix]`` URL without a trailing slash.

    Raises:
        RemoteEnvError: not a URL with a scheme and a host.
    """
    parts = urlsplit(str(base_url).strip())
    if parts.scheme not in SCHEMES or not parts.hostname:
        raise RemoteEnvError(f"base_url {base_url!r} is not a server URL; write it as http://HOST:PORT "
                             f"(e.g. http://127.0.0.1:8000)")
    try:
        parts.port
    except ValueError:
        raise RemoteEnvError(f"base_url {base_url!r} has a bad port; write it as http://HOST:PORT") from None
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return f"{scheme}://{parts.netloc}{parts.path}".rstrip("/")


def get(url: str, *, timeout_s: float, headers: dict[str, str] | None = None):
    """``GET url`` with httpx, the whole answer within ``timeout_s`` seconds (a total deadline,
    ``agentrl.deadline``: a server trickling bytes does not hold the caller); returns the response.

    Raises:
        RemoteEnvError: nothing answers (connection refused, DNS failure, timeout, deadline).
    """
    httpx = require_module("httpx", "hubs")
    client = httpx.Client(timeout=timeout_s, headers=headers or {})
    try:
        return call_with_deadline(lambda: client.get(url), timeout_s, what=f"GET {url}", abandon=client.close)
    except (httpx.TimeoutException, DeadlineExceeded):
        raise RemoteEnvError(f"no answer from {url} within {timeout_s:g}s; is the server up and the URL right?") from None
    except httpx.HTTPError as exc:
        raise RemoteEnvError(f"no server answers at {url} ({type(exc).__name__}: {exc}); start one (e.g. "
                             f"`agentrl envs serve ID --protocol openenv --port PORT`) or fix base_url") from None
    finally:
        client.close()


def refused(resp, url: str, protocol: str) -> None:
    """Raise ``RemoteEnvError`` for a 401/403 (token) or a 404 (another protocol's server)."""
    if resp.status_code in (401, 403):
        raise RemoteEnvError(f"{url} refused the request ({resp.status_code}): the server wants a token; "
                             f"pass token=... (agentrl envs serve --token)")
    if resp.status_code == 404:
        other = "nemo-gym" if protocol == "openenv" else "openenv"
        raise RemoteEnvError(f"{url} answered 404: the server at this URL does not speak {protocol}; "
                             f"check base_url, or set protocol={other!r} if it is a {other} server")
    if resp.status_code >= 400:
        raise RemoteEnvError(f"{url} answered HTTP {resp.status_code}; the server is not ready for {protocol}")
