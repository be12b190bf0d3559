"""``benchmarks/credit_sizes.py`` at a tiny size in a subprocess: the JSON has the similarity rows
(shipped clustering identical to the plain difflib loop, asserted inside the script) and the
BiPACE hidden-size rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_credit_sizes_smoke(tmp_path):
    out = tmp_path / "credit_sizes.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "credit_sizes.py"), "--groups", "6",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res["similarity"]) == {"gigpo/100k", "gigpo/400k", "graphgpo/100k", "graphgpo/400k"}
    assert res["similarity"]["gigpo/100k"]["identical_to_plain"] is True
    assert set(res["bipace"]) == {"bipace/h64", "bipace/h1536", "bipace/h3584"}
    assert res["n_turns"]["400k"] > res["n_turns"]["100k"] > 0
