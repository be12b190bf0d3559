"""The oracle arm of the junction-maze LLM comparison (issue 38), and its per-iteration endpoints.

The oracle trains the policy on the *exact* advantages A^π = Q^π − V^π of the policy that
sampled the batch: for every maze of the iteration, π(a|s) in every non-terminal state comes
from one forward of the live (LoRA) model per distinct prompt, renormalised over the token
trie's allowed ids as the constrained sampler does (``llm_maze.PolicyTables``), and the values
from the finite-horizon DP (``agentrl.credit.exact``). It needs the live model and the
iteration's episodes (action texts, task ids), which an estimator (``fn(table)``) does not see,
so this *benchmark-only* module

- registers the estimator ``exact_oracle`` in this process while a cell runs (``oracle_registered``;
  never in ``agentrl.credit``: an estimator that needs an env's task graph and the live model is
  not a general method), and
- wraps ``agentrl.train.loop.start_run`` (to hold the run's ``Policy``) and
  ``agentrl.train.loop.collect_iteration`` (to hold the iteration's episodes and record its
  endpoints: ``junction_stats``) for the duration of ``capture()``.

The advantages are the raw exact values (no group or batch normalisation), as the tabular
oracle of ``credit_fidelity.py``; the update's optimizer is AdamW, whose step does not depend on
the advantages' overall scale.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from agentrl.credit import list_estimators, register_estimator, unregister_estimator
from agentrl.credit.exact import exact_advantages
from agentrl.types import Episode, EpisodeStatus, TurnTable
from agentrl_envs.junction.maze import NO_OPS, Maze
from studies.llm_maze import PolicyTables, group_members

ORACLE = "exact_oracle"
#: ``PolicyTables.batched`` of the oracle's calls (False: one forward per prompt, the path before
#: issue 51; ``benchmarks/cell_speed.py`` sets it to time both)
BATCHED = True


@dataclass
class LiveRun:
    """What the wrapped trainer hands the oracle and the endpoints while a cell trains.

    ``policy``: the run's ``Policy`` (set by the wrapped ``start_run``); ``loop``: the run's
    ``LoopConfig`` (``agentrl.eval.loop_config``); ``episodes``: the current iteration's;
    ``per_iter``: one ``junction_stats`` dict per iteration (1-based order); ``oracle_checks``:
    per oracle call the prompt mismatches and the max |stored logprob − log π| of sampled turns."""

    policy: object | None = None
    loop: object | None = None
    paraphrase_bank: int = 0
    episodes: list[Episode] = field(default_factory=list)
    per_iter: list[dict] = field(default_factory=list)
    oracle_checks: list[dict] = field(default_factory=list)


LIVE = LiveRun()


def bank_of(env_kwargs: dict) -> int:
    """``PolicyTables.paraphrase_bank`` of a junction-maze run: 0 at ``paraphrase`` 0, else the env's
    ``paraphrase_bank`` (its default when not set)."""
    if not int(env_kwargs.get("paraphrase", 0) or 0):
        return 0
    from agentrl_envs.junction.env import PARAPHRASE_BANK

    return int(env_kwargs.get("paraphrase_bank", PARAPHRASE_BANK))


class TurnRole(NamedTuple):
    """One turn of a junction-maze episode replayed on its maze's task graph (``turn_roles``).

    ``state``: the task-graph state the action was taken in (``"j1"`` …); ``role``: ``"noop"`` (look / wait),
    ``"exit_<direction>"`` (an exit taken at a junction) or ``"move"`` (any other move); ``voiced``:
    ``"voiced"`` / ``"unvoiced"`` (the junction's sign comes with a spoken hint or not) and ``right``: the exit
    leads on — both None but at exits."""

    state: str
    role: str
    voiced: str | None
    right: bool | None


def turn_roles(episode: Episode, horizon: int) -> list[TurnRole]:
    """``TurnRole`` of every turn of one episode, replayed on its maze's task graph (horizon ``horizon``).

    Raises:
        ValueError: the task id is not a junction maze's, or an action is not admissible where taken."""
    maze = Maze.parse(episode.task_id)
    graph = maze.graph(horizon)
    acts = [t.action for t in episode.turns]
    out: list[TurnRole] = []
    for s, a in zip(graph.replay(acts), acts):
        if a in NO_OPS:
            out.append(TurnRole(s, "noop", None, None))
        elif graph.kind[s] == "junction":
            out.append(TurnRole(s, f"exit_{a[3:]}", "voiced" if maze.hinted(int(s[1:])) else "unvoiced",
                                graph.kind[graph.next_state[(s, a)]] != "dead"))
        else:
            out.append(TurnRole(s, "move", None, None))
    return out


def junction_stats(episodes: list[Episode], horizon: int) -> dict[str, float]:
    """The endpoints of one iteration's episodes (all of them in the denominators):
    ``success`` (share won), ``first_junction_right`` (share whose first exit taken at junction 1
    leads on: the pre-registered primary endpoint), ``first_junction_chosen`` (share that took
    any exit at junction 1), ``junction_accuracy`` (right exits / exits taken at any junction),
    ``episodes``, ``failed`` (episodes not ok: never counted as right)."""
    right = chosen = j_right = j_taken = failed = 0
    for ep in episodes:
        if ep.status != EpisodeStatus.OK:
            failed += 1
            continue
        first = True
        for r in turn_roles(ep, horizon):
            if not r.role.startswith("exit_"):
                continue
            j_taken, j_right = j_taken + 1, j_right + r.right
            if r.state == "j1" and first:
                first, chosen, right = False, chosen + 1, right + r.right
    n = max(len(episodes), 1)
    return {"episodes": len(episodes), "success": sum(bool(e.success) for e in episodes) / n,
            "first_junction_right": right / n, "first_junction_chosen": chosen / n,
            "junction_accuracy": j_right / j_taken if j_taken else float("nan"), "failed": failed}


def oracle_advantages(table: TurnTable, episodes: list[Episode], tables: PolicyTables, horizon: int) -> tuple[np.ndarray, dict]:
    """float64[N] exact advantages of ``table``'s rows (matched to ``episodes`` by episode id and
    turn index) under the policy ``tables`` computes, and the checks (prompt mismatches, max logprob
    gap over sampled turns). Episodes not ok get 0 (they are flagged, as the trainer does).

    Raises:
        KeyError: a row's episode is not among ``episodes``."""
    by_id = {e.episode_id: e for e in episodes}
    members = group_members(episodes) if tables.paraphrase_bank else {}
    out, gap, mismatch = np.zeros(len(table)), 0.0, 0
    for ep_id in np.unique(table.episode):
        ep = by_id[int(ep_id)]
        rows = np.flatnonzero(table.episode == ep_id)
        if ep.status != EpisodeStatus.OK:
            continue
        m = (tables.maze(ep.task_id, horizon, first=ep.turns[0].anchor_obs, member=members[ep.episode_id])
             if tables.paraphrase_bank else tables.maze(ep.task_id, horizon))  # paraphrase: per first wording, member
        acts = [t.action for t in ep.turns]
        adv = exact_advantages(m.graph, m.values, acts)
        for turn, s, a in zip(ep.turns, m.graph.replay(acts), acts):
            bad, d = m.check(turn, s, a)
            mismatch, gap = mismatch + bad, max(gap, d)
        out[rows] = adv[table.t[rows]]
    return out, {"prompt_mismatch": mismatch, "logp_gap": gap, "forwards": tables.forwards}


def _exact_oracle(table: TurnTable) -> np.ndarray:
    """The registered ``exact_oracle``: ``oracle_advantages`` under the live model (eval mode)."""
    pol = LIVE.policy
    if pol is None:
        raise RuntimeError("exact_oracle runs only inside studies.oracle_arm.capture() (it needs the live model)")
    was_training = pol.model.training
    pol.model.eval()
    try:
        tables = PolicyTables(pol.model, pol.renderer, LIVE.loop, pol.pad_id, paraphrase_bank=LIVE.paraphrase_bank,
                              batched=BATCHED)
        adv, checks = oracle_advantages(table, LIVE.episodes, tables, LIVE.loop.max_turns)
    finally:
        pol.model.train(was_training)
    LIVE.oracle_checks.append(checks)
    if checks["prompt_mismatch"]:
        raise RuntimeError(f"exact_oracle: {checks['prompt_mismatch']} sampled prompts differ from the rebuilt state "
                           "prompts: the exact values would be of another policy")
    return adv


@contextlib.contextmanager
def oracle_registered():
    """While open, ``exact_oracle`` is a registered estimator (a config naming it validates); on
    exit it is unregistered again, unless it was registered before: an estimator that would read a
    finished run's stale ``LIVE`` must not outlive the cell (later "every registered estimator"
    loops in the same process would call it)."""
    ours = ORACLE not in list_estimators()
    if ours:
        register_estimator(ORACLE, groups_by_task=False)(_exact_oracle)
    try:
        yield
    finally:
        if ours:
            unregister_estimator(ORACLE)


@contextlib.contextmanager
def capture(cfg, on_iter=None):
    """While open, the trainer hands ``LIVE`` its policy and each iteration's episodes, and
    ``LIVE.per_iter`` gets each iteration's ``junction_stats`` (also handed to ``on_iter(iteration,
    stats)``, 0-based iteration, when given); yields ``LIVE`` (reset)."""
    import agentrl.train.loop as loop_mod
    from agentrl.eval import loop_config

    start, collect = loop_mod.start_run, loop_mod.collect_iteration
    LIVE.__init__(loop=loop_config(cfg), paraphrase_bank=bank_of(dict(cfg.env.kwargs)))

    def start_run(*a, **kw):
        parts, state = start(*a, **kw)
        LIVE.policy = parts.policy
        return parts, state

    def collect_iteration(*a, **kw):
        eps = collect(*a, **kw)
        LIVE.episodes = eps
        LIVE.per_iter.append(junction_stats(eps, cfg.env.max_turns))
        if on_iter is not None:
            on_iter(a[2] if len(a) > 2 else kw["iteration"], LIVE.per_iter[-1])
        return eps

    loop_mod.start_run, loop_mod.collect_iteration = start_run, collect_iteration
    try:
        yield LIVE
    finally:
        loop_mod.start_run, loop_mod.collect_iteration = start, collect
