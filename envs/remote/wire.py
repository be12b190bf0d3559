"""What every protocol client of ``agentrl/Remote-v0`` hands back, and its errors.

A client (``openenv_client``, ``nemo_gym_client``) turns one server reply into a
``RemoteReply``; ``RemoteEnv`` maps replies onto the TextEnv contract. Configuration and
connection problems found before an episode are ``RemoteEnvError`` (a ``ValueError`` with a
one-line message naming the fix); a transport failure during an episode is ``RemoteFault``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class RemoteEnvError(ValueError):
    """A bad URL, no server, the wrong protocol or a refused token: one line naming the fix."""


class RemoteFault(RuntimeError):
    """The server failed during an episode: it died, timed out, or answered with an error."""


def wire_reward(raw: object) -> float | object:
    """A server's reward as the env returns it: None → 0.0 (no reward sent), a JSON number
    (``int``/``float``, ``NaN``/``Infinity`` included) → float, anything else unchanged — the
    env pools then make that episode ``env_error`` (``agentrl.env.guards``)."""
    if raw is None:
        return 0.0
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        try:
            return float(raw)
        except OverflowError:  # a JSON integer past a float's range: the pool's check names it
            return raw
    return raw


@dataclass
class RemoteReply:
    """One reset/step answer of a remote env.

    Attributes:
        text: the observation text, byte for byte as the server sent it.
        reward: the step reward (0.0 when the server sent none); any other value the server sent
            that is not a JSON number (a string, a bool, a list) stays as it came, so the env
            pool's answer check flags the episode (``reward_not_numeric``) instead of guessing.
        terminated: the episode ended (won or lost).
        truncated: the server's turn limit cut it; None when the protocol has no such flag.
        info: the server's info (JSON values), possibly empty.
    """

    text: str
    reward: float | object = 0.0
    terminated: bool = False
    truncated: bool | None = None
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ServerInfo:
    """Who answered: recorded in every episode's reset info.

    Attributes:
        protocol: ``"openenv"`` or ``"nemo-gym"``.
        protocol_version: the client package and version that spoke it (e.g.
            ``"openenv-core 0.3.0"``) or the wire description we implement.
        server: what the server says about itself (OpenEnv ``/metadata`` name and version),
            or the configured env name.
    """

    protocol: str
    protocol_version: str
    server: str


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of ``exc`` (a timeout with no message says so)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if not text and isinstance(exc, TimeoutError):
        text = "no answer within the request timeout"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
