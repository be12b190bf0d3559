"""``WeightLayout``: how the inference state dict travels in the trainer → engine weight group.

Plain data (pickles through pipes and Ray): the names, dtypes and shapes of the tensors, tied
tensors sent once, cut into buckets of at most ``bucket_bytes`` (each tensor at a 16-byte
aligned offset of one ``uint8`` buffer per bucket). Used by ``agentrl.llm.weight_broadcast``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

__all__ = ["ALIGN", "WeightLayout"]

#: Byte alignment of every tensor inside a bucket buffer (any dtype may view its slice).
ALIGN = 16


@dataclass(frozen=True)
class WeightLayout:
    """The inference state dict's layout (plain data: pickles through pipes and Ray).

    Attributes:
        names / dtypes / shapes: the tensors sent (dtype without ``torch.``), in order.
        offsets: byte offset of each tensor inside its bucket buffer (16-byte aligned).
        buckets: per bucket, (first index, end index, buffer bytes).
        aliases: ``(name, sent name)`` of tied tensors (one storage under two names).
    """

    names: tuple[str, ...]
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]
    buckets: tuple[tuple[int, int, int], ...]
    aliases: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, state: Mapping[str, torch.Tensor], bucket_bytes: int = 512 << 20) -> "WeightLayout":
        """The layout of ``state`` in buckets of at most ``bucket_bytes`` bytes (a larger
        tensor goes alone).

        Raises:
            ValueError: ``bucket_bytes`` < 1.
        """
        if bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}; set policy.vllm.weight_bucket_mb > 0")
        seen: dict[tuple, str] = {}
        names, dtypes, shapes, offsets, aliases, buckets = [], [], [], [], [], []
        start, at = 0, 0
        for name, t in state.items():
            key = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
            if t.numel() and key in seen:
                aliases.append((name, seen[key]))
                continue
            seen[key] = name
            n = t.numel() * t.element_size()
            if at and at + n > bucket_bytes:
                buckets.append((start, len(names), at))
                start, at = len(names), 0
            names.append(name)
            dtypes.append(str(t.dtype).removeprefix("torch."))
            shapes.append(tuple(int(s) for s in t.shape))
            offsets.append(at)
            at += -(-n // ALIGN) * ALIGN
        if names:
            buckets.append((start, len(names), at))
        return cls(tuple(names), tuple(dtypes), tuple(shapes), tuple(offsets), tuple(buckets), tuple(aliases))

    @property
    def nbytes(self) -> int:
        """Bytes sent per push (alignment padding included)."""
        return sum(b[2] for b in self.buckets)
