"""``benchmarks/scorer_cost.py --smoke`` in a subprocess: GRPO, OPRL (trained and ``prm_lr: 0``) and
StepOPSD on the junction maze with the tiny model, one iteration each; the JSON holds every arm's
timings, OPRL's forward rows per turn (2 no-grad passes with the trainer's reference, a third after a
PRM step) and the ratios to GRPO."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # four training subprocesses: ~30 s idle
def test_scorer_cost_smoke_writes_every_arm(tmp_path):
    out = tmp_path / "scorer_cost.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scorer_cost.py"), "--smoke", "--iterations", "1",
                           "--threads", "1", "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"grpo", "oprl", "oprl_frozen", "stepopsd"} and res["smoke"] is True
    for arm, r in res["results"].items():
        (it,) = r["iterations"]
        assert it["iteration_s"] == pytest.approx(it["time/rollout_s"] + it["time/credit_s"] + it["time/update_s"])
        assert res["summary"][arm]["iteration1_ratio_vs_grpo"] > 0
    oprl, frozen = res["results"]["oprl"]["iterations"][0], res["results"]["oprl_frozen"]["iterations"][0]
    assert oprl["prm/forward_rows_per_turn"] == (3.0 if oprl["prm/pairs"] > 0 else 2.0)
    assert frozen["prm/forward_rows_per_turn"] == 2.0 and frozen["prm/backward_rows_per_turn"] == 0.0
    assert res["results"]["stepopsd"]["iterations"][0]["hindsight/forward_rows_per_turn"] <= 1.0
