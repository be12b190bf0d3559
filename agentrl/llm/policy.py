"""Build the policy a config names: engine + chat renderer + the torch model they share."""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.config import PolicyConfig
from agentrl.llm.chat import ChatRenderer


@dataclass
class Policy:
    """The policy of a training run.

    Attributes:
        engine: the ``LLMClient`` that samples rollouts (``HFEngine`` on CPU).
        renderer: the chat renderer of the policy's tokenizer.
        model: the torch model being trained; for the in-process HF engine it is the very
            object the engine samples from, so an optimizer step is a weight sync.
        pad_id: the id used for padding training batches.
    """

    engine: object
    renderer: ChatRenderer
    model: object
    pad_id: int


def load_policy(cfg: PolicyConfig) -> Policy:
    """Load ``cfg.model`` (a packaged name such as ``smollm2-135m-instruct`` or an HF folder)
    with the ``hf`` engine in ``cfg.dtype``.

    Raises:
        FileNotFoundError: the packaged model is not prepared (names the command to run).
        KeyError: unknown model name (with suggestions).
        ValueError: an engine other than ``hf`` (the in-process trainer needs the weights).
    """
    if cfg.engine != "hf":
        raise ValueError(f"policy.engine={cfg.engine!r} cannot be trained in-process yet; use policy.engine=hf")
    from transformers import AutoTokenizer

    from agentrl.llm.hf import HFEngine
    from agentrl.llm.models import resolve_model

    path = resolve_model(cfg.model)
    engine = HFEngine.from_pretrained(path, dtype=cfg.dtype)
    return Policy(engine=engine, renderer=ChatRenderer(AutoTokenizer.from_pretrained(path)), model=engine.model,
                  pad_id=engine.pad_token_id)
