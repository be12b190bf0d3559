"""A tabular softmax policy on ``agentrl/JunctionMaze-v0`` task graphs (issue 38).

The policy has one logit vector per observation text — the env's Markov prompt — over that
state's admissible actions (junction states: one per (junction, cue, exits) text; filler rooms:
one per room text). Episodes are sampled on the maze's ``TaskGraph`` (the same transitions and
rewards the env steps through, checked by the env's tests), turned into a ``TurnTable`` the
registered estimators read, and trained by a policy gradient with Adam, as the trainer's
per-turn loss is: ``-(1/N) Σ_t A_t log π(a_t | s_t)`` over the N turns of the batch.

Everything is float64 NumPy; one run of 30 iterations × 4 mazes × 8 episodes takes about a
second per arm on one core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from agentrl.credit.exact import exact_advantages, exact_values
from agentrl.env.task_graph import TaskGraph
from agentrl.types import TurnTable

HIDDEN = 16  # size of BiPACE's stand-in hidden state (one random centre per observation text)


@dataclass
class Episode:
    """One sampled episode on a task graph.

    Attributes:
        states: the T states visited before each action (graph state ids).
        actions: the T actions taken.
        rewards: float64[T] step rewards.
        won: whether the episode ended with a positive terminal reward.
        truncated: whether the horizon cut it (not terminated).
        next_states: the T states after each action.
    """

    states: list[str]
    actions: list[str]
    rewards: np.ndarray
    won: bool
    truncated: bool
    next_states: list[str]


@dataclass
class TabularPolicy:
    """Softmax policy: ``logits[obs]`` float64[n_actions(obs)], created at 0 when first seen,
    trained with Adam (``lr``, β = (0.9, 0.999), ε = 1e-8; the tabular prototype's lr 0.7);
    initial logits from ``prime``."""

    lr: float = 0.7
    cue_prior: float = 0.0
    noop_logit: float = 0.0
    logits: dict[str, np.ndarray] = field(default_factory=dict)
    _m: dict[str, np.ndarray] = field(default_factory=dict)
    _v: dict[str, np.ndarray] = field(default_factory=dict)
    _steps: int = 0

    def prime(self, graph: TaskGraph) -> None:
        """Create the logits of ``graph``'s unseen observation texts: 0, except ``noop_logit`` on
        ``look``/``wait`` and ``cue_prior`` on a junction's right exit (a stand-in for what a
        pretrained model reads from a sign: the same prior per junction at every K)."""
        for s, acts in graph.actions.items():
            obs = graph.observation[s]
            if obs in self.logits:
                continue
            z = np.array([self.noop_logit if a in ("look", "wait") else 0.0 for a in acts])
            if graph.kind[s] == "junction":
                for i, a in enumerate(acts):
                    nxt = graph.next_state[(s, a)]
                    if nxt != s and graph.kind.get(nxt) != "dead":
                        z[i] = self.cue_prior
            self.logits[obs] = z

    def probs(self, obs: str, n_actions: int) -> np.ndarray:
        """float64[n_actions]: π(· | obs). Raises ValueError when ``obs`` was seen with another
        number of actions (two states with one text must offer the same actions)."""
        z = self.logits.get(obs)
        if z is None:
            z = self.logits[obs] = np.zeros(n_actions)
        if z.shape[0] != n_actions:
            raise ValueError(f"observation {obs[:60]!r} seen with {z.shape[0]} and {n_actions} actions")
        e = np.exp(z - z.max())
        return e / e.sum()

    def state_policy(self, graph: TaskGraph) -> dict[str, np.ndarray]:
        """π per non-terminal state of ``graph`` (what ``exact_values`` reads)."""
        return {s: self.probs(graph.observation[s], len(acts)) for s, acts in graph.actions.items()}

    def step(self, grads: Mapping[str, np.ndarray]) -> None:
        """One Adam step on the logits, ascending ``grads`` (obs → float64[n_actions])."""
        self._steps += 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        c1, c2 = 1 - b1 ** self._steps, 1 - b2 ** self._steps
        for obs, g in grads.items():
            m = self._m.setdefault(obs, np.zeros_like(g))
            v = self._v.setdefault(obs, np.zeros_like(g))
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            self.logits[obs] += self.lr * (m / c1) / (np.sqrt(v / c2) + eps)


def sample_episode(graph: TaskGraph, policy: TabularPolicy, rng: np.random.Generator) -> Episode:
    """Play one episode on ``graph`` from its start with ``policy`` (at most ``graph.horizon`` turns)."""
    policy.prime(graph)
    s, states, actions, nexts, rewards = graph.start, [], [], [], []
    while s not in graph.terminal and len(actions) < graph.horizon:
        acts = graph.actions[s]
        p = policy.probs(graph.observation[s], len(acts))
        a = acts[min(int(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right")), len(acts) - 1)]
        states.append(s)
        actions.append(a)
        rewards.append(graph.reward[(s, a)])
        s = graph.next_state[(s, a)]
        nexts.append(s)
    won = s in graph.terminal and rewards[-1] > 0
    return Episode(states, actions, np.asarray(rewards, dtype=np.float64), won, s not in graph.terminal, nexts)


@dataclass
class Batch:
    """One iteration's episodes: ``groups[g]`` holds the episodes of maze ``graphs[g]``.

    ``table`` is their ``TurnTable`` (rows in episode order, turn order inside), ``ep_of_row``
    int64[N], ``kind`` the graph's state label per row (``"junction"``, ``"filler"``, ...),
    ``correct`` bool[N] (the action leads to a non-dead, non-losing state) and ``won`` bool[N]
    (the row's episode won)."""

    graphs: list[TaskGraph]
    groups: list[list[Episode]]
    table: TurnTable
    kind: np.ndarray
    correct: np.ndarray
    won: np.ndarray
    obs: list[str]
    action_index: np.ndarray


def build_batch(graphs: Sequence[TaskGraph], groups: Sequence[Sequence[Episode]],
                value_of: Callable[[str], float] | None = None, seed: int = 0) -> Batch:
    """The batch's ``TurnTable``: anchors = observation texts, one random float64[16] centre per
    text as BiPACE's hidden state, ``value`` from ``value_of(obs)`` (turn-PPO's critic; 0 when
    None), one tree per episode, no branch groups (chains), BEACON's milestones as the env's
    ``info["milestone"]`` (a junction left by its right exit; ``n_milestones`` = the junctions)."""
    vocab: dict[str, int] = {}
    acts: dict[str, int] = {}
    cols: dict[str, list] = {k: [] for k in ("group", "episode", "t", "reward", "terminated", "truncated", "anchor",
                                             "next", "action", "parent", "kind", "correct", "won", "obs", "aidx",
                                             "milestone", "n_milestones")}
    ep_id = 0
    for g, (graph, eps) in enumerate(zip(graphs, groups)):
        n_junctions = sum(1 for lab in graph.kind.values() if lab == "junction")
        for ep in eps:
            n = len(ep.actions)
            for t, (s, a, s2) in enumerate(zip(ep.states, ep.actions, ep.next_states)):
                row = len(cols["t"])
                obs, obs2 = graph.observation[s], graph.observation[s2]
                cols["group"].append(g)
                cols["episode"].append(ep_id)
                cols["t"].append(t)
                cols["reward"].append(ep.rewards[t])
                cols["terminated"].append(t == n - 1 and not ep.truncated)
                cols["truncated"].append(t == n - 1 and ep.truncated)
                cols["anchor"].append(vocab.setdefault(obs, len(vocab)))
                cols["next"].append(vocab.setdefault(obs2, len(vocab)))
                cols["action"].append(acts.setdefault(a, len(acts)))
                cols["parent"].append(row - 1 if t else -1)
                cols["kind"].append(graph.kind[s])
                cols["correct"].append(graph.kind.get(s2) not in ("dead",) and not (s2 in graph.terminal
                                                                                   and graph.reward[(s, a)] <= 0))
                cols["won"].append(ep.won)
                cols["obs"].append(obs)
                cols["aidx"].append(graph.actions[s].index(a))
                # BEACON's milestones as JunctionMaze-v0 publishes them: a junction left by its right exit
                cols["milestone"].append(graph.kind[s] == "junction" and s2 != s and graph.kind.get(s2) != "dead")
                cols["n_milestones"].append(n_junctions)
            ep_id += 1
    n = len(cols["t"])
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(len(vocab), 1), HIDDEN))
    anchor = np.asarray(cols["anchor"], np.int64)
    values = np.asarray([value_of(o) if value_of else 0.0 for o in cols["obs"]], np.float64)
    table = TurnTable(
        group=np.asarray(cols["group"], np.int64), episode=np.asarray(cols["episode"], np.int64),
        t=np.asarray(cols["t"], np.int64), reward=np.asarray(cols["reward"], np.float64),
        terminated=np.asarray(cols["terminated"], bool), truncated=np.asarray(cols["truncated"], bool),
        action_valid=np.ones(n, bool), anchor_key=anchor, next_anchor_key=np.asarray(cols["next"], np.int64),
        action_key=np.asarray(cols["action"], np.int64), parent=np.asarray(cols["parent"], np.int64),
        episode_ok=np.ones(n, bool), trainable=np.ones(n, bool), turn_id=np.arange(n, dtype=np.int64),
        hidden=centres[anchor], value=values, bootstrap_value=np.zeros(n),
        tree=np.asarray(cols["episode"], np.int64), branch=np.full(n, -1, np.int64),
        milestone=np.asarray(cols["milestone"], bool), n_milestones=np.asarray(cols["n_milestones"], np.int64),
        anchor_vocab=tuple(sorted(vocab, key=vocab.__getitem__)))
    return Batch(list(graphs), [list(e) for e in groups], table, np.asarray(cols["kind"]),
                 np.asarray(cols["correct"], bool), np.asarray(cols["won"], bool), cols["obs"],
                 np.asarray(cols["aidx"], np.int64))


def true_advantages(batch: Batch, policy: TabularPolicy) -> np.ndarray:
    """float64[N]: A^π(s_t, a_t) = Q^π − V^π per row, by dynamic programming on each maze's graph
    under the policy that sampled the batch (``agentrl.credit.exact``)."""
    out = []
    for graph, eps in zip(batch.graphs, batch.groups):
        values = exact_values(graph, policy.state_policy(graph))
        for ep in eps:
            out.append(exact_advantages(graph, values, ep.actions))
    return np.concatenate(out) if out else np.zeros(0)


def policy_gradient(batch: Batch, policy: TabularPolicy, adv: np.ndarray) -> dict[str, np.ndarray]:
    """Per observation text, float64[n_actions]: (1/N) Σ_t A_t ∇ log π(a_t | s_t) (the ascent
    direction of the trainer's per-turn policy-gradient loss)."""
    grads: dict[str, np.ndarray] = {}
    n = max(len(adv), 1)
    for obs, a, A in zip(batch.obs, batch.action_index, adv):
        if A == 0.0:
            continue
        p = policy.probs(obs, policy.logits[obs].shape[0])
        g = grads.setdefault(obs, np.zeros_like(p))
        g -= (A / n) * p
        g[a] += A / n
    return grads


def success_rate(batch: Batch) -> float:
    """Share of the batch's episodes that won."""
    eps = [e for g in batch.groups for e in g]
    return float(np.mean([e.won for e in eps])) if eps else float("nan")
