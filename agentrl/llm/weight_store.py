"""The weight group's rendezvous store, bound where the run needs it and keyed by a per-run
secret (issue 52, defect 1).

``torch.distributed``'s ``TCPStore`` has no authorization (PyTorch's security notes: its stores
are for trusted networks) and, given a host name, still listens on every interface. Here:

- **Bound**: the store's server listens on a socket this module binds to the one address the
  engines dial (``127.0.0.1`` when every engine is on the trainer's host; the configured
  ``rollout.placement.broadcast_host`` or the node IP otherwise) and hands to ``TCPStore`` as
  ``master_listen_fd`` — a host on another interface cannot connect at all.
- **Keyed**: every key of the group (the control messages and gloo's rendezvous) lives under
  ``agentrl-weights/<secret>/`` (``torch.distributed.PrefixStore``), the secret a random 128-bit
  token made per run (``new_secret``) and handed to the engines inside their spawn arguments
  (a pipe) or Ray actor arguments, never on a command line or in the run folder.
- **Signed**: a store lets anyone who connects list its keys (``TCPStore.list_keys``), so a
  prefix alone hides nothing from a process that can reach it. Each control message (a version,
  ``rejoin``, ``close``) therefore carries an HMAC-SHA256 (the standard library's ``hmac``)
  of the store's port, its sequence number and the message under the secret; a receiver acts
  only on messages that verify and refuses versions lower than the one it holds, so a process
  without the secret can neither make an engine stage its tensors as a version nor move it to
  a foreign group. It can still disturb the group (overwrite keys, stall a push): on a network
  others reach, firewall the port range (``docs/scaling.md``, threat model).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import secrets
import socket
from datetime import timedelta

import torch.distributed as dist

__all__ = ["new_secret", "is_loopback", "serve_store", "scoped", "sign", "verify", "PREFIX"]

PREFIX = "agentrl-weights"  #: the group's keys: ``agentrl-weights/<secret>/...``


def new_secret() -> str:
    """A fresh per-run secret: 32 hex characters (128 random bits, ``secrets.token_hex``)."""
    return secrets.token_hex(16)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IPs (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: any free one), listening.

    Raises:
        OSError: the port is in use, or ``host`` is not an address of this machine.
    """
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.bind(addr)
        sock.listen(512)
    except OSError:
        sock.close()
        raise
    return sock


def serve_store(host: str, ports: tuple[int, int] | None, timeout_s: float) -> dist.TCPStore:
    """A ``TCPStore`` server listening on ``host`` only, on the first free port of ``ports``
    (inclusive; None: any free port). The store owns the listening socket (it closes it when
    the store is released).

    Raises:
        RuntimeError: no port of the range is free (names the config key to widen).
        OSError: ``host`` is not an address of this machine.
    """
    first, last = ports or (0, 0)
    error: OSError | None = None
    for port in range(first, last + 1):
        try:
            sock = _listen(host, port)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:  # in use: try the next port
                raise
            error = exc
            continue
        bound = int(sock.getsockname()[1])
        fd = sock.detach()  # the store's from here on
        try:
            return dist.TCPStore(host, bound, None, True, timedelta(seconds=timeout_s), wait_for_workers=False,
                                 master_listen_fd=fd)
        except Exception:
            socket.close(fd)
            raise
    raise RuntimeError(f"no free port for the weight store in {first}-{last} ({error}); widen "
                       "rollout.placement.broadcast_ports (an engine restart opens a new store)")


def scoped(store: dist.Store, secret: str) -> dist.PrefixStore:
    """``store`` seen under ``agentrl-weights/<secret>/`` (the group's keys and gloo's rendezvous)."""
    return dist.PrefixStore(f"{PREFIX}/{secret}", store)


def _mac(secret: str, port: int, seq: int, message: str) -> str:
    return hmac.new(secret.encode(), f"{port}:{seq}:{message}".encode(), hashlib.sha256).hexdigest()


def sign(secret: str, port: int, seq: int, message: str) -> str:
    """The stored value of control message ``message`` (``"<version>"``, ``"rejoin host:port"``,
    ``"close"``) at sequence number ``seq`` of the store on ``port``: ``"<message>|<hmac hex>"``."""
    return f"{message}|{_mac(secret, port, seq, message)}"


def verify(secret: str, port: int, seq: int, value: str) -> str | None:
    """The message of a stored ``value`` when its HMAC verifies for (``port``, ``seq``), else
    None (a value written without the secret, or replayed from another place)."""
    message, sep, tag = value.rpartition("|")
    if not sep or not hmac.compare_digest(tag, _mac(secret, port, seq, message)):
        return None
    return message
