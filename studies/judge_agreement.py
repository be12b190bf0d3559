"""How well does a judge model agree with WebShop's own reward? (issue 53, ``reward.judge``)

WebShop scores a purchase exactly, so it can grade a judge: this study builds episodes with a
known outcome on the eval split and asks a judge (``agentrl.rollout.judge``) for its verdict,
then reports accuracy and Cohen's κ against the env's ``won`` (R == 1), and the cost per episode.

Episodes (one per goal, seed = goal index): half follow the oracle walkthrough
(``info["walkthrough"]``: search the target's title, click it, its options, Buy Now); the
other half are the walkthrough spoiled one of three ways, in turn — another product from the
same results bought instead (``wrong_product``), the options left unclicked (``no_options``),
or never bought (``no_purchase``). The label is what the env says (a spoiled episode can still
win: a goal with no options). The transcript the judge reads holds the observation before each
action and the action (``judge.transcript``) — the final "Your score" page is never shown.

Judges: SmolLM2-135M-Instruct as packaged (the only local model here), in process, greedy,
grammar-constrained to the verdict's JSON schema (``EngineJudgeClient``), with a WebShop rubric,
as ``pass_fail`` and as a 0–10 ``scale`` (pass at ≥ 5). A κ near 0 is a finding about the
judge, not about the feature.

Usage::

    .venv/bin/python -m studies.judge_agreement [--episodes 240] [--out studies/results/judge_agreement.json]
    .venv/bin/python -m studies.judge_agreement --summary

Resumable: rows are saved as they come and a rerun judges only the missing ones.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

OUT = Path(__file__).parent / "results" / "judge_agreement.json"
RUBRIC = (
    "You check an online shopping agent. The customer's instruction is in the first observation. The agent "
    "succeeded only if it clicked 'buy now' on a product that matches the instruction: the right kind of "
    "product, every requested attribute and option (size, color, ...), and a price below the limit.\n\n"
    "Transcript of the agent's session:\n{transcript}\n\nDid the agent succeed? Answer with JSON only.")
SPOILS = ("wrong_product", "no_options", "no_purchase")
VERDICTS = ("pass_fail", "scale")


def spoil(walkthrough: list[str], clickables: list[str], how: str) -> list[str]:
    """The walkthrough spoiled ``how`` (``SPOILS``); ``clickables`` are the search page's."""
    search, product, *options, buy = walkthrough
    if how == "no_options":
        return [search, product, buy]
    if how == "no_purchase":
        return [search, product, *options]
    target = product[len("click["):-1]
    others = [c for c in clickables if c != target and len(c) == 10 and c.startswith("b")]  # ASINs
    return [search, f"click[{others[0]}]", buy] if others else [search, product, buy]


def episode(seed: int, mode: str):
    """One WebShop episode (``agentrl.types.Episode``) played by ``mode`` (``oracle`` or a spoil)."""
    import numpy as np

    from agentrl.env import make
    from agentrl.types import Episode, Turn

    env = make("agentrl/WebShop-v0", split="eval")
    try:
        obs, info = env.reset(seed=seed)
        walkthrough = list(info["walkthrough"])
        plan, ep = list(walkthrough), Episode(episode_id=seed, group_id=seed, env_id="agentrl/WebShop-v0",
                                                       task_id=str(info["task_id"]), seed=seed)
        for t in range(len(plan)):
            if mode != "oracle" and t == 1:
                plan = spoil(walkthrough, list(info.get("clickables", [])), mode)
            if t >= len(plan):
                break
            nxt, r, term, trunc, info = env.step(plan[t])
            ep.turns.append(Turn(run_id="judge", episode_id=seed, group_id=seed, t=t, observation=obs, anchor_obs="",
                                 action=plan[t], action_valid=True, reward=float(r), terminated=term, truncated=trunc,
                                 prompt_ids=np.zeros(0, np.int32), completion_ids=np.zeros(0, np.int32),
                                 completion_logprobs=np.zeros(0, np.float32), info={"won": bool(info.get("won"))}))
            obs = nxt
            if term or trunc:
                break
        return ep
    finally:
        env.close()


def kappa(labels: list[bool], verdicts: list[bool]) -> float:
    """Cohen's κ of two binary raters (NaN when both always say the same one thing)."""
    n = len(labels)
    po = sum(a == b for a, b in zip(labels, verdicts)) / n
    p1, q1 = sum(labels) / n, sum(verdicts) / n
    pe = p1 * q1 + (1 - p1) * (1 - q1)
    return float("nan") if pe == 1 else (po - pe) / (1 - pe)


def summary(rows: list[dict]) -> dict:
    """Per verdict: episodes, positives, the judge's pass rate, accuracy, κ, the confusion
    counts, seconds per episode and prompt characters."""
    out = {}
    for v in VERDICTS:
        r = [x for x in rows if x["verdict"] == v and x["score"] is not None]
        if not r:
            continue
        y, p = [x["won"] for x in r], [x["score"] >= 0.5 for x in r]
        out[v] = {"episodes": len(r), "won": sum(y), "judge_pass_rate": sum(p) / len(r),
                  "accuracy": sum(a == b for a, b in zip(y, p)) / len(r), "kappa": kappa(y, p),
                  "tp": sum(a and b for a, b in zip(y, p)), "fp": sum(b and not a for a, b in zip(y, p)),
                  "fn": sum(a and not b for a, b in zip(y, p)), "tn": sum(not a and not b for a, b in zip(y, p)),
                  "errors": sum(x["score"] is None for x in rows if x["verdict"] == v),
                  "seconds_per_episode": sum(x["seconds"] for x in r) / len(r),
                  "prompt_chars_mean": sum(x["prompt_chars"] for x in r) / len(r)}
    return out


def run(args) -> dict:
    import torch

    from agentrl.config.reward import JudgeConfig
    from agentrl.llm.hf import load_hf_policy
    from agentrl.rollout.judge import Judge
    from agentrl.rollout.judge_clients import EngineJudgeClient

    torch.set_num_threads(args.threads)
    out_path = Path(args.out)
    data = json.loads(out_path.read_text()) if out_path.exists() else {"rows": []}
    done = {(r["seed"], r["verdict"]) for r in data["rows"]}
    engine, renderer = load_hf_policy(args.model)
    client = EngineJudgeClient(engine, renderer, name=f"local:{args.model}")
    judges = {v: Judge(JudgeConfig(endpoint=f"local:{args.model}", rubric=RUBRIC, verdict=v, max_tokens=16,
                                   retries=0, timeout_s=600), client) for v in VERDICTS}
    modes = ["oracle", SPOILS[0], "oracle", SPOILS[1], "oracle", SPOILS[2]]
    for seed in range(args.episodes):
        todo = [v for v in VERDICTS if (seed, v) not in done]
        if not todo:
            continue
        mode = modes[seed % len(modes)]
        base = episode(seed, mode)
        for v in todo:
            ep = episode(seed, mode) if v != todo[0] else base
            t0 = time.perf_counter()
            judges[v].apply([ep])
            rec = ep.turns[-1].info["judge"]
            data["rows"].append({"seed": seed, "mode": mode, "verdict": v, "won": bool(base.success),
                                 "env_return": float(sum(t.info.get("env_reward", t.reward) or 0.0 for t in ep.turns)),
                                 "turns": len(ep.turns), "score": rec["score"], "reply": rec["reply"],
                                 "seconds": time.perf_counter() - t0, "prompt_chars": len(rec["prompt"])})
        if seed % 10 == 9 or seed == args.episodes - 1:
            data.update(summary=summary(data["rows"]), model=args.model, rubric=RUBRIC,
                        cpu_threads=args.threads, finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            out_path.write_text(json.dumps(data, indent=1) + "\n")
            print(f"{seed + 1}/{args.episodes}: {json.dumps(data['summary'])}", flush=True)
    return data


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=240)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--summary", action="store_true", help="print the saved summary and exit")
    args = ap.parse_args(argv)
    if args.summary:
        print(json.dumps(summary(json.loads(Path(args.out).read_text())["rows"]), indent=1))
        return
    run(args)


if __name__ == "__main__":
    main()
