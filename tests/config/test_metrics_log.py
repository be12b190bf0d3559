"""Metrics sinks: JSONL records, console line, TensorBoard scalars, lazy W&B, validation."""

from __future__ import annotations

import importlib.util
import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from agentrl.config import LogConfig
from agentrl.log import ConsoleSink, JsonlSink, MetricsLogger, TensorBoardSink, WandbSink, make_logger


def test_jsonl_and_console(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = ConsoleSink(keys=["reward/mean", "update/loss"], console=Console(file=buf, width=200))
    with MetricsLogger([console, JsonlSink(tmp_path / "m.jsonl")]) as log:
        log.log(0, {"reward/mean": 0.25, "update/loss": 1.5, "other": 3})
        log.log(1, {"reward/mean": math.nan, "update/loss": 0.125})
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1]
    assert lines[0]["reward/mean"] == 0.25 and lines[0]["other"] == 3.0 and lines[1]["reward/mean"] is None
    out = buf.getvalue().splitlines()
    assert out[0] == "it 0 │ reward/mean 0.25 │ update/loss 1.5" and "other" not in out[0]
    assert out[1] == "it 1 │ reward/mean nan │ update/loss 0.125"


def test_tensorboard_scalars_read_back(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path / "tb")
    MetricsLogger([sink]).log(3, {"a/b": 2.5})
    MetricsLogger([sink]).log(4, {"a/b": -1.0})
    sink.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    tensors = acc.Tensors("a/b")
    assert [t.step for t in tensors] == [3, 4]
    assert [float(t.tensor_proto.float_val[0]) for t in tensors] == [2.5, -1.0]


def test_bad_metrics_and_steps_are_rejected(tmp_path: Path) -> None:
    log = MetricsLogger([JsonlSink(tmp_path / "m.jsonl")])
    with pytest.raises(TypeError, match="metric 'x' must be a real scalar"):
        log.log(0, {"x": "high"})
    with pytest.raises(ValueError, match="non-negative integer"):
        log.log(-1, {"x": 1.0})
    log.close()
    assert (tmp_path / "m.jsonl").read_text() == ""


def test_make_logger_from_config_and_lazy_wandb(tmp_path: Path) -> None:
    log = make_logger(LogConfig(console=False, jsonl=True, tensorboard=True), tmp_path)
    assert [type(s).__name__ for s in log.sinks] == ["JsonlSink", "TensorBoardSink"]
    log.log(1, {"x": 1})
    log.close()
    assert (tmp_path / "metrics.jsonl").exists() and any((tmp_path / "tb").iterdir())
    if importlib.util.find_spec("wandb") is None:  # W&B is imported only when configured
        with pytest.raises(ImportError, match="pip install wandb"):
            WandbSink("proj", "run")


def test_sample_tables_reach_tensorboard_text_and_skip_other_sinks(tmp_path: Path) -> None:
    """Issue 23 item 9: a few episodes' turns per iteration as a table — TensorBoard's text
    plugin reads it back (Markdown, text escaped); console/JSONL sinks ignore it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from agentrl.log import SampleTurn

    rows = [SampleTurn(3, 0, "a room | with a door", "open door", 0.0, -0.5),
            SampleTurn(3, 1, "the door is open\nnorth", "go north", 1.0, None)]
    tb, jsonl = TensorBoardSink(tmp_path / "tb"), JsonlSink(tmp_path / "m.jsonl")
    with MetricsLogger([tb, jsonl]) as log:
        log.log(2, {"x": 1.0})
        log.log_samples(2, rows)
        log.log_samples(3, [])  # nothing to show: nothing written
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    (event,) = acc.Tensors("samples")
    text = event.tensor_proto.string_val[0].decode()
    assert event.step == 2 and text.splitlines()[0] == "| episode | t | observation | action | reward | advantage |"
    assert "| 3 | 0 | a room \\| with a door | open door | 0 | -0.5 |" in text
    assert "| 3 | 1 | the door is open north | go north | 1 |  |" in text
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 1  # JSONL has the metrics only


def test_sample_turns_pick_the_best_and_worst_episode() -> None:
    import numpy as np

    from agentrl.rollout.stats import sample_turns
    from agentrl.types import Episode, EpisodeStatus, Turn

    def ep(eid: int, reward: float, status=EpisodeStatus.OK) -> Episode:
        turns = [Turn("r", eid, 0, t, "o" * 500, "s", f"a{t}", True, reward if t == 1 else 0.0, turn_id=eid * 10 + t)
                 for t in range(2)]
        return Episode(eid, 0, "agentrl/Toy-v0", "x", 0, status=status, turns=turns)

    eps = [ep(0, 0.5), ep(1, 1.0), ep(2, 0.0), ep(3, 9.0, EpisodeStatus.ENV_ERROR)]
    rows = sample_turns(eps, np.array([10, 11, 20, 21]), np.array([0.1, 0.2, -0.1, -0.2]))
    assert [(r.episode_id, r.t) for r in rows] == [(1, 0), (1, 1), (2, 0), (2, 1)]  # best, worst; failed left out
    assert [r.advantage for r in rows] == [0.1, 0.2, -0.1, -0.2] and len(rows[0].observation) == 300
