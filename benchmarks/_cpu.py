"""What the benchmarks ask of this CPU (imported by the scripts of ``benchmarks/``, which run with
this folder on ``sys.path``)."""

from __future__ import annotations

from pathlib import Path


def cpu_dtype() -> str:
    """float32 on CPUs without AVX-512-BF16/AMX (bf16 is ~13x slower there), else bfloat16."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "float32"
    return "bfloat16" if ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"
