"""Fixtures of the viewer tests (builders in ``view_fixtures``, a uniquely named module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from view_fixtures import HandStore, build_hand_store


@pytest.fixture()
def hand_store(tmp_path) -> HandStore:
    return build_hand_store(tmp_path / "hand.sqlite")


@pytest.fixture(scope="session")
def word_tokenizer(tmp_path_factory) -> Path:
    """A WordLevel ``tokenizer.json``: ids 0..5 = [UNK], look, north, door, open, <eos>."""
    tokenizers = pytest.importorskip("tokenizers", reason="needs the tokenizers package: pip install 'agentrl[llm]'")
    vocab = {w: i for i, w in enumerate(["[UNK]", "look", "north", "door", "open", "<eos>"])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path
