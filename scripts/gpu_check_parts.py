"""The measurements of ``scripts/gpu_check.py`` (one function per JSON section).

Each function takes the device and sizes, runs agentrl's own code paths (``HFEngine``,
``agentrl.update``, ``agentrl.distributed``) and returns a flat dict of numbers and booleans for the
JSON report (this file is a script helper, not part of the package). Times are wall-clock
seconds after ``torch.cuda.synchronize``; memory in GiB (2**30 bytes) from
``torch.cuda.max_memory_allocated``; throughputs in tokens per second.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch

# Qwen2.5-1.5B(-Instruct)'s published config.json (Hugging Face hub), written out here: the
# lent machine has no network and no weights, so the model is random-initialised from it.
QWEN25_15B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                  num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                  rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
                  use_sliding_window=False, bos_token_id=151643, eos_token_id=151645, pad_token_id=151643)
# SmolLM2-135M's shape (the previous default of this script), a Llama.
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=2048,
                    rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
# A CPU smoke model: the Qwen2 class of the real check (same decoder layers for FSDP2), tiny sizes.
TINY_QWEN2 = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                  rope_theta=1000000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)
MODELS = {"qwen1.5b": ("Qwen2", QWEN25_15B), "smollm2": ("Llama", SMOLLM2_135M), "tiny": ("Qwen2", TINY_QWEN2)}


@dataclass(frozen=True)
class Sizes:
    """Workload of one run. ``gen_batches``: prompts per ``generate`` call (one measurement
    each); ``prompt_len`` / ``new_tokens``: tokens per prompt / sampled per prompt;
    ``update_rows`` rows of ``update_prompt`` + ``update_completion`` tokens per optimizer
    step, ``micro_batch`` rows per forward; ``steps`` timed optimizer steps after 1 warm-up;
    ``peak_batch`` prompts of ``peak_prompt`` tokens sampling ``peak_new`` tokens each in the
    ``rollout_peak`` section (one ``generate`` call with per-row seeds)."""

    gen_batches: tuple[int, ...]
    prompt_len: int
    new_tokens: int
    update_rows: int
    update_prompt: int
    update_completion: int
    micro_batch: int
    steps: int
    peak_batch: int = 4
    peak_prompt: int = 32
    peak_new: int = 8


_UPDATE = dict(update_rows=32, update_prompt=256, update_completion=128, micro_batch=8, steps=3)
PRESETS = {"qwen1.5b": Sizes((16, 64), 128, 128, **_UPDATE, peak_batch=128, peak_prompt=4096, peak_new=256),
           # SmolLM2's context is 2048 positions: the peak prompt leaves room for the new tokens
           "smollm2": Sizes((16, 64), 128, 128, **_UPDATE, peak_batch=128, peak_prompt=1536, peak_new=256),
           "tiny": Sizes((2, 4), 16, 8, update_rows=6, update_prompt=12, update_completion=6, micro_batch=2, steps=2,
                         peak_batch=4, peak_prompt=32, peak_new=8)}


def sync(device: torch.device) -> None:
    """Wait for the device's queued kernels (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    """``torch.cuda.max_memory_allocated`` in GiB since the last ``reset_peak``; None on CPU."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def build_model(name: str, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """Random-weight causal LM ``name`` (a key of ``MODELS``) built directly on ``device`` in
    ``dtype`` (no fp32 CPU copy of a 1.5B model), eval mode."""
    import transformers

    family, spec = MODELS[name]
    cfg = getattr(transformers, f"{family}Config")(**spec)
    torch.manual_seed(seed)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = getattr(transformers, f"{family}ForCausalLM")(cfg)
    finally:
        torch.set_default_dtype(old)
    model.generation_config.eos_token_id = spec["eos_token_id"]
    model.generation_config.pad_token_id = spec["pad_token_id"]
    return model.eval()


def random_prompts(vocab: int, n: int, length: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab - 8, size=length).tolist() for _ in range(n)]


# ------------------------------------------------------------------ section: device paths
def device_paths(device_spec: str, dtype: str) -> dict:
    """Every place agentrl puts tensors on ``policy.device``, on the tiny packaged-format model
    (tokenizer + random Qwen3 written to a temp folder): ``load_policy`` placement and dtype,
    generate (plain, with hidden states, constrained) and score returning CPU numpy,
    ``batch_logprobs`` vs the sampled logprobs, one ``update``, LoRA ``reference_logprobs``,
    ``sft_update``, and the turn critic (``make_critic``, ``turn_values``, ``critic_update``)."""
    from agentrl.config import ConfigError, LoraSpec, UpdateConfig, config_from_dict
    from agentrl.llm.base import SamplingParams
    from agentrl.llm.device import resolve_device
    from agentrl.llm.policy import load_policy
    from agentrl.llm.tiny import tiny_model_dir
    from agentrl.train.critic import make_critic
    from agentrl.update import batch_logprobs, build_batch, make_optimizer, update
    from agentrl.update.critic import critic_update, turn_values
    from agentrl.update.lora import prepare_policy, reference_logprobs
    from agentrl.update.step import sft_update

    out: dict = {}
    dev = resolve_device(device_spec)
    out["resolved_device"] = str(dev)
    try:  # the bound check against the real device count
        resolve_device(f"cuda:{torch.cuda.device_count() if torch.cuda.is_available() else 0}")
        out["cuda_out_of_range_rejected"] = False
    except ConfigError:
        out["cuda_out_of_range_rejected"] = True
    with tempfile.TemporaryDirectory(prefix="gpu-check-tiny-") as tmp:
        folder = str(tiny_model_dir(tmp))
        cfg = config_from_dict({"env": {"id": "agentrl/Toy-v0"},
                                "policy": {"model": folder, "device": device_spec, "dtype": dtype}})
        policy = load_policy(cfg.policy)
        params = list(policy.model.parameters())
        out["policy_on_device"] = all(p.device == dev for p in params)
        out["policy_dtype_ok"] = all(p.dtype == getattr(torch, dtype) for p in params)
        eng, eos = policy.engine, policy.engine.eos_token_id
        prompts = [list(range(10, 30)), list(range(40, 52)), list(range(60, 75))]
        outs = eng.generate(prompts, SamplingParams(max_tokens=8, seed=0), return_hidden=True)
        allowed = [[[101, 102, eos], [103, eos]], None, [[104, 105, 106, eos]]]
        cons = eng.generate(prompts, SamplingParams(max_tokens=8, seed=0), allowed=allowed)
        scored = eng.score(prompts[0], outs[0].token_ids.tolist())
        arrays = [a for o in outs + cons for a in (o.token_ids, o.logprobs)] + [o.hidden for o in outs] + [scored]
        out["engine_returns_cpu_numpy"] = all(isinstance(a, np.ndarray) for a in arrays)
        out["constrained_follows_trie"] = cons[0].token_ids.tolist() in ([101, 102, eos], [103, eos])
        batch = build_batch([np.asarray(p) for p in prompts], [o.token_ids for o in outs],
                            [o.logprobs for o in outs], np.array([1.0, -1.0, 0.5]), pad_id=policy.pad_id)
        lp = batch_logprobs(policy.model, batch)
        out["batch_logprobs_gap"] = float((lp - batch.old_logprobs)[batch.loss_mask.bool()].abs().max())
        stats = update(policy.model, make_optimizer(policy.model, lr=1e-3), batch, UpdateConfig(micro_batch=2))
        out["update_loss_finite"] = bool(np.isfinite(stats.loss))
        lora = prepare_policy(policy.model, UpdateConfig(), LoraSpec(rank=4))
        ref = reference_logprobs(lora, batch)
        out["lora_reference_gap"] = float((ref - batch_logprobs(policy.model, batch)).abs().max())
        opt = make_optimizer(lora, lr=1e-3)
        out["sft_loss"] = sft_update(lora, opt, batch, micro_batch=2)
        out["lora_on_device"] = all(p.device == dev for p in lora.parameters())
        critic = make_critic(cfg)
        out["critic_on_device"] = all(p.device == dev for p in critic.model.parameters())
        values = turn_values(critic.model, batch)
        target = batch.with_(returns=torch.tensor([1.0, 0.0, 0.5]), old_values=values)
        out["critic_loss"] = critic_update(critic.model, critic.optimizer, target, micro_batch=2).loss
        out["critic_values_on_cpu"] = values.device.type == "cpu"
    out["ok"] = bool(out["policy_on_device"] and out["policy_dtype_ok"] and out["engine_returns_cpu_numpy"]
                     and out["constrained_follows_trie"] and out["update_loss_finite"] and out["lora_on_device"]
                     and out["critic_on_device"] and out["critic_values_on_cpu"] and np.isfinite(out["sft_loss"])
                     and np.isfinite(out["critic_loss"]) and out["cuda_out_of_range_rejected"]
                     and out["lora_reference_gap"] < 0.1)  # zero-init LoRA B: the reference is the base
    return out


# ------------------------------------------------------------------ section: rollout
def rollout(model, sizes: Sizes, device: torch.device) -> dict:
    """``HFEngine.generate`` tokens/s per batch size in ``sizes.gen_batches`` (after a warm-up
    call), and on the first batch: sampled logprobs vs ``score`` (bf16 rounding only) and
    seeded repeatability. Every timed call and the seeded repeat start with an empty prefix
    KV cache (``reset_prefix_cache``: a warm cache prefills only each prompt's last token, other
    kernels, other bf16 rounding); ``warm_cache_*`` (informational, not part of ``ok``) then
    repeats the call with the cache warm to show how far that moves the sampled tokens
    (``warm_cache_reused_tokens``: prompt tokens that call took from the cache)."""
    from agentrl.llm.base import SamplingParams
    from agentrl.llm.hf import HFEngine

    spec = model_ids(model)
    engine = HFEngine(model, eos_token_id=spec["eos"], pad_token_id=spec["pad"], num_threads=None)
    out: dict = {}
    engine.generate(random_prompts(spec["vocab"], 2, 8, seed=9), SamplingParams(max_tokens=4, seed=0))  # warm-up
    for i, b in enumerate(sizes.gen_batches):
        prompts = random_prompts(spec["vocab"], b, sizes.prompt_len, seed=b)
        sp = SamplingParams(max_tokens=sizes.new_tokens, seed=1)
        outs, dt, out[f"b{b}_peak_mem_gib"] = timed_generate(engine, prompts, sp, device)
        n = sum(o.token_ids.size for o in outs)
        out[f"b{b}_tokens"], out[f"b{b}_seconds"], out[f"b{b}_tokens_per_s"] = n, dt, n / dt
        if i == 0:
            gaps = [float(np.max(np.abs(engine.score(p, o.token_ids.tolist()) - o.logprobs)))
                    for p, o in zip(prompts[:4], outs[:4])]
            out["score_max_abs_gap"] = max(gaps)
            engine.reset_prefix_cache()
            again = engine.generate(prompts, sp)  # cold, like the first call
            out["seeded_repeatable"] = all(np.array_equal(a.token_ids, c.token_ids) for a, c in zip(outs, again))
            cache = engine.prefix_cache
            hits = cache.reused_tokens if cache is not None else 0
            out.update(warm_cache_drift(outs, engine.generate(prompts, sp)))  # the cache holds `again`'s rows
            out["warm_cache_reused_tokens"] = cache.reused_tokens - hits if cache is not None else 0
    out["ok"] = bool(out["score_max_abs_gap"] <= 0.1 and out["seeded_repeatable"])  # bf16 batch vs row: rounding
    return out


def timed_generate(engine, prompts: list[list[int]], sp, device: torch.device) -> tuple[list, float, float | None]:
    """``engine.generate(prompts, sp)`` from an empty prefix cache and a reset peak: (the
    completions, wall-clock seconds, peak GiB during the call — None on CPU)."""
    engine.reset_prefix_cache()
    reset_peak(device)
    sync(device)
    t0 = time.perf_counter()
    outs = engine.generate(prompts, sp)
    sync(device)
    return outs, time.perf_counter() - t0, peak_gib(device)


def warm_cache_drift(cold: list, warm: list) -> dict:
    """How a warm-cache repeat differs from the cold call with the same seed:
    ``seeded_repeatable_warm_cache`` (every row the same tokens), ``warm_cache_rows_differ``
    (rows whose tokens differ), ``warm_cache_first_diff_mean`` (mean index of the first
    differing token over those rows, None when none) and ``warm_cache_logprob_max_gap`` (max
    |logprob gap|, nats, over the tokens before each row's first difference)."""
    firsts, gaps = [], [0.0]
    for c, w in zip(cold, warm):
        a, b = c.token_ids, w.token_ids
        k = min(a.size, b.size)
        diff = np.flatnonzero(a[:k] != b[:k])
        first = int(diff[0]) if diff.size else (k if a.size != b.size else None)
        upto = a.size if first is None else first
        if upto:
            gaps.append(float(np.max(np.abs(c.logprobs[:upto] - w.logprobs[:upto]))))
        if first is not None:
            firsts.append(first)
    return {"seeded_repeatable_warm_cache": not firsts, "warm_cache_rows_differ": len(firsts),
            "warm_cache_first_diff_mean": float(np.mean(firsts)) if firsts else None,
            "warm_cache_logprob_max_gap": max(gaps)}


def model_ids(model) -> dict:
    """eos / pad / vocab of a model built by ``build_model``."""
    c = model.config
    return {"eos": int(model.generation_config.eos_token_id), "pad": int(model.generation_config.pad_token_id),
            "vocab": int(c.vocab_size)}


# ------------------------------------------------------------------ section: FSDP2 update
def update_batch(vocab: int, sizes: Sizes, pad: int, seed: int = 0):
    """A ``TrainBatch`` of ``sizes.update_rows`` random turns (advantages ±1, old logprobs
    filled in later by a recompute so the PPO ratio starts at 1)."""
    from agentrl.update import build_batch

    rng = np.random.default_rng(seed)
    prompts = [rng.integers(3, vocab - 8, size=sizes.update_prompt) for _ in range(sizes.update_rows)]
    comps = [rng.integers(3, vocab - 8, size=sizes.update_completion) for _ in range(sizes.update_rows)]
    adv = np.where(np.arange(sizes.update_rows) % 2 == 0, 1.0, -1.0)
    return build_batch(prompts, comps, [np.zeros(c.size, np.float32) for c in comps], adv, pad_id=pad)


def fsdp_update(name: str, lora: bool, ctx, sizes: Sizes, device: torch.device, dtype: torch.dtype,
                push_to=None) -> dict:
    """Fresh model ``name`` (+ LoRA rank 16 on q/k/v/o when ``lora``) wrapped by
    ``agentrl.distributed.parallelize`` on the 1-rank group ``ctx``; ``1 + sizes.steps`` optimizer
    steps of ``agentrl.update.step.update(..., dp=ctx)``. Reports step time, sequence and
    trained tokens/s over the timed steps, peak memory (from before the warm-up step, so it
    includes gradients and AdamW states; ``baseline_mem_gib`` is what was allocated then —
    the weights plus the resident ``push_to`` engine copy), and that weights and logprobs moved. With
    ``push_to`` (an ``HFEngine`` of the same architecture): the weight push, gathered with
    ``agentrl.distributed`` then loaded by ``update_weights``, and the engine's logprobs vs the
    trainer's afterwards."""
    from agentrl.config import LoraSpec, UpdateConfig
    from agentrl.distributed import parallelize
    from agentrl.update import batch_logprobs, make_optimizer
    from agentrl.update.lora import prepare_policy
    from agentrl.update.step import update

    out: dict = {"mode": "lora" if lora else "full"}
    model = build_model(name, device, dtype, seed=1)
    spec = model_ids(model)
    batch = update_batch(spec["vocab"], sizes, spec["pad"])
    cfg = UpdateConfig(micro_batch=sizes.micro_batch, lr=1e-5 if not lora else 1e-4)
    if lora:
        model = prepare_policy(model, cfg, LoraSpec(rank=16, alpha=32.0))
    model.train()
    model = parallelize(model, ctx)
    from torch.distributed.fsdp import FSDPModule

    out["fsdp_sharded"] = isinstance(model, FSDPModule)  # the 1-rank group really took the FSDP2 path
    batch = batch.with_(old_logprobs=batch_logprobs(model, batch, micro_batch=sizes.micro_batch) * batch.loss_mask)
    out["trainable_params_m"] = sum(p.numel() for p in model.parameters() if p.requires_grad) / 1e6
    opt = make_optimizer(model, lr=cfg.lr)
    reset_peak(device)
    out["baseline_mem_gib"] = torch.cuda.memory_allocated(device) / 2**30 if device.type == "cuda" else None
    probe = _probe(model)
    w0 = probe.detach().full_tensor().clone() if hasattr(probe, "full_tensor") else probe.detach().clone()
    update(model, opt, batch, cfg, dp=ctx)  # warm-up (allocator, AdamW states)
    sync(device)
    t0, losses = time.perf_counter(), []
    for _ in range(sizes.steps):
        losses.append(update(model, opt, batch, cfg, dp=ctx).loss)
    sync(device)
    dt = (time.perf_counter() - t0) / sizes.steps
    seq_tokens, trained = int(batch.attention_mask.sum()), batch.num_tokens
    out.update(rows=batch.num_rows, seq_len=int(batch.input_ids.shape[1]), step_seconds=dt,
               seq_tokens_per_s=seq_tokens / dt, trained_tokens_per_s=trained / dt, peak_mem_gib=peak_gib(device),
               losses=losses)
    w1 = probe.detach().full_tensor() if hasattr(probe, "full_tensor") else probe.detach()
    out["weights_changed"] = bool(not torch.equal(w0, w1))
    model.eval()
    after = batch_logprobs(model, batch, micro_batch=sizes.micro_batch)
    mask = batch.loss_mask.bool()
    out["logprob_max_change"] = float((after - batch.old_logprobs)[mask].abs().max())
    ok = all(np.isfinite(losses)) and out["weights_changed"] and out["logprob_max_change"] > 0 and out["fsdp_sharded"]
    if push_to is not None:
        out.update(weight_push(model, ctx, push_to, batch, after, device))
        ok = ok and out["push_logprob_max_gap"] <= 0.1
    out["ok"] = bool(ok)
    del model, opt
    free_memory(device)
    return out


def _probe(model) -> torch.Tensor:
    """A trained weight to compare before/after: the first LoRA B matrix, else the first
    decoder layer's MLP down projection."""
    for name, p in model.named_parameters():
        if p.requires_grad and ("lora_B" in name or "mlp.down_proj.weight" in name):
            return p
    return next(p for p in model.parameters() if p.requires_grad)


def weight_push(model, ctx, engine, batch, trainer_lp: torch.Tensor, device: torch.device) -> dict:
    """Trainer → engine: gather the full (LoRA-merged) state dict with
    ``agentrl.distributed.inference_state`` (``push_gather_seconds``), ``engine.update_weights`` (``push_load_seconds``), then the
    engine's ``score`` of row 0 vs the trainer's logprobs (``push_logprob_max_gap``)."""
    from agentrl.distributed import inference_state

    sync(device)
    t0 = time.perf_counter()
    state = inference_state(model, ctx)  # 1-rank group: the FSDP2 all-gather path, to CPU
    sync(device)
    t1 = time.perf_counter()
    engine.update_weights(state, version=engine.policy_version + 1)
    sync(device)
    t2 = time.perf_counter()
    n_bytes = sum(t.numel() * t.element_size() for t in state.values())
    del state
    ids = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    cols = batch.loss_mask[0].nonzero().squeeze(-1)
    start = int(cols[0])
    eng_lp = engine.score(ids[:start], ids[start:])
    gap = float(np.max(np.abs(eng_lp - trainer_lp[0, start:len(ids)].numpy())))
    return {"push_gather_seconds": t1 - t0, "push_load_seconds": t2 - t1, "push_seconds": t2 - t0,
            "push_gib": n_bytes / 2**30, "push_version": engine.policy_version, "push_logprob_max_gap": gap}


def free_memory(device: torch.device) -> None:
    """Collect garbage and return cached CUDA blocks to the driver (peaks then start clean)."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()

