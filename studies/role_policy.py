"""A tabular maze policy with *shared* skills (issue 51): what the per-text table misses about LoRA.

``tabular_maze.TabularPolicy`` has one logit vector per observation text, so "follow the voice"
must be learned junction by junction. The LLM pilot of issue 38 showed that LoRA learns it as one
skill for every hinted junction at once, which episode-level credit teaches as well as any (RESULTS,
junction_llm). ``RolePolicy`` adds that: every action has a **role** — at a hinted junction the
``voiced`` exit and the ``unvoiced`` ones, at an unhinted junction ``exit``, elsewhere ``onward``,
and ``look`` / ``wait`` everywhere — and its logit is the text's own logit plus the role's shared
logit θ[role]:

    z(s, a) = table[obs(s)][a] + θ[role(s, a)]

Both are trained by the same Adam ascent (the role's gradient is the sum over the batch's texts).
θ starts at ``prior`` (calibrated on SmolLM2 by ``studies/junction_prior.py``: the untrained model's
mean probability per role, ``role_means``, as log-probabilities, ``prior_logits``), the table at 0;
``shared=False`` keeps θ fixed at the prior (the per-text model with the LLM's starting point).
Which cue an unhinted sign means is only in the table: no role knows it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from agentrl.env.task_graph import TaskGraph
from studies.tabular_maze import TabularPolicy

ROLES = ("voiced", "unvoiced", "exit", "onward", "look", "wait")
_VOICE = re.compile(r"A voice says: (go \w+)\.")


def action_roles(graph: TaskGraph, state: str) -> np.ndarray:
    """int64[n_actions]: the index into ``ROLES`` of each action of ``state``. A junction is hinted
    when its observation carries the voice ("A voice says: go east.", ``envs/junction``)."""
    acts = graph.actions[state]
    obs = graph.observation[state]
    voice = _VOICE.search(obs) if graph.kind[state] == "junction" else None
    out = []
    for a in acts:
        if a in ("look", "wait"):
            out.append(ROLES.index(a))
        elif graph.kind[state] != "junction":
            out.append(ROLES.index("onward"))
        elif voice is None:
            out.append(ROLES.index("exit"))
        else:
            out.append(ROLES.index("voiced" if a == voice.group(1) else "unvoiced"))
    return np.asarray(out, np.int64)


@dataclass
class RolePolicy(TabularPolicy):
    """``TabularPolicy`` plus shared role logits θ (module doc). ``prior`` maps role → initial θ
    (missing roles 0); ``shared`` whether θ is trained."""

    prior: Mapping[str, float] = field(default_factory=dict)
    shared: bool = True
    roles: dict[str, np.ndarray] = field(default_factory=dict)
    theta: np.ndarray = field(default_factory=lambda: np.zeros(len(ROLES)))
    _tm: np.ndarray = field(default_factory=lambda: np.zeros(len(ROLES)))
    _tv: np.ndarray = field(default_factory=lambda: np.zeros(len(ROLES)))

    def __post_init__(self) -> None:
        unknown = set(self.prior) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown roles {sorted(unknown)}: the roles are {ROLES}")
        self.theta = np.array([float(self.prior.get(r, 0.0)) for r in ROLES])

    def prime(self, graph: TaskGraph) -> None:
        """Table logits 0 and the role of every action for ``graph``'s unseen texts.

        Raises:
            ValueError: one text with two different role layouts (the table would be ambiguous)."""
        for s, acts in graph.actions.items():
            obs = graph.observation[s]
            roles = action_roles(graph, s)
            seen = self.roles.get(obs)
            if seen is not None and not np.array_equal(seen, roles):
                raise ValueError(f"observation {obs[:60]!r} has two role layouts: {seen} and {roles}")
            self.roles[obs] = roles
            self.logits.setdefault(obs, np.zeros(len(acts)))

    def probs(self, obs: str, n_actions: int) -> np.ndarray:
        """float64[n_actions]: softmax(table[obs] + θ[roles[obs]]).

        Raises:
            KeyError: ``obs`` was never primed (its roles are unknown)."""
        z = self.logits.get(obs)
        if z is None or obs not in self.roles:
            raise KeyError(f"observation {obs[:60]!r} was not primed: call prime(graph) first")
        if z.shape[0] != n_actions:
            raise ValueError(f"observation {obs[:60]!r} seen with {z.shape[0]} and {n_actions} actions")
        z = z + self.theta[self.roles[obs]]
        e = np.exp(z - z.max())
        return e / e.sum()

    def step(self, grads: Mapping[str, np.ndarray]) -> None:
        """One Adam step ascending ``grads`` (obs → float64[n_actions], the gradient of the
        objective with respect to the text's full logits): the table takes each text's gradient,
        θ (when ``shared``) their sum per role."""
        super().step(grads)
        if not self.shared:
            return
        g = np.zeros(len(ROLES))
        for obs, grad in grads.items():
            g += np.bincount(self.roles[obs], weights=grad, minlength=len(ROLES))
        b1, b2, eps = 0.9, 0.999, 1e-8
        c1, c2 = 1 - b1 ** self._steps, 1 - b2 ** self._steps
        self._tm = b1 * self._tm + (1 - b1) * g
        self._tv = b2 * self._tv + (1 - b2) * g * g
        self.theta = self.theta + self.lr * (self._tm / c1) / (np.sqrt(self._tv / c2) + eps)

    def greedy_success(self, graph: TaskGraph) -> bool:
        """Whether the argmax path from ``graph.start`` wins within ``graph.horizon`` turns (ties:
        the first action)."""
        self.prime(graph)
        s = graph.start
        for _ in range(graph.horizon):
            if s in graph.terminal:
                break
            acts = graph.actions[s]
            a = acts[int(np.argmax(self.probs(graph.observation[s], len(acts))))]
            r, s = graph.reward[(s, a)], graph.next_state[(s, a)]
            if s in graph.terminal:
                return r > 0
        return False


def role_means(graphs: list[TaskGraph], policies: list[Mapping[str, np.ndarray]]) -> dict[str, float]:
    """Per role, the mean probability of one action of that role over every state of ``graphs``
    where the role occurs (``policies[i]``: π per state of ``graphs[i]``, e.g.
    ``llm_maze.PolicyTables.graph_policy``). Roles that never occur are left out."""
    sums, counts = np.zeros(len(ROLES)), np.zeros(len(ROLES))
    for g, pi in zip(graphs, policies):
        for s in g.actions:
            roles = action_roles(g, s)
            sums += np.bincount(roles, weights=np.asarray(pi[s], np.float64), minlength=len(ROLES))
            counts += np.bincount(roles, minlength=len(ROLES))
    return {r: float(sums[i] / counts[i]) for i, r in enumerate(ROLES) if counts[i]}


def prior_logits(means: Mapping[str, float]) -> dict[str, float]:
    """θ from ``role_means``: log of each role's mean probability per action (softmax of these
    over a state's actions gives back the means' proportions)."""
    return {r: float(np.log(max(p, 1e-12))) for r, p in means.items()}
