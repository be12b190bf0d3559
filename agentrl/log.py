"""Metrics sinks and one fan-out logger: console (rich), JSONL, TensorBoard, W&B.

``MetricsLogger.log(step, {"reward/mean": 0.4, "update/loss": 0.12})`` writes one record
to every configured sink. TensorBoard (the ``tensorboard`` package's own writer, no torch)
and W&B are imported lazily, only when configured; a missing package raises an
``ImportError`` that names the extra to install.

Layer L0: imports only the standard library and rich.
"""

from __future__ import annotations

import importlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

__all__ = ["Sink", "SampleTurn", "samples_markdown", "ConsoleSink", "JsonlSink", "TensorBoardSink", "WandbSink",
           "MetricsLogger", "make_logger"]

SAMPLE_COLUMNS = ("episode", "t", "observation", "action", "reward", "advantage")


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Validate and convert metric values to float (bool/int/float/NumPy/torch scalars).

    Raises:
        TypeError: a non-string key or a value that is not a real scalar.
    """
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"metric names must be strings, got {key!r}")
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"metric {key!r} must be a real scalar, got {type(value).__name__} {value!r}") from None
    return out


@dataclass(frozen=True)
class SampleTurn:
    """One row of an iteration's sample table (a few episodes' turns, text trimmed): the
    ``episode_id``, turn ``t``, what the agent saw and did, the env's ``reward`` and the
    ``advantage`` it was trained on (None when not scored / not trained)."""

    episode_id: int
    t: int
    observation: str
    action: str
    reward: float | None
    advantage: float | None

    def cells(self) -> list:
        """The row as ``SAMPLE_COLUMNS`` values."""
        return [self.episode_id, self.t, self.observation, self.action, self.reward, self.advantage]


def samples_markdown(rows: Sequence[SampleTurn]) -> str:
    """A Markdown table of ``rows`` (TensorBoard's text plugin renders it); ``|`` and newlines in
    the text are escaped."""
    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")
    head = "| " + " | ".join(SAMPLE_COLUMNS) + " |\n|" + "---|" * len(SAMPLE_COLUMNS)
    return head + "".join("\n| " + " | ".join(cell(v) for v in r.cells()) + " |" for r in rows)


class Sink(Protocol):
    """Where metrics go. ``write`` gets already-validated float scalars."""

    def write(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class ConsoleSink:
    """One rich line per ``write``: ``it 12 │ reward/mean 0.41 │ update/loss 0.0123 …``.

    Args:
        keys: metric names to show, in order (None = all, sorted).
        console: a rich ``Console`` (default: stdout).
    """

    def __init__(self, keys: Sequence[str] | None = None, console: Console | None = None) -> None:
        self.keys = list(keys) if keys is not None else None
        self.console = console or Console()

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        keys = [k for k in self.keys if k in metrics] if self.keys is not None else sorted(metrics)
        parts = [f"[bold cyan]it {step}[/]"] + [f"{k} [bold]{metrics[k]:.4g}[/]" for k in keys]
        self.console.print(" │ ".join(parts), highlight=False, soft_wrap=True)  # one line per iteration in logs

    def close(self) -> None:
        pass


class JsonlSink:
    """Appends ``{"step": int, "time": unix seconds, <name>: value, ...}`` per line to
    ``path`` and flushes. Non-finite values (NaN, ±inf) are written as ``null``, since JSON
    has no NaN."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        record: dict[str, Any] = {"step": step, "time": time.time()}
        record.update({k: (v if math.isfinite(v) else None) for k, v in metrics.items()})
        self._fh.write(json.dumps(record, allow_nan=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise ImportError(f"{module!r} is not installed; install it with `pip install 'agentrl[{extra}]'` "
                          f"or turn the sink off in the log section of the config") from exc


class TensorBoardSink:
    """Scalars to TensorBoard event files in ``logdir`` (``tensorboard.summary.Writer``).

    Raises:
        ImportError: ``tensorboard`` is not installed (extra ``metrics``).
    """

    def __init__(self, logdir: str | Path) -> None:
        summary = _require("tensorboard.summary", "metrics")
        self.logdir = Path(logdir)
        self._writer = summary.Writer(str(self.logdir))
        self._text = None  # an event file of text summaries, opened with the first sample table

    def write_samples(self, step: int, rows: Sequence[SampleTurn]) -> None:
        """The iteration's sample table as a TensorBoard text summary ``samples`` (Markdown)."""

        from tensorboard.compat.proto import event_pb2
        from tensorboard.plugins.text.summary_v2 import text_pb
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        if self._text is None:
            self._text = EventFileWriter(str(self.logdir), filename_suffix=".samples")
        self._text.add_event(event_pb2.Event(wall_time=time.time(), step=step,
                                             summary=text_pb("samples", samples_markdown(rows))))
        self._text.flush()

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        for k, v in metrics.items():
            self._writer.add_scalar(k, v, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
        if self._text is not None:
            self._text.close()


class WandbSink:
    """Weights & Biases run (``wandb.init(project=..., name=..., config=...)``).

    Raises:
        ImportError: ``wandb`` is not installed (``pip install wandb``).
    """

    def __init__(self, project: str, name: str, config: Mapping[str, Any] | None = None, out_dir: str | Path | None = None) -> None:
        try:
            wandb = importlib.import_module("wandb")
        except ModuleNotFoundError as exc:
            raise ImportError("log.wandb_project is set but 'wandb' is not installed; `pip install wandb` "
                              "or set log.wandb_project=null") from exc
        self._run = wandb.init(project=project, name=name, config=dict(config or {}),
                               dir=str(out_dir) if out_dir is not None else None)

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        self._run.log(dict(metrics), step=step)

    def write_samples(self, step: int, rows: Sequence[SampleTurn]) -> None:
        """The iteration's sample table as a ``wandb.Table`` logged under ``samples``."""
        wandb = importlib.import_module("wandb")
        self._run.log({"samples": wandb.Table(columns=list(SAMPLE_COLUMNS), data=[r.cells() for r in rows])}, step=step)

    def close(self) -> None:
        self._run.finish()


class MetricsLogger:
    """Fan-out to sinks: ``log(step, metrics)`` validates once and writes to each sink.

    Usable as a context manager (closes the sinks on exit).
    Raises:
        TypeError: (from ``log``) a metric value that is not a real scalar.
        ValueError: (from ``log``) a negative step.
    """

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        if int(step) != step or step < 0:
            raise ValueError(f"step must be a non-negative integer (iteration or update count), got {step!r}")
        values = _scalars(metrics)
        for sink in self.sinks:
            sink.write(int(step), values)

    def log_samples(self, step: int, rows: Sequence[SampleTurn]) -> None:
        """Hand an iteration's sample table to the sinks that show tables (TensorBoard text,
        W&B); the others ignore it. Nothing happens for no rows."""
        if rows:
            for sink in self.sinks:
                if hasattr(sink, "write_samples"):
                    sink.write_samples(int(step), rows)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_logger(log_cfg: Any, run_dir: str | Path, *, run_name: str = "run",
                config: Mapping[str, Any] | None = None, console_keys: Sequence[str] | None = None) -> MetricsLogger:
    """Build the sinks a ``agentrl.config.LogConfig`` asks for.

    Files: ``<run_dir>/metrics.jsonl`` and TensorBoard events under ``<run_dir>/tb``.
    ``config`` (the run config as a plain dict) is passed to W&B.
    Raises:
        ImportError: a configured sink's package is missing (names the fix).
    """
    run_dir = Path(run_dir)
    sinks: list[Sink] = []
    if log_cfg.console:
        sinks.append(ConsoleSink(console_keys))
    if log_cfg.jsonl:
        sinks.append(JsonlSink(run_dir / "metrics.jsonl"))
    if log_cfg.tensorboard:
        sinks.append(TensorBoardSink(run_dir / "tb"))
    if log_cfg.wandb_project:
        sinks.append(WandbSink(log_cfg.wandb_project, run_name, config, run_dir))
    return MetricsLogger(sinks)
