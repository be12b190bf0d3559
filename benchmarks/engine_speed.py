"""Engine path speed: training iterations with the HF engine's prefix KV cache off vs on.

Runs an example config (the README main job, ``examples/gigpo_textworld.yaml``, and one
learning-benchmark setup, ``examples/gigpo_cc3.yaml``) for the same iterations, seed and
episodes twice in one process, ``policy.prefix_cache_mb=0`` (the old engine path: every
prompt prefilled in full) and the default cache, and reports per iteration the rollout and
update seconds and their ratio. Exactness is checked on the cached run: the largest
|stored − recomputed| logprob of its first iteration's turns under the initial weights (the
update's own recompute: ``build_batch`` with the constraint masks, ``forward_token_stats``),
and each run's first-update ``approx_kl``.

Conditions are recorded with the numbers (threads, load average before and after, CPU
model); the machine is shared, so read the off/on ratio, not the seconds. The two runs
alternate order per config (off first for the first config, on first for the second).

Usage::

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/engine_speed.py --iterations 2
    .venv/bin/python benchmarks/engine_speed.py --configs gigpo_textworld --iterations 2 --new update.share_prefix=true

``--new KEY=VALUE ...`` adds overrides to the cached runs only: the new path (prefix KV cache
+ e.g. the update's shared-prefix forward) against the old one in the same process;
``--old KEY=VALUE ...`` to the uncached runs only (the old path where the example config
now turns the new one on)::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/engine_speed.py --iterations 1 \
        --old update.share_prefix=false policy.decode_attention=sdpa
    .venv/bin/python benchmarks/engine_speed.py --configs gigpo_textworld --interleaved 2 rollout.groups_per_iteration=2

``--interleaved N`` times rollouts only: N pairs of the first iteration's collect with the
cache off and on, alternating on one loaded policy and env pool (robust to load changes on a
shared machine; the update does not depend on the cache).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "engine_speed.json"


def _cfg(name: str, cache_mb: int, iterations: int, out_dir: Path, extra: list[str]):
    from agentrl.train.checks import load_checked_config

    return load_checked_config(ROOT / "examples" / f"{name}.yaml", [
        f"run.name={name}-cache{cache_mb}", f"run.out_dir={out_dir}", f"run.iterations={iterations}",
        "run.eval_every=0", "run.eval_before=false", f"run.save_every={iterations}", "log.console=false",
        f"policy.prefix_cache_mb={cache_mb}", *extra])


def _gap(cfg, store_path: Path, run_id: str) -> float:
    """Largest |stored − recomputed| logprob over iteration 1's turns, initial weights."""
    import numpy as np
    import torch

    from agentrl.llm.constrained import constraint_masks
    from agentrl.llm.grammar import grammar_masks
    from agentrl.llm.policy import load_policy
    from agentrl.store import TurnStore
    from agentrl.update.batch import build_batch
    from agentrl.update.logprobs import forward_token_stats

    policy = load_policy(cfg.policy)  # the packaged weights = LoRA at init (B = 0)
    with TurnStore(store_path) as store:
        turns = [t for ep in store.load_episodes(run_id) for t in ep.turns
                 if t.policy_version == 0 and t.has_tokens and t.info.get("trainable", True)]
    worst = 0.0
    for i in range(0, len(turns), 8):
        chunk = turns[i: i + 8]
        batch = build_batch([t.prompt_ids for t in chunk], [t.completion_ids for t in chunk],
                            [t.completion_logprobs for t in chunk], np.ones(len(chunk)), pad_id=policy.pad_id,
                            allowed=constraint_masks(chunk, policy.renderer),
                            grammar=grammar_masks(chunk, policy.renderer))
        with torch.no_grad():
            st = forward_token_stats(policy.model, batch.input_ids, batch.attention_mask,
                                     allowed_ids=batch.allowed_ids, grammar_mask=batch.grammar_mask)
        m = batch.loss_mask.bool()
        worst = max(worst, float(torch.max(torch.abs(st.logprobs[m] - batch.old_logprobs[m]))))
    return worst


def run(name: str, cache_mb: int, iterations: int, out_dir: Path, extra: list[str]) -> dict:
    """One training run; per-iteration seconds from its metrics.jsonl."""
    from agentrl.train import train

    cfg = _cfg(name, cache_mb, iterations, out_dir, extra)
    t0 = time.perf_counter()
    result = train(cfg, resume=False)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    its = [r for r in rows if "time/rollout_s" in r]
    out = {"prefix_cache_mb": cache_mb, "wall_s": wall,
           "rollout_s": [r["time/rollout_s"] for r in its], "update_s": [r.get("time/update_s", 0.0) for r in its],
           "turns": [r.get("rollout/turns") for r in its], "episodes": [r.get("rollout/episodes") for r in its],
           "completion_tokens": [r.get("rollout/completion_tokens") for r in its],
           "approx_kl_first_update": next((r["update/approx_kl"] for r in its if "update/approx_kl" in r), None)}
    if cache_mb:
        out["max_abs_logprob_gap_iter1"] = _gap(cfg, result.store_path, result.run_id)
    return out


def _steal_share():
    """A closure giving the share of CPU time stolen by the hypervisor since it was made
    (/proc/stat; None where unreadable): shared VMs can lose most of their cores."""
    def read():
        try:
            f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        return sum(f), f[7] if len(f) > 7 else 0

    start = read()

    def share():
        now = read()
        if start is None or now is None or now[0] == start[0]:
            return None
        return (now[1] - start[1]) / (now[0] - start[0])
    return share


def interleaved(name: str, repeats: int, out_dir: Path, extra: list[str], old: list[str] = ()) -> dict:
    """Rollouts only, the cache off and on alternating on one loaded policy and env pool:
    ``repeats`` pairs of the config's first-iteration collect (same tasks and seeds), so a
    load change on a shared machine hits both modes alike. The update does not depend on
    the cache (``rollout_s`` is the part it changes). ``old`` may hold
    ``policy.decode_attention=sdpa``: the shared model then switches attention per mode."""
    from dataclasses import replace

    from agentrl.llm.decode_attention import set_decode_attention
    from agentrl.llm.hf import HFEngine
    from agentrl.llm.policy import load_policy
    from agentrl.train.steps import collect_iteration, open_pool

    cfg = _cfg(name, 1024, 1, out_dir, extra)
    policy = load_policy(cfg.policy)
    on = policy.engine
    off = HFEngine(on.model, eos_token_id=on.eos_token_id, pad_token_id=on.pad_token_id, num_threads=None,
                   max_context=on.max_context, prefix_cache_mb=0)
    rows = []
    with open_pool(cfg) as pool:
        for r in range(repeats):
            for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                engine = on if mode == "on" else off
                old_attention = "policy.decode_attention=sdpa" in old and mode == "off"
                set_decode_attention(on.model, "sdpa" if old_attention else cfg.policy.decode_attention)
                t0 = time.perf_counter()
                eps = collect_iteration(replace(policy, engine=engine), cfg, 1, pool=pool)
                rows.append({"repeat": r, "mode": mode, "rollout_s": time.perf_counter() - t0,
                             "turns": sum(len(e.turns) for e in eps), "episodes": len(eps),
                             "load": os.getloadavg()[0],
                             "reused_tokens": on.prefix_cache.reused_tokens if mode == "on" else 0})
                print(rows[-1], flush=True)
    t_off = sum(x["rollout_s"] for x in rows if x["mode"] == "off")
    t_on = sum(x["rollout_s"] for x in rows if x["mode"] == "on")
    return {"rows": rows, "rollout_ratio": t_off / t_on, "prefilled_tokens_on": on.prefix_cache.prefilled_tokens,
            "reused_tokens_on": on.prefix_cache.reused_tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=["gigpo_textworld", "gigpo_cc3"])
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--policy-dtype", default="float32", help="policy.dtype for both runs (float32 on AVX2-only CPUs)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--interleaved", type=int, default=0, metavar="N",
                    help="instead: N off/on pairs of rollouts only, alternating on one loaded policy")
    ap.add_argument("--new", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides for the cached ('on') runs only, e.g. update.share_prefix=true: the new path "
                         "against the old (no cache, defaults)")
    ap.add_argument("--old", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides for the uncached ('off') runs only, e.g. update.share_prefix=false "
                         "policy.decode_attention=sdpa: the old path where the example now turns the new one on")
    ap.add_argument("overrides", nargs="*", help="config overrides for every run, e.g. rollout.groups_per_iteration=2")
    args = ap.parse_args()
    extra = [f"policy.dtype={args.policy_dtype}", *args.overrides]
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    steal = _steal_share()
    report = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu, "cores": os.cpu_count(),
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "load_before": os.getloadavg(),
              "iterations": args.iterations, "policy_dtype": args.policy_dtype, "overrides": args.overrides,
              "new_path_overrides": args.new, "old_path_overrides": args.old,
              "interleaved_pairs": args.interleaved, "configs": {}}
    with tempfile.TemporaryDirectory(prefix="agentrl-engine-speed-") as tmp:
        for name in args.configs if args.interleaved else ():
            report["configs"][name] = {"interleaved": interleaved(name, args.interleaved, Path(tmp), extra, args.old)}
            print(f"{name}: rollout off/on {report['configs'][name]['interleaved']['rollout_ratio']:.2f}x", flush=True)
            report["load_after"], report["cpu_steal_share"] = os.getloadavg(), steal()
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1))
        for k, name in enumerate(() if args.interleaved else args.configs):
            order = (0, 1024) if k % 2 == 0 else (1024, 0)
            runs = {mb: run(name, mb, args.iterations, Path(tmp), extra + (args.new if mb else args.old)) for mb in order}
            off, on = runs[0], runs[1024]
            it_off = [a + b for a, b in zip(off["rollout_s"], off["update_s"])]
            it_on = [a + b for a, b in zip(on["rollout_s"], on["update_s"])]
            report["configs"][name] = {
                "off": off, "on": on, "order": list(order),
                "iteration_s_off": it_off, "iteration_s_on": it_on,
                "iteration_ratio": sum(it_off) / sum(it_on),
                "rollout_ratio": sum(off["rollout_s"]) / sum(on["rollout_s"]),
                "wall_ratio": off["wall_s"] / on["wall_s"]}
            print(f"{name}: iteration off {sum(it_off):.0f} s / on {sum(it_on):.0f} s = "
                  f"{report['configs'][name]['iteration_ratio']:.2f}x (rollout "
                  f"{report['configs'][name]['rollout_ratio']:.2f}x); logprob gap {on['max_abs_logprob_gap_iter1']:.2e}",
                  flush=True)
            report["load_after"] = os.getloadavg()
            report["cpu_steal_share"] = steal()
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1))  # after every config: a partial run keeps its pairs
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
