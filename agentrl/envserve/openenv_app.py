"""An agentrl env id as an OpenEnv server, built with OpenEnv's own server (``openenv-core``).

``build_openenv_app`` hands OpenEnv's ``create_fastapi_app`` a factory of ``AgentrlEnvironment``
(an OpenEnv ``Environment``) whose ``reset``/``step`` go to a ``PoolHub`` slot, so the wire
format (WebSocket ``/ws``; ``/health``, ``/schema``, ``/metadata``; one-shot ``POST /reset``,
``/step``) is exactly what OpenEnv clients speak. What maps to what:

- action: ``{"message": str}`` — the action text, sent to ``env.step`` byte for byte;
- observation: ``{"text", "info", "terminated", "truncated"}`` plus OpenEnv's top-level
  ``reward`` and ``done`` (= terminated or truncated). OpenEnv drops an observation's
  ``metadata`` and has no ``truncated`` flag, so both travel as observation fields; ``info``
  is the env's info made JSON-safe (``anchor_obs``, ``admissible_actions``, ``won``,
  ``walkthrough``, ``env_error``, ...).
- reset data: ``seed`` (int), ``task_id`` (str, becomes ``options["task_id"]``),
  ``options`` (dict), ``episode_id`` (kept in the state);
- an env failure (the pool's ``EnvResult.error``: raised, hung past the deadline, worker
  died) is an ``EXECUTION_ERROR`` reply; the session must reset before stepping again.
- OpenEnv's one-shot ``POST /step`` builds a fresh env for the one call, which has no episode
  to step: it is refused with 409 and a line naming the WebSocket session (``NoOneShotStep``)
  instead of a 500 with a traceback. One-shot ``POST /reset`` works (and frees its slot).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from agentrl.env.contract import require_module
from agentrl.envserve.dispatch import PoolHub

#: the version of the mapping above (bump when the observation/action fields change).
WIRE_VERSION = "agentrl-openenv-1"

_types = require_module("openenv.core.env_server.types", "hubs")
_interfaces = require_module("openenv.core.env_server.interfaces", "hubs")


class AgentrlAction(_types.Action):
    """One action: the text the agent wrote."""

    message: str


class AgentrlObservation(_types.Observation):
    """One observation of an agentrl text env (``done``/``reward`` are OpenEnv's fields)."""

    text: str = ""
    info: dict[str, Any] = {}
    terminated: bool = False
    truncated: bool = False


class AgentrlState(_types.State):
    """The session's state: OpenEnv's ``episode_id``/``step_count`` and the served id."""

    env_id: str = ""
    task_id: str | None = None


def jsonable(value: Any) -> Any:
    """``value`` with NumPy scalars/arrays, tuples and sets turned into JSON types; anything
    else that JSON cannot hold becomes its ``str``."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return jsonable(value.tolist())
    return str(value)


class AgentrlEnvironment(_interfaces.Environment):
    """One OpenEnv session: leases a ``PoolHub`` slot at its first reset, frees it on close.

    Raises (turned into OpenEnv error replies by the server): ``RuntimeError`` when the env
    failed (``EXECUTION_ERROR``), ``HubCapacityError`` when no slot is free,
    ``ValueError`` for a step before any reset, and for any call after ``close``: OpenEnv's
    idle-session reaper closes the session but leaves its WebSocket open, and a reset there must
    not lease a slot that nothing would release (every lease is released exactly once).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, hub: PoolHub, description: str) -> None:
        super().__init__()
        self._hub, self._description = hub, description
        self._slot: int | None = None
        self._state = AgentrlState(env_id=hub.env_id)
        self._live = self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("this session was closed (idle for longer than the server's session timeout, or "
                             "shut down); open a new session")

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              options: dict | None = None, **kwargs: Any) -> AgentrlObservation:
        """Start an episode on this session's slot (``seed`` picks the task)."""
        self._check_open()
        if self._slot is None:
            self._slot = self._hub.lease()
        opts = dict(options or {})
        if task_id is not None:
            opts["task_id"] = str(task_id)
        res = self._hub.reset(self._slot, None if seed is None else int(seed), opts or None)
        self._live = res.error is None
        if res.error is not None:
            raise RuntimeError(f"{self._hub.env_id} reset failed: {res.error.strip().splitlines()[0]}")
        self._state = AgentrlState(episode_id=episode_id or str(uuid.uuid4()), step_count=0,
                                   env_id=self._hub.env_id, task_id=res.info.get("task_id"))
        return self._observation(res)

    def step(self, action: AgentrlAction, timeout_s: float | None = None, **kwargs: Any) -> AgentrlObservation:
        """Play ``action.message`` (``timeout_s`` is ignored: the pool's deadline applies)."""
        self._check_open()
        if self._slot is None or not self._live:
            raise ValueError("no episode is running in this session: send a reset first")
        res = self._hub.step(self._slot, action.message)
        if res.error is not None:
            self._live = False
            raise RuntimeError(f"{self._hub.env_id} step failed: {res.error.strip().splitlines()[0]}")
        self._state.step_count += 1
        if res.terminated or res.truncated:
            self._live = False
        return self._observation(res)

    @staticmethod
    def _observation(res) -> AgentrlObservation:
        return AgentrlObservation(text=res.obs, info=jsonable(dict(res.info)), terminated=bool(res.terminated),
                                  truncated=bool(res.truncated), reward=float(res.reward),
                                  done=bool(res.terminated or res.truncated))

    @property
    def state(self) -> AgentrlState:
        """``episode_id``, ``step_count``, the env id and the task played."""
        return self._state

    def get_metadata(self):
        """OpenEnv ``EnvironmentMetadata``: name = the env id, version = ``WIRE_VERSION``."""
        import agentrl

        return _types.EnvironmentMetadata(
            name=self._hub.env_id, version=WIRE_VERSION, author=f"agentrl {agentrl.__version__}",
            description=self._description,
            readme_content=json.dumps({"wire": WIRE_VERSION, "action": {"message": "str"},
                                       "observation": ["text", "info", "terminated", "truncated"]}))

    def close(self) -> None:
        """Free the slot and end the session for good (idempotent)."""
        self._closed = True
        if self._slot is not None:
            self._hub.release(self._slot)
            self._slot = None
        self._live = False


def build_openenv_app(hub: PoolHub, *, session_timeout_s: float | None = 600.0, token: str | None = None):
    """The FastAPI app serving ``hub``'s env over OpenEnv (at most ``hub.slots`` sessions).

    Args:
        hub: the slots to serve.
        session_timeout_s: idle seconds after which OpenEnv's reaper closes a session and frees
            its slot (None: never; a dropped client then holds its slot until the server stops).
        token: when set, every request but ``GET /health`` must carry
            ``Authorization: Bearer <token>`` (or ``X-Agentrl-Token``); others get 401/403.
    Raises:
        MissingExtraError: openenv-core is not installed (``pip install 'agentrl[hubs]'``).
    """
    http_server = require_module("openenv.core.env_server.http_server", "hubs")
    description = (f"agentrl env {hub.env_id} served over OpenEnv ({WIRE_VERSION}): action {{message: str}}; "
                   f"observation {{text, info, terminated, truncated}}")

    def agentrl_env_factory() -> AgentrlEnvironment:
        return AgentrlEnvironment(hub, description)

    config = _types.ConcurrencyConfig(max_concurrent_envs=hub.slots, session_timeout=session_timeout_s)
    app = http_server.create_fastapi_app(agentrl_env_factory, AgentrlAction, AgentrlObservation,
                                         concurrency_config=config)
    app.add_middleware(QuietDisconnect)
    app.add_middleware(NoOneShotStep)
    if token:
        from agentrl.envserve.auth import TokenGate

        app.add_middleware(TokenGate, token=token)
    return app


class NoOneShotStep:
    """ASGI middleware: ``POST /step`` over plain HTTP answers 409 — a one-shot env has no
    running episode, an agentrl env is played over a WebSocket session (``/ws``)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path") == "/step":
            from agentrl.envserve.auth import json_reply

            return await json_reply(send, 409, "POST /step has no episode to step: a one-shot request gets a fresh env. "
                                               "Play over a WebSocket session (/ws; OpenEnv's client, or "
                                               "agentrl/Remote-v0)")
        return await self.app(scope, receive, send)


class QuietDisconnect:
    """ASGI middleware: a WebSocket whose client already left raises ``WebSocketDisconnect``
    when OpenEnv's handler closes it in its ``finally``; that is a normal end of session, not
    an error worth a traceback in the server log."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            pass
