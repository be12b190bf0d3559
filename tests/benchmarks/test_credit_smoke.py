"""``benchmarks/credit.py`` at a tiny size in a subprocess: every registered estimator has a row at
both sizes (BiPACE at three hidden sizes, GiGPO / GraphGPO also with similarity), the old-code,
naive-reference and saved-array checks hold, and the 400k/100k ratio is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from agentrl.credit import list_estimators

ROOT = Path(__file__).resolve().parents[2]


def test_credit_benchmark_smoke(tmp_path):
    out = tmp_path / "credit.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "credit.py"), "--groups", "4", "--repeat", "1",
                           "--save", str(tmp_path / "saved"), "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())["variants"]
    names = {label.split("/")[0] for label in res}
    # what a fresh interpreter registers (this process may hold plugins other tests imported, e.g.
    # examples/custom_estimator.py's discounted_grpo on the same xdist worker)
    fresh = subprocess.run([sys.executable, "-c", "import json; from agentrl.credit import list_estimators; "
                            "print(json.dumps(list_estimators()))"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=120, check=True)
    assert names == set(json.loads(fresh.stdout)) and names <= set(list_estimators())
    assert {"bipace/h64", "bipace/h1536", "bipace/h3584", "gigpo/similarity", "graphgpo/similarity"} <= set(res)
    for label in ("bipace/h64", "bipace/h1536", "gigpo/similarity", "graphgpo/similarity"):
        assert res[label]["100k"]["identical_to_old_code"] is True
    assert res["bipace/h1536"]["400k"]["identical_to_old_code"] is True
    assert "skipped" in res["bipace/h3584"]["400k"]
    assert all(r["100k"]["matches_naive"] for k, r in res.items() if "/" not in k)
    assert all("cpu_ratio_400k_100k" in r for k, r in res.items() if k != "bipace/h3584")
    assert len(list((tmp_path / "saved").glob("*.npy"))) == 2 * len(res) - 1
