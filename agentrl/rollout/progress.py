"""Progress of a long phase (rollout, evaluation) that a person can read on a terminal and in
a log file.

On a terminal (``rich.console.Console.is_terminal``) it is a rich progress bar. Elsewhere
(nohup, CI, SLURM: stdout is a file or a pipe) rich would draw the bar only once, at the end;
``PhaseProgress`` writes plain lines instead — one when the phase starts, one every
``interval_s`` seconds (default 30, ``AGENTRL_PROGRESS_INTERVAL_S``), and one at the end — each
with the count, the rate and the ETA::

    rollout: 12/32 episodes · 96 turns · 0.41 episodes/s · 29 s elapsed · ETA 49 s
"""

from __future__ import annotations

import os
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["PhaseProgress", "INTERVAL_ENV"]

INTERVAL_ENV = "AGENTRL_PROGRESS_INTERVAL_S"


class PhaseProgress:
    """``with PhaseProgress("rollout", total) as p: p.advance(1, turns=k)``.

    Args:
        label: the phase's name, first on every line / the bar.
        total: units the phase will complete (≥ 0).
        unit: what a unit is (``"episodes"``).
        enabled: False shows nothing at all.
        console: where to write (default: a new stdout ``Console``).
        interval_s: seconds between plain lines (default ``$AGENTRL_PROGRESS_INTERVAL_S`` or 30).
    Raises:
        ValueError: a negative ``total`` or ``interval_s``, or a non-numeric
            ``AGENTRL_PROGRESS_INTERVAL_S``.
    """

    def __init__(self, label: str, total: int, *, unit: str = "episodes", enabled: bool = True,
                 console: Console | None = None, interval_s: float | None = None) -> None:
        if total < 0:
            raise ValueError(f"progress total must be >= 0, got {total}")
        if interval_s is None:
            text = os.environ.get(INTERVAL_ENV, "30")
            try:
                interval_s = float(text)
            except ValueError:
                raise ValueError(f"{INTERVAL_ENV}={text!r} is not a number of seconds") from None
        if interval_s < 0:
            raise ValueError(f"progress interval must be >= 0 seconds, got {interval_s}")
        self.label, self.total, self.unit, self.enabled = label, int(total), unit, enabled
        self.console = console or Console()
        self.interval_s = float(interval_s)
        self.done, self.turns = 0, None
        self._bar: Progress | None = None
        self._task = None
        self._t0 = self._last = 0.0

    def __enter__(self) -> "PhaseProgress":
        self._t0 = self._last = time.monotonic()
        if not self.enabled:
            return self
        if self.console.is_terminal:
            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn(self.unit + "{task.fields[extra]}"), TimeElapsedColumn(),
                                 console=self.console, transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total, extra="")
        else:
            self._line(self._t0)
        return self

    def advance(self, n: int = 1, *, turns: int | None = None) -> None:
        """``n`` more units done; ``turns``: the phase's turn count so far (shown when given)."""
        self.done += n
        if turns is not None:
            self.turns = turns
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, advance=n, extra="" if self.turns is None else f" · {self.turns} turns")
            return
        now = time.monotonic()
        if now - self._last >= self.interval_s and self.done < self.total:
            self._line(now)

    def __exit__(self, *exc) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.__exit__(*exc)
        else:
            self._line(time.monotonic(), final=True)

    def _line(self, now: float, final: bool = False) -> None:
        self._last = now
        elapsed = now - self._t0
        parts = [f"{self.label}: {self.done}/{self.total} {self.unit}"]
        if self.turns is not None:
            parts.append(f"{self.turns} turns")
        if self.done and elapsed > 0:
            rate = self.done / elapsed
            parts.append(f"{rate:.2f} {self.unit}/s")
        parts.append(f"{elapsed:.0f} s elapsed")
        if not final and self.done and elapsed > 0 and self.done < self.total:
            parts.append(f"ETA {(self.total - self.done) / rate:.0f} s")
        if final:
            parts.append("done" if self.done >= self.total else "stopped")
        self.console.print(" · ".join(parts), markup=False, highlight=False, soft_wrap=True)
