"""The OpenEnv side of ``agentrl/Remote-v0``: OpenEnv's official client (``openenv-core``'s
``GenericEnvClient``, WebSocket ``/ws``; one connection = one server session).

Observation mapping: an agentrl-served env (``agentrl envs serve``) sends ``{text, info,
terminated, truncated}``; any other OpenEnv env sends its own fields, of which the text is
the first string field among ``TEXT_FIELDS`` (else the observation as sorted JSON), the info
its ``info`` dict when it has one, and the admissible actions its ``legal_actions`` /
``available_actions`` when it lists them. OpenEnv has no ``truncated`` flag: ``done`` is
``terminated`` for such envs.
"""

from __future__ import annotations

import json

from agentrl.env.contract import INFO_ADMISSIBLE, require_module

from agentrl_envs.remote.probe import get, http_base, refused
from agentrl_envs.remote.wire import RemoteEnvError, RemoteFault, RemoteReply, ServerInfo, one_line, wire_reward

TEXT_FIELDS = ("text", "prompt", "message", "echoed_message", "output", "response", "content")
ACTION_LIST_FIELDS = (INFO_ADMISSIBLE, "legal_actions", "available_actions", "valid_actions")


def parse_observation(payload_obs: object, reward: float | None, done: bool) -> RemoteReply:
    """A ``RemoteReply`` from an OpenEnv ``StepResult``'s parts (module doc: the mapping)."""
    obs = payload_obs if isinstance(payload_obs, dict) else {"text": str(payload_obs)}
    text = next((obs[k] for k in TEXT_FIELDS if isinstance(obs.get(k), str)), None)
    if text is None:
        text = json.dumps(obs, sort_keys=True, ensure_ascii=False)
    info = dict(obs["info"]) if isinstance(obs.get("info"), dict) else {}
    if INFO_ADMISSIBLE not in info:
        listed = next((obs[k] for k in ACTION_LIST_FIELDS if isinstance(obs.get(k), list)), None)
        if listed is not None:
            info[INFO_ADMISSIBLE] = [str(a) for a in listed]
    terminated = bool(obs["terminated"]) if isinstance(obs.get("terminated"), bool) else bool(done)
    truncated = bool(obs["truncated"]) if isinstance(obs.get("truncated"), bool) else None
    return RemoteReply(text=text, reward=wire_reward(reward), terminated=terminated, truncated=truncated, info=info)


class OpenEnvClient:
    """Episodes of one OpenEnv server, one WebSocket session each.

    Args:
        base_url: the server (``http://host:port``; ``ws://`` works too).
        request_timeout_s: seconds to wait for each reply (keep it below the ``EnvPool``
            step deadline so the env reports the timeout itself).
        connect_timeout_s: seconds for the probe and for opening a session.
        token: sent as ``Authorization: Bearer`` (agentrl servers started with ``--token``).
        action_field: the action's field name (``message`` for agentrl servers).
    Raises:
        RemoteEnvError: bad URL, no server, not an OpenEnv server, token refused.
        MissingExtraError: openenv-core is not installed (``pip install 'agentrl[hubs]'``).
    """

    protocol = "openenv"

    def __init__(self, base_url: str, *, request_timeout_s: float, connect_timeout_s: float,
                 token: str | None = None, action_field: str = "message") -> None:
        self.base_url = http_base(base_url)
        self.action_field = action_field
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        meta = self._probe(connect_timeout_s)
        version = require_module("openenv", "hubs").__version__
        self.server_info = ServerInfo("openenv", f"openenv-core {version}",
                                      f"{meta.get('name', '?')} {meta.get('version') or ''}".strip())
        self._timeouts = (connect_timeout_s, request_timeout_s)
        self._client = None

    def _probe(self, timeout_s: float) -> dict:
        url = f"{self.base_url}/metadata"
        resp = get(url, timeout_s=timeout_s, headers=self._headers)
        refused(resp, url, self.protocol)
        try:
            meta = resp.json()
        except ValueError:
            meta = None
        if not isinstance(meta, dict) or "name" not in meta:
            raise RemoteEnvError(f"{url} did not answer with OpenEnv metadata (a JSON object with 'name'); "
                                 f"is base_url an OpenEnv server?")
        return meta

    def _new_client(self):
        generic = require_module("openenv.core.generic_client", "hubs")
        connect_s, request_s = self._timeouts
        cls = generic.GenericEnvClient
        if self._headers:
            cls = _token_client_class(generic.GenericEnvClient, self._headers)
        return cls(base_url=self.base_url, connect_timeout_s=connect_s, message_timeout_s=request_s).sync()

    def open(self, seed: int | None, data: dict) -> RemoteReply:
        """Close the previous session, open a new one and reset it with ``seed`` and ``data``.

        Raises:
            RemoteFault: the server failed, timed out or answered with an error.
        """
        self.close()
        try:
            self._client = self._new_client()
            self._client.connect()
            result = self._client.reset(**({} if seed is None else {"seed": int(seed)}), **data)
        except Exception as exc:
            self.close(wait=False)
            raise RemoteFault(f"OpenEnv reset at {self.base_url} failed: {one_line(exc)}") from exc
        return parse_observation(result.observation, result.reward, result.done)

    def step(self, action: str) -> RemoteReply:
        """Send ``action`` as ``{action_field: action}``. Raises ``RemoteFault`` on failure."""
        if self._client is None:
            raise RemoteFault("no OpenEnv session is open (the last one failed or was closed)")
        try:
            result = self._client.step({self.action_field: action})
        except Exception as exc:
            self.close(wait=False)
            raise RemoteFault(f"OpenEnv step at {self.base_url} failed: {one_line(exc)}") from exc
        return parse_observation(result.observation, result.reward, result.done)

    def close(self, wait: bool = True) -> None:
        """Close the session (sends OpenEnv's ``close``; best effort, idempotent). ``wait=False``
        closes in a background thread: after a fault, a hung server's close handshake must not
        hold the step past its deadline."""
        client, self._client = self._client, None
        if client is None:
            return
        if wait:
            _quiet_close(client)
        else:
            import threading

            threading.Thread(target=_quiet_close, args=(client,), daemon=True, name="openenv-close").start()


def _quiet_close(client) -> None:
    try:
        client.close()
    except Exception:
        pass


def _token_client_class(base, headers: dict[str, str]):
    """``GenericEnvClient`` whose WebSocket handshake carries ``headers``: the official client
    sends none, so ``connect`` opens the socket itself with the client's own settings."""
    from websockets.asyncio.client import connect as ws_connect

    class _HeaderClient(base):
        async def connect(self):
            if self._ws is None:
                try:
                    self._ws = await ws_connect(self._ws_url, open_timeout=self._connect_timeout,
                                                max_size=self._max_message_size, additional_headers=headers)
                except Exception as exc:
                    raise ConnectionError(f"Failed to connect to {self._ws_url}: {exc}") from exc
            return self

    return _HeaderClient
