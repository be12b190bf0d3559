"""The NeMo-Gym side of ``agentrl/Remote-v0``: the step-level ``GymnasiumServer`` wire
(NeMo-Gym ``resources_servers/gymnasium``), spoken with httpx because no NeMo-Gym client
installs on Python 3.11 (``nemo-gym`` needs >= 3.13).

- ``POST /reset`` ``{responses_create_params, ...row fields}`` -> ``{observation: str|null, info}``;
- ``POST /step`` ``{responses_create_params, response, ...row fields}`` -> ``{observation,
  reward, terminated, truncated, info}``; the action travels as a minimal Responses-API object
  (one assistant ``message`` with one ``output_text``);
- the session is the server's cookie: one cookie jar (``httpx.Client``) per episode;
- ``POST /close`` only when the reset info says ``supports_explicit_close``; a step id
  ``_ng_step_request_id`` only when it says ``supports_step_idempotency``.

The first observation is the row's prompt (``responses_create_params.input``: a string, or
messages whose text parts are joined by blank lines) followed by the reset observation when
that is not null. Tool calls are not sent: the action is plain text.
"""

from __future__ import annotations

import time
import uuid

from agentrl.deadline import DeadlineExceeded, call_with_deadline
from agentrl.env.contract import require_module

from agentrl_envs.remote.probe import get, http_base, refused
from agentrl_envs.remote.wire import RemoteFault, RemoteReply, ServerInfo, one_line, wire_reward

WIRE = "nemo-gym GymnasiumServer (reset/step/close, cookie sessions)"


def prompt_text(params: dict) -> str:
    """The text of a row's ``responses_create_params.input`` (str, or messages' text parts)."""
    value = params.get("input", "")
    if isinstance(value, str):
        return value
    parts: list[str] = []
    for msg in value if isinstance(value, list) else []:
        content = msg.get("content", "") if isinstance(msg, dict) else msg
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(c.get("text", "")) for c in content if isinstance(c, dict) and "text" in c)
    return "\n\n".join(p for p in parts if p)


def response_object(text: str, model: str = "agentrl") -> dict:
    """A minimal valid Responses-API ``response`` holding ``text`` as the assistant's output."""
    return {"id": f"resp_{uuid.uuid4().hex}", "created_at": int(time.time()), "model": model, "object": "response",
            "output": [{"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "parallel_tool_calls": False, "tool_choice": "none", "tools": []}


class NemoGymClient:
    """Episodes of one NeMo-Gym ``GymnasiumServer``, one cookie session each.

    Args:
        base_url: the resources server (``http://host:port``).
        env_name: the server's config name (recorded as the server's name).
        request_timeout_s: seconds per request (below the ``EnvPool`` step deadline).
        connect_timeout_s: seconds for the liveness probe and connecting.
        token: optional ``Authorization: Bearer`` header.
    Raises:
        RemoteEnvError: bad URL, no server, not a NeMo-Gym server (``GET /`` not 200).
        MissingExtraError: httpx is not installed.
    """

    protocol = "nemo-gym"

    def __init__(self, base_url: str, *, env_name: str | None, request_timeout_s: float, connect_timeout_s: float,
                 token: str | None = None) -> None:
        self.base_url = http_base(base_url)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        resp = get(f"{self.base_url}/", timeout_s=connect_timeout_s, headers=self._headers)
        refused(resp, f"{self.base_url}/", self.protocol)
        self.server_info = ServerInfo("nemo-gym", WIRE, env_name or self.base_url)
        self._timeouts = (connect_timeout_s, request_timeout_s)
        self._client = None
        self._row: dict = {}
        self._caps: dict = {}

    def _post(self, route: str, body: dict) -> dict:
        httpx = require_module("httpx", "hubs")
        client, url = self._client, f"{self.base_url}/{route}"
        try:  # a total deadline: a server trickling its answer must not outlast request_timeout_s
            resp = call_with_deadline(lambda: client.post(url, json=body), self._timeouts[1], what=f"POST {url}",
                                      abandon=client.close)
        except (httpx.TimeoutException, DeadlineExceeded):
            raise RemoteFault(f"NeMo-Gym /{route} at {self.base_url}: no answer within {self._timeouts[1]:g}s") from None
        except httpx.HTTPError as exc:
            raise RemoteFault(f"NeMo-Gym /{route} at {self.base_url} failed: {one_line(exc)}") from None
        if resp.status_code >= 400:
            raise RemoteFault(f"NeMo-Gym /{route} at {self.base_url} answered HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            data = resp.json()
        except ValueError:
            raise RemoteFault(f"NeMo-Gym /{route} at {self.base_url} answered non-JSON: {resp.text[:200]!r}") from None
        if not isinstance(data, dict):
            raise RemoteFault(f"NeMo-Gym /{route} answered {type(data).__name__}, not a JSON object")
        return data

    def open(self, seed: int | None, row: dict) -> RemoteReply:
        """Close the previous session and reset a new one on dataset ``row``.

        Raises:
            RemoteFault: the server failed, timed out or answered with an error.
        """
        httpx = require_module("httpx", "hubs")
        self.close()
        connect_s, request_s = self._timeouts
        self._client = httpx.Client(timeout=httpx.Timeout(request_s, connect=connect_s), headers=self._headers)
        self._row = dict(row)
        self._row.setdefault("responses_create_params", {"input": []})
        if seed is not None:
            self._row.setdefault("seed", int(seed))
        try:
            data = self._post("reset", self._row)
        except RemoteFault:
            self.close(send=False)
            raise
        info = dict(data.get("info") or {})
        self._caps = {k: bool(info.get(k)) for k in ("supports_explicit_close", "supports_step_idempotency")}
        prompt = prompt_text(self._row["responses_create_params"])
        obs = data.get("observation")
        text = prompt if obs is None else (f"{prompt}\n\n{obs}" if prompt else str(obs))
        info.setdefault("tools", self._row["responses_create_params"].get("tools", []))
        return RemoteReply(text=text, info=info)

    def step(self, action: str) -> RemoteReply:
        """Send ``action`` inside a Responses object. Raises ``RemoteFault`` on failure."""
        if self._client is None:
            raise RemoteFault("no NeMo-Gym session is open (the last one failed or was closed)")
        body = {**self._row, "response": response_object(action)}
        if self._caps.get("supports_step_idempotency"):
            body["_ng_step_request_id"] = uuid.uuid4().hex
        try:
            data = self._post("step", body)
        except RemoteFault:
            self.close(send=False)
            raise
        obs = data.get("observation")
        terminated = bool(data.get("terminated")) or obs is None
        return RemoteReply(text="" if obs is None else str(obs), reward=wire_reward(data.get("reward")),
                           terminated=terminated, truncated=bool(data.get("truncated")) and not terminated,
                           info=dict(data.get("info") or {}))

    def close(self, send: bool = True) -> None:
        """End the session: ``POST /close`` when the server advertised it (best effort,
        idempotent; ``send=False`` after a fault), then drop the cookie jar."""
        client, self._client = self._client, None
        if client is None:
            return
        if send and self._caps.get("supports_explicit_close"):
            try:
                call_with_deadline(lambda: client.post(f"{self.base_url}/close", json=self._row), self._timeouts[1],
                                   what="NeMo-Gym /close", abandon=client.close)
            except Exception:
                pass
        client.close()
