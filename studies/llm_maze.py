"""An LLM policy on ``agentrl/JunctionMaze-v0`` with exact values (issue 38, "then on SmolLM2 batches").

Batches are sampled through agentrl's real rollout path (``agentrl.rollout.collector.collect``,
an ``HFEngine``, a Markov prompt and constrained decoding: ``markov_loop``) and written to a
``TurnStore``; the estimators read the store's ``TurnTable``. The exact advantages need the
policy's probabilities in *every* non-terminal state of each maze (the DP sums over states the
batch may never visit), so each state's prompt is rebuilt the way the rollout builds it (a
``window`` context with ``window_k = 0``: system prompt, task text = the maze's first
observation, current observation with its admissible actions; ``state_prompts``) and checked
against every stored prompt. The policy over a state's admissible actions comes from one batched
forward per distinct prompt (``action_probs``): each action's completion (its text + EOS, as
``completion_sequences`` renders it) is teacher-forced after the prompt and each token's raw
logprob renormalised over the ids the token trie allows at that position, exactly as the
engine's constrained sampler does (``agentrl.llm.step_logprobs``); the product over the
completion's tokens sums to 1 over the actions.

Everything runs on the CPU in the precision the engine was loaded in (fp32 for the benchmark).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agentrl.credit.exact import ExactValues, exact_advantages, exact_values
from agentrl.env.task_graph import TaskGraph
from agentrl.llm.base import SamplingParams
from agentrl.llm.chat import ChatRenderer
from agentrl.llm.constrained import TokenTrie, completion_sequences
from agentrl.rollout.agent_loop import LoopConfig, make_context
from agentrl.rollout.collector import CollectConfig, collect
from agentrl.rollout.parsing import parse_format
from agentrl.rollout.prompt import render_system
from agentrl.store import TurnStore
from agentrl.types import Episode, EpisodeStatus, Turn, TurnTable
from agentrl_envs.junction.maze import Maze

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
    if loop.context != "window" or loop.window_k != 0:
        raise ValueError(f"state prompts need a Markov loop (context window, window_k 0), got {loop.context}/"
                         f"{loop.window_k}")
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


@torch.inference_mode()
def action_probs(model: torch.nn.Module, prompt: np.ndarray, seqs: list[np.ndarray], pad_id: int) -> np.ndarray:
    """float64[A]: the constrained-decoding probability of each completion in ``seqs`` after
    ``prompt`` (one batched forward of A rows, right-padded; per token the raw logit minus the
    logsumexp over the trie's allowed ids at that position). Sums to 1 when ``seqs`` is every
    allowed completion (each ending with EOS, as ``completion_sequences`` gives them)."""
    p, width = len(prompt), max(len(s) for s in seqs)
    ids = torch.full((len(seqs), p + width), int(pad_id), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :p], ids[i, p:p + len(s)] = torch.as_tensor(prompt, dtype=torch.long), torch.as_tensor(s)
        mask[i, :p + len(s)] = 1
    dev = next(model.parameters()).device
    logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), logits_to_keep=width + 1).logits
    raw = logits[:, :width].float().cpu()  # (A, width, V): position p - 1 + k predicts token k
    trie, out = TokenTrie(seqs), np.zeros(len(seqs))
    for i, s in enumerate(seqs):
        for k, allowed in enumerate(trie.walk(s)):
            z = raw[i, k, torch.from_numpy(allowed)]
            out[i] += float(raw[i, k, int(s[k])] - torch.logsumexp(z, dim=0))
    return np.exp(out)


def renormalised(p: np.ndarray) -> np.ndarray:
    """float64[A] ``p / p.sum()``: ``action_probs`` in fp32 sums to 1 within ~1e-6 (rounding of the
    per-token logsumexps), ``exact_values`` wants 1e-9."""
    return p / p.sum()


@dataclass
class PolicyTables:
    """The policy's probabilities, cached by prompt (mazes share prompts: same entrance text and
    room text). ``by_prompt``: prompt bytes -> float64[A]; ``forwards``: forwards run; ``by_task``:
    task id -> ``MazeValues`` (``maze``)."""

    model: torch.nn.Module
    renderer: ChatRenderer
    loop: LoopConfig
    pad_id: int
    by_prompt: dict | None = None
    forwards: int = 0
    by_task: dict | None = None

    def graph_policy(self, graph: TaskGraph) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(π per non-terminal state: float64[len(actions)] summing to 1; prompt ids per state)."""
        self.by_prompt = {} if self.by_prompt is None else self.by_prompt
        prompts, pi = state_prompts(graph, self.renderer, self.loop), {}
        fmt, eos = self.loop.action_format, self.renderer.eos_token_id
        for s, prompt in prompts.items():
            key = prompt.tobytes()
            if key not in self.by_prompt:
                seqs = completion_sequences(graph.actions[s], fmt, self.renderer.encode, eos)
                self.by_prompt[key] = renormalised(action_probs(self.model, prompt, seqs, self.pad_id))
                self.forwards += 1
            pi[s] = self.by_prompt[key]
        return pi, prompts

    def maze(self, task_id: str, horizon: int) -> "MazeValues":
        """The maze ``task_id``'s graph (``Maze.parse(task_id).graph(horizon)``), π and prompts per
        state (``graph_policy``) and exact values under π; cached per task id."""
        self.by_task = {} if self.by_task is None else self.by_task
        if task_id not in self.by_task:
            g = Maze.parse(task_id).graph(horizon)
            pi, prompts = self.graph_policy(g)
            self.by_task[task_id] = MazeValues(g, pi, prompts, exact_values(g, pi))
        return self.by_task[task_id]


@dataclass(frozen=True)
class MazeValues:
    """One maze under one policy: its ``graph``, ``pi`` (state -> float64[A]), ``prompts`` (state
    -> int ids the rollout builds there) and ``values`` (``exact_values``)."""

    graph: TaskGraph
    pi: dict
    prompts: dict
    values: ExactValues

    def check(self, turn: Turn, state: str, action: str) -> tuple[bool, float]:
        """(the turn's stored prompt differs from ``prompts[state]``, |stored completion logprob sum
        − log π(action|state)| in nats) for one sampled turn on this maze."""
        mismatch = not np.array_equal(np.asarray(turn.prompt_ids), self.prompts[state])
        lp = float(np.sum(turn.completion_logprobs, dtype=np.float64))
        p = self.pi[state][self.graph.actions[state].index(action)]
        return mismatch, abs(lp - float(np.log(p)))


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
    (0) and flagged; ``pi``/``visits``: per (task, state) the computed π and the sampled counts."""

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


def map_batch(store: TurnStore, run_id: str, episodes: list[Episode], tables: PolicyTables,
              max_turns: int = 24) -> MappedBatch:
    """Replay every stored episode on its maze's graph (``Maze.parse(task_id).graph``), compute
    π per state (``PolicyTables``), exact values and advantages (``agentrl.credit.exact``)."""
    table = store.table(run_id)
    by_id = {e.episode_id: e for e in episodes}
    states, kinds, onward, won, a_true = [], [], [], [], []
    gap, mismatch, invalid, visits, pis = 0.0, 0, 0, {}, {}
    for ep_id in dict.fromkeys(table.episode.tolist()):
        ep = by_id[ep_id]
        tid = ep.task_id
        m = tables.maze(tid, max_turns)
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
    mazes = [tables.maze(by_id[e].task_id, max_turns) for e in dict.fromkeys(table.episode.tolist())]
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
