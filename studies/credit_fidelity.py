"""Credit fidelity on the junction maze (issue 38): are an estimator's advantages *right*?

For every registered estimator, on the same batches of ``agentrl/JunctionMaze-v0`` (K = 1, the
control, and K = 5 junctions), against the exact advantages A^π = Q^π − V^π from dynamic
programming on each maze's task graph (``agentrl.credit.exact``):

1. **Fidelity table** at the initial (uniform) tabular policy, one batch per seed (``--tasks``
   mazes × ``--group`` episodes): corr(A_est, A_true) and sign accuracy on junction turns, the
   share of correct junction choices inside failed episodes credited A > 0, the noise share
   (Var on filler turns / Var on junction turns), and two store-side diagnostics (share of turns
   in informative anchor groups, share whose sign differs from GRPO's); ``studies/fidelity.py``.
2. **Learning curves**: a tabular softmax policy (``studies/tabular_maze.py``: one logit
   vector per observation text, Adam lr ``--lr``) trained ``--iterations`` iterations by each
   estimator, and by an **oracle arm** trained on the exact advantages (the upper bound of what
   credit can buy here). Arms share each seed's mazes and sampling seeds (paired by seed).
   Reported: success per iteration (mean, 95 % normal interval over seeds), success averaged over
   training, and its paired difference against GRPO.

Estimator settings: defaults, except the terms that assume ALFWorld's reward 10: G2PO
``success_reward``, GraphGPO ``goal_value`` and BEACON ``milestone_reward`` = 1.0 (the maze's
reward), and GraphGPO γ 0.95
(the prototype's). turn-PPO's critic is tabular (per observation text, the mean return-to-go of
the previous batch, updated with step 0.5; at the fidelity batch, fitted on one extra batch).
HiPER (no tags in the maze): one segment per episode, the turn critic as its three heads, keep
penalties 0. Tree-GRPO and RTPO score tree rollouts; on these chain batches (one tree per episode, no branch
groups) they are reported as they come out. Estimators whose columns come from a model-based step
scorer (OPRL's PRM, StepOPSD's hindsight teacher; ``LEFT_OUT``) are left out of both modes for now.

**LLM mode** (``--policy smollm2``; ``studies/llm_maze.py``): the fidelity table on batches
sampled by the packaged SmolLM2 through the real rollout path (Markov prompt, constrained
decoding, groups of ``--group``), ``--seeds`` batches of ``--tasks`` mazes per K. The exact
advantages use the policy's own constrained-decoding probabilities in every state of each maze
(one forward per distinct prompt). turn-PPO's tabular critic is cross-fitted (fitted on the
other seeds' batches of the same K); BiPACE reads the model's final-layer hidden states. Checks
reported with it: every stored prompt equals the rebuilt state prompt, the stored logprob of
each sampled action equals log π(a|s), no episode left the graph, and per-state empirical action
frequencies vs π on the most visited states. Output ``--out`` defaults to
``results/credit_fidelity_llm.json``.

The committed ``results/credit_fidelity.json`` was run on 3 exits with bare cues, before the env's
defaults changed for SmolLM2: reproduce it with ``--n-exits 3 --n-hinted 0 --cue-prior 1.3``.

Usage: ``python -m studies.credit_fidelity [--ks 1 5] [--seeds 200] [--iterations 30]
[--tasks 4] [--group 8] [--lr 0.7] [--cue-prior 0.7] [--n-exits N] [--n-hinted N] [--workers 2] [--out studies/results/credit_fidelity.json]``;
``--summary`` prints the Markdown tables of ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from multiprocessing import Pool
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import agentrl  # noqa: E402,F401  (registers the agentrl/ ids)
from agentrl.credit import compute_advantages, get_estimator, list_estimators  # noqa: E402
from studies.fidelity import StateCounts, fidelity, informative_share, mean_ci, sign_vs_grpo  # noqa: E402
from studies.tabular_maze import (TabularPolicy, build_batch, policy_gradient, sample_episode,  # noqa: E402
                                  success_rate, true_advantages)

ENV_ID = "agentrl/JunctionMaze-v0"
ORACLE = "oracle"
KWARGS = {"g2po": {"success_reward": 1.0}, "graphgpo": {"goal_value": 1.0, "gamma": 0.95},
          "beacon": {"milestone_reward": 1.0}, "hiper": {"keep_penalty": 0.0, "keep_consistency_penalty": 0.0}}
#: estimators the study does not score, with the reason (their columns come from a model-based step scorer)
LEFT_OUT = {"oprl": "its step rewards come from a trained PRM (step scorer prm), not scored here yet",
            "stepopsd": "its token gaps come from a hindsight teacher (step scorer hindsight), not scored here yet"}
METRICS = ("corr", "sign_acc", "failed_credit", "noise_share", "informative_share", "sign_vs_grpo")
_ENVS: dict[tuple, gym.Env] = {}


def study_estimators() -> list[str]:
    """The registered estimators this study scores: every one but ``LEFT_OUT``, in registry order."""
    return [n for n in list_estimators() if n not in LEFT_OUT]


def maze_kwargs(args: argparse.Namespace) -> dict[str, int]:
    """The env kwargs ``--n-exits`` / ``--n-hinted`` set (the env's defaults where None)."""
    kw = {"n_exits": getattr(args, "n_exits", None), "n_hinted": getattr(args, "n_hinted", None)}
    return {k: v for k, v in kw.items() if v is not None}


def mazes(k: int, seed: int, iteration: int, n_tasks: int, env_kwargs: dict[str, int] | None = None) -> list:
    """The ``n_tasks`` task graphs of (seed, iteration) from the env's train split."""
    key = (k, tuple(sorted((env_kwargs or {}).items())))
    env = _ENVS.get(key)
    if env is None:
        env = _ENVS[key] = gym.make(ENV_ID, k=k, split="train", **(env_kwargs or {})).unwrapped
    out = []
    for i in range(n_tasks):
        env.reset(seed=(seed * 1009 + iteration) * n_tasks + i)
        out.append(env.task_graph())
    return out


class TabularCritic:
    """turn-PPO's critic here: per observation text, a value moved toward each observed
    undiscounted return-to-go with step ``rate`` (0 for an unseen text)."""

    def __init__(self, rate: float = 0.5) -> None:
        self.rate, self.v = rate, {}

    def __call__(self, obs: str) -> float:
        return self.v.get(obs, 0.0)

    def fit(self, batch) -> None:
        for obs, g in zip(batch.obs, _returns_to_go(batch)):
            self.v[obs] = self.v.get(obs, 0.0) + self.rate * (g - self.v.get(obs, 0.0))


def _returns_to_go(batch) -> np.ndarray:
    out = [np.cumsum(ep.rewards[::-1])[::-1] for eps in batch.groups for ep in eps]
    return np.concatenate(out) if out else np.zeros(0)


def play(graphs, policy: TabularPolicy, group: int, rng: np.random.Generator, critic=None, seed: int = 0):
    """One batch: ``group`` episodes on each graph, as a ``tabular_maze.Batch``."""
    groups = [[sample_episode(g, policy, rng) for _ in range(group)] for g in graphs]
    return build_batch(graphs, groups, critic, seed=seed)


def advantages(name: str, batch, policy: TabularPolicy, counts: StateCounts | None = None) -> np.ndarray:
    """float64[N]: the arm's advantages on ``batch`` (exact ones for the oracle); 3SPO reads the
    per-state statistics of the earlier batches ``counts`` (none: no prior)."""
    if name == ORACLE:
        return true_advantages(batch, policy)
    return compute_advantages(with_counts(name, batch.table, counts), name, **KWARGS.get(name, {}))


def with_counts(name: str, table, counts: StateCounts | None):
    """``table`` with 3SPO's ``state_stats`` from ``counts`` when estimator ``name`` requires them,
    and HiPER's columns when it requires those (``hiper_columns``)."""
    import dataclasses

    if "switch" in get_estimator(name).requires:
        return dataclasses.replace(table, **hiper_columns(table))
    if "state_stats" not in get_estimator(name).requires:
        return table
    return dataclasses.replace(table, state_stats=(counts or StateCounts()).column(table))


def hiper_columns(table) -> dict[str, np.ndarray]:
    """HiPER's inputs on a maze without tags: every turn KEEP (one segment per episode), no switch
    or subgoal span, the turn critic's ``value`` as all three heads: HAE is then whitened turn
    GAE (γ = λ = 1) against that critic."""
    n = len(table)
    value = np.zeros(n) if table.value is None else table.value
    return {"switch": np.zeros(n, bool), "has_switch": np.zeros(n, bool), "subgoal_key": np.full(n, -1, np.int64),
            "value_low": value, "value_high": value, "value_term": value}


def onward(batch) -> np.ndarray:
    """bool[N]: the row's action is an exit that leads on (not a no-op, not a dead end)."""
    return batch.correct & np.array([a.startswith("go ") for eps in batch.groups for ep in eps for a in ep.actions])


def run_seed(job: tuple[int, int, argparse.Namespace]) -> dict:
    """Fidelity at the initial policy and every arm's learning curve for one (K, seed)."""
    k, seed, args = job
    arms = list(getattr(args, "arms", None) or study_estimators()) + [ORACLE]
    t0 = time.process_time()
    policy, critic = TabularPolicy(lr=args.lr, cue_prior=args.cue_prior, noop_logit=args.noop_logit), TabularCritic()
    graphs = mazes(k, seed, 0, args.tasks, maze_kwargs(args))
    warm, counts = play(graphs, policy, args.group, np.random.default_rng([seed, k, 99]), seed=seed), StateCounts()
    critic.fit(warm)
    counts.fit(warm.table)  # 3SPO's statistics: the same earlier batch the critic saw
    batch = play(graphs, policy, args.group, np.random.default_rng([seed, k, 0]), critic, seed=seed)
    a_true = true_advantages(batch, policy)
    fid = {}
    for name in arms:
        a = advantages(name, batch, policy, counts)
        fid[name] = fidelity(a, a_true, batch.kind, onward(batch), batch.won)
        fid[name]["informative_share"] = informative_share(batch.table)
        fid[name]["sign_vs_grpo"] = sign_vs_grpo(batch.table, a)
    curves = {}
    for name in arms:
        policy, critic, succ = TabularPolicy(lr=args.lr, cue_prior=args.cue_prior, noop_logit=args.noop_logit), TabularCritic(), []
        counts = StateCounts()
        for it in range(args.iterations):
            graphs = mazes(k, seed, it, args.tasks, maze_kwargs(args))
            b = play(graphs, policy, args.group, np.random.default_rng([seed, k, it]), critic, seed=seed)
            succ.append(success_rate(b))
            policy.step(policy_gradient(b, policy, advantages(name, b, policy, counts)))
            critic.fit(b)
            counts.fit(b.table)
        curves[name] = succ
    return {"k": k, "seed": seed, "fidelity": fid, "curves": curves, "cpu_s": time.process_time() - t0}


def aggregate(results: list[dict], ks: list[int]) -> dict:
    """Per K: the fidelity table and the learning summary (means with 95 % intervals)."""
    out = {}
    for k in ks:
        rs = [r for r in results if r["k"] == k]
        arms = list(rs[0]["fidelity"])
        fid = {a: {m: mean_ci(np.array([r["fidelity"][a][m] for r in rs])) for m in METRICS} for a in arms}
        curves = {a: np.array([r["curves"][a] for r in rs]) for a in arms}
        avg = {a: c.mean(axis=1) for a, c in curves.items()}
        learn = {a: {"per_iter": [mean_ci(c[:, i]) for i in range(c.shape[1])], "avg": mean_ci(avg[a]),
                     "vs_grpo": mean_ci(avg[a] - avg["grpo"])} for a, c in curves.items()}
        out[str(k)] = {"seeds": len(rs), "fidelity": fid, "learning": learn}
    return out


def summary(data: dict) -> str:
    """Markdown: per K, the fidelity table and the learning table."""
    lines = []
    for k, d in data["by_k"].items():
        lines += [f"\nK = {k} ({d['seeds']} seeds): fidelity at the initial policy (mean [95 % CI])\n",
                  "| estimator | " + " | ".join(METRICS) + " |", "|---" * (len(METRICS) + 1) + "|"]
        for a, row in d["fidelity"].items():
            lines.append(f"| {a} | " + " | ".join(_fmt(row[m]) for m in METRICS) + " |")
        lines += [f"\nK = {k}: success averaged over {data['config']['iterations']} iterations, and vs GRPO "
                  "(points, paired by seed)\n", "| arm | success % | vs GRPO | first → last iteration % |",
                  "|---|---|---|---|"]
        for a, row in d["learning"].items():
            first, last = row["per_iter"][0][0], row["per_iter"][-1][0]
            lines.append(f"| {a} | {_fmt(row['avg'], 100)} | {_fmt(row['vs_grpo'], 100, sign=True)} | "
                         f"{100 * first:.1f} → {100 * last:.1f} |")
    return "\n".join(lines)


def _fmt(ci, scale: float = 1.0, sign: bool = False) -> str:
    m, lo, hi = (scale * x for x in ci)
    f = "{:+.2f}" if sign else "{:.2f}"
    return f"{f.format(m)} [{f.format(lo)}, {f.format(hi)}]" if np.isfinite(lo) else f.format(m)


def _critic_values(fit_on: list, table) -> np.ndarray:
    """float64[N]: turn-PPO's tabular critic (``TabularCritic``, per anchor text) fitted on the
    mapped batches ``fit_on`` (in order), read on ``table``'s rows (0 for unseen texts)."""
    from studies.llm_maze import returns_to_go

    critic = TabularCritic()
    for mb in fit_on:
        for key, g in zip(mb.table.anchor_key, returns_to_go(mb.table)):
            obs = mb.table.anchor_vocab[key]
            critic.v[obs] = critic.v.get(obs, 0.0) + critic.rate * (g - critic.v.get(obs, 0.0))
    return np.array([critic(table.anchor_vocab[key]) for key in table.anchor_key], np.float64)


def run_llm(args: argparse.Namespace) -> dict:
    """The LLM mode (module docstring): per K and seed, sample, map, score; returns the JSON."""
    import dataclasses
    import tempfile

    import torch
    from studies.llm_maze import PolicyTables, frequency_check, map_batch, markov_loop, sample_batch
    from transformers import AutoTokenizer

    from agentrl.llm.chat import ChatRenderer
    from agentrl.llm.hf import HFEngine
    from agentrl.llm.models import resolve_model
    from agentrl.store import TurnStore

    torch.set_num_threads(1)
    path = resolve_model(args.model)
    engine = HFEngine.from_pretrained(path, dtype=args.dtype, num_threads=1)
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(path))
    tables = PolicyTables(engine.model, renderer, markov_loop(args.max_turns), engine.pad_token_id)
    t0, load0 = time.time(), os.getloadavg()[0]
    by_k = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = TurnStore(args.store or Path(tmp) / "llm.sqlite")
        for k in args.ks:
            mapped, t_k = [], time.time()
            for seed in range(args.seeds):
                run_id = f"{args.tag}-k{k}-s{seed}"
                eps = sample_batch(engine, renderer, store, run_id, k=k, seed=1000 * seed + 17 * k, n_tasks=args.tasks,
                                   group=args.group, max_turns=args.max_turns, env_kwargs=maze_kwargs(args))
                mapped.append(map_batch(store, run_id, eps, tables, args.max_turns))
            fids = []
            for i, mb in enumerate(mapped):
                table = dataclasses.replace(  # chains: one tree per episode, no branch groups (as the tabular mode)
                    mb.table, value=_critic_values(mapped[:i] + mapped[i + 1:], mb.table), tree=mb.table.episode,
                    branch=np.full(len(mb.table), -1, np.int64))
                row, counts = {}, StateCounts()
                for other in mapped[:i] + mapped[i + 1:]:  # 3SPO's statistics: the other batches, as the critic
                    counts.fit(other.table)
                for name in study_estimators() + [ORACLE]:
                    a = mb.a_true if name == ORACLE else compute_advantages(with_counts(name, table, counts), name,
                                                                            **KWARGS.get(name, {}))
                    row[name] = fidelity(a, mb.a_true, mb.kind, mb.onward, mb.won)
                    row[name]["informative_share"] = informative_share(table)
                    row[name]["sign_vs_grpo"] = sign_vs_grpo(table, a)
                fids.append(row)
            n_ep = [len(np.unique(mb.table.episode)) for mb in mapped]
            wins = [int(np.sum([mb.won[mb.table.episode == e][0] for e in np.unique(mb.table.episode)])) for mb in mapped]
            by_k[str(k)] = {
                "seeds": len(mapped), "episodes": int(sum(n_ep)), "wins": int(sum(wins)),
                "success_sampled": sum(wins) / max(sum(n_ep), 1),
                "success_exact": float(np.mean([mb.success_exact for mb in mapped])),
                "rows": int(sum(len(mb.table) for mb in mapped)),
                "fidelity": {a: {m: mean_ci(np.array([f[a][m] for f in fids])) for m in METRICS} for a in fids[0]},
                "checks": {"max_logprob_gap": max(mb.logp_gap for mb in mapped),
                           "prompt_mismatches": int(sum(mb.prompt_mismatch for mb in mapped)),
                           "invalid_episodes": int(sum(mb.invalid_episodes for mb in mapped)),
                           "most_visited": frequency_check(mapped)},
                "wall_s": time.time() - t_k}
        store.close()
    return {"config": {"policy": args.policy, "model": args.model, "dtype": args.dtype, "ks": args.ks,
                       "seeds": args.seeds, "tasks": args.tasks, "group": args.group, "max_turns": args.max_turns,
                       "env_kwargs": maze_kwargs(args) or "env defaults",
                       "env_seed_of_group": "1000 * seed + 17 * k + g", "temperature": 1.0,
                       "loop": "window, window_k 0, action_format whole, action_constraint admissible",
                       "critic": "turn-PPO tabular critic cross-fitted on the other seeds' batches",
                       "torch_threads": 1},
            "estimator_kwargs": KWARGS, "left_out": LEFT_OUT, "date": time.strftime("%Y-%m-%d"),
            "host": platform.node(), "torch": torch.__version__, "forwards": tables.forwards,
            "wall_s": time.time() - t0, "load": [load0, os.getloadavg()[0]], "by_k": by_k}


def llm_summary(data: dict) -> str:
    """Markdown: per K, the LLM-mode fidelity table, success rates and checks."""
    lines = []
    for k, d in data["by_k"].items():
        c = d["checks"]
        lines += [f"\nK = {k} ({d['seeds']} batches, {d['episodes']} episodes, {d['rows']} turns): success sampled "
                  f"{d['wins']}/{d['episodes']} = {100 * d['success_sampled']:.1f} %, exact under π "
                  f"{100 * d['success_exact']:.1f} %; checks: max |stored logprob − log π| {c['max_logprob_gap']:.2e}, "
                  f"prompt mismatches {c['prompt_mismatches']}, invalid episodes {c['invalid_episodes']}\n",
                  "| estimator | " + " | ".join(METRICS) + " |", "|---" * (len(METRICS) + 1) + "|"]
        for a, row in d["fidelity"].items():
            lines.append(f"| {a} | " + " | ".join(_fmt(row[m]) for m in METRICS) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 5])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.7)
    ap.add_argument("--cue-prior", type=float, default=0.7,
                    help="initial logit of a junction's right exit (others 0): per-junction success ~0.65 with the "
                         "env's 2 exits (1.3 did that with the 3 exits of results/credit_fidelity.json)")
    ap.add_argument("--n-exits", type=int, default=None, help="the env's n_exits (default: the env's)")
    ap.add_argument("--n-hinted", type=int, default=None, help="the env's n_hinted (default: the env's)")
    ap.add_argument("--noop-logit", type=float, default=-3.0, help="initial logit of look/wait")
    ap.add_argument("--arms", nargs="+", default=None,
                    help="tabular mode: estimators to run (default: every registered one but LEFT_OUT; grpo is needed "
                         "for the paired differences; the oracle always runs)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None, help="default results/credit_fidelity.json (tabular), "
                    "results/credit_fidelity_llm.json (--policy smollm2)")
    ap.add_argument("--policy", default="tabular", choices=["tabular", "smollm2"])
    ap.add_argument("--model", default="smollm2-135m-instruct", help="LLM mode: packaged name or HF folder")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--max-turns", type=int, default=24)
    ap.add_argument("--store", default=None, help="LLM mode: keep the sampled batches in this turn store")
    ap.add_argument("--tag", default="fidelity", help="LLM mode: run-id prefix in the store")
    ap.add_argument("--summary", action="store_true", help="print the Markdown tables of --out and exit")
    ap.add_argument("--estimator-kwargs", default=None, metavar="JSON",
                    help='merged into KWARGS, e.g. \'{"hiper": {"norm_adv": false}}\' (recorded in the JSON)')
    args = ap.parse_args()
    for name, kw in json.loads(args.estimator_kwargs or "{}").items():  # before the Pool forks: workers see it
        KWARGS.setdefault(name, {}).update(kw)
    llm = args.policy != "tabular"
    args.out = args.out or str(Path(__file__).parent / "results" / (
        "credit_fidelity_llm.json" if llm else "credit_fidelity.json"))
    show = llm_summary if llm else summary
    if args.summary:
        print(show(json.loads(Path(args.out).read_text())))
        return
    if llm:
        data = run_llm(args)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(data, indent=1, default=float))
        print(show(data))
        return
    jobs = [(k, s, args) for k in args.ks for s in range(args.seeds)]
    t0, load0 = time.time(), os.getloadavg()[0]
    with Pool(args.workers) as pool:
        results = pool.map(run_seed, jobs, chunksize=1)
    data = {"config": {k: v for k, v in vars(args).items() if k not in ("out", "summary", "model", "dtype", "store",
                                                                         "tag", "estimator_kwargs")},
            "env_kwargs": maze_kwargs(args) or "defaults of agentrl/JunctionMaze-v0 (n_exits 2, n_cues 24, n_hinted 20)",
            "estimator_kwargs": KWARGS, "left_out": LEFT_OUT, "date": time.strftime("%Y-%m-%d"),
            "host": platform.node(), "wall_s": time.time() - t0, "cpu_s_per_seed": float(np.mean([r["cpu_s"] for r in results])),
            "load": [load0, os.getloadavg()[0]], "by_k": aggregate(results, args.ks)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(data, indent=1, default=float))
    print(summary(data))


if __name__ == "__main__":
    main()
