"""An LLM policy on ``agentrl/JunctionMaze-v0`` with exact values (issue 38, "then on SmolLM2 batches").

Batches are sampled through agentrl's real rollout path (``agentrl.rollout.collector.collect``,
an ``HFEngine``, a Markov prompt and constrained decoding: ``markov_loop``) and written to a
``TurnStore``; the estimators read the store's ``TurnTable``. The exact advantages need the
policy's probabilities in *every* non-terminal state of each maze (the DP sums over states the
batch may never visit), so each state's prompt is rebuilt the way the rollout builds it (a
``window`` context with ``window_k = 0``: system prompt, task text = the maze's first
observation, current observation with its admissible actions; ``state_prompts``) and checked
against every stored prompt. The policy over a state's admissible actions comes from each distinct
prompt scored once (``batch_action_probs`` over a graph's new prompts: their shared prefix once,
then one row per token-trie path that reaches a branch point; ``action_probs``, one padded
forward per prompt, agrees within ~1e-6): each action's completion (its text + EOS, as
``completion_sequences`` renders it) is teacher-forced after the prompt and each token's raw
logprob renormalised over the ids the token trie allows at that position, exactly as the
engine's constrained sampler does (``agentrl.llm.step_logprobs``); the product over the
completion's tokens sums to 1 over the actions.

Paraphrase (the env's ``paraphrase=1``, ``PolicyTables.paraphrase_bank`` = B > 0): a room is shown
with a wording drawn per visit from its bank (``agentrl_envs.junction.paraphrase.bank``), member j of
a group of G from its slice ``b % G == j``. π(a | room) is then the policy's probability averaged
over the wordings the member can be shown there: ``wording_prompts`` builds the prompt of every
such wording of every non-terminal room, ``batch_action_probs`` scores them all (renormalised per
wording) and ``PolicyTables.maze`` averages. The window prompt's task text is the episode's *first*
wording of the entrance, so π also depends on that one draw: the values are computed per
(maze, first wording, member), and the first turn's π at the entrance is that wording's own (later
visits to the entrance, after a no-op, average over the slice; ``ExactValues.V[0, start]`` is
recomputed with it). Cost per oracle call (``PolicyTables.maze``: one maze, one first wording, one
member): one prompt per wording of each non-terminal room, B / G prompts per room (B for G = 1, the
whole bank) instead of 1, the first turn's prompt being one of the entrance's. Each prompt is
scored in one forward row (``batch_action_probs``: one row per token-trie path reaching a branch
point, not one per action; one for the maze's actions with SmolLM2's tokenizer) holding only its
own suffix after a KV-cached shared prefix (the system prompt and the task text): B = 16, G = 1 at
K = 5 (10-15 rooms) is ~200 prompts per first wording, ~55 s for SmolLM2-135M in fp32 on one CPU
thread (0.27 s per prompt measured, against 1.5-2.5 s per prompt for ``action_probs``).
``map_batch`` maps a stored prompt that shows any wording of a room back to that room (the member
is the episode's rank inside its group, the first wording its first anchor).

Everything runs on the CPU in the precision the engine was loaded in (fp32 for the benchmark).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from agentrl.credit.exact import ExactValues, exact_advantages, exact_values
from agentrl.env.task_graph import TaskGraph
from agentrl.llm.base import SamplingParams
from agentrl.llm.chat import ChatRenderer
from agentrl.llm.constrained import completion_sequences
from agentrl.rollout.agent_loop import LoopConfig, make_context
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.rollout.parsing import parse_format
from agentrl.rollout.prompt import render_system
from agentrl.store import TurnStore
from agentrl.types import Episode, EpisodeStatus, Turn, TurnTable
from agentrl_envs.junction import paraphrase as para
from agentrl_envs.junction.maze import Maze
from studies.maze_probs import action_probs, batch_action_probs, renormalised  # noqa: F401  (re-exported)

ENV_ID = "agentrl/JunctionMaze-v0"


def markov_loop(max_turns: int = 24) -> LoopConfig:
    """The agent loop of ``examples/grpo_junction.yaml``: a Markov prompt (``window`` context,
    ``window_k = 0``: task text + current observation, no history), actions written whole,
    decoding constrained to the admissible actions."""
    return LoopConfig(context="window", window_k=0, max_turns=max_turns, action_format="whole",
                      action_constraint="admissible")


def state_prompts(graph: TaskGraph, renderer: ChatRenderer, loop: LoopConfig) -> dict[str, np.ndarray]:
    """int32[P] prompt ids per non-terminal state of ``graph`` as the rollout renders them under
    ``loop`` (which must be a ``window`` context with ``window_k = 0``: then the prompt is a pure
    function of the maze's first observation and the state). Raises ValueError for another loop."""
    _check_markov(loop)
    system = render_system(loop.system_prompt, None, parse_format(loop.action_format).instructions)  # as EpisodeDriver
    task = graph.observation[graph.start]

    def shown(s: str) -> str:  # agent_loop.shown_observation
        return f"{graph.observation[s]}\nAdmissible actions: {', '.join(graph.actions[s])}" if loop.show_admissible \
            else graph.observation[s]

    out = {}
    for s in graph.actions:
        ctx = make_context(loop, renderer, system)
        out[s] = ctx.first(shown(graph.start), task=task)  # as EpisodeDriver.start, then observe (window_k = 0)
        if s != graph.start:
            out[s] = ctx.next(np.zeros(0, np.int32), "", shown(s), past=graph.observation[s])
    return out


def _check_markov(loop: LoopConfig) -> None:
    if loop.context != "window" or loop.window_k != 0:
        raise ValueError(f"state prompts need a Markov loop (context window, window_k 0), got {loop.context}/"
                         f"{loop.window_k}")


def wording_prompts(graph: TaskGraph, renderer: ChatRenderer, loop: LoopConfig, wordings: Mapping[str, Sequence[str]],
                    first: str) -> tuple[np.ndarray, dict[str, list[np.ndarray]]]:
    """The prompts of a paraphrased episode whose reset showed ``first`` (the entrance's wording: the
    window prompt's task text) under the Markov ``loop``: (int32[P] the first turn's prompt,
    {non-terminal state: [int32 prompt of each wording in ``wordings[state]``, in that order]}), each
    as ``EpisodeDriver`` renders it (a later visit to the entrance worded ``first`` gets the first
    turn's prompt, as ``WindowContext`` does). Raises ValueError for another loop."""
    _check_markov(loop)
    system = render_system(loop.system_prompt, None, parse_format(loop.action_format).instructions)

    def shown(s: str, text: str) -> str:
        return f"{text}\nAdmissible actions: {', '.join(graph.actions[s])}" if loop.show_admissible else text

    def prompt(s: str | None, text: str) -> np.ndarray:
        ctx = make_context(loop, renderer, system)
        ids = ctx.first(shown(graph.start, first), task=first)
        return ids if s is None else ctx.next(np.zeros(0, np.int32), "", shown(s, text), past=text)

    return prompt(None, first), {s: [prompt(s, w) for w in wordings[s]] for s in graph.actions}


def _key(ids) -> bytes:
    """A prompt's cache key: its ids as int32 bytes."""
    return np.asarray(ids, np.int32).tobytes()


@dataclass
class PolicyTables:
    """The policy's probabilities, cached by prompt (mazes share prompts: same entrance text and
    room text). ``by_prompt``: prompt bytes -> float64[A]; ``forwards``: prompts scored (each call's
    new prompts in one ``batch_action_probs``: their common prefix once, within ~1e-6 of one
    ``action_probs`` forward per prompt; ``batched`` False: that one forward per prompt, the path
    before issue 51, kept for ``benchmarks/cell_speed.py``; paraphrase 1 is always batched);
    ``by_task``: task id
    (paraphrase: (task id, first wording, member)) -> ``MazeValues`` (``maze``);
    ``paraphrase_bank``: 0 for the env's ``paraphrase=0``, else its ``paraphrase_bank`` B."""

    model: torch.nn.Module
    renderer: ChatRenderer
    loop: LoopConfig
    pad_id: int
    by_prompt: dict | None = None
    forwards: int = 0
    by_task: dict | None = None
    paraphrase_bank: int = 0
    batched: bool = True

    def graph_policy(self, graph: TaskGraph) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(π per non-terminal state: float64[len(actions)] summing to 1; prompt ids per state)."""
        self.by_prompt = {} if self.by_prompt is None else self.by_prompt
        prompts = state_prompts(graph, self.renderer, self.loop)
        todo: dict[bytes, tuple[np.ndarray, str]] = {}
        for s, prompt in prompts.items():
            if prompt.tobytes() not in self.by_prompt:
                todo.setdefault(prompt.tobytes(), (prompt, s))
        if todo:  # the graph's new prompts in one call: their common prefix once, rows batched
            fmt, eos = self.loop.action_format, self.renderer.eos_token_id
            keys = list(todo)
            seqs = [completion_sequences(graph.actions[todo[k][1]], fmt, self.renderer.encode, eos) for k in keys]
            if self.batched:
                probs = batch_action_probs(self.model, [todo[k][0] for k in keys], seqs, self.pad_id)
            else:
                probs = [renormalised(action_probs(self.model, todo[k][0], q, self.pad_id)) for k, q in zip(keys, seqs)]
            self.by_prompt.update(zip(keys, probs))
            self.forwards += len(keys)
        return {s: self.by_prompt[p.tobytes()] for s, p in prompts.items()}, prompts

    def member_wordings(self, graph: TaskGraph, task_id: str, member: tuple[int, int] = (0, 1)) -> dict[str, tuple]:
        """{non-terminal state: the wordings member ``(j, G)`` can be shown there}: the slice
        ``b % G == j`` of the room's bank (``paraphrase.bank``, B = ``paraphrase_bank``)."""
        j, g = member
        return {s: para.bank(task_id, s, self.paraphrase_bank)[j::g] for s in graph.actions}

    def wording_policy(self, graph: TaskGraph, task_id: str, first: str,
                       member: tuple[int, int] = (0, 1)) -> tuple[dict[str, np.ndarray], np.ndarray, dict, dict]:
        """At paraphrase 1, for an episode of member ``(j, G)`` whose reset showed ``first``: (π per
        non-terminal state, the mean over the member's wordings of each wording's renormalised π;
        π of the first turn; prompts per state (``wording_prompts``); {prompt bytes: (state, that
        prompt's π)} over every prompt, the first turn's included). New prompts are scored in one
        ``batch_action_probs`` call. Raises ValueError when ``first`` is not a wording of the
        entrance in the member's slice."""
        self.by_prompt = {} if self.by_prompt is None else self.by_prompt
        wordings = self.member_wordings(graph, task_id, member)
        if first not in wordings[graph.start]:
            raise ValueError(f"{first[:80]!r} is not a wording of the entrance of {task_id!r} for member {member} "
                             f"(bank {self.paraphrase_bank})")
        first_prompt, prompts = wording_prompts(graph, self.renderer, self.loop, wordings, first)
        todo: dict[bytes, tuple[np.ndarray, str]] = {}
        for s, ps in [(graph.start, [first_prompt]), *prompts.items()]:
            for p in ps:
                if _key(p) not in self.by_prompt:
                    todo.setdefault(_key(p), (p, s))
        if todo:
            fmt, eos = self.loop.action_format, self.renderer.eos_token_id
            seqs = {s: completion_sequences(graph.actions[s], fmt, self.renderer.encode, eos) for s in graph.actions}
            keys = list(todo)
            probs = batch_action_probs(self.model, [todo[k][0] for k in keys], [seqs[todo[k][1]] for k in keys],
                                       self.pad_id)
            self.by_prompt.update(zip(keys, probs))
            self.forwards += len(keys)
        pi = {s: np.mean([self.by_prompt[_key(p)] for p in ps], axis=0) for s, ps in prompts.items()}
        index = {_key(p): (s, self.by_prompt[_key(p)]) for s, ps in prompts.items() for p in ps}
        index[_key(first_prompt)] = (graph.start, self.by_prompt[_key(first_prompt)])
        return pi, self.by_prompt[_key(first_prompt)], prompts, index

    def maze(self, task_id: str, horizon: int, first: str | None = None,
             member: tuple[int, int] = (0, 1)) -> "MazeValues":
        """The maze ``task_id``'s graph (``Maze.parse(task_id).graph(horizon)``), π and prompts per
        state (``graph_policy``) and exact values under π; cached per task id. At paraphrase 1
        (``paraphrase_bank`` > 0) per (task id, ``first``: the episode's first wording of the
        entrance, ``member``: its (j, G)): π from ``wording_policy``, the values under it with
        ``V[0, start]`` recomputed with the first turn's own π (Q at t = 0 already holds the later
        visits' average). Raises ValueError at paraphrase 1 without ``first``."""
        self.by_task = {} if self.by_task is None else self.by_task
        if not self.paraphrase_bank:
            if task_id not in self.by_task:
                g = Maze.parse(task_id).graph(horizon)
                pi, prompts = self.graph_policy(g)
                self.by_task[task_id] = MazeValues(g, pi, prompts, exact_values(g, pi))
            return self.by_task[task_id]
        if first is None:
            raise ValueError("paraphrased maze values need the episode's first wording of the entrance (first=...)")
        key = (task_id, first, (int(member[0]), int(member[1])))
        if key not in self.by_task:
            g = Maze.parse(task_id).graph(horizon)
            pi, pi0, prompts, index = self.wording_policy(g, task_id, first, key[2])
            ev = exact_values(g, pi)
            i0, n = ev.index[g.start], len(g.actions[g.start])
            v = ev.V.copy()
            v[0, i0] = float(np.dot(pi0, ev.Q[0, i0, :n]))
            self.by_task[key] = MazeValues(g, pi, prompts, replace(ev, V=v), index, pi0)
        return self.by_task[key]


@dataclass(frozen=True)
class MazeValues:
    """One maze under one policy: its ``graph``, ``pi`` (state -> float64[A]), ``prompts`` (state
    -> int ids the rollout builds there; at paraphrase 1 a list, one per wording) and ``values``
    (``exact_values``); at paraphrase 1 also ``by_prompt`` (prompt bytes -> (state, that prompt's
    π)) and ``first_pi`` (π of the episode's first turn)."""

    graph: TaskGraph
    pi: dict
    prompts: dict
    values: ExactValues
    by_prompt: dict | None = None
    first_pi: np.ndarray | None = None

    def check(self, turn: Turn, state: str, action: str) -> tuple[bool, float]:
        """(the turn's stored prompt differs from ``prompts[state]`` (paraphrase: is none of the
        room's prompts), |stored completion logprob sum − log π(action|prompt)| in nats) for one
        sampled turn on this maze (π of the stored prompt itself; the room's mean if unknown)."""
        lp = float(np.sum(turn.completion_logprobs, dtype=np.float64))
        a = self.graph.actions[state].index(action)
        if self.by_prompt is None:
            mismatch = not np.array_equal(np.asarray(turn.prompt_ids), self.prompts[state])
            return mismatch, abs(lp - float(np.log(self.pi[state][a])))
        hit = self.by_prompt.get(_key(turn.prompt_ids))
        mismatch = hit is None or hit[0] != state
        p = (self.pi[state] if mismatch else hit[1])[a]
        return mismatch, abs(lp - float(np.log(p)))

    def room_of(self, prompt_ids) -> str | None:
        """The room whose wording the prompt ``prompt_ids`` shows (paraphrase 1; None when none)."""
        hit = (self.by_prompt or {}).get(_key(prompt_ids))
        return None if hit is None else hit[0]


def sample_batch(engine, renderer: ChatRenderer, store: TurnStore, run_id: str, *, k: int, seed: int,
                 n_tasks: int, group: int, max_turns: int = 24, env_kwargs: dict | None = None,
                 max_tokens: int = 8, return_hidden: bool = True) -> list[Episode]:
    """Play ``n_tasks`` groups of ``group`` episodes (group g: env seed ``seed + g``, train split)
    with ``engine`` under ``markov_loop``, temperature 1, sampler seed ``seed``, final-layer hidden
    states kept (BiPACE reads them); stored under ``run_id``. Returns the episodes (episode-id order)."""
    kw = {"k": k, "split": "train", "max_turns": max_turns, **(env_kwargs or {})}
    cfg = CollectConfig(env_id=ENV_ID, n_groups=n_tasks, group_size=group, seed=seed, loop=markov_loop(max_turns),
                        sampling=SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=seed), env_kwargs=kw,
                        num_slots=n_tasks * group, num_workers=1, run_id=run_id, progress=False,
                        return_hidden=return_hidden)
    episodes = collect(engine, renderer, cfg)
    store.add_episodes(episodes, run_id=run_id)
    return episodes


@dataclass
class MappedBatch:
    """A stored batch mapped onto its mazes' graphs, rows in ``TurnStore.table`` order.

    ``table``: the store's ``TurnTable``; ``state``: graph state per row; ``kind``, ``onward``
    (bool: the action is an exit that leads on), ``won`` (bool: the row's episode won);
    ``a_true``: float64[N] exact advantages under the sampling policy; ``logp_gap``: max |stored
    completion logprob sum − log π(a|s)| over rows; ``prompt_mismatch``: rows whose stored
    prompt differs from ``state_prompts``; ``invalid_episodes``: episodes with an action outside
    the graph (impossible under constrained decoding) or a failed status — left out of ``a_true``
    (0) and flagged; ``pi``/``visits``: per (task, state) the computed π (paraphrase 1: that of the
    last episode mapped there; it depends on the episode's first wording and member) and the
    sampled counts."""

    table: TurnTable
    state: list[str]
    kind: np.ndarray
    onward: np.ndarray
    won: np.ndarray
    a_true: np.ndarray
    logp_gap: float
    prompt_mismatch: int
    invalid_episodes: int
    success_exact: float
    pi: dict
    visits: dict


def group_members(episodes: list[Episode]) -> dict[int, tuple[int, int]]:
    """{episode id: (j, G)}: its rank j by episode id inside its group and the group's size G (the
    ``options["agentrl.member"]`` ``collect`` gave it: ids ``g*G + j``)."""
    groups: dict[int, list[int]] = {}
    for e in episodes:
        groups.setdefault(e.group_id, []).append(e.episode_id)
    return {eid: (j, len(ids)) for ids in groups.values() for j, eid in enumerate(sorted(ids))}


def map_batch(store: TurnStore, run_id: str, episodes: list[Episode], tables: PolicyTables,
              max_turns: int = 24) -> MappedBatch:
    """Replay every stored episode on its maze's graph (``Maze.parse(task_id).graph``), compute
    π per state (``PolicyTables``), exact values and advantages (``agentrl.credit.exact``). At
    paraphrase 1 (``tables.paraphrase_bank``) each episode's values are those of its (maze, first
    wording = its first turn's anchor, member = ``group_members``), and a stored prompt maps back to
    the room whose wording it shows (``MazeValues.check``)."""
    table = store.table(run_id)
    by_id = {e.episode_id: e for e in episodes}
    members = group_members(episodes) if tables.paraphrase_bank else {}

    def values(ep: Episode) -> MazeValues:
        if not tables.paraphrase_bank:
            return tables.maze(ep.task_id, max_turns)
        return tables.maze(ep.task_id, max_turns, first=ep.turns[0].anchor_obs, member=members[ep.episode_id])

    states, kinds, onward, won, a_true = [], [], [], [], []
    gap, mismatch, invalid, visits, pis = 0.0, 0, 0, {}, {}
    for ep_id in dict.fromkeys(table.episode.tolist()):
        ep = by_id[ep_id]
        tid = ep.task_id
        m = values(ep)
        g, acts = m.graph, [t.action for t in ep.turns]
        try:
            visited = g.replay(acts)
            ok = ep.status == EpisodeStatus.OK and all(t.action_valid for t in ep.turns)
        except ValueError:
            visited, ok = [g.start] * len(acts), False
        invalid += not ok
        adv = exact_advantages(g, m.values, acts) if ok else np.zeros(len(acts))
        for turn, s, a, at in zip(ep.turns, visited, acts, adv):
            nxt = g.next_state.get((s, a), s)
            states.append(s)
            kinds.append(g.kind[s])
            onward.append(ok and a.startswith("go ") and g.kind.get(nxt) != "dead")
            won.append(bool(ep.success))
            a_true.append(at)
            if ok:
                bad, d = m.check(turn, s, a)
                mismatch, gap = mismatch + bad, max(gap, d)
                visits.setdefault((tid, s), np.zeros(len(g.actions[s]), np.int64))[g.actions[s].index(a)] += 1
                pis[(tid, s)] = m.pi[s]
    mazes = [values(by_id[e]) for e in dict.fromkeys(table.episode.tolist())]
    succ = float(np.mean([m.values.v(0, m.graph.start) for m in mazes]))
    return MappedBatch(table, states, np.asarray(kinds), np.asarray(onward, bool), np.asarray(won, bool),
                       np.asarray(a_true, np.float64), gap, mismatch, invalid, succ, pis, visits)


def returns_to_go(table: TurnTable) -> np.ndarray:
    """float64[N]: each row's undiscounted return from its turn to its episode's end."""
    out = np.zeros(len(table))
    for e in np.unique(table.episode):
        rows = np.flatnonzero(table.episode == e)
        rows = rows[np.argsort(table.t[rows])]
        out[rows] = np.cumsum(table.reward[rows][::-1])[::-1]
    return out


def frequency_check(batches: list[MappedBatch], top: int = 8) -> list[dict[str, object]]:
    """The ``top`` most visited (task, state) pairs over ``batches``: visits, empirical action
    frequencies, the computed π, and the chi-square-like total variation distance between them."""
    rows = [(key, b.visits[key], b.pi[key]) for b in batches for key in b.visits]
    rows.sort(key=lambda r: -int(r[1].sum()))
    out = []
    for (tid, s), n, p in rows[:top]:
        f = n / n.sum()
        out.append({"task": tid, "state": s, "visits": int(n.sum()), "freq": f.round(3).tolist(),
                    "pi": np.round(p, 3).tolist(), "tv": float(0.5 * np.abs(f - p).sum())})
    return out
