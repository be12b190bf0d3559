"""The check after every weight sync (``agentrl.train.sync``): the probe's verdicts by hand, the
deadline that bounds a sync, and through the training loop — a run whose engine workers get
their weights passes the probe at every sync (gap logged), a run whose push loads nothing on
purpose stops at the first probe with one line naming the engine, the version and the gap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_train_loop import _cfg  # noqa: E402

from agentrl.train.sync import DEADLINE_EXIT, SyncCheck, SyncError, probe_tokens  # noqa: E402


def _check(tol: float = 1e-3) -> SyncCheck:
    return SyncCheck(np.arange(3, dtype=np.int32), np.arange(2, dtype=np.int32), tol)


def test_verdicts_by_hand():
    chk = _check()
    trainer = np.array([-1.0, -2.0], np.float32)
    gap, why = chk.verdict("engine", np.array([-1.0, -2.0005], np.float32), trainer, 1)
    assert gap == pytest.approx(5e-4, abs=1e-6) and why is None  # within 1e-3
    gap, why = chk.verdict("engine", np.array([-1.0, -2.5], np.float32), trainer, 2)
    assert gap == pytest.approx(0.5) and why.startswith("engine at policy version 2: probe logprobs differ")
    assert "0.5 nats (tolerance 0.001" in why
    # the trainer moved by 0.3 while the engine returned its last logprobs bit for bit: nothing was loaded
    chk = _check(tol=0.5)
    chk.verdict("engine 1", np.array([-1.0, -2.0], np.float32), trainer, 1)
    gap, why = chk.verdict("engine 1", np.array([-1.0, -2.0], np.float32), trainer + 0.3, 2)
    assert gap == pytest.approx(0.3) and "did not change while the trainer's moved by 0.3 nats" in why
    # the same, but the engine moved too (a good sync within tolerance): fine
    gap, why = chk.verdict("engine 1", np.array([-0.4, -1.45], np.float32), trainer + 0.6, 3)
    assert gap == pytest.approx(0.05, abs=1e-6) and why is None
    # a trainer move below a tenth of the tolerance says nothing (bf16 merges may round to the same weights)
    gap, why = chk.verdict("engine 1", np.array([-0.4, -1.45], np.float32), trainer + 0.64, 4)
    assert gap == pytest.approx(0.09, abs=1e-6) and why is None


def test_an_engine_holding_a_version_the_trainer_did_not_push_fails_the_probe(monkeypatch):
    """Issue 52: equal logprobs are not enough — a worker that says it holds another version
    than the one pushed (a foreign push staged as "version 999") fails; so does an asynchronous
    report of a version newer than any the trainer pushed."""
    from agentrl.rollout.engines.interface import WorkerScore

    chk, trainer = _check(), np.array([-1.0, -2.0], np.float32)
    gap, why = chk.verdict("engine worker 0", trainer.copy(), trainer, 3, held=3)
    assert gap == 0.0 and why is None
    gap, why = chk.verdict("engine worker 1", trainer.copy(), trainer, 3, held=999)
    assert gap == 0.0 and "holds policy version 999, but the trainer pushed 3" in why

    class Workers:
        def score(self, prompt, completion):
            return [WorkerScore(0, trainer.copy(), 3), WorkerScore(1, trainer.copy(), 999)]

    class Policy:
        shares_weights = True

    assert [(lbl, held) for lbl, _, held in chk.engine_scores(Policy(), Workers(), local=True)] == [
        ("engine worker 0", 3), ("engine worker 1", 999)]

    class Stream:
        def probe_reports(self):
            return [(0, 3, trainer.copy()), (1, 999, trainer.copy())]

    with pytest.raises(SyncError, match="engine worker 1 loaded policy version 999, newer than any the trainer pushed"):
        import types

        import agentrl.train.sync as sync

        monkeypatch.setattr(sync, "trainer_logprobs", lambda *a: trainer)  # the trainer's probe at version 3
        chk.check_reports(types.SimpleNamespace(model=None), Stream(), None, 3)


def test_probe_tokens_end_with_eos(tiny_dir):
    from transformers import AutoTokenizer

    from agentrl.llm.chat import ChatRenderer

    renderer = ChatRenderer(AutoTokenizer.from_pretrained(tiny_dir))
    prompt, completion = probe_tokens(renderer)
    assert prompt.dtype == completion.dtype == np.int32 and prompt.size > 5 and completion.size > 2
    assert completion[-1] == renderer.eos_token_id
    again = probe_tokens(renderer)
    assert np.array_equal(again[0], prompt) and np.array_equal(again[1], completion)  # fixed tokens


def test_deadline_stops_a_hung_sync_with_one_line():
    code = ("import time\nfrom agentrl.train.sync import deadline\n"
            "with deadline(0.5, 'the weight sync to policy version 7'):\n    time.sleep(30)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == DEADLINE_EXIT
    first = proc.stderr.splitlines()[0]
    assert first == ("[agentrl] the weight sync to policy version 7 did not finish in 0.5 s "
                     "(rollout.sync_timeout_s); stopping the run (thread stacks follow)")
    fine = subprocess.run([sys.executable, "-c", code.replace("time.sleep(30)", "pass")], capture_output=True,
                          text=True, timeout=60)
    assert fine.returncode == 0 and fine.stderr == ""


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_engine_workers_pass_the_probe_after_every_sync(tiny_dir, tmp_path):
    from agentrl.train import train

    cfg = _cfg(tiny_dir, tmp_path, name="probe-ok", rollout__engines=1, run__eval_every=0, run__seed=0)
    result = train(cfg, resume=False)
    lines = _metrics(result.run_dir)
    assert len(lines) == 2 and lines[0]["update/steps"] >= 1  # the weights moved at the first update
    for m in lines:  # float32 HF worker vs trainer: the same weights, another batch shape
        assert 0.0 <= m["sync/probe_max_abs_diff"] <= 1e-4 and m["sync/seconds"] > 0 and m["sync/probe_s"] > 0


def test_a_sync_that_loads_nothing_stops_at_the_first_probe(tiny_dir, tmp_path, monkeypatch):
    from agentrl.rollout.engines.procs import ProcessEngineWorkers
    from agentrl.train import train

    def push_nothing(self, state, version):  # the bug: the version moves, the weights never arrive
        self._shared._version.value = int(version)  # (shared memory: the version written, not the buffers)
        self.policy_version = int(version)
        self._ask_all(("weights", int(version)), "weights_ok")  # every worker "loads" version 1

    monkeypatch.setattr(ProcessEngineWorkers, "push_weights", push_nothing)
    cfg = _cfg(tiny_dir, tmp_path, name="probe-bad", rollout__engines=1, run__eval_every=0, run__seed=0)
    with pytest.raises(SyncError) as err:
        train(cfg, resume=False)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("weight sync check failed: engine worker 0 at policy version 1: probe logprobs differ "
                          "from the trainer's by ")
    gap = float(msg.split("trainer's by ")[1].split(" nats")[0])
    assert gap > 1e-3  # lr 1e-2 moved the trainer's probe far beyond the float32 tolerance
