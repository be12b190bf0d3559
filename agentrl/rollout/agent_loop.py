"""The agent loop: one episode, turn by turn, with a context strategy (no torch).

``EpisodeDriver`` holds one episode's state; the collector batches many drivers into one
engine call per round. Context strategies build each turn's prompt ids:

- ``WindowContext(k)``: every turn is a fresh render — system prompt, then one user
  message with the task (the first observation, without its admissible-action list), the
  last ``k`` actions in order, each followed by the observation it produced
  (``history="full"``) or alone (``history="actions"``), and the current observation (the
  result of the last action, with the admissible actions). At t = 0 the reset text is shown
  once (under ``Task:``, with the admissible actions). Each turn is its own training segment.
- ``ChatContext``: an append-only conversation. The next prompt is the previous prompt +
  the sampled completion ids (verbatim) + the template bridge + the new observation's
  tokens (``ChatRenderer.extend``; PITFALLS P1/P2). When the template would rewrite
  history, a new segment starts (``turn.info["segment"]`` increments, the fork is
  counted in ``turn.info["forks"]``).

The system message is ``LoopConfig.system_prompt``, a template rendered at reset with the
env's instructions and the action format's sentence (``agentrl.rollout.prompt``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from agentrl.env.contract import (ACTION_EXACT, INFO_ADMISSIBLE, INFO_ANCHOR, INFO_ENV_ERROR, INFO_INSTRUCTIONS,
                                  INFO_VALID, INFO_WON, milestone_info, normalize_action)
from agentrl.env.pool import EnvResult
from agentrl.llm.base import Completion
from agentrl.llm.chat import ChatRenderer
from agentrl.llm.constrained import (INFO_ALLOWED, INFO_DIGEST, INFO_FORMAT, INFO_SUBGOALS, allowed_digest,
                                    check_constraint, completion_sequences, has_template, rendered_completions)
from agentrl.rollout.parsing import HIPER_FORMAT, ActionFormat, parse_format
from agentrl.rollout.prompt import DEFAULT_INSTRUCTIONS, DEFAULT_SYSTEM_PROMPT, check_template, render_system
from agentrl.failures import with_context
from agentrl.types import Episode, EpisodeStatus, Message, Turn

DEFAULT_SYSTEM = DEFAULT_INSTRUCTIONS  # the generic instructions, for an env that gives none


@dataclass(frozen=True)
class LoopConfig:
    """How the agent loop builds prompts and reads actions.

    Attributes:
        context: ``"chat"`` (append-only) or ``"window"``.
        window_k: past actions kept by ``window`` (≥ 0).
        window_history: ``"full"`` (each kept action with the observation it produced) or
            ``"actions"`` (the actions only: shorter prompts; the current observation always
            holds the last action's result).
        max_turns: turns before the episode is cut (last turn ``truncated``).
        action_format: see ``agentrl.rollout.parsing`` (``"tag:action"``).
        system_prompt: the system message template (``agentrl.rollout.prompt``): ``{env_instructions}``
            (the env's reset ``info["instructions"]``, else a generic text-game sentence) and
            ``{action_format}`` (the format's sentence) are filled in at reset.
        show_admissible: append the env's admissible actions to each observation.
        action_constraint: ``"none"`` or ``"admissible"``: decode only the env's admissible
            actions rendered in ``action_format`` (``agentrl.llm.constrained``; needs an
            engine that takes ``allowed``, e.g. ``HFEngine``; envs without admissible
            actions stay unconstrained).
        hiper_subgoals: the ``<subgoal>`` texts a constrained ``hiper`` turn may write (each
            admissible action then has ``2 * len(hiper_subgoals)`` allowed completions,
            ``agentrl.llm.constrained.rendered_completions``); unused otherwise.
    Raises:
        ValueError: bad context name or counts; an unknown placeholder in ``system_prompt``;
            ``admissible`` with a ``regex:`` format, or with ``hiper`` and no (or a blank) subgoal.
    """

    context: str = "chat"
    window_k: int = 3
    window_history: str = "full"
    max_turns: int = 20
    action_format: str = "tag:action"
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    show_admissible: bool = True
    action_constraint: str = "none"
    hiper_subgoals: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.context not in ("chat", "window"):
            raise ValueError(f"LoopConfig.context must be 'chat' or 'window', got {self.context!r}")
        if self.window_k < 0 or self.max_turns < 1:
            raise ValueError(f"need window_k >= 0 and max_turns >= 1, got {self.window_k}, {self.max_turns}")
        if self.window_history not in ("full", "actions"):
            raise ValueError(f"LoopConfig.window_history must be 'full' or 'actions', got {self.window_history!r}")
        parse_format(self.action_format)
        check_template(self.system_prompt)
        check_constraint(self.action_constraint, self.action_format)
        if self.action_constraint == "admissible":
            rendered_completions("x", self.action_format, self.hiper_subgoals)  # hiper: subgoals given and non-blank


class ContextStrategy(Protocol):
    """Builds prompt ids turn by turn. ``segment`` / ``forks`` describe the last prompt;
    ``system`` is the system message (set before ``first``)."""

    system: str
    segment: int
    forks: int

    def first(self, observation: str, task: str | None = None) -> np.ndarray: ...

    def next(self, completion_ids: np.ndarray, action: str, observation: str, past: str | None = None) -> np.ndarray: ...


class WindowContext:
    """Fresh prompt per turn: task + the last ``k`` actions (with or without the observations
    they produced) + the current observation.

    ``first(observation, task=...)`` takes the shown first observation and the task text
    (default: the observation itself); ``next`` appends ``(action, observation)``. While no
    history is shown and the current observation is the task's text (t = 0; with ``k = 0``
    also any later return to it), the reset text is shown once::

        Task:
        <first observation, with admissible actions>

    The rendered user message (``history="full"``, k=2, after actions a1, a2, a3)::

        Task:
        <first observation>

        Recent history:
        > a2
        <observation after a2>
        > a3

        Current observation:
        <observation after a3, with admissible actions>
    """

    def __init__(self, renderer: ChatRenderer, system: str, k: int, history: str = "full") -> None:
        self.renderer, self.system, self.k, self.history = renderer, system, k, history
        self.segment, self.forks = 0, 0
        self.task, self.current, self._current_raw = "", "", ""
        self.steps: list[tuple[str, str]] = []  # (action, observation it produced), oldest first

    def _prompt(self) -> np.ndarray:
        recent = self.steps[-self.k :] if self.k else []
        if not recent and self._current_raw == self.task:  # t = 0: the reset text once
            return self._render(f"Task:\n{self.current}")
        lines = [f"Task:\n{self.task}"]
        if recent:
            shown = []
            for i, (action, obs) in enumerate(recent):
                shown.append(f"> {action}")
                if self.history == "full" and i < len(recent) - 1:  # the last result is the current observation
                    shown.append(obs)
            lines.append("Recent history:\n" + "\n".join(shown))
        lines.append(f"Current observation:\n{self.current}")
        return self._render("\n\n".join(lines))

    def _render(self, user: str) -> np.ndarray:
        return self.renderer.render_ids([Message("system", self.system), Message("user", user)])

    def first(self, observation: str, task: str | None = None) -> np.ndarray:
        self.task, self.current = (observation if task is None else task), observation
        self._current_raw = self.task  # the reset's own text: shown once
        return self._prompt()

    def next(self, completion_ids: np.ndarray, action: str, observation: str, past: str | None = None) -> np.ndarray:
        """``past``: how ``observation`` is shown once it is history (default: as is; the
        driver passes it without the admissible-action list, which is stale by then)."""
        self.steps.append((action or "(invalid)", observation if past is None else past))
        self.current, self._current_raw = observation, (observation if past is None else past)
        self.segment += 1
        return self._prompt()


class ChatContext:
    """Append-only conversation with exact token extension (``ChatRenderer.extend``)."""

    def __init__(self, renderer: ChatRenderer, system: str) -> None:
        self.renderer, self.system = renderer, system
        self.segment, self.forks = 0, 0
        self.messages: tuple[Message, ...] = ()
        self.prompt_ids = np.zeros(0, np.int32)

    def first(self, observation: str, task: str | None = None) -> np.ndarray:
        self.messages = (Message("system", self.system), Message("user", observation))
        self.prompt_ids = self.renderer.render_ids(self.messages)
        return self.prompt_ids

    def next(self, completion_ids: np.ndarray, action: str, observation: str, past: str | None = None) -> np.ndarray:
        ext = self.renderer.extend(self.prompt_ids, self.messages, completion_ids, [Message("user", observation)])
        if ext.forked:
            self.segment += 1
            self.forks += 1
        self.messages, self.prompt_ids = ext.messages, ext.prompt_ids
        return self.prompt_ids


def make_context(cfg: LoopConfig, renderer: ChatRenderer, system: str) -> ContextStrategy:
    """The strategy named by ``cfg.context``."""
    if cfg.context == "chat":
        return ChatContext(renderer, system)
    return WindowContext(renderer, system, cfg.window_k, cfg.window_history)


def shown_observation(result: EnvResult, show_admissible: bool) -> str:
    """The text shown to the agent: the observation, plus admissible actions when asked."""
    acts = result.info.get(INFO_ADMISSIBLE) if show_admissible else None
    return f"{result.obs}\nAdmissible actions: {', '.join(acts)}" if acts else result.obs


class EpisodeDriver:
    """Plays one episode: ``start`` (reset result) → [``prompt`` → ``act`` → ``observe``]*.

    Args:
        episode: the Episode to fill (its turns are appended here).
        renderer: the chat renderer of the policy's tokenizer.
        cfg: loop configuration.
        max_context: the engine's context length in tokens.
        action_normalize: how the parsed action is normalised before it is sent and stored:
            the env's declaration (``agentrl.env.action_normalization(env_id)``); ``"exact"``
            (default) sends it as written, ``"whitespace"`` collapses whitespace runs.
    """

    def __init__(self, episode: Episode, renderer: ChatRenderer, cfg: LoopConfig, max_context: int,
                 action_normalize: str = ACTION_EXACT) -> None:
        normalize_action("", action_normalize)  # an unknown mode raises here, not at the first turn
        self.episode, self.cfg, self.max_context = episode, cfg, max_context
        self.action_normalize = action_normalize
        self.fmt: ActionFormat = parse_format(cfg.action_format)
        self.context = make_context(cfg, renderer, render_system(cfg.system_prompt, None, self.fmt.instructions))
        self.renderer = renderer
        self.done = False
        self._prompt = np.zeros(0, np.int32)
        self._obs, self._anchor = "", ""
        self._pending: Turn | None = None
        self._completion = np.zeros(0, np.int32)
        self._admissible: list[str] = []
        self._seq_cache: dict[str, list[np.ndarray]] = {}

    def start(self, result: EnvResult) -> None:
        """Begin from a reset result (an error result fails the episode)."""
        if result.error:
            return self.fail(EpisodeStatus.ENV_ERROR, with_context("reset failed: ", result.error))
        self._obs = shown_observation(result, self.cfg.show_admissible)
        self._anchor = str(result.info.get(INFO_ANCHOR, result.obs))
        self._admissible = [str(a) for a in result.info.get(INFO_ADMISSIBLE) or ()]
        instructions = result.info.get(INFO_INSTRUCTIONS)
        self.context.system = render_system(self.cfg.system_prompt, None if instructions is None else str(instructions),
                                            self.fmt.instructions)
        self._prompt = self.context.first(self._obs, task=result.obs)
        self._check_room()

    def prompt(self) -> np.ndarray:
        """int32[P] ids of this turn's prompt."""
        return self._prompt

    def allowed(self) -> list[np.ndarray] | None:
        """This turn's allowed completions (int64 id sequences ending with EOS) under
        ``action_constraint: admissible``; None when unconstrained, when the env listed no
        admissible action, or when one is a template with a free slot (``search[<query>]``)."""
        if not self._constrained():
            return None
        fmt, eos = self.fmt.spec, self.renderer.eos_token_id
        for a in self._admissible:
            if a not in self._seq_cache:  # one sequence per action (hiper: one per switch and subgoal)
                self._seq_cache[a] = completion_sequences([a], fmt, self.renderer.encode, eos, self.cfg.hiper_subgoals)
        return [seq for a in dict.fromkeys(self._admissible) for seq in self._seq_cache[a]]

    def _constrained(self) -> bool:
        return self.cfg.action_constraint == "admissible" and bool(self._admissible) and not has_template(self._admissible)

    def act(self, completion: Completion) -> str:
        """Record the completion; return the action text to send (``""`` when unparsable)."""
        text = completion.text if completion.text is not None else self.renderer.completion_text(completion.token_ids)
        parsed = self.fmt.parse(text, self.action_normalize)
        ep = self.episode
        self._pending = Turn(
            run_id=ep.run_id, episode_id=ep.episode_id, group_id=ep.group_id, t=len(ep.turns),
            observation=self._obs, anchor_obs=self._anchor, action=parsed.text, action_valid=parsed.ok,
            reward=None, prompt_ids=self._prompt, completion_ids=completion.token_ids,
            completion_logprobs=completion.logprobs, policy_version=completion.policy_version,
            hidden=completion.hidden,
            info={"segment": self.context.segment, "forks": self.context.forks,
                  "finish_reason": completion.finish_reason, "parse_ok": parsed.ok,
                  "token_faithful": completion.token_faithful},
        )
        if self.fmt.turn_info is not None:  # what the format reads besides the action (HiPER: tags, token spans)
            self._pending.info.update(self.fmt.turn_info(self.renderer, completion.token_ids))
        if self.cfg.context == "window":
            del self._pending.info["segment"]
        if self._constrained():
            self._pending.info[INFO_ALLOWED] = list(dict.fromkeys(self._admissible))
            self._pending.info[INFO_FORMAT] = self.fmt.spec
            if self.fmt.spec == HIPER_FORMAT:  # the subgoal choices the sampler was given
                self._pending.info[INFO_SUBGOALS] = list(self.cfg.hiper_subgoals)
            self._pending.info[INFO_DIGEST] = allowed_digest(self.allowed())  # what the sampler was given
        self._completion = completion.token_ids
        return parsed.text

    def observe(self, result: EnvResult) -> bool:
        """Apply the env's answer to the pending turn; returns True when the episode is done."""
        turn, self._pending = self._pending, None
        if turn is None:
            raise RuntimeError("observe() called without a pending act()")
        error = result.error or result.info.get(INFO_ENV_ERROR)
        if error:  # the worker died, or the env's own infrastructure failed (e.g. a scoring sandbox, P8)
            self.episode.turns.append(turn)
            self.fail(EpisodeStatus.ENV_ERROR, with_context("step failed: ", str(error)))
            return True
        turn.reward = float(result.reward)
        turn.action_valid = bool(turn.action_valid and result.info.get(INFO_VALID, True))
        turn.terminated = bool(result.terminated)
        turn.truncated = bool(result.truncated) or (not result.terminated and turn.t + 1 >= self.cfg.max_turns)
        turn.next_anchor_obs = str(result.info.get(INFO_ANCHOR, result.obs))
        turn.info["won"] = bool(result.info.get(INFO_WON, False))
        turn.info.update(milestone_info(result.info))  # BEACON's milestones (§15.2), when the env publishes them
        self.episode.turns.append(turn)
        if turn.terminated or turn.truncated:
            self.done = True
            return True
        self._obs = shown_observation(result, self.cfg.show_admissible)
        self._anchor = turn.next_anchor_obs
        self._admissible = [str(a) for a in result.info.get(INFO_ADMISSIBLE) or ()]
        self._prompt = self.context.next(self._completion, turn.action, self._obs, past=result.obs)
        return self._check_room()

    def _check_room(self) -> bool:
        """Cut the episode when the next prompt leaves no room for a completion."""
        if self._prompt.size < self.max_context:
            return False
        if self.episode.turns:
            self.episode.turns[-1].truncated = True
            self.episode.turns[-1].info["cut"] = "context"
            self.done = True
        else:
            self.fail(EpisodeStatus.ABORTED, f"first prompt ({self._prompt.size} tokens) fills the context "
                                             f"({self.max_context}); shorten policy.system_prompt or the task "
                                             f"text, or use a longer-context model")
        return True

    def fail(self, status: EpisodeStatus, error: str) -> None:
        """Mark the episode failed (stored and shown, never scored 0; PITFALLS P5)."""
        self.episode.status, self.episode.error, self.done = status, error, True
