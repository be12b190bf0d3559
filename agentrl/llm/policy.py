"""Build the policy a config names: engine + chat renderer + the torch model they share."""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.config import PolicyConfig
from agentrl.llm.chat import ChatRenderer


@dataclass
class Policy:
    """The policy of a training run.

    Attributes:
        engine: the ``LLMClient`` that samples rollouts (``HFEngine`` on ``policy.device``).
        renderer: the chat renderer of the policy's tokenizer.
        model: the torch model being trained, on ``policy.device`` in ``policy.dtype``; for the
            in-process HF engine it is the very object the engine samples from, so an
            optimizer step is a weight sync.
        pad_id: the id used for padding training batches.
        shares_weights: True when the engine samples from ``model`` itself (in-process HF):
            an optimizer step is the weight sync. False (vLLM): the trainer must push the
            weights with ``engine.update_weights`` after each update.
    """

    engine: object
    renderer: ChatRenderer
    model: object
    pad_id: int
    shares_weights: bool = True


def load_policy(cfg: PolicyConfig) -> Policy:
    """Load ``cfg.model`` (a packaged name such as ``smollm2-135m-instruct`` or an HF folder)
    in ``cfg.dtype`` on ``cfg.device`` (``agentrl.llm.device.resolve_device``, checked
    before anything is read) with the engine ``cfg.engine``: ``hf`` (the engine samples from the
    trained model) or ``vllm`` (an in-process vLLM engine plus a separate HF copy that
    trains; weights are pushed to vLLM after every update; with ``action_constraint:
    admissible`` the vLLM engine is built for constrained decoding). The vLLM engine's
    arguments come from ``cfg.vllm`` (``agentrl.llm.vllm_setup.engine_kwargs``), resolved
    once the trainer's model is on the device.

    Raises:
        ConfigError: ``policy.device`` asks for CUDA that is not there, or
            ``policy.vllm.enable_sleep_mode: true`` off CUDA (names the fix).
        FileNotFoundError: the packaged model is not prepared (names the command to run).
        KeyError: unknown model name (with suggestions).
        ModuleNotFoundError: ``vllm`` requested but not installed (names the fix).
        ValueError: an engine that cannot take weight updates from an in-process trainer
            (``vllm_http``, ``openai_http``, ``scripted``).
    """
    if cfg.engine not in ("hf", "vllm"):
        raise ValueError(f"policy.engine={cfg.engine!r} cannot be trained in-process; use hf or vllm "
                         f"({cfg.engine} engines serve rollouts and evaluation: agentrl.llm.openai_http)")
    from transformers import AutoTokenizer

    from agentrl.llm.device import resolve_device
    from agentrl.llm.hf import HFEngine
    from agentrl.llm.models import resolve_model

    device = resolve_device(cfg.device)  # a missing GPU fails here, before any weights or rollouts
    path = resolve_model(cfg.model)
    renderer = ChatRenderer(AutoTokenizer.from_pretrained(path))
    trainer_side = HFEngine.from_pretrained(path, dtype=cfg.dtype, device=device, num_threads=cfg.num_threads,
                                           prefix_cache_mb=cfg.prefix_cache_mb, decode_attention=cfg.decode_attention)
    if cfg.engine == "hf":
        return Policy(engine=trainer_side, renderer=renderer, model=trainer_side.model,
                      pad_id=trainer_side.pad_token_id)
    from agentrl.llm.vllm import VLLMEngine
    from agentrl.llm.vllm_setup import engine_kwargs

    # after the trainer's model is resident: the free GPU memory read here is what it left
    kw = engine_kwargs(cfg.vllm, device=device, model_dir=path, model=trainer_side.model, lora=cfg.lora is not None)
    engine = VLLMEngine.from_pretrained(path, dtype=cfg.dtype, constrained=cfg.action_constraint == "admissible", **kw)
    return Policy(engine=engine, renderer=renderer, model=trainer_side.model, pad_id=trainer_side.pad_token_id,
                  shares_weights=False)
