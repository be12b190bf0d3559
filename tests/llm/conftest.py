"""Fixtures of the grammar tests: the tiny tokenizer's chat renderer and its grammar compiler."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def renderer(tiny_tokenizer):
    """``ChatRenderer`` on the tiny BPE-2k tokenizer (ChatML template)."""
    from agentrl.llm.chat import ChatRenderer

    return ChatRenderer(tiny_tokenizer)


@pytest.fixture(scope="module")
def compiler(renderer):
    """The renderer's cached ``GrammarCompiler`` (needs the grammar extra)."""
    pytest.importorskip("llguidance", reason="needs the grammar extra: pip install 'agentrl[grammar]'")
    from agentrl.llm.grammar import compiler_for

    return compiler_for(renderer)
