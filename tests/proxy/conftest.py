"""Fixtures of the proxy tests: the tiny ChatML tokenizer's renderer, scripted replies,
and a recording proxy served by uvicorn on 127.0.0.1 (a free port) in a thread."""

from __future__ import annotations

import contextlib

import pytest

pytest.importorskip("fastapi", reason="needs the proxy extra: pip install 'agentrl[proxy]'")
pytest.importorskip("openai", reason="needs the dev extra (openai SDK)")


@pytest.fixture(scope="session")
def renderer(tiny_tokenizer):
    from agentrl.llm.chat import ChatRenderer

    return ChatRenderer(tiny_tokenizer)


@pytest.fixture(scope="session")
def reply_ids(tiny_tokenizer):
    """``reply_ids("go east")`` → the canonical ids of the text followed by EOS."""
    def enc(text: str, eos: bool = True) -> list[int]:
        ids = tiny_tokenizer.encode(text, add_special_tokens=False)
        return ids + [tiny_tokenizer.eos_token_id] * eos
    return enc


@pytest.fixture
def serve(renderer):
    """``with serve(engine, **proxy_kwargs) as proxy:`` — a started ``RecordingProxy``."""
    from agentrl.proxy import RecordingProxy

    @contextlib.contextmanager
    def _serve(engine, **kw):
        proxy = RecordingProxy(engine, renderer, **kw)
        proxy.start()
        try:
            yield proxy
        finally:
            proxy.stop()
    return _serve
