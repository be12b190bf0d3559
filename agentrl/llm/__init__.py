"""agentrl.llm — policy engines and chat rendering (layer L1).

Owns the ``LLMClient`` protocol (token-in/token-out), ``SamplingParams`` and ``Completion``
(``base``), the backends (``hf`` — torch, in-process; ``openai_http`` — httpx, any
OpenAI-compatible server; ``scripted`` — deterministic, for tests), the chat renderer and
loss-mask helpers (``chat``), tiny offline test models (``tiny``) and the packaged model
cache (``models``). May import ``agentrl.types`` and ``agentrl.registry`` only. torch is
imported only by ``hf`` and its decoding helpers (``step_logprobs``, ``trie_decode``,
``grammar_decode``, ...), and lazily by ``tiny`` / ``models``.
"""

from agentrl.llm.base import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    Completion,
    LLMClient,
    SamplingParams,
)

__all__ = ["Completion", "LLMClient", "SamplingParams", "FINISH_STOP", "FINISH_LENGTH", "FINISH_ABORT"]
