"""Expert-Q fidelity on the real envs (issue 49): is an estimator's step credit *right* on
TextWorld-CU1, ALFWorld and WebShop?

There are no exact advantages on a real env, so each turn is scored against an **expert's**
(QVal, arXiv 2606.32034): restore s_t (same seed, replay the prefix), take a_t, let the env's
expert play on from there (``agentrl.env.expert``): Q^E(s_t, a_t) = r_t + γ·V^E(s_{t+1}),
V^E(s_t) the expert's own discounted return from s_t, A^E = Q^E − V^E, γ = 0.95 (so a wasted step
costs). Experts: TextWorld's ``policy_commands`` (the quest's winning commands from the current
state), the ALFWorld Fast Downward planner re-run from the current state, WebShop ``click[back to
search]`` then its oracle actions (search the target's title, open it, its options, Buy Now) —
except on the target's item page (its missing options, Buy Now) or a results page listing it.

Per chain cell (env × policy): a **warm-up batch** (turn-PPO's tabular critic and 3SPO's state
statistics are fitted on it: W = 1 batch) and a **scored batch** of ``groups`` × ``group`` episodes
sampled by SmolLM2 through the real rollout path (the env's example config: window context,
constrained decoding over the admissible actions, temperature 1; ``policy: main`` reads a GiGPO
checkpoint trained by the README's main-job config in the cell's run folder), final-layer hidden
states kept (BiPACE), or by the scripted noisy walkthrough. Every registered chain estimator whose
inputs the batch carries is read on the scored batch. Tree-GRPO and RTPO are read on their own
samplers (``sampler: tree`` / ``rtpo``, ``studies/expert_batches.py``; a branch's expert values
come from its whole root-to-leaf path; RTPO at a fixed policy, scored on its branching turns, the
only ones it gives a value); HiPER needs its own action format and is left out, and so are OPRL and
StepOPSD, whose columns come from model-based step scorers (a PRM, a hindsight teacher). Metrics over the
scored turns of ok episodes (``expert_metrics``), with 95 % bootstrap intervals over task groups;
GRPO is the floor. The expert continuations are cached in the run
folder (``expert_cache.json``): an interrupted cell resumes without re-playing them.

Usage: ``python -m studies.runner --study expert_fidelity --left`` (every cell without a result) or
``--run KEY``; ``python -m studies.expert_fidelity --summary`` prints a table per cell (every
metric), ``--by-metric`` a table per metric (estimator × cell).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from studies.expert_batches import collect_batch, expert_table, load_policy
from studies.runner import ROOT, Cell, Study, finished

GAMMA = 0.95
#: per env: example config, episodes cap, expert step cap, overrides (the study's CPU budget)
ENVS = {
    "textworld_cu1": {"config": "examples/gigpo_textworld.yaml", "groups": 16, "group": 8, "max_expert_steps": 20,
                      "overrides": []},
    "alfworld": {"config": "examples/gigpo_alfworld.yaml", "groups": 6, "group": 4, "max_expert_steps": 60,
                 "overrides": ["env.max_turns=20"]},
    "webshop": {"config": "examples/grpo_webshop.yaml", "groups": 64, "group": 4, "max_expert_steps": 20,
                "overrides": []},
    "webshop_llm": {"config": "examples/grpo_webshop.yaml", "groups": 8, "group": 4, "max_expert_steps": 20,
                    "overrides": []},
}
#: policies: SmolLM2 as packaged, SmolLM2 after the main job, the walkthrough with 25 % slips
POLICIES = ("untrained", "main", "noisy_walkthrough")
#: estimator kwargs: the maze study's settings where a term assumes ALFWorld's reward 10
KWARGS = {"g2po": {"success_reward": 1.0}, "graphgpo": {"goal_value": 1.0, "gamma": GAMMA},
          "beacon": {"milestone_reward": 1.0}, "gigpo": {"gamma": GAMMA},
          # examples/hiper_junction.yaml: the released ALFWorld script's values, penalties scaled to reward 1
          "hiper": {"gamma": 1.0, "lam_turn": 1.0, "lam_seg": 0.95, "keep_penalty": -0.03,
                    "keep_penalty_mode": "normalized", "keep_consistency_penalty": -0.03,
                    "keep_consistency_requires_both": True, "c_inv": 0.1, "bootstrap_truncated": True,
                    "norm_adv": True, "use_term": True}}
LEFT_OUT = {"tree_grpo": "its own sampler (tree cell)", "rtpo": "its own sampler (rtpo cell)",
            "hiper": "its own action format (hiper cell)",
            # columns a model-based step scorer fills during training (ALGORITHMS.md §17.3, §18.3): not yet here
            "oprl": "its step rewards come from a trained PRM (step scorer prm), not scored here yet",
            "stepopsd": "its token gaps come from a hindsight teacher (step scorer hindsight), not scored here yet"}
#: the estimator read on a tree sampler's batches (they branch: the chain estimators refuse them)
SAMPLER_ESTIMATOR = {"tree": "tree_grpo", "rtpo": "rtpo"}
CHAIN_SAMPLERS = ("chains", "hiper")
#: HiPER's sampler: chains in its tagged format (switch, subgoal, action; constrained to the
#: admissible commands in every switch × subgoal form), as examples/hiper_junction.yaml
HIPER_OVERRIDES = ["policy.action_format=hiper", "policy.max_tokens=48", "algorithm.estimator=hiper",
                   "algorithm.kwargs={}", "update.share_prefix=false",
                   'policy.hiper_subgoals=["find the object the task names", "do what the task asks with it"]']
#: the tree samplers' settings (examples/gigpo_textworld.yaml otherwise), 16 tasks as the chain cells
TREE_OVERRIDES = {"tree": ["rollout.sampler=tree", "algorithm.estimator=tree_grpo", "algorithm.kwargs={}",
                           "rollout.tree.trees=4", "rollout.tree.rounds=1", "rollout.tree.branches=2"],
                  "rtpo": ["rollout.sampler=rtpo", "algorithm.estimator=rtpo", "algorithm.kwargs={}",
                           "rollout.tree.siblings=3", "rollout.tree.branch_points=2", "rollout.tree.stride=1"]}
METRICS = ("corr", "spearman", "sign_agree", "sign_acc_hurting", "failed_credit")


def make_cell(env: str, policy: str, seed: int = 0, sampler: str = "chains") -> Cell:
    """One cell: ``env`` (a key of ``ENVS``) sampled by ``policy`` (one of ``POLICIES``) with
    ``sampler`` (chains, or Tree-GRPO's ``tree`` / RTPO's ``rtpo``: 16 tasks × 4 trees or bases); an
    LLM policy on WebShop samples fewer groups (``webshop_llm``: its prompts are long)."""
    sizes = dict(ENVS["webshop_llm"] if env == "webshop" and policy != "noisy_walkthrough" else ENVS[env])
    tag = ""
    if sampler == "hiper":
        sizes.update(groups=8, overrides=[*sizes["overrides"], *HIPER_OVERRIDES])
        tag = "-hiper"
    elif sampler != "chains":
        sizes.update(groups=16, group=4, overrides=[*sizes["overrides"], *TREE_OVERRIDES[sampler]])
        tag = f"-{sampler}"
    return Cell("expert_fidelity", f"{env}-{policy}{tag}-s{seed}", {"env": env, "policy": policy, "gamma": GAMMA,
                                                                    "sampler": sampler, **sizes}, seed)


def grid(root: Path = ROOT) -> list[Cell]:
    """TextWorld-CU1 under SmolLM2 after the main job, as packaged and the noisy walkthrough;
    WebShop under SmolLM2 as packaged (its outcome mix, measured) and the noisy walkthrough; ALFWorld
    under the noisy walkthrough (SmolLM2 as packaged won 0 of 16 games in 20 turns, and a planner call
    per visited state makes its 640 turns ~45 min for an all-fail batch); Tree-GRPO and RTPO on
    their own samplers, TextWorld-CU1 under SmolLM2 as packaged."""
    return [make_cell("textworld_cu1", "main"), make_cell("textworld_cu1", "untrained"),
            make_cell("textworld_cu1", "noisy_walkthrough"), make_cell("webshop", "noisy_walkthrough"),
            make_cell("alfworld", "noisy_walkthrough"), make_cell("webshop", "untrained"),
            make_cell("textworld_cu1", "untrained", sampler="tree"), make_cell("textworld_cu1", "untrained", sampler="rtpo"),
            make_cell("textworld_cu1", "untrained", sampler="hiper")]


def _rank(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x), dtype=np.float64)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)  # average ties
    sums = np.bincount(inv.ravel(), weights=r)
    return (sums / counts)[inv.ravel()]


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def expert_metrics(a_est: np.ndarray, a_exp: np.ndarray, won: np.ndarray, tol: float = 1e-9) -> dict[str, float]:
    """Fidelity of float64[N] ``a_est`` to the expert advantages float64[N] ``a_exp`` (bool[N]
    ``won``: the row's episode won):

    * ``corr`` / ``spearman``: Pearson / Spearman (ties averaged) correlation over all rows, pooled
      (QVal's ``pearson`` / ``spearman``);
    * ``sign_agree``: share of rows with sign(A_est) = sign(A^E), 0 its own sign (QVal's sign
      agreement; with an optimal expert A^E ≤ 0, so a 0 there is "as good as the expert");
    * ``sign_acc_hurting``: share of the hurting turns (A^E < −tol) given A_est < 0;
    * ``failed_credit``: share of the turns *as good as the expert's* (A^E ≥ −tol) inside failed
      episodes given A_est > 0 — an episode-level baseline cannot credit them;
    NaN where a set is empty or a correlation undefined.
    """
    a_est, a_exp, won = np.asarray(a_est, np.float64), np.asarray(a_exp, np.float64), np.asarray(won, bool)
    hurt, good = a_exp < -tol, a_exp >= -tol
    fc = good & ~won
    return {"corr": _corr(a_est, a_exp), "spearman": _corr(_rank(a_est), _rank(a_exp)),
            "sign_acc_hurting": float(np.mean(a_est[hurt] < 0)) if hurt.any() else float("nan"),
            "failed_credit": float(np.mean(a_est[fc] > 0)) if fc.any() else float("nan"),
            "sign_agree": float(np.mean(np.sign(a_est) == np.sign(np.where(np.abs(a_exp) <= tol, 0.0, a_exp))))
            if a_est.size else float("nan")}


def bootstrap(group: np.ndarray, fn, n_boot: int = 1000, seed: int = 0) -> dict[str, list[float]]:
    """{metric: [lo, hi]}: 95 % percentile intervals of ``fn(rows)`` (a metrics dict over the row
    index array ``rows``) resampling task groups (int64[N] ``group``) with replacement."""
    rng, gids = np.random.default_rng(seed), np.unique(group)
    by = {g: np.flatnonzero(group == g) for g in gids}
    draws: dict[str, list[float]] = {}
    for _ in range(n_boot):
        rows = np.concatenate([by[g] for g in rng.choice(gids, len(gids))])
        for k, v in fn(rows).items():
            draws.setdefault(k, []).append(v)
    out = {}
    for k, v in draws.items():
        x = np.asarray(v)[np.isfinite(v)]
        out[k] = [float(np.percentile(x, 2.5)), float(np.percentile(x, 97.5))] if x.size > 1 else [float("nan")] * 2
    return out


def _estimates(table, warm_table) -> dict[str, np.ndarray]:
    """float64[N] advantages of every registered estimator the batch can feed (``LEFT_OUT`` not)."""
    from dataclasses import replace

    from agentrl.credit import compute_advantages, list_estimators
    from studies.credit_fidelity import _critic_values
    from studies.fidelity import StateCounts

    if not table.trainable.any():  # scripted turns carry no tokens: score every row of an ok episode
        table = replace(table, trainable=np.ones(len(table), bool))
        warm_table = replace(warm_table, trainable=np.ones(len(warm_table), bool))
    counts = StateCounts()
    counts.fit(warm_table)

    class _Mapped:  # _critic_values reads .table
        table = warm_table

    full = replace(table, value=_critic_values([_Mapped], table), state_stats=counts.column(table))
    from agentrl.credit import get_estimator

    names = [n for n in list_estimators()
             if n not in LEFT_OUT and not ("hidden" in get_estimator(n).requires and table.hidden is None)]
    if table.switch is not None:  # a HiPER-format batch: its tags are columns; the tabular critic as its three heads
        full = replace(full, value_low=full.value, value_high=full.value, value_term=full.value)
        names.append("hiper")
    return {n: compute_advantages(full, n, **KWARGS.get(n, {})) for n in names}


def _run(cell: Cell, run_dir: Path) -> dict:
    from agentrl.credit import compute_advantages
    from agentrl.env.expert import ExpertCache
    from agentrl.store import TurnStore

    c, t0 = cell.config, time.perf_counter()
    cfg, policy = load_policy(cell, run_dir)
    store = TurnStore(run_dir / "batches.sqlite")
    runs, sampler = set(store.runs()), c.get("sampler", "chains")
    batches = {}
    # chains: a warm-up batch for the learned parts (W = 1); tree samplers: their own estimator only
    for name, seed in ((("warm", 1000 + cell.seed),) if sampler in CHAIN_SAMPLERS else ()) + (("scored", cell.seed),):
        batches[name] = store.table(name) if name in runs else None
        if batches[name] is None or not len(batches[name]):
            collect_batch(cfg, policy, store, name, c["groups"], c["group"], seed, sampler)
            batches[name] = store.table(name)
    t_roll = time.perf_counter() - t0
    episodes = store.load_episodes("scored")
    cache = ExpertCache(run_dir / "expert_cache.json")
    values = expert_table(cfg, episodes, c, cache)
    t_exp = time.perf_counter() - t0 - t_roll
    table = batches["scored"]
    a_exp = np.zeros(len(table))
    use = np.zeros(len(table), bool)
    for i, (e, t) in enumerate(zip(table.episode.tolist(), table.t.tolist())):
        if e in values and table.episode_ok[i]:
            a_exp[i], use[i] = values[e].a[t], True
    won_ep = {e.episode_id: bool(e.success) for e in episodes}
    won = np.array([won_ep[e] for e in table.episode.tolist()])
    ests = _estimates(table, batches["warm"]) if sampler in CHAIN_SAMPLERS else {
        SAMPLER_ESTIMATOR[sampler]: compute_advantages(table, SAMPLER_ESTIMATOR[sampler])}
    if sampler == "rtpo":  # RTPO gives a value to its branching turns only (credit/rtpo.py): score those
        use &= np.asarray(table.branch) >= 0
    rows = np.flatnonzero(use)
    res = {}
    for name, adv in ests.items():
        fn = (lambda r, adv=adv: expert_metrics(adv[rows][r], a_exp[rows][r], won[rows][r]))
        res[name] = {"point": fn(np.arange(rows.size)), "ci": bootstrap(table.group[rows], fn)}
    ep_won = [won_ep[e] for e in values]
    return {"env": c["env"], "env_id": cfg.env.id, "policy": c["policy"], "sampler": sampler, "gamma": c["gamma"],
            "max_turns": cfg.env.max_turns, "max_expert_steps": c["max_expert_steps"],
            "episodes": len(values), "turns": int(rows.size), "success": float(np.mean(ep_won)) if ep_won else 0.0,
            "mixed_groups": int(sum(len({won_ep[e] for e in np.unique(table.episode[table.group == g])}) > 1
                                    for g in np.unique(table.group))),
            "groups": int(np.unique(table.group).size),
            "a_exp": {"hurting": int((a_exp[rows] < -1e-9).sum()), "as_good": int((a_exp[rows] >= -1e-9).sum()),
                      "mean": float(a_exp[rows].mean()) if rows.size else float("nan")},
            "expert_won_from_start": float(np.mean([v.won[0] for v in values.values()])) if values else 0.0,
            "replay_mismatch": int(sum(v.replay_mismatch for v in values.values())),
            "continuations": len(cache.entries), "seconds_rollout": t_roll, "seconds_expert": t_exp,
            "left_out": LEFT_OUT, "kwargs": KWARGS, "estimators": res}


POLICY_LABEL = {"untrained": "SmolLM2-135M-Instruct as packaged (constrained decoding, T = 1)",
                "main": "SmolLM2 after the main job (GiGPO, 4 iterations; constrained decoding, T = 1)",
                "noisy_walkthrough": "the walkthrough with 25 % random slips (scripted)"}
EXPERT_LABEL = {"textworld_cu1": "TextWorld `policy_commands` from the current state",
                "alfworld": "Fast Downward planner re-run from the current state",
                "webshop": "finish from the target's item/results page, else back to search + oracle"}


def summary(root: Path = ROOT) -> str:
    """The Markdown table of the finished cells: estimator × cell, each metric with its interval."""
    lines = []
    order = {c.key: i for i, c in enumerate(grid())}
    for rec in sorted(finished(root, "expert_fidelity"), key=lambda rec: order.get(rec["key"], 99)):
        r = rec["row"]
        fmt = " in HiPER's tagged format (switch, subgoal, action)" if r.get("sampler") == "hiper" else ""
        lines.append(f"\n**{r['env_id']}** (max_turns {r['max_turns']}), sampled by {POLICY_LABEL[r['policy']]}{fmt}; "
                     f"expert: {EXPERT_LABEL[r['env']]} (≤ {r['max_expert_steps']} steps), γ {r['gamma']}. "
                     f"{r['turns']} turns of {r['episodes']} episodes ({r['groups']} groups, {r['mixed_groups']} with "
                     f"mixed outcomes), success {r['success']:.0%}; A^E < 0 on {r['a_exp']['hurting']} turns; "
                     f"replay mismatches {r['replay_mismatch']}; "
                     + ("warm-up W = 1 batch (turn-PPO's tabular critic, 3SPO's statistics)\n"
                        if r.get("sampler", "chains") in CHAIN_SAMPLERS else f"sampler {r['sampler']}\n"))
        lines.append("| estimator | " + " | ".join(METRICS) + " |")
        lines.append("|---" * (len(METRICS) + 1) + "|")
        for name, m in r["estimators"].items():
            lines.append(f"| {name} | " + " | ".join(_fmt(m, k) for k in METRICS) + " |")
    return "\n".join(lines)


def _fmt(m: dict, k: str) -> str:
    p, (lo, hi) = m["point"][k], m["ci"].get(k, [float("nan")] * 2)
    if not np.isfinite(p):
        return "–"
    return f"{p:+.2f} [{lo:+.2f}, {hi:+.2f}]" if np.isfinite(lo) else f"{p:+.2f}"


def by_metric(root: Path = ROOT, metrics: tuple[str, ...] = ("corr", "sign_acc_hurting", "failed_credit")) -> str:
    """One Markdown table per metric: estimator × cell (env, policy), point [95 % interval]."""
    order = {c.key: i for i, c in enumerate(grid())}
    recs = [rec["row"] for rec in sorted(finished(root, "expert_fidelity"), key=lambda rec: order.get(rec["key"], 99))
            if rec["row"].get("sampler", "chains") in CHAIN_SAMPLERS]
    names = sorted({n for r in recs for n in r["estimators"]})
    head = " | ".join(f"{r['env']} · {r['policy']}{' · hiper format' if r.get('sampler') == 'hiper' else ''} "
                      f"({r['turns']} turns)" for r in recs)
    out = []
    for k in metrics:
        out += [f"\n**{k}**\n", f"| estimator | {head} |", "|---" * (len(recs) + 1) + "|"]
        out += [f"| {n} | " + " | ".join(_fmt(r["estimators"][n], k) if n in r["estimators"] else "n/a" for r in recs)
                + " |" for n in names]
    return "\n".join(out)


def tree_table(root: Path = ROOT) -> str:
    """Tree-GRPO and RTPO on their own samplers: one row per cell, every metric."""
    out = ["| estimator · cell | turns scored (episodes, success) | " + " | ".join(METRICS) + " |",
           "|---" * (len(METRICS) + 2) + "|"]
    for rec in finished(root, "expert_fidelity"):
        r = rec["row"]
        if r.get("sampler", "chains") in CHAIN_SAMPLERS:
            continue
        for name, m in r["estimators"].items():
            out.append(f"| {name} · {r['env']} {r['policy']} {r['sampler']} | {r['turns']} ({r['episodes']}, "
                       f"{r['success']:.0%}) | " + " | ".join(_fmt(m, k) for k in METRICS) + " |")
    return "\n".join(out)


STUDY = Study("expert_fidelity", grid, _run)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--summary", action="store_true", help="print the Markdown tables of the finished cells")
    ap.add_argument("--by-metric", action="store_true", help="print one table per metric (estimator × cell)")
    args = ap.parse_args(argv)
    if args.summary:
        print(summary())
    if args.by_metric:
        print(by_metric())
        print("\n" + tree_table())


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    main()
