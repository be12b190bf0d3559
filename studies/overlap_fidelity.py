"""Credit where states never repeat (issue 50): every registered estimator, OPRL (trained PRM and
``prm_lr: 0``) and StepOPSD (the paper's λ 0.2, α 0.05 and λ 1, α 0.5) against the exact advantages
on SmolLM2 batches of ``agentrl/JunctionMaze-v0`` at ``paraphrase`` 0 (rooms worded alike: anchor
groups recur) and 1 (no room worded alike by two members of a group: anchor groups are singletons),
K = 5 and K = 1.

A cell (paraphrase, K, seed) on the shared study runner:

1. **Warm-up**: W = ``WARMUP`` iterations of OPRL training through the real trainer
   (``examples/oprl_junction.yaml`` at the cell's paraphrase and K, fp32, a checkpoint every
   iteration, so an interrupted cell resumes): the policy and the PRM both train (OPRL's log-ratio
   is 0 at iteration 0, so a learned scorer is read only after some iterations).
2. **Fidelity batches**: ``BATCHES`` batches of ``TASKS`` mazes × ``GROUP`` episodes sampled by the
   warmed-up policy (``studies.llm_maze.sample_batch``: the real collector, Markov prompt, constrained
   decoding, temperature 1), mapped to their exact advantages under that policy
   (``studies.llm_maze.map_batch``; at paraphrase 1 π per room averaged over the member's share of the
   wording bank).
3. **Scores**: the PRM after W iterations scores each batch without a step on it (``prm``); a zero
   adapter beside it is the released code's PRM (``oprl_frozen``: π_φ = the initial policy); the
   hindsight teacher is the stale snapshot of iteration 0 (W < ``teacher_refresh`` = 10, so the
   initial policy) with the hindsight block. turn-PPO's tabular critic and 3SPO's counts are
   cross-fitted on the cell's other batch (as ``studies.credit_fidelity``'s LLM mode).

Metrics per estimator (``studies.fidelity``): Pearson correlation with A^π on junction turns,
sign accuracy, credit of correct exits inside failed episodes, filler-noise share, plus the share of
rows whose state (the exact text shown) another episode of the same group also saw (the overlap) —
averaged over the cell's batches.

Usage: ``python -m studies.runner --study overlap_fidelity --run p1-k1-s0``;
``python -m studies.overlap_fidelity --summary`` prints the table of the committed cells.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from studies.runner import ROOT, Cell, Study

WARMUP = 3  #: W: OPRL training iterations before the fidelity batches
BATCHES, TASKS, GROUP, MAX_TURNS = 2, 4, 8, 24
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "oprl_junction.yaml"
#: the learned-credit rows beside every registered estimator: (row name, estimator, its kwargs)
EXTRA = (("oprl", "oprl", {}), ("oprl_frozen", "oprl", {}), ("stepopsd", "stepopsd", {}),
         ("stepopsd_large", "stepopsd", {"lambda_mix": 1.0, "alpha_clip": 0.5}))


def make_cell(paraphrase: int, k: int, seed: int = 0) -> Cell:
    """The cell of (paraphrase, K, seed)."""
    return Cell("overlap_fidelity", f"p{paraphrase}-k{k}-s{seed}", {"paraphrase": paraphrase, "k": k,
                                                                   "warmup": WARMUP, "batches": BATCHES,
                                                                   "tasks": TASKS, "group": GROUP}, seed)


def grid(root: Path = ROOT) -> list[Cell]:
    """K = 1 first (the cheap cells), then K = 5; paraphrase 0 and 1 each."""
    return [make_cell(p, k) for k in (1, 5) for p in (0, 1)]


def warmup_config(cell: Cell, run_dir: Path):
    """The warm-up run's checked config: the example at the cell's paraphrase and K, fp32."""
    from agentrl.config import _yaml_load
    from agentrl.train.checks import checked_config_from_dict

    raw = _yaml_load(EXAMPLE.read_text())
    raw["run"] = {**raw["run"], "name": "warmup", "out_dir": str(run_dir), "iterations": WARMUP, "save_every": 1,
                  "eval_every": 0, "eval_before": False, "seed": cell.seed}
    raw["env"]["kwargs"] = {"k": cell.config["k"], "paraphrase": cell.config["paraphrase"]}
    raw["policy"] = {**raw["policy"], "dtype": "float32", "num_threads": 2}
    raw["log"] = {"console": False, "jsonl": True, "tensorboard": False}
    return checked_config_from_dict(raw)


def _scorers(cfg, policy, ckpt: Path):
    """(trained PRM, frozen PRM, hindsight teacher) on the warmed-up ``policy``: the PRM as checkpointed
    (scoring only: no step on a fidelity batch), a zero ``prm_frozen`` adapter, the teacher of iteration 0."""
    from agentrl.config import AlgorithmConfig
    from agentrl.train.hindsight import HindsightScorer
    from agentrl.train.prm import PRMScorer
    from agentrl.train.scorer_options import HindsightOptions, PRMOptions

    beta, mb = cfg.algorithm.kwargs["beta"], cfg.update.micro_batch
    prm = PRMScorer(policy.model, policy.renderer, policy.pad_id, PRMOptions(), beta, 2 * cfg.update.lr, mb)
    if not prm.load(ckpt):
        raise RuntimeError(f"the warm-up checkpoint {ckpt} has no prm.pt")
    prm.optimizer = None  # read the PRM of iteration W; never step it on a fidelity batch
    frozen = PRMScorer(policy.model, policy.renderer, policy.pad_id, PRMOptions(prm_lr=0.0), beta, 0.0, mb,
                       adapter="prm_frozen")
    hcfg = dataclasses.replace(cfg, algorithm=AlgorithmConfig(estimator="stepopsd", kwargs={"lambda_mix": 1.0}))
    hind = HindsightScorer(policy.model, policy.renderer, policy.pad_id, hcfg, HindsightOptions())
    hind.refreshed_at = 0  # the stale snapshot taken at iteration 0 (zero adapter = the initial policy)
    return prm, frozen, hind


def overlap(table) -> float:
    """Share of the eligible rows whose anchor (exact text shown) another episode of the same task
    group also saw: the state overlap anchor estimators need (0 at paraphrase 1)."""
    elig = table.episode_ok & table.trainable
    seen: dict[tuple[int, int], set[int]] = {}
    for g, a, e in zip(table.group[elig].tolist(), table.anchor_key[elig].tolist(), table.episode[elig].tolist()):
        seen.setdefault((g, a), set()).add(e)
    hit = [len(seen[(g, a)]) >= 2 for g, a in zip(table.group[elig].tolist(), table.anchor_key[elig].tolist())]
    return float(np.mean(hit)) if hit else float("nan")


def _rows(mapped, scored, counts_of, critic_of) -> list[dict]:
    """Per batch, every estimator's fidelity row."""
    from agentrl.credit import compute_advantages
    from studies.credit_fidelity import KWARGS, ORACLE, study_estimators, with_counts
    from studies.fidelity import fidelity, informative_share, sign_vs_grpo

    out = []
    for i, mb in enumerate(mapped):
        base = dataclasses.replace(mb.table, value=critic_of(i), tree=mb.table.episode,
                                   branch=np.full(len(mb.table), -1, np.int64))
        row = {}
        for name in study_estimators() + [n for n, _, _ in EXTRA] + [ORACLE]:
            if name == ORACLE:
                a = mb.a_true
            elif name in {n for n, _, _ in EXTRA}:
                est, kw = next((e, k) for n, e, k in EXTRA if n == name)
                a = compute_advantages(dataclasses.replace(base, scores=scored[i][name]), est, **kw)
            else:
                a = compute_advantages(with_counts(name, base, counts_of(i)), name, **KWARGS.get(name, {}))
            row[name] = {**fidelity(a, mb.a_true, mb.kind, mb.onward, mb.won),
                         "informative_share": informative_share(base), "sign_vs_grpo": sign_vs_grpo(base, a),
                         "overlap": overlap(base)}
        out.append(row)
    return out


def _run(cell: Cell, run_dir: Path) -> dict:
    """Warm up (resumable), sample and map the fidelity batches, score, compare (module docstring)."""
    import torch

    from agentrl.distributed import DistContext
    from agentrl.distributed.policy import trained_policy
    from agentrl.llm.policy import load_policy
    from agentrl.store import TurnStore
    from agentrl.train import train
    from agentrl.update.checkpoint import load_weights
    from studies.credit_fidelity import _critic_values
    from studies.fidelity import StateCounts
    from studies.llm_maze import PolicyTables, map_batch, markov_loop, sample_batch

    t0 = time.time()
    cfg = warmup_config(cell, run_dir)
    result = train(cfg, resume=True)
    warm = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    ckpt = result.run_dir / "checkpoints" / (result.run_dir / "checkpoints" / "latest").read_text().strip()
    t_warm = time.time() - t0
    torch.set_num_threads(2)
    policy = trained_policy(load_policy(cfg.policy), cfg, DistContext())
    load_weights(ckpt, policy.model)
    prm, frozen, hind = _scorers(cfg, policy, ckpt)
    p, k = cell.config["paraphrase"], cell.config["k"]
    tables = PolicyTables(policy.model, policy.renderer, markov_loop(MAX_TURNS), policy.pad_id,
                          paraphrase_bank=16 if p else 0)
    store_path = run_dir / "fidelity.sqlite"
    store_path.unlink(missing_ok=True)
    mapped, scored, sampled = [], [], []
    with TurnStore(store_path) as store:
        for b in range(BATCHES):
            run_id = f"fid-b{b}"
            eps = sample_batch(policy.engine, policy.renderer, store, run_id, k=k, seed=10_000 + 1000 * cell.seed + b,
                               n_tasks=TASKS, group=GROUP, max_turns=MAX_TURNS, env_kwargs={"paraphrase": p})
            mb = map_batch(store, run_id, eps, tables, MAX_TURNS)
            t_p, t_f, t_h = (s.score(mb.table, eps, WARMUP) for s in (prm, frozen, hind))
            keep = lambda t, names: {n: t.scores[n] for n in names}  # noqa: E731
            scored.append({"oprl": keep(t_p, ("prm_logratio", "prm_batch_absmax")),
                           "oprl_frozen": keep(t_f, ("prm_logratio", "prm_batch_absmax")),
                           "stepopsd": keep(t_h, ("gap", "gap_span")), "stepopsd_large": keep(t_h, ("gap", "gap_span"))})
            mapped.append(mb)
            wins = [bool(mb.won[mb.table.episode == e][0]) for e in np.unique(mb.table.episode)]
            sampled.append({"episodes": len(wins), "wins": int(sum(wins)), "success_exact": mb.success_exact,
                            "max_logprob_gap": mb.logp_gap, "prompt_mismatches": mb.prompt_mismatch,
                            "invalid_episodes": mb.invalid_episodes, "rows": len(mb.table),
                            "prm_abs_mean": float(np.abs(t_p.scores["prm_logratio"]).mean()),
                            "frozen_abs_mean": float(np.abs(t_f.scores["prm_logratio"]).mean())})

    def counts_of(i: int):
        counts = StateCounts()
        for other in mapped[:i] + mapped[i + 1:]:
            counts.fit(other.table)
        return counts

    rows = _rows(mapped, scored, counts_of, lambda i: _critic_values(mapped[:i] + mapped[i + 1:], mapped[i].table))
    names = list(rows[0])
    fid = {n: {m: float(np.nanmean([r[n][m] for r in rows])) for m in rows[0][n]} for n in names}
    return {"paraphrase": p, "k": k, "warmup": WARMUP, "fidelity": fid, "per_batch": rows, "batches": sampled,
            "warmup_metrics": [{key: r[key] for key in r if key.startswith(("prm/", "rollout/success", "time/"))}
                               for r in warm if "prm/pairs" in r],
            "forwards": tables.forwards, "seconds": {"warmup": t_warm, "total": time.time() - t0}}


STUDY = Study("overlap_fidelity", grid, _run)


def summary(rows: list[dict]) -> str:
    """Markdown: estimator × (paraphrase, K) correlation (and failed-episode credit) with A^π."""
    cols = sorted({(r["row"]["paraphrase"], r["row"]["k"]) for r in rows}, key=lambda c: (-c[1], c[0]))
    by = {(r["row"]["paraphrase"], r["row"]["k"]): r["row"] for r in rows}
    names = list(next(iter(by.values()))["fidelity"]) if by else []
    head = "| estimator | " + " | ".join(f"p{p} K={k}: corr / failed credit" for p, k in cols) + " |"
    lines = [head, "|---" * (len(cols) + 1) + "|"]
    for n in names:
        cells = []
        for c in cols:
            f = by[c]["fidelity"].get(n, {})
            cells.append(f"{f.get('corr', float('nan')):+.2f} / {f.get('failed_credit', float('nan')):.2f}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines.append("| overlap (rows whose state another episode of the group saw) | " + " | ".join(
        f"{by[c]['fidelity']['grpo']['overlap']:.2f}" for c in cols) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--summary", action="store_true", help="print the table of the committed cells")
    args = ap.parse_args(argv)
    if args.summary:
        folder = ROOT / "results" / "overlap_fidelity"
        print(summary([json.loads(f.read_text()) for f in sorted(folder.glob("*.json"))]))


if __name__ == "__main__":
    main()
