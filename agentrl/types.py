"""Data contracts shared by every layer: Message, Turn, Episode, TurnTable.

Vocabulary (DESIGN.md): a *group* is all rollouts of one task instance (verl's uid), an
*episode* is one rollout (trajectory), a *turn* is one agent decision (step).

This module is layer L0: it imports only NumPy and the standard library.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Mapping, Sequence

import numpy as np

from agentrl.failures import failure_cause
from agentrl.turn_info import (  # noqa: F401  (re-exported: the contracts' public names)
    INVALID_ACTION_KEY, NO_SUBGOAL, info_columns, intern_strings, normalize_action_key)

#: Version of the on-disk store schema and of these contracts. Bump on any change to the
#: stored columns; the store refuses to open a file written with another version.
SCHEMA_VERSION = 1



class EpisodeStatus(str, Enum):
    """Outcome of running an episode. Only ``ok`` episodes enter group statistics.

    ``env_error``: the env raised, hung or its worker died; ``timeout``: the episode
    deadline passed; ``aborted``: stopped by the caller (e.g. a proxy client hung up).
    Failed episodes are stored and shown, never scored 0 (PITFALLS P5).
    """

    OK = "ok"
    ENV_ERROR = "env_error"
    TIMEOUT = "timeout"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message (OpenAI wire shape, minus tool-call details).

    Attributes:
        role: ``"system" | "user" | "assistant" | "tool"``.
        content: the message text (Unicode).
    """

    role: str
    content: str


def _empty_i32() -> np.ndarray:
    return np.zeros(0, dtype=np.int32)


def _empty_f32() -> np.ndarray:
    return np.zeros(0, dtype=np.float32)


@dataclass(slots=True)
class Turn:
    """One agent decision: the prompt shown, the tokens sampled, the env's answer.

    Attributes:
        run_id: the run that produced the turn (str).
        turn_id: unique within the run (int, ≥ 0); the store assigns it when absent (-1).
        episode_id: the episode (trajectory) this turn belongs to (int).
        group_id: the task group of the episode (int); identical env seed inside a group.
        parent_turn_id: the previous turn of the episode, or the branch point for tree
            rollouts; ``None`` at t = 0 of a root episode.
        t: 0-based index of the turn in its episode (int).
        policy_version: number of optimizer updates applied to the policy that sampled
            this turn (int).
        observation: the text the agent was shown for this turn (its new observation).
        anchor_obs: the raw env state text used for "same state" tests
            (ALGORITHMS.md §0.4); never contains history or the prompt template.
        next_anchor_obs: the anchor text of the state reached after the action.
        prompt_ids: int32[P], the exact token ids fed to the engine.
        completion_ids: int32[C], the exact token ids sampled (EOS included when sampled).
        completion_logprobs: float32[C], behaviour-policy logprob of each sampled token.
        action: the parsed action text sent to the env.
        action_valid: whether the parser and the env accepted the action.
        reward: env reward of this step (float); ``None`` when never scored.
        terminated: the env reached a terminal state after this step.
        truncated: the episode was cut (turn limit) after this step.
        hidden: float32[H] final-layer hidden state at the last prompt token, or None.
        info: small JSON-serialisable extras (e.g. ``{"segment": 0, "won": True}``).
    """

    run_id: str
    episode_id: int
    group_id: int
    t: int
    observation: str
    anchor_obs: str
    action: str
    action_valid: bool
    reward: float | None
    terminated: bool = False
    truncated: bool = False
    next_anchor_obs: str = ""
    prompt_ids: np.ndarray = field(default_factory=_empty_i32)
    completion_ids: np.ndarray = field(default_factory=_empty_i32)
    completion_logprobs: np.ndarray = field(default_factory=_empty_f32)
    policy_version: int = 0
    parent_turn_id: int | None = None
    turn_id: int = -1
    hidden: np.ndarray | None = None
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.prompt_ids = np.asarray(self.prompt_ids, dtype=np.int32).reshape(-1)
        self.completion_ids = np.asarray(self.completion_ids, dtype=np.int32).reshape(-1)
        self.completion_logprobs = np.asarray(self.completion_logprobs, dtype=np.float32).reshape(-1)
        if self.completion_logprobs.size not in (0, self.completion_ids.size):
            raise ValueError(
                f"Turn t={self.t}: completion_logprobs has {self.completion_logprobs.size} values "
                f"for {self.completion_ids.size} completion ids; pass one logprob per sampled token"
            )
        if self.hidden is not None:
            self.hidden = np.asarray(self.hidden, dtype=np.float32).reshape(-1)

    @property
    def has_tokens(self) -> bool:
        """True when the turn carries the exact tokens an update trains on: non-empty
        ``prompt_ids`` and ``completion_ids`` (a text-only turn, e.g. plain ``{role, content}``
        messages or a scripted policy's action, has neither and is never trainable)."""
        return self.prompt_ids.size > 0 and self.completion_ids.size > 0


@dataclass(slots=True)
class Episode:
    """One rollout (trajectory) of one task.

    Attributes:
        episode_id: unique within the run (int).
        group_id: the task group (int); all episodes of a group share ``task_id`` and seed.
        env_id: registered env id, e.g. ``"agentrl/TextWorld-v0"``.
        task_id: stable task identifier inside the env (str).
        seed: the env seed used at reset (int).
        status: ``EpisodeStatus``; only ``ok`` episodes enter group statistics.
        turns: the turns in order of ``t``.
        error: a human-readable reason when ``status`` is not ok.
        run_id: the run that produced it.
    """

    episode_id: int
    group_id: int
    env_id: str
    task_id: str
    seed: int
    status: EpisodeStatus = EpisodeStatus.OK
    turns: list[Turn] = field(default_factory=list)
    error: str = ""
    run_id: str = ""

    @property
    def cause(self) -> str:
        """Why the episode failed, as one of ``FAILURE_CAUSES`` ("" when ok or not classified)."""
        return failure_cause(self.error)

    @property
    def return_(self) -> float | None:
        """Sum of the turn rewards (float), or ``None`` if any turn was never scored."""
        if any(t.reward is None for t in self.turns):
            return None
        return float(sum(t.reward for t in self.turns))

    @property
    def success(self) -> bool:
        """True when the last turn reported ``info["won"]``."""
        return bool(self.turns and self.turns[-1].info.get("won", False))


#: Columns of ``TurnTable.state_stats`` (3SPO, ALGORITHMS.md §16.2): prior (N, N_s) of the anchor,
#: of the next anchor, and the episode counter t.
STATE_STATS_FIELDS = ("n_total", "n_success", "next_n_total", "next_n_success", "t")

_INT_COLS = ("group", "episode", "t", "anchor_key", "next_anchor_key", "action_key", "parent", "turn_id")
_BOOL_COLS = ("terminated", "truncated", "action_valid", "episode_ok", "trainable")


@dataclass(frozen=True)
class TurnTable:
    """Columnar view of N turns: the input of every credit estimator.

    All columns have shape (N,) unless stated; row order is irrelevant (``t`` is explicit).

    Attributes:
        group: int64, task group id.
        episode: int64, episode (trajectory) id, unique over the table.
        t: int64, 0-based turn index within the episode.
        reward: float64, env reward of the turn (0.0 where unscored; see ``episode_ok``).
        terminated: bool, env reached a terminal state after the turn.
        truncated: bool, episode cut after the turn (turn limit).
        action_valid: bool, parser and env accepted the action.
        anchor_key: int64, interned anchor observation (exact string equality, §0.4).
        next_anchor_key: int64, interned anchor of the next state; same vocabulary as
            ``anchor_key`` so a next state equals a later current state.
        action_key: int64, interned normalised action (``normalize_action_key``).
        parent: int64, row index of the parent turn (previous turn or branch point), -1
            for none.
        episode_ok: bool, the episode's status is ok and every reward was scored. Rows
            with False take part in no group statistic and get advantage 0 (P5).
        trainable: bool, the row will receive gradient (e.g. non-empty loss mask).
            Rows with False take part in no baseline (P6).
        turn_id: int64, the store's turn id (-1 when not stored).
        hidden: float64[N, H] or None, BiPACE hidden states.
        value: float64[N] or None, critic value V(s_t) for turn-PPO.
        bootstrap_value: float64[N] or None, V(s_T) for truncated episodes (read on the
            last row of each episode; 0 where unavailable).
        tree: int64[N] or None, tree id for tree rollouts (Tree-GRPO).
        branch: int64[N] or None, branch-group id of a branching turn (RTPO), -1 otherwise.
        state_stats: int64[N, 5] or None, 3SPO's per-state success statistics from the run's
            *earlier* iterations (state outside the batch, filled by the trainer from the store:
            ``agentrl.store.state_stats``), columns ``STATE_STATS_FIELDS``: episodes that visited
            the row's anchor and how many of them succeeded, the same for its next anchor, and
            the counter t = 1 + earlier ok episodes. ALGORITHMS.md §16.2.
        policy_version: int64[N] or None, the policy version that sampled the turn
            (``Turn.policy_version``: optimizer updates applied to the sampler); filled by
            ``from_episodes`` and the store's ``table()``. Read only by the staleness-aware
            credit options (``agentrl.credit.versions``), never by an estimator itself.
        milestone: bool[N] or None, True on the turn that completed the next milestone of its
            episode (BEACON, ALGORITHMS.md §15.2; ``Turn.info["milestone"]``, False where absent).
        n_milestones: int64[N] or None, the episode's number of milestones (constant per
            episode; ``Turn.info["n_milestones"]``), -1 where unknown (BEACON's dynamic rule).
        switch, has_switch: bool[N] or None, HiPER (ALGORITHMS.md §14.2): the ``<switch>`` content
            is not KEEP (a new segment starts; ``Turn.info["switch"]``), and the response has a
            ``<switch>`` tag (a switch span; ``Turn.info["switch_span"]``, None = every row has one).
        subgoal_key: int64[N] or None, HiPER: the interned exact ``<subgoal>`` text
            (``Turn.info["subgoal"]``), ``NO_SUBGOAL`` (-1) where the tag is missing.
        value_low, value_high, value_term: float64[N] or None, HiPER's three critic heads
            (§14.2): V(s_t, g_t) on every row, V(s_t) (read on segment-start rows only) and the
            switch value (optional).
        scores: ``{name: float64[N, ...]}``, columns a step scorer filled (OPRL's PRM, your own;
            ``agentrl.train.scorers``); an estimator names them in ``requires`` like any column.
        anchor_vocab: the interned strings, ``anchor_vocab[code] == text``.
    Raises:
        ValueError: a column has the wrong shape or a required column is missing.
    """

    group: np.ndarray
    episode: np.ndarray
    t: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    action_valid: np.ndarray
    anchor_key: np.ndarray
    next_anchor_key: np.ndarray
    action_key: np.ndarray
    parent: np.ndarray
    episode_ok: np.ndarray
    trainable: np.ndarray
    turn_id: np.ndarray
    hidden: np.ndarray | None = None
    value: np.ndarray | None = None
    bootstrap_value: np.ndarray | None = None
    tree: np.ndarray | None = None
    branch: np.ndarray | None = None
    policy_version: np.ndarray | None = None
    milestone: np.ndarray | None = None
    n_milestones: np.ndarray | None = None
    state_stats: np.ndarray | None = None
    switch: np.ndarray | None = None
    has_switch: np.ndarray | None = None
    subgoal_key: np.ndarray | None = None
    value_low: np.ndarray | None = None
    value_high: np.ndarray | None = None
    value_term: np.ndarray | None = None
    anchor_vocab: tuple[str, ...] = ()
    scores: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = np.asarray(self.group).shape[0]
        for name in _INT_COLS:
            object.__setattr__(self, name, _column(self, name, n, np.int64))
        for name in _BOOL_COLS:
            object.__setattr__(self, name, _column(self, name, n, np.bool_))
        object.__setattr__(self, "reward", _column(self, "reward", n, np.float64))
        for name in ("value", "bootstrap_value", "value_low", "value_high", "value_term"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _column(self, name, n, np.float64))
        for name in ("tree", "branch", "policy_version", "n_milestones", "subgoal_key"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _column(self, name, n, np.int64))
        for name in ("milestone", "switch", "has_switch"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _column(self, name, n, np.bool_))
        if self.state_stats is not None:
            object.__setattr__(self, "state_stats", _state_stats(self.state_stats, n))
        if self.hidden is not None:
            h = np.asarray(self.hidden, dtype=np.float64)
            if h.ndim != 2 or h.shape[0] != n:
                raise ValueError(f"TurnTable.hidden must have shape (N, H) with N={n}, got {h.shape}")
            object.__setattr__(self, "hidden", h)
        object.__setattr__(self, "scores", {k: _score(k, v, n) for k, v in dict(self.scores).items()})

    def __len__(self) -> int:
        return int(self.group.shape[0])

    def require(self, columns: Iterable[str]) -> None:
        """Raise ``ValueError`` naming the missing optional columns among ``columns``."""
        missing = [c for c in columns if getattr(self, c, None) is None and c not in self.scores]
        if missing:
            raise ValueError(
                f"TurnTable lacks column(s) {missing}; they are filled only when the rollout "
                f"records them (hidden: policy.return_hidden=true; value: a critic; tree/branch: tree rollouts; "
                f"policy_version: TurnTable.from_episodes or TurnStore.table; milestone: likewise, from Turn.info; "
                f"state_stats: agentrl.store.with_state_stats, which the trainer runs; switch/subgoal_key: "
                f"policy.action_format: hiper; value_low/value_high/value_term: HiPER's three-head critic; "
                f"scores: the step scorers the estimator declares)"
            )

    def take(self, idx: np.ndarray) -> "TurnTable":
        """Rows ``idx`` (int array or bool mask) as a new table; ``parent`` is re-indexed
        (parents outside the selection become -1)."""
        idx = np.flatnonzero(idx) if np.asarray(idx).dtype == np.bool_ else np.asarray(idx, dtype=np.int64)
        remap = np.full(len(self) + 1, -1, dtype=np.int64)
        remap[idx] = np.arange(idx.size)
        cols = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            cols[f.name] = v[idx] if isinstance(v, np.ndarray) else v
        cols["scores"] = {k: v[idx] for k, v in self.scores.items()}
        cols["parent"] = remap[self.parent[idx]]
        return TurnTable(**cols)

    @classmethod
    def from_episodes(cls, episodes: Sequence[Episode], *, trainable: Sequence[bool] | None = None) -> "TurnTable":
        """Build the table from in-memory episodes (rows in episode order, then ``t``).

        Args:
            episodes: episodes with their turns; ``parent_turn_id`` refers to ``turn_id``s
                of turns in these episodes.
            trainable: optional per-row flags (length N); default: rows with token ids
                (``Turn.has_tokens``) not marked ``info["trainable"] = False``. Text-only turns
                are not trainable, so estimators give them 0 and keep them out of every group
                statistic.
        ``policy_version`` is each turn's ``Turn.policy_version``; ``tree`` / ``branch`` are
        filled from ``Turn.info["tree"]`` / ``Turn.info["branch"]`` when any turn records them
        (-1 on the other rows). ``milestone`` is ``Turn.info["milestone"]`` (False where absent,
        always filled); ``n_milestones`` is ``Turn.info["n_milestones"]`` when any turn records it
        (-1 on the other rows), else None. HiPER's ``switch`` / ``has_switch`` / ``subgoal_key``
        come from ``Turn.info`` when any turn records ``"switch"`` (``hiper_columns``), else None.
        """
        turns = [tr for ep in episodes for tr in ep.turns]
        ok = [ep.status == EpisodeStatus.OK and ep.return_ is not None for ep in episodes for _ in ep.turns]
        vocab: dict[str, int] = {}
        anchor = intern_strings([tr.anchor_obs for tr in turns], vocab)
        nxt = intern_strings([tr.next_anchor_obs for tr in turns], vocab)
        actions = intern_strings([normalize_action_key(tr.action, tr.action_valid) for tr in turns])
        row_of = {tr.turn_id: i for i, tr in enumerate(turns) if tr.turn_id >= 0}
        parent = [row_of.get(tr.parent_turn_id, -1) if tr.parent_turn_id is not None else -1 for tr in turns]
        if trainable is None:
            trainable = [tr.has_tokens and tr.info.get("trainable", True) is not False for tr in turns]
        extra = info_columns([tr.info for tr in turns])
        hidden = None
        if turns and all(tr.hidden is not None for tr in turns):
            hidden = np.stack([tr.hidden for tr in turns]).astype(np.float64)
        return cls(
            group=[tr.group_id for tr in turns],
            episode=[tr.episode_id for tr in turns],
            t=[tr.t for tr in turns],
            reward=[0.0 if tr.reward is None else tr.reward for tr in turns],
            terminated=[tr.terminated for tr in turns],
            truncated=[tr.truncated for tr in turns],
            action_valid=[tr.action_valid for tr in turns],
            anchor_key=anchor,
            next_anchor_key=nxt,
            action_key=actions,
            parent=parent,
            episode_ok=ok,
            trainable=list(trainable),
            turn_id=[tr.turn_id for tr in turns],
            hidden=hidden,
            policy_version=[tr.policy_version for tr in turns],
            anchor_vocab=tuple(vocab),
            **extra,
        )


def _column(table: TurnTable, name: str, n: int, dtype: type) -> np.ndarray:
    value = getattr(table, name)
    if value is None:
        raise ValueError(f"TurnTable column {name!r} is required")
    arr = np.asarray(value, dtype=dtype).reshape(-1) if np.ndim(value) <= 1 else np.asarray(value, dtype=dtype)
    if arr.shape != (n,):
        raise ValueError(f"TurnTable column {name!r} has shape {arr.shape}; expected ({n},) like 'group'")
    return arr


def _state_stats(value: np.ndarray, n: int) -> np.ndarray:
    """``value`` as int64[N, 5] (``STATE_STATS_FIELDS``); ValueError for another shape."""
    arr = np.asarray(value, dtype=np.int64)
    if arr.shape != (n, len(STATE_STATS_FIELDS)):
        raise ValueError(f"TurnTable.state_stats must have shape (N, {len(STATE_STATS_FIELDS)}) with N={n}, "
                         f"got {arr.shape}")
    return arr


def _score(name: str, value: np.ndarray, n: int) -> np.ndarray:
    """A step scorer's column ``name`` as float64 with leading dimension N; ValueError otherwise."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim < 1 or arr.shape[0] != n:
        raise ValueError(f"TurnTable.scores[{name!r}] must have shape (N, ...) with N={n}, got {arr.shape}")
    return arr
