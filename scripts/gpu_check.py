"""GPU smoke check for a lent accelerator machine (only torch + transformers there; no vLLM,
no network, no model files): builds a randomly initialised SmolLM2-sized Llama model in
memory (30 layers, hidden 576, 9 heads / 3 KV heads, head_dim 64, vocab 49,152; ≈135M
parameters), then measures on the GPU in bf16

1. generation through ``agentrl.llm.hf.HFEngine`` (batch B, T new tokens, seeded): tokens/s,
   and that the sampled-token logprobs equal a teacher-forced forward (``score``);
2. one PPO-family update step through ``agentrl.update`` (``build_batch`` → ``update``):
   step time in seconds, and that the step changed the weights and the logprobs;

and prints one JSON object (also written to ``--out``). Exit code 0 when every check holds.

Usage: ``python scripts/gpu_check.py [--batch 16] [--new-tokens 128] [--out gpu_check.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # agentrl from the checkout, no install needed


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def build_model(device: str, layers: int = 30, seed: int = 0):
    """Random SmolLM2-135M-shaped ``LlamaForCausalLM`` (``layers`` layers) in bf16 on ``device``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=layers,
                      num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=2048,
                      rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = 2, 2
    return model.eval()


def check_generation(engine, batch: int, new_tokens: int, prompt_len: int, device: str) -> dict:
    """Time ``engine.generate`` (after one warm-up) and compare logprobs with ``score``."""
    import numpy as np
    import torch

    from agentrl.llm.base import SamplingParams

    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 49152, size=prompt_len).tolist() for _ in range(batch)]
    sp = SamplingParams(max_tokens=new_tokens, seed=1, stop_token_ids=())
    engine.generate(prompts[:2], SamplingParams(max_tokens=8, seed=0))  # warm-up (kernels, allocator)
    _sync(device)
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sp)
    _sync(device)
    dt = time.perf_counter() - t0
    n = sum(o.token_ids.size for o in outs)
    gaps = [float(np.max(np.abs(engine.score(p, o.token_ids.tolist()) - o.logprobs))) for p, o in zip(prompts[:4], outs[:4])]
    again = engine.generate(prompts, sp)  # same batch, same seed → same tokens
    return {"gen_batch": batch, "gen_new_tokens": new_tokens, "gen_tokens": n, "gen_seconds": dt,
            "gen_tokens_per_s": n / dt, "gen_score_max_abs_gap_bf16": max(gaps),
            "gen_seeded_repeatable": all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(outs, again)),
            "prompts": prompts, "outs": outs}


def check_update(model, prompts, outs, micro_batch: int, device: str) -> dict:
    """One ``agentrl.update.update`` step on the sampled turns (random ±1 advantages)."""
    import numpy as np
    import torch

    from agentrl.config import UpdateConfig
    from agentrl.update import batch_logprobs, build_batch, make_optimizer, update

    adv = np.where(np.arange(len(outs)) % 2 == 0, 1.0, -1.0)
    batch = build_batch([np.asarray(p) for p in prompts], [o.token_ids for o in outs], [o.logprobs for o in outs],
                        adv, pad_id=2)
    before = batch_logprobs(model, batch, micro_batch=micro_batch)
    w0 = model.model.layers[0].mlp.down_proj.weight.detach().clone()
    opt = make_optimizer(model, lr=1e-4)
    _sync(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    stats = update(model, opt, batch, UpdateConfig(), micro_batch=micro_batch)
    _sync(device)
    dt = time.perf_counter() - t0
    model.eval()
    after = batch_logprobs(model, batch, micro_batch=micro_batch)
    mask = batch.loss_mask.bool()
    return {"update_rows": int(batch.input_ids.shape[0]), "update_seq_len": int(batch.input_ids.shape[1]),
            "update_tokens": int(stats.tokens), "update_step_seconds": dt, "update_loss": float(stats.loss),
            "update_grad_norm": float(stats.grad_norm), "update_peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None,
            "update_weights_changed": bool(not torch.equal(w0, model.model.layers[0].mlp.down_proj.weight)),
            "update_logprob_max_change": float((after.cpu() - before.cpu())[mask].abs().max())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=16, help="prompts per generate call")
    ap.add_argument("--new-tokens", type=int, default=128, help="tokens sampled per prompt")
    ap.add_argument("--prompt-len", type=int, default=64, help="prompt length in tokens")
    ap.add_argument("--micro-batch", type=int, default=8, help="rows per forward in the update")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    ap.add_argument("--device", default="cuda", help="torch device (cpu: a smoke run of this script)")
    ap.add_argument("--layers", type=int, default=30, help="decoder layers (30 = SmolLM2-135M)")
    args = ap.parse_args(argv)

    import torch
    import transformers

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(json.dumps({"ok": False, "error": "no CUDA device visible to torch"}))
        return 2
    from agentrl.llm.hf import HFEngine

    t0 = time.perf_counter()
    model = build_model(args.device, args.layers)
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else args.device
    report = {"device": name, "layers": args.layers, "torch": torch.__version__,
              "transformers": transformers.__version__, "dtype": "bfloat16",
              "params_m": sum(p.numel() for p in model.parameters()) / 1e6, "build_seconds": time.perf_counter() - t0}
    engine = HFEngine(model, eos_token_id=2, pad_token_id=2, max_context=2048, num_threads=None)
    gen = check_generation(engine, args.batch, args.new_tokens, args.prompt_len, args.device)
    prompts, outs = gen.pop("prompts"), gen.pop("outs")
    report.update(gen)
    report.update(check_update(model, prompts, outs, args.micro_batch, args.device))
    # bf16 forward of a batch vs one row differs by rounding only: 0.1 nats is generous
    report["ok"] = bool(report["gen_score_max_abs_gap_bf16"] <= 0.1 and report["gen_seeded_repeatable"]
                        and report["update_weights_changed"] and report["update_logprob_max_change"] > 0)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
