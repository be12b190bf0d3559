"""Token display of a turn: the run's tokenizer (when known), per-token spans and colours.

The store keeps token ids only. The tokenizer comes from ``--tokenizer`` (a ``tokenizer.json``
or a model folder holding one) or from the run's config: ``config.yaml`` next to the store
file (what ``agentrl train`` writes) whose ``run.name`` is the run and whose ``policy.model``
is a packaged model name or an HF folder. Without one, ids are shown undecoded.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True, slots=True)
class TokenSpan:
    """One completion token as shown: id, decoded text (``""`` without a tokenizer), the
    behaviour policy's logprob (nats), loss-mask value (0/1) and the CSS background colour."""

    token_id: int
    text: str
    logprob: float | None
    mask: int
    colour: str

    @property
    def title(self) -> str:
        """Hover text: ``id 42 · logprob -0.1234 · mask 1 · 'text'``."""
        lp = "n/a" if self.logprob is None else f"{self.logprob:.4f}"
        return f"id {self.token_id} · logprob {lp} · mask {self.mask}" + (f" · {self.text!r}" if self.text else "")


class Decoder:
    """Decodes token ids with a Hugging Face ``tokenizers`` file.

    Args:
        path: ``tokenizer.json`` or a folder holding one.
    Raises:
        FileNotFoundError: no ``tokenizer.json`` at ``path``.
        ImportError: the ``tokenizers`` package is missing (``pip install 'agentrl[llm]'``).
    """

    def __init__(self, path: str | Path) -> None:
        p = Path(path).expanduser()
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {p}; pass --tokenizer PATH/tokenizer.json or a model folder")
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - tokenizers ships with the llm extra
            raise ImportError("decoding tokens needs the tokenizers package: pip install 'agentrl[llm]'") from exc
        self.path = file
        self._tok = Tokenizer.from_file(str(file))

    def text(self, ids: np.ndarray) -> str:
        """Decoded text of int32[N] ids (special tokens kept)."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def pieces(self, ids: np.ndarray) -> list[str]:
        """One decoded string per id of int32[N] (bytes of a split character decode to '�')."""
        return [self._tok.decode([int(i)], skip_special_tokens=False) for i in ids]


@functools.lru_cache(maxsize=8)
def load_decoder(path: str) -> Decoder:
    """A cached ``Decoder`` for ``path`` (same errors as ``Decoder``)."""
    return Decoder(path)


def run_tokenizer(store_path: Path, run_id: str, recorded: str | None = None) -> str | None:
    """The tokenizer of ``run_id``: ``recorded`` (what the store records,
    ``TurnStore.tokenizer`` / ``agentrl.store.schema.recorded_tokenizer``) when it exists here,
    else the model of the ``config.yaml`` beside the store.

    Returns ``None`` when neither names a tokenizer that exists here (another run's config, a
    packaged model that was not prepared).
    """
    if recorded is not None and (Path(recorded).is_file() or (Path(recorded) / "tokenizer.json").is_file()):
        return recorded
    cfg_file = store_path.parent / "config.yaml"
    if not cfg_file.is_file():
        return None
    import yaml

    try:
        raw = yaml.safe_load(cfg_file.read_text(encoding="utf-8")) or {}
        if (raw.get("run") or {}).get("name") != run_id:
            return None
        model = (raw.get("policy") or {}).get("model")
        if not model:
            return None
        from agentrl.llm.models import resolve_model

        folder = resolve_model(str(model))
    except (yaml.YAMLError, OSError, KeyError, AttributeError, FileNotFoundError):
        return None
    return str(folder) if (folder / "tokenizer.json").is_file() else None


def advantage_colour(value: float | None, scale: float) -> str:
    """CSS colour of an advantage: green for > 0, red for < 0, alpha ∝ |value| / scale (≤ 1);
    transparent when ``None`` (no advantage stored)."""
    if value is None or not math.isfinite(value) or scale <= 0:
        return "transparent"
    a = min(abs(value) / scale, 1.0) * 0.75 + 0.1
    return f"rgba(22,163,74,{a:.2f})" if value > 0 else f"rgba(220,38,38,{a:.2f})" if value < 0 else "rgba(0,0,0,0.06)"


def completion_spans(ids: np.ndarray, logprobs: np.ndarray, advantage: float | None, scale: float,
                     decoder: Decoder | None) -> list[TokenSpan]:
    """Spans of a turn's completion: int32[C] ids, float32[C] logprobs (may be shorter, e.g. a
    proxy turn without logprobs), mask 1 on every completion token (DESIGN invariant 2), the
    colour of the turn's advantage."""
    texts = decoder.pieces(ids) if decoder is not None else [""] * len(ids)
    colour = advantage_colour(advantage, scale)
    return [TokenSpan(int(i), texts[k], float(logprobs[k]) if k < len(logprobs) else None, 1, colour)
            for k, i in enumerate(ids)]
