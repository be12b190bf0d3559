"""Grammar-constrained generation on SmolLM2-135M (issue 24): parse rate, exactness, overhead.

50 prompts — 25 forced tool calls (``GrammarSpec.tool_call`` over 1–3 offered tools) and 25
JSON-schema outputs — sampled at T = 1 by ``HFEngine`` (fp32, 1 thread) with llguidance
masks, in batches of ``--batch``. Measured in one run:

* parse rate: the completion ended with EOS and parses (``tool_text`` block → JSON with the
  forced name and the schema's required keys; JSON output → ``json.loads`` with the required keys);
* closed by budget: completions whose shortest way to finish was forced near the end of the
  budget (``agentrl.llm.grammar_close``; logprob 0 on the forced tokens, both sides);
* exactness: max |stored − recomputed| logprob when the update rebuilds the masks from the
  stored turns (``grammar_masks`` → ``build_batch`` → ``forward_token_stats``), and the PPO ratio;
* overhead: the same batches decoded unconstrained for the same number of steps
  (``min_new_tokens`` pins the step count), wall time per decoding step, constrained ÷ free;
  plus the grammar's own time per masked token (matcher advance + bitmask + mask apply).

    OMP_NUM_THREADS=1 python benchmarks/grammar.py [--batch 10] [--max-tokens 192] [--temperature 1.0 | --greedy]
        [--out benchmarks/results/grammar.json]

Each run adds its entry (``sampled_t1_max192``, ``greedy_max192`` ...) to the output file; ``--parse-only``
skips the unconstrained pass (parse rate and exactness only).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch

from agentrl.llm.base import SamplingParams
from agentrl.llm.grammar import GrammarSpec, compiler_for, grammar_info, grammar_masks
from agentrl.llm.grammar_decode import GrammarLogits
from agentrl.llm.hf import load_hf_policy
from agentrl.llm.tool_text import tool_call_blocks
from agentrl.types import Message, Turn
from agentrl.update.batch import build_batch
from agentrl.update.logprobs import forward_token_stats

S, I, N, B = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}


def _obj(props: dict, required=None) -> dict:
    return {"type": "object", "properties": props, "required": list(required or props), "additionalProperties": False}


TOOLS = {
    "get_weather": _obj({"city": S, "unit": {"enum": ["celsius", "fahrenheit"]}}),
    "search_web": _obj({"query": S, "max_results": I}),
    "send_email": _obj({"to": S, "subject": S, "body": S}),
    "calculate": _obj({"expression": S}),
    "book_flight": _obj({"origin": S, "destination": S, "date": S, "passengers": I}),
    "set_timer": _obj({"minutes": N, "label": S}),
}
SCHEMAS = [
    _obj({"name": S, "age": I}),
    _obj({"title": S, "year": I, "genres": {"type": "array", "items": S}}),
    _obj({"answer": S, "confidence": N}),
    _obj({"city": S, "country": S, "population": I}),
    _obj({"sentiment": {"enum": ["positive", "negative", "neutral"]}, "reason": S}),
    _obj({"task": S, "done": B, "priority": I}),
]
ASKS = ["What is the weather in {c}?", "Find news about {c}.", "Email my boss about the trip to {c}.",
        "How much is 17 * 23?", "Book a flight from London to {c} tomorrow.", "Remind me in 10 minutes to call {c}."]
JSON_ASKS = ["Describe a person who lives in {c} as JSON.", "Give me a movie set in {c} as JSON.",
             "Answer as JSON: what is the capital of France?", "Give facts about {c} as JSON.",
             "Classify the sentiment of 'I love {c}' as JSON.", "Make a to-do item about visiting {c} as JSON."]
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Delhi", "Rome", "Quito", "Accra"]


def prompts() -> list[tuple[str, GrammarSpec, tuple[str, ...], tuple[str, ...]]]:
    """50 (question, spec, allowed tool names, required keys) cases, fixed order."""
    names = list(TOOLS)
    out = []
    for k in range(25):
        offered = [names[(k + j) % len(names)] for j in range(1 + k % 3)]
        force = offered[0] if k % 2 == 0 else None  # named function, else "required" over all offered
        tools = [(n, TOOLS[n]) for n in ([force] if force else offered)]
        out.append((ASKS[names.index(offered[0])].format(c=CITIES[k % 9]), GrammarSpec.tool_call(tools),
                    tuple(n for n, _ in tools), ()))
    for k in range(25):
        schema = SCHEMAS[k % len(SCHEMAS)]
        out.append((JSON_ASKS[k % len(JSON_ASKS)].format(c=CITIES[k % 9]), GrammarSpec.json_schema(schema), (),
                    tuple(schema["required"])))
    return out


def _parses(text: str, spec: GrammarSpec, names: tuple[str, ...], required: tuple[str, ...]) -> bool:
    try:
        if spec.kind == "tool_call":
            blocks = tool_call_blocks(text)
            call = json.loads(blocks[0].body) if len(blocks) == 1 else None
            schema = dict(spec.tools)[call["name"]] if call and call.get("name") in names else None
            return schema is not None and set(json.loads(schema)["required"]) <= set(call["arguments"])
        return set(required) <= set(json.loads(text))
    except (json.JSONDecodeError, KeyError, TypeError, IndexError):
        return False


class _Timed(GrammarLogits):
    """``GrammarLogits`` that adds up its own wall time."""

    spent = 0.0
    masked = 0

    def __call__(self, input_ids, scores):
        t0 = time.perf_counter()
        out = super().__call__(input_ids, scores)
        _Timed.spent += time.perf_counter() - t0
        _Timed.masked += sum(not d for d in self._done)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--greedy", action="store_true", help="argmax decoding (parse rate and exactness only)")
    ap.add_argument("--parse-only", action="store_true", help="no unconstrained pass (no overhead ratio)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/grammar.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    engine, renderer = load_hf_policy("smollm2-135m-instruct")
    if getattr(engine, "prefix_cache", None) is not None:  # compare decoding, not prompt-prefix reuse
        engine.prefix_cache = None
    t0 = time.perf_counter()
    comp = compiler_for(renderer)
    tok_init = time.perf_counter() - t0
    import agentrl.llm.hf as hf_mod

    hf_mod.GrammarLogits = _Timed  # time the grammar's share inside the constrained runs
    cases = prompts()
    t0 = time.perf_counter()
    grammars = [comp.compile(spec) for _, spec, _, _ in cases]
    compile_s = time.perf_counter() - t0
    turns, ok, steps, t_con, t_free, closed = [], 0, 0, 0.0, 0.0, 0
    for start in range(0, len(cases), args.batch):
        chunk = cases[start:start + args.batch]
        ids = [renderer.render_ids([Message("user", q)]) for q, *_ in chunk]
        s = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed + start,
                           greedy=args.greedy)
        t0 = time.perf_counter()
        outs = engine.generate(ids, s, grammars=grammars[start:start + args.batch])
        t_con += time.perf_counter() - t0
        n_steps = max(c.token_ids.size for c in outs)
        if not (args.greedy or args.parse_only):  # the same batch unconstrained for the same number of steps
            t_free += _free_pass(engine, ids, n_steps, args.temperature, args.seed + start)
        steps += n_steps
        print(f"prompts {start}-{start + len(chunk) - 1}: {n_steps} steps, constrained {t_con:.1f} s, "
              f"free {t_free:.1f} s so far", flush=True)
        for (q, spec, names, req), c, p in zip(chunk, outs, ids):
            text = renderer.completion_text(c.token_ids)
            good = c.finish_reason == "stop" and _parses(text, spec, names, req)
            ok += good
            closed += c.grammar_close_at is not None
            if not good:
                print("NOT PARSED:", q, repr(text)[:200], flush=True)
            if c.grammar_close_at is not None:
                print(f"CLOSED BY BUDGET at {c.grammar_close_at} of {c.token_ids.size}:", repr(text)[-120:], flush=True)
            info = grammar_info(spec, c)
            turns.append(Turn(run_id="bench", episode_id=len(turns), group_id=0, t=0, observation=q, anchor_obs=q,
                              action=text, action_valid=good, reward=0.0, prompt_ids=p, completion_ids=c.token_ids,
                              completion_logprobs=c.logprobs, turn_id=len(turns), info=info))
    t0 = time.perf_counter()
    masks = grammar_masks(turns, renderer)
    rebuild_s = time.perf_counter() - t0
    gaps, ratios = [], []
    for start in range(0, len(turns), args.batch):
        sub = turns[start:start + args.batch]
        batch = build_batch([t.prompt_ids for t in sub], [t.completion_ids for t in sub],
                            [t.completion_logprobs for t in sub], np.ones(len(sub)), pad_id=renderer.eos_token_id,
                            grammar=masks[start:start + args.batch])
        with torch.no_grad():
            lp = forward_token_stats(engine.model, batch.input_ids, batch.attention_mask,
                                     grammar_mask=batch.grammar_mask).logprobs
        m = batch.loss_mask.bool()
        gaps.append(float((lp[m] - batch.old_logprobs[m]).abs().max()))
        ratios.append(float((torch.exp(lp[m] - batch.old_logprobs[m]) - 1).abs().max()))
    n_tok = int(sum(t.completion_ids.size for t in turns))
    result = {
        "model": "smollm2-135m-instruct (fp32, HFEngine, 1 torch thread)", "grammar_engine": "llguidance",
        "prompts": len(cases), "tool_call_prompts": 25, "json_schema_prompts": 25,
        "decoding": "greedy" if args.greedy else f"sampled, T = {args.temperature}",
        "batch": args.batch, "max_tokens": args.max_tokens,
        "parse_rate": ok / len(cases), "parsed": ok, "closed_by_budget": closed,
        "max_abs_logprob_gap_fp32": max(gaps), "max_abs_ratio_minus_1": max(ratios),
        "completion_tokens": n_tok, "mean_completion_tokens": n_tok / len(cases), "decode_steps": steps,
        "constrained_s_per_step": t_con / steps, "unconstrained_s_per_step": t_free / steps if t_free else None,
        "overhead_ratio": t_con / t_free if t_free else None,
        "grammar_ms_per_masked_token": 1e3 * _Timed.spent / max(_Timed.masked, 1),
        "grammar_share_of_constrained_time": _Timed.spent / t_con,
        "tokenizer_init_s": tok_init, "compile_s_per_grammar": compile_s / len(cases),
        "rebuild_ms_per_token": 1e3 * rebuild_s / n_tok,
        "load_avg_1m": os.getloadavg()[0], "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
    }
    import llguidance

    result["llguidance"] = getattr(llguidance, "__version__", None) or _version("llguidance")
    out = Path(args.out)  # one entry per decoding mode in the same file
    out.parent.mkdir(parents=True, exist_ok=True)
    merged = json.loads(out.read_text()) if out.is_file() else {}
    merged[("greedy" if args.greedy else f"sampled_t{args.temperature:g}") + f"_max{args.max_tokens}"] = result
    out.write_text(json.dumps(merged, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def _free_pass(engine, ids: list, n_steps: int, temperature: float, seed: int) -> float:
    """Seconds to decode ``ids`` unconstrained for exactly ``n_steps`` steps (``min_new_tokens``)."""
    engine.model.generation_config.min_new_tokens = n_steps
    try:
        t0 = time.perf_counter()
        engine.generate(ids, SamplingParams(temperature=temperature, max_tokens=n_steps, seed=seed))
        return time.perf_counter() - t0
    finally:
        engine.model.generation_config.min_new_tokens = None


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    main()
