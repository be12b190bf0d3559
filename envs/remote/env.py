"""``agentrl/Remote-v0``: an env served by another process (OpenEnv or NeMo-Gym) played
through the TextEnv contract (docs/envs.md "Env hubs").

- ``reset`` closes the previous remote session, opens a new one and resets it: OpenEnv with
  ``seed`` (and ``task_id`` from ``options``, and the task row when ``tasks`` are given);
  NeMo-Gym with the row ``tasks[seed % len(tasks)]`` (or ``options["task_id"]``'s row).
- observations come back byte for byte; ``info`` is the server's info plus the contract's
  defaults: ``anchor_obs`` (the text), ``action_valid`` (True), ``won`` — the server's when
  it says, else inferred as ``terminated and reward > 0``, and ``won_source`` says which;
  ``remote_protocol``, ``remote_protocol_version``, ``remote_server`` record who answered.
- ``truncated``: the server's flag; OpenEnv has none for third-party envs, so ``max_turns``
  (when set) truncates locally.
- a transport failure or error reply during ``step`` ends the episode with
  ``info["env_error"]`` (the episode is ``env_error``, never scored); one during ``reset``
  raises ``RuntimeError`` (the pool reports it as an env error).
- every request waits at most ``request_timeout_s`` (default 20 s, below ``EnvPool``'s 30 s
  step deadline: keep it so, and the env reports a slow server itself instead of being killed).
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium

from agentrl.env import INFO_ANCHOR, INFO_TASK, INFO_VALID, INFO_WON, text_spaces
from agentrl.env.contract import INFO_ENV_ERROR, META_REMOTE

from agentrl_envs.remote.wire import RemoteEnvError, RemoteFault, RemoteReply

PROTOCOLS = ("openenv", "nemo-gym")
WON_FROM_SERVER = "server"
WON_INFERRED = "inferred: terminated and reward > 0"


def _protocol(name: str) -> str:
    p = str(name).strip().lower().replace("_", "-")
    if p not in PROTOCOLS:
        raise RemoteEnvError(f"unknown protocol {name!r}; use one of {', '.join(PROTOCOLS)}")
    return p


def load_tasks(tasks) -> list[dict]:
    """Task rows from a JSONL path or a list of dicts ([] for None).

    Raises:
        RemoteEnvError: a missing file, a line that is not a JSON object, or a non-dict row.
    """
    if tasks is None:
        return []
    if isinstance(tasks, (str, Path)):
        path = Path(tasks)
        if not path.is_file():
            raise RemoteEnvError(f"tasks file {str(path)!r} does not exist; pass a JSONL file of rows or a list of dicts")
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise RemoteEnvError(f"{path}:{n} is not JSON ({exc.msg}); each line must be one JSON object") from None
        tasks = rows
    rows = list(tasks)
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise RemoteEnvError(f"task row {bad} is a {type(rows[bad]).__name__}, not a JSON object (dict)")
    return [dict(r) for r in rows]


class RemoteEnv(gymnasium.Env):
    """A remote env as a TextEnv (module doc: what maps to what).

    Args:
        base_url: the server, ``http://HOST:PORT``.
        protocol: ``"openenv"`` or ``"nemo-gym"``.
        env_name: the server's env / config name (recorded; NeMo-Gym has no metadata route).
        tasks: rows (list of dicts) or a JSONL path; required for NeMo-Gym (rows carry
            ``responses_create_params`` with the prompt); for OpenEnv merged into reset data.
        reset_kwargs: fields merged into every reset (OpenEnv data / NeMo-Gym row).
        action_field: OpenEnv action field (``message`` for agentrl servers).
        request_timeout_s: seconds per request (> 0).
        connect_timeout_s: seconds for probing and connecting (> 0).
        max_turns: local turn limit for servers without a truncated flag (None: none).
        token: optional bearer token.
    Raises:
        RemoteEnvError (a ValueError, one line): bad protocol, URL, tasks or timeouts; no
            server; the wrong protocol's server; a refused token.
        MissingExtraError: the protocol's client is not installed (``agentrl[hubs]``).
    """

    metadata = {"render_modes": [], "agentrl.action_normalize": "exact", META_REMOTE: True}

    def __init__(self, base_url: str, protocol: str = "openenv", env_name: str | None = None, tasks=None,
                 reset_kwargs: dict | None = None, action_field: str = "message", request_timeout_s: float = 20.0,
                 connect_timeout_s: float = 10.0, max_turns: int | None = None, token: str | None = None) -> None:
        self.observation_space, self.action_space = text_spaces()
        self.protocol = _protocol(protocol)
        if request_timeout_s <= 0 or connect_timeout_s <= 0:
            raise RemoteEnvError("request_timeout_s and connect_timeout_s must be > 0 seconds")
        self.tasks = load_tasks(tasks)
        if self.protocol == "nemo-gym" and not self.tasks:
            raise RemoteEnvError("protocol 'nemo-gym' needs tasks=: dataset rows (JSONL path or list of dicts) with "
                                 "responses_create_params; the server has no prompt of its own")
        self.reset_kwargs = dict(reset_kwargs or {})
        self.max_turns = max_turns
        if self.protocol == "openenv":
            from agentrl_envs.remote.openenv_client import OpenEnvClient

            self.client = OpenEnvClient(base_url, request_timeout_s=request_timeout_s,
                                        connect_timeout_s=connect_timeout_s, token=token, action_field=action_field)
        else:
            from agentrl_envs.remote.nemo_gym_client import NemoGymClient

            self.client = NemoGymClient(base_url, env_name=env_name, request_timeout_s=request_timeout_s,
                                        connect_timeout_s=connect_timeout_s, token=token)
        self._turns = 0
        self._live = False

    @classmethod
    def check_data(cls, **kwargs) -> None:
        """Pre-flight (``agentrl.env.preflight``): build the client, which probes the server.
        Raises ``RemoteEnvError`` (one line) when it cannot be played."""
        env = cls(**kwargs)
        env.close()

    # ------------------------------------------------------------------ episodes
    def _row(self, seed: int | None, options: dict) -> tuple[dict, str | None]:
        """The task row for this reset and its task id (None: let the server say)."""
        if not self.tasks:
            return {}, options.get("task_id")
        if "task_id" in options:
            tid = str(options["task_id"])
            for i, row in enumerate(self.tasks):
                if str(row.get("task_id", i)) == tid:
                    return row, tid
            raise ValueError(f"task_id {tid!r} is not in the {len(self.tasks)} task rows of this env")
        i = (seed or 0) % len(self.tasks)
        return self.tasks[i], str(self.tasks[i].get("task_id", i))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Close the last session, open one, reset it. Raises ``RuntimeError`` when the server fails."""
        super().reset(seed=seed)
        opts = dict(options or {})
        row, task_id = self._row(seed, opts)
        try:
            if self.protocol == "openenv":
                data = {**row, **self.reset_kwargs, **({"task_id": task_id} if task_id is not None else {})}
                reply = self.client.open(seed, data)
            else:
                reply = self.client.open(seed, {**row, **self.reset_kwargs})
        except RemoteFault as exc:
            raise RuntimeError(str(exc)) from None
        self._turns, self._live = 0, True
        info = self._info(reply, reset=True)
        if self.tasks:  # the row is the task (so options["task_id"] replays it); keep the server's id too
            if INFO_TASK in info and str(info[INFO_TASK]) != task_id:
                info["remote_task_id"] = info[INFO_TASK]
            info[INFO_TASK] = task_id
        info.setdefault(INFO_TASK, task_id if task_id is not None else str(seed))
        info[INFO_TASK] = str(info[INFO_TASK])
        return reply.text, info

    def step(self, action: str):
        """Send ``action`` byte for byte. A server failure ends the episode with ``env_error``."""
        if not self._live:
            raise RuntimeError("step() before reset() (or after the episode ended): call reset() first")
        self._turns += 1
        try:
            reply = self.client.step(action)
        except RemoteFault as exc:
            self._live = False
            info = {INFO_ANCHOR: "", INFO_WON: False, INFO_VALID: True, INFO_ENV_ERROR: str(exc),
                    **self._provenance()}
            return "", 0.0, True, False, info
        terminated = reply.terminated
        truncated = bool(reply.truncated) and not terminated
        if reply.truncated is None and self.max_turns is not None and not terminated:
            truncated = self._turns >= self.max_turns
        if terminated or truncated:
            self._live = False
        return reply.text, reply.reward, terminated, truncated, self._info(reply, terminated=terminated)

    def _provenance(self) -> dict:
        s = self.client.server_info
        return {"remote_protocol": s.protocol, "remote_protocol_version": s.protocol_version, "remote_server": s.server}

    def _info(self, reply: RemoteReply, *, reset: bool = False, terminated: bool = False) -> dict:
        info = dict(reply.info)
        info.setdefault(INFO_ANCHOR, reply.text)
        if INFO_WON in info:
            info[INFO_WON], info["won_source"] = bool(info[INFO_WON]), WON_FROM_SERVER
        else:
            info[INFO_WON] = bool(not reset and terminated and isinstance(reply.reward, float) and reply.reward > 0)
            info["won_source"] = WON_INFERRED
        if not reset:
            info.setdefault(INFO_VALID, True)
        info.update(self._provenance())
        return info

    def close(self) -> None:
        """Close the remote session (idempotent)."""
        self._live = False
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
