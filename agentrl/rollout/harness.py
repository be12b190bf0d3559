"""Play episodes with an *external* agent program (a harness) through the recording proxy.

The harness is any command. Its environment gets, per episode:

- ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``: the episode's proxy base URL and key — every
  OpenAI SDK picks them up, so each LLM call is recorded as a token-faithful turn;
- ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``: the same endpoint for Anthropic SDKs
  (``/v1/messages``; the base URL without ``/v1``);
- ``AGENTRL_ENV_ID``, ``AGENTRL_ENV_KWARGS`` (JSON), ``AGENTRL_SEED``: the registered env
  and the seed to ``reset`` it with; ``AGENTRL_TASK_ID``: when not empty, the task to play
  (``reset(seed=..., options={"task_id": ...})``: a held-out panel's task, ``agentrl.eval``);
- ``AGENTRL_ACTION_LOG``: a file where the harness appends one JSON line
  ``{"action": "..."}`` per env step, in order.

**Reward comes from the verifier, not from the harness.** After the harness exits, the
trainer side resets its own copy of the env with the same seed and replays the logged
actions; rewards, termination, validity and anchor observations come from that replay, so
a harness can neither invent a reward nor misreport one. Step ``i`` of the replay is
assigned to the ``i``-th completed call (turn) when the counts match (one LLM call per env
step, the common agent loop). Otherwise the replay's return goes to the last turn (other
turns 0.0; ``info["reward_alignment"] = "episode"``).

Statuses (and causes, ``agentrl.failures``): the deadline passed → the process group is
killed, ``timeout`` (``harness_timeout``); the harness exited non-zero → ``aborted``
(``harness_exit``, stderr tail in ``error``); an unreadable action log → ``aborted``
(``bad_action_log``); a model call that failed, was cut off or straddled a weight update →
``aborted`` (``model_call_failed`` / ``client_disconnected`` / ``mixed_versions``, set by the
proxy even when the harness retried and exited 0); the env raised during replay →
``env_error``. Failed episodes keep their recorded turns (unscored), are never scored 0 and
never trained on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from agentrl.config import HarnessConfig
from agentrl.env import validate_id
from agentrl.env.contract import INFO_ANCHOR, INFO_TASK, INFO_VALID, INFO_WON
from agentrl.env.guards import EnvAnswerError, require_good_step
from agentrl.failures import tag_cause
from agentrl.llm.base import LLMClient, SamplingParams
from agentrl.llm.chat import ChatRenderer
from agentrl.proxy import RecordingProxy
from agentrl.types import Episode, EpisodeStatus, Turn


@dataclass(frozen=True)
class HarnessSpec:
    """How to run one harness episode.

    Attributes:
        command: argv of the harness; ``{python}`` is replaced by this interpreter.
        env_id: registered env id the harness plays (and the verifier replays).
        env_kwargs: env constructor kwargs (same on both sides).
        timeout_s: wall-clock deadline per episode in seconds (then killed → ``timeout``).
        cwd: working directory of the harness (default: the current one).
        environ: extra environment variables for the harness.
    Raises:
        ValueError: an empty command or a non-positive timeout.
    """

    command: tuple[str, ...]
    env_id: str
    env_kwargs: dict = field(default_factory=dict)
    timeout_s: float = 300.0
    cwd: str | None = None
    environ: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError("HarnessSpec.command is empty; give the harness argv, e.g. ('{python}', 'agent.py')")
        if not self.timeout_s > 0:
            raise ValueError(f"HarnessSpec.timeout_s must be > 0 seconds, got {self.timeout_s}")
        validate_id(self.env_id)  # KeyError with the closest registered ids

    @classmethod
    def from_config(cls, harness: HarnessConfig, env_id: str, env_kwargs: dict | None = None) -> "HarnessSpec":
        """The spec of a config's ``rollout.harness`` section for ``env_id``."""
        return cls(command=tuple(harness.command), env_id=env_id, env_kwargs=dict(env_kwargs or {}),
                   timeout_s=harness.timeout_s)


@dataclass(frozen=True)
class StepResult:
    """One replayed env step (what the verifier saw)."""

    action: str
    reward: float
    terminated: bool
    truncated: bool
    valid: bool
    won: bool
    anchor_obs: str
    next_anchor_obs: str
    observation: str


def _argv(spec: HarnessSpec) -> list[str]:
    return [sys.executable if a == "{python}" else a for a in spec.command]


def _environ(spec: HarnessSpec, base_url: str, key: str, seed: int, log: Path, task_id: str = "") -> dict[str, str]:
    env = {**os.environ, **{k: str(v) for k, v in spec.environ.items()}}
    root = base_url[:-3] if base_url.endswith("/v1") else base_url  # Anthropic SDKs append /v1/messages
    env.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY=key, ANTHROPIC_BASE_URL=root, ANTHROPIC_API_KEY=key,
               AGENTRL_ENV_ID=spec.env_id, AGENTRL_SEED=str(seed),
               AGENTRL_ENV_KWARGS=json.dumps(spec.env_kwargs), AGENTRL_ACTION_LOG=str(log), AGENTRL_TASK_ID=task_id)
    return env


def read_action_log(path: Path) -> list[str]:
    """Actions of an action log (JSON lines ``{"action": str}``; a missing file is empty).

    Raises:
        ValueError: a line that is not such an object (names the line number).
    """
    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not JSON ({exc}); write one {{\"action\": ...}} object per line") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("action"), str):
            raise ValueError(f"{path}:{n}: expected {{\"action\": \"...\"}}, got {line[:80]!r}")
        out.append(obj["action"])
    return out


def replay(env_id: str, env_kwargs: dict, seed: int, actions: Sequence[str],
           task_id: str = "") -> tuple[str, list[StepResult]]:
    """Reset ``env_id`` with ``seed`` (and ``options={"task_id": task_id}`` when given) and step
    through ``actions`` (stops at the end of the episode; later actions are ignored). Returns
    ``(task_id, steps)``. Env exceptions propagate; an answer that breaks the contract raises
    ``agentrl.env.guards.EnvAnswerError``."""
    from agentrl.env import make

    env = make(env_id, **env_kwargs)
    try:
        obs, info = env.reset(seed=seed, options={INFO_TASK: task_id} if task_id else None)
        anchor, task, steps = str(info.get(INFO_ANCHOR, obs)), str(info.get(INFO_TASK, "")), []
        for a in actions:
            obs, r, term, trunc, info = env.step(a)
            r = require_good_step(env, obs, r)
            nxt = str(info.get(INFO_ANCHOR, obs))
            steps.append(StepResult(a, float(r), bool(term), bool(trunc), bool(info.get(INFO_VALID, True)),
                                    bool(info.get(INFO_WON, False)), anchor, nxt, obs))
            anchor = nxt
            if term or trunc:
                break
        return task, steps
    finally:
        env.close()


def apply_steps(ep: Episode, steps: Sequence[StepResult], n_actions: int) -> None:
    """Write the replayed steps onto the episode's completed turns (see module docstring)."""
    live = [t for t in ep.turns if t.info.get("trainable", True)]
    for t in ep.turns:
        t.reward = 0.0
        t.info["env_steps"] = len(steps)
        if n_actions > len(steps):
            t.info["ignored_actions"] = n_actions - len(steps)
    if not live:
        return
    done = bool(steps) and (steps[-1].terminated or steps[-1].truncated)
    if len(live) == len(steps):
        for t, s in zip(live, steps):
            _fill(t, s)
            t.info["reward_alignment"] = "turn"
    else:
        last = live[-1]
        last.reward = float(sum(s.reward for s in steps))
        if steps:
            s = steps[-1]
            last.terminated, last.truncated, last.next_anchor_obs = s.terminated, s.truncated, s.next_anchor_obs
            last.info["won"] = s.won
        for t in live:
            t.info["reward_alignment"] = "episode"
    if not done:
        live[-1].truncated = True
        live[-1].info["cut"] = "harness_ended"


def _fill(t: Turn, s: StepResult) -> None:
    t.reward, t.terminated, t.truncated = s.reward, s.terminated, s.truncated
    t.action, t.action_valid = s.action, s.valid
    t.anchor_obs, t.next_anchor_obs = s.anchor_obs, s.next_anchor_obs
    t.info["won"] = s.won


def run_harness(proxy: RecordingProxy, spec: HarnessSpec, *, seed: int, group_id: int = 0,
                episode_id: int | None = None, sampling: dict | None = None, task_id: str = "",
                turn_seeds: int | None = None) -> Episode:
    """Run one harness episode through ``proxy`` (which must be serving) and verify it.

    Args:
        sampling: ``SamplingParams`` fields forced on every call of the episode.
        turn_seeds: a base seed: each sampled call draws from its own seed (``SessionRegistry.create``).
        task_id: the task to play (``AGENTRL_TASK_ID``; "" = the one ``seed`` draws).
    Returns:
        The closed ``Episode`` (also sent to the proxy's sink, if any).
    Raises:
        RuntimeError: the proxy is not serving.
    """
    if not proxy.url:
        raise RuntimeError("the proxy is not serving; call proxy.start() (or use proxy.serve()) first")
    h = proxy.create_episode(env_id=spec.env_id, task_id=task_id, seed=seed, group_id=group_id,
                             episode_id=episode_id, sampling=sampling, turn_seeds=turn_seeds)
    with tempfile.TemporaryDirectory(prefix="agentrl-harness-") as tmp:
        log = Path(tmp) / "actions.jsonl"
        status, error = _run_process(spec, _environ(spec, h.base_url, h.key, seed, log, task_id))
        actions: list[str] = []
        if status == EpisodeStatus.OK:
            try:
                actions = read_action_log(log)
            except ValueError as exc:
                status, error = EpisodeStatus.ABORTED, tag_cause("bad_action_log", f"bad action log: {exc}")
    return proxy.close_episode(h.episode_id, status, error, annotate=lambda ep: _verify(ep, spec, seed, actions, task_id))


def _run_process(spec: HarnessSpec, environ: dict[str, str]) -> tuple[EpisodeStatus, str]:
    proc = subprocess.Popen(_argv(spec), env=environ, cwd=spec.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=spec.timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return EpisodeStatus.TIMEOUT, tag_cause("harness_timeout", f"harness passed its deadline of {spec.timeout_s:g} s "
                                                                   "and was killed")
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip()[-800:]
        return EpisodeStatus.ABORTED, tag_cause("harness_exit", f"harness exited with code {proc.returncode}: {tail}")
    return EpisodeStatus.OK, ""


def collect_harness_episodes(engine: LLMClient, renderer: ChatRenderer, spec: HarnessSpec, *, n_groups: int,
                             group_size: int = 1, seed: int = 0, run_id: str = "",
                             sampling: SamplingParams | None = None, max_parallel: int = 8,
                             mode: str = "tito", tasks: Sequence[tuple[str, int]] | None = None,
                             tool_schemas: dict | None = None, force_tools: bool = False,
                             resends: str = "retry", turn_seeds: bool = False,
                             only_tools: tuple[str, ...] | None = None) -> list[Episode]:
    """Play ``n_groups × group_size`` harness episodes through a fresh recording proxy.

    Group ``g`` plays env seed ``seed + g`` in all its episodes; episode ids are
    ``g * group_size + j`` and group ids ``g`` (as ``agentrl.rollout.collector.collect``).
    ``sampling`` gives the defaults for parameters a harness leaves out, and its
    ``temperature`` / ``top_p`` are forced on every call (on-policy samples; its seed is not
    used, so group members differ) — unless ``turn_seeds``: then every sampled call of episode ``e``
    draws from its own seed ``turn_seed(sampling.seed, e, call index)``, whatever the batch (a
    sampled held-out evaluation repeats for the same seed; ``agentrl.eval``). ``tasks``:
    ``(task_id, seed)`` per group instead (a held-out panel; ``n_groups`` must equal its length).
    ``tool_schemas`` / ``force_tools`` / ``only_tools``: the proxy's
    decoding constraints on tool calls; ``resends``: how it reads an exact resend (``RecordingProxy``). Returns the episodes in id order;
    the caller writes the store.

    Raises:
        ValueError: non-positive counts, ``tasks`` of another length than ``n_groups``, or ``turn_seeds``
            without ``sampling.seed``.
    """
    if n_groups < 1 or group_size < 1 or max_parallel < 1:
        raise ValueError(f"n_groups, group_size and max_parallel must be >= 1, got {n_groups}, {group_size}, "
                         f"{max_parallel}")
    if tasks is not None and len(tasks) != n_groups:
        raise ValueError(f"tasks lists {len(tasks)} (task_id, seed) pairs for n_groups={n_groups}; give one per group")
    base = sampling or SamplingParams()
    if turn_seeds and base.seed is None:
        raise ValueError("turn_seeds needs a sampling seed (SamplingParams.seed), the base of every call's seed")
    force = {"temperature": base.temperature, "top_p": base.top_p, "greedy": base.greedy}
    proxy = RecordingProxy(engine, renderer, run_id=run_id, mode=mode, max_batch=max_parallel,
                           tool_schemas=tool_schemas, force_tools=force_tools, resends=resends, only_tools=only_tools,
                           sampling=SamplingParams(temperature=base.temperature, top_p=base.top_p,
                                                   max_tokens=base.max_tokens, stop_token_ids=base.stop_token_ids))
    jobs = [(g, j) for g in range(n_groups) for j in range(group_size)]

    def one(job: tuple[int, int]) -> Episode:
        g, j = job
        task_id, s = ("", seed + g) if tasks is None else (str(tasks[g][0]), int(tasks[g][1]))
        return run_harness(proxy, spec, seed=s, group_id=g, episode_id=g * group_size + j, sampling=force,
                           task_id=task_id, turn_seeds=base.seed if turn_seeds else None)

    with proxy.serve(), ThreadPoolExecutor(max_workers=max_parallel) as pool:
        episodes = list(pool.map(one, jobs))
    return sorted(episodes, key=lambda e: e.episode_id)


def _verify(ep: Episode, spec: HarnessSpec, seed: int, actions: list[str], task_id: str = "") -> None:
    if ep.status != EpisodeStatus.OK:
        return
    try:
        ep.task_id, steps = replay(spec.env_id, spec.env_kwargs, seed, actions, task_id)
    except EnvAnswerError as exc:  # a reward that is not a finite number, an observation that is not text
        ep.status, ep.error = EpisodeStatus.ENV_ERROR, tag_cause(exc.cause, f"verifier replay failed: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - any env failure fails the episode, stored and shown
        ep.status, ep.error = EpisodeStatus.ENV_ERROR, f"verifier replay failed: {type(exc).__name__}: {exc}"
        return
    apply_steps(ep, steps, len(actions))
