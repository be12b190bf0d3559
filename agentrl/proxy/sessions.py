"""Episode sessions: capability keys, the turns recorded so far, rewards, close.

One ``EpisodeSession`` per episode, bound to a random 128-bit key (the ``/e/{key}/v1`` base
URL and the API key). Calls of one episode run one at a time (``acquire`` / ``release``;
a second concurrent request waits its turn, never interleaves). Turns stay in memory
while the episode is open — rewards arrive later and the store is append-only — and the
finished ``Episode`` goes to the sink (e.g. a ``TurnStore``) in one transaction on close.

**A broken episode is never closed ok.** Each call of the episode that the proxy answered with
an error, whose reply the client did not take in full, or whose weights changed while it was
generated is noted on its session (``note_failure``); ``close`` then sets an ``ok`` (or
``aborted``) episode's status to ``aborted`` with the first such cause (``agentrl.failures``: ``model_call_failed``,
``client_disconnected``, ``mixed_versions``), so training excludes it while its turns stay in
the store. A 429 answered while the weights are being updated is not a failure (the harness
is asked to retry).
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from agentrl.failures import tag_cause
from agentrl.llm.base import SamplingParams, turn_seed
from agentrl.proxy.errors import WireError
from agentrl.proxy.tito import ThreadState
from agentrl.types import Episode, EpisodeStatus

_SAMPLING_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}


class EpisodeSink(Protocol):
    """Where closed episodes go; ``agentrl.store.TurnStore`` is one."""

    def add_episodes(self, episodes: Sequence[Episode], *, run_id: str | None = None) -> None: ...


@dataclass(frozen=True)
class EpisodeHandle:
    """What a harness needs to play one episode.

    Attributes:
        episode_id: the episode's id (int).
        key: the capability key (32 hex chars).
        base_url: OpenAI base URL ``http://host:port/e/{key}/v1`` ("" before the server starts).
        api_key: the same key, for harnesses that send it as a bearer token (or ``x-api-key``).
    """

    episode_id: int
    key: str
    base_url: str
    api_key: str

    @property
    def anthropic_base_url(self) -> str:
        """The base URL for Anthropic SDKs (they append ``/v1/messages``): ``http://host:port/e/{key}``."""
        return self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url


@dataclass(frozen=True)
class EpisodeSummary:
    """One row of ``list_episodes``: ``status`` is ``"open"`` or an ``EpisodeStatus`` value;
    ``segments`` and ``forks`` count token segments and history rewrites."""

    episode_id: int
    group_id: int
    env_id: str
    task_id: str
    seed: int
    status: str
    calls: int
    segments: int
    forks: int
    return_: float | None


@dataclass
class EpisodeSession:
    """Mutable state of one open episode (guarded by ``cv``)."""

    key: str
    episode: Episode
    sampling: dict = field(default_factory=dict)
    max_calls: int | None = None
    turn_seeds: int | None = None  # base of per-call seeds (``SessionRegistry.create``)
    threads: dict[bytes, ThreadState] = field(default_factory=dict)
    segment: int | None = None  # segment of the last recorded call
    n_segments: int = 0
    forks: int = 0
    calls: int = 0
    last_call: object = None  # the last delivered PendingCall (an identical resend retries it)
    responses: dict = field(default_factory=dict)  # Responses API: response id -> conversation (previous_response_id)
    episode_reward: float | None = None
    final_return: float | None = None
    closed: bool = False
    busy: bool = False
    failures: list = field(default_factory=list)  # (cause, text) of each failed call, in order
    created_at: float = field(default_factory=time.time)
    cv: threading.Condition = field(default_factory=threading.Condition)

    def acquire(self) -> None:
        """Wait for the episode's previous call to finish and take the episode.

        Raises:
            WireError: 409 when the episode is closed or has used ``max_calls`` calls.
        """
        with self.cv:
            self.cv.wait_for(lambda: not self.busy or self.closed)
            self._admit()

    def _admit(self) -> None:
        """Mark the episode busy (under ``cv``). Raises ``WireError`` 409 (closed / max_calls)."""
        if self.closed:
            raise WireError(409, f"episode {self.episode.episode_id} is closed; ask the trainer for a new episode "
                                 f"key", kind="conflict")
        if self.max_calls is not None and self.calls >= self.max_calls:
            raise WireError(409, f"episode {self.episode.episode_id} reached its max_calls={self.max_calls}",
                            kind="conflict")
        self.busy = True

    def try_acquire(self) -> bool:
        """Take the episode if no call is running (never waits).

        Raises:
            WireError: 409 as ``acquire``.
        """
        with self.cv:
            if self.busy and not self.closed:
                return False
            self._admit()
            return True

    def release(self) -> None:
        """End the current call (wakes the next waiting call or a pending close)."""
        with self.cv:
            self.busy = False
            self.cv.notify_all()

    def note_failure(self, cause: str, text: str) -> None:
        """Note a failed call of this episode (``cause`` from ``agentrl.failures.HARNESS_CAUSES``);
        ``SessionRegistry.close`` then closes it ``aborted`` with the first cause noted."""
        with self.cv:
            self.failures.append((cause, f"call {self.calls}: {text}"))

    def effective(self, sampling: SamplingParams) -> SamplingParams:
        """``sampling`` with this episode's overrides applied; with ``turn_seeds`` (and not greedy) the call
        samples from its own seed ``turn_seed(turn_seeds, episode id, calls so far)`` (``row_seeds`` of one)."""
        s = dataclasses.replace(sampling, **self.sampling) if self.sampling else sampling
        if self.turn_seeds is None or s.greedy:
            return s
        return dataclasses.replace(s, seed=None, row_seeds=(turn_seed(self.turn_seeds, self.episode.episode_id,
                                                                      self.calls),))

    def summary(self) -> EpisodeSummary:
        ep = self.episode
        status = ep.status.value if self.closed else "open"
        return EpisodeSummary(ep.episode_id, ep.group_id, ep.env_id, ep.task_id, ep.seed, status, self.calls,
                              self.n_segments, self.forks, self.final_return)


class SessionRegistry:
    """All episodes of one proxy (thread-safe).

    Args:
        run_id: stamped on episodes and turns.
        sink: receives each closed episode (None: the caller of ``close`` keeps it).
        first_episode_id: id of the first episode created without an explicit id.
    """

    def __init__(self, run_id: str, sink: EpisodeSink | None = None, first_episode_id: int = 0) -> None:
        self.run_id, self.sink = run_id, sink
        self._lock = threading.Lock()
        self._by_key: dict[str, EpisodeSession] = {}
        self._by_id: dict[int, EpisodeSession] = {}
        self._next_id = first_episode_id

    def create(self, *, env_id: str = "", task_id: str = "", seed: int = 0, group_id: int = 0,
               episode_id: int | None = None, sampling: dict | None = None,
               max_calls: int | None = None, turn_seeds: int | None = None) -> EpisodeSession:
        """Open an episode.

        Args:
            sampling: overrides of ``SamplingParams`` fields forced on every call (e.g.
                ``{"temperature": 1.0}``).
            turn_seeds: None (calls sample from the engine's stream, or the request's own ``seed``), or
                a base seed: call ``c`` of the episode (0-based) samples from its own generator seeded with
                ``agentrl.llm.base.turn_seed(turn_seeds, episode_id, c)``, whatever else the engine
                batches with it — a sampled evaluation through a harness repeats for the same base seed
                (``agentrl.eval``). Ignored on greedy calls.
        Raises:
            ValueError: an id already used, an unknown sampling field, or ``max_calls`` < 1.
        """
        bad_keys = set(sampling or {}) - _SAMPLING_FIELDS
        if bad_keys:
            raise ValueError(f"unknown sampling override(s) {sorted(bad_keys)}; valid: {sorted(_SAMPLING_FIELDS)}")
        if max_calls is not None and max_calls < 1:
            raise ValueError(f"max_calls must be >= 1 or None, got {max_calls}")
        SamplingParams(**(sampling or {}))  # range check now, not on the first call
        key = secrets.token_hex(16)
        with self._lock:
            eid = self._next_id if episode_id is None else int(episode_id)
            if eid in self._by_id:
                raise ValueError(f"episode id {eid} is already used by this proxy; pass another id or None")
            self._next_id = max(self._next_id, eid + 1)
            ep = Episode(episode_id=eid, group_id=int(group_id), env_id=env_id, task_id=task_id, seed=int(seed),
                         run_id=self.run_id)
            s = EpisodeSession(key=key, episode=ep, sampling=dict(sampling or {}), max_calls=max_calls,
                               turn_seeds=None if turn_seeds is None else int(turn_seeds))
            self._by_key[key], self._by_id[eid] = s, s
        return s

    def by_key(self, key: str | None) -> EpisodeSession:
        """The session of a capability key. Raises ``WireError`` 401 for an unknown key."""
        s = self._by_key.get(key or "")
        if s is None:
            raise WireError(401, "unknown episode key: use the base URL /e/{key}/v1 (or the API key) that the trainer "
                                 "handed out for this episode", kind="authentication_error")
        return s

    def get(self, episode_id: int) -> EpisodeSession:
        """The session of an episode id. Raises ``KeyError`` naming the known ids."""
        s = self._by_id.get(int(episode_id))
        if s is None:
            raise KeyError(f"no episode {episode_id} in this proxy; known: {sorted(self._by_id)[:20]}")
        return s

    def set_reward(self, episode_id: int, reward: float, *, turn: int | None = None) -> None:
        """Set the reward of turn ``turn`` (its ``t``), or the episode's reward (``turn=None``,
        added to the last completed turn at close; other unscored turns then get 0.0).

        Raises:
            KeyError: unknown episode or turn. ValueError: a non-finite reward or a closed episode.
        """
        reward = float(reward)
        if reward != reward or reward in (float("inf"), float("-inf")):
            raise ValueError(f"reward must be finite, got {reward}")
        s = self.get(episode_id)
        with s.cv:
            if s.closed:
                raise ValueError(f"episode {episode_id} is closed; set rewards before close")
            if turn is None:
                s.episode_reward = reward
                return
            if not 0 <= turn < len(s.episode.turns):
                raise KeyError(f"episode {episode_id} has turns t=0..{len(s.episode.turns) - 1}, not t={turn}")
            s.episode.turns[turn].reward = reward

    def close(self, episode_id: int, status: EpisodeStatus | str = EpisodeStatus.OK, error: str = "", *,
              annotate: Callable[[Episode], None] | None = None, timeout_s: float = 600.0) -> Episode:
        """Close an episode: wait for its call in flight, apply the episode reward, run
        ``annotate`` (e.g. a verifier filling rewards), send it to the sink, return it.

        Raises:
            KeyError: unknown episode. ValueError: already closed or an unknown status.
            TimeoutError: a call was still running after ``timeout_s`` seconds.
        """
        status = EpisodeStatus(status)
        s = self.get(episode_id)
        with s.cv:
            if s.closed:
                raise ValueError(f"episode {episode_id} is already closed")
            if not s.cv.wait_for(lambda: not s.busy, timeout=timeout_s):
                raise TimeoutError(f"episode {episode_id}: a call was still running after {timeout_s} s")
            s.closed = True
            s.cv.notify_all()
        ep = s.episode
        ep.status, ep.error = status, error
        if s.failures and status in (EpisodeStatus.OK, EpisodeStatus.ABORTED):  # the root cause of an abort
            cause, text = s.failures[0]
            ep.status = EpisodeStatus.ABORTED
            ep.error = tag_cause(cause, f"{len(s.failures)} model call(s) of this episode failed, first {text}; the "
                                        "episode is excluded from training (its turns stay in the store)"
                                 + (f"; then: {error}" if error else ""))
        if annotate is not None:
            annotate(ep)
        _apply_episode_reward(ep, s.episode_reward)
        for tr in ep.turns:
            tr.info["episode_forks"] = s.forks
        s.final_return = ep.return_
        s.episode, s.threads = dataclasses.replace(ep, turns=[]), {}  # the proxy keeps only the summary
        s.responses = {}
        if self.sink is not None:
            self.sink.add_episodes([ep], run_id=self.run_id)
        return ep

    def summaries(self) -> list[EpisodeSummary]:
        """Every episode of this proxy, by id."""
        with self._lock:
            sessions = sorted(self._by_id.values(), key=lambda s: s.episode.episode_id)
        return [s.summary() for s in sessions]


def _apply_episode_reward(ep: Episode, reward: float | None) -> None:
    if reward is None:
        return
    scored = [tr for tr in ep.turns if tr.info.get("trainable", True)]
    last = scored[-1] if scored else (ep.turns[-1] if ep.turns else None)
    for tr in ep.turns:
        if tr.reward is None:
            tr.reward = 0.0
    if last is not None:
        last.reward += reward
