"""Execution slots: one unprivileged host uid per concurrent sandbox run.

RLIMIT_NPROC counts processes per *real uid across the host*, so two runs sharing a uid
would share one process budget (and could signal each other). Each slot therefore owns a
uid ``base_uid + index``. Slots are exclusive across threads *and processes*: a slot is
held by an ``flock`` on ``<lock_dir>/slot-<index>.lock``, which the kernel releases when
the holder dies, so a crashed worker never leaks a slot.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from agentrl_sandboxes.base import SandboxBusyError

DEFAULT_BASE_UID = 1_200_000
DEFAULT_LOCK_DIR = "/tmp/agentrl-sandbox-slots"


@dataclass(frozen=True, slots=True)
class Slot:
    """A held execution slot: ``index`` in [0, capacity), the host ``uid`` (= gid) its
    runs use."""

    index: int
    uid: int


class SlotPool:
    """At most ``slots`` concurrent runs in this process, each on a uid no other process
    holds.

    Args:
        slots: concurrent runs allowed in this process (≥ 1).
        base_uid: uid of slot 0 (must be non-zero; root is exempt from RLIMIT_NPROC).
        capacity: uids scanned machine-wide (slots of all processes together).
        lock_dir: directory of the per-slot lock files.
    Raises:
        ValueError: ``slots < 1``, ``slots > capacity`` or ``base_uid == 0``.
    """

    def __init__(self, slots: int = 4, *, base_uid: int = DEFAULT_BASE_UID, capacity: int = 64,
                 lock_dir: str = DEFAULT_LOCK_DIR) -> None:
        if slots < 1 or slots > capacity:
            raise ValueError(f"slots must be in [1, capacity={capacity}], got {slots}")
        if base_uid <= 0:
            raise ValueError("base_uid must be a non-root uid (> 0): RLIMIT_NPROC does not apply to root")
        self.slots, self.base_uid, self.capacity, self.lock_dir = slots, base_uid, capacity, lock_dir
        self._local = threading.BoundedSemaphore(slots)
        os.makedirs(lock_dir, mode=0o700, exist_ok=True)

    def _try_lock(self, index: int) -> int | None:
        fd = os.open(os.path.join(self.lock_dir, f"slot-{index}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            os.close(fd)
            return None

    @contextmanager
    def acquire(self, wait_s: float = 60.0) -> Iterator[Slot]:
        """Hold a free slot for the duration of the ``with`` block.

        Raises:
            SandboxBusyError: no slot became free within ``wait_s`` seconds.
        """
        deadline = time.monotonic() + wait_s
        if not self._local.acquire(timeout=wait_s):
            raise SandboxBusyError(f"all {self.slots} sandbox slots of this process stayed busy for {wait_s:.0f} s")
        try:
            fd, index, delay = None, -1, 0.001
            while fd is None:
                for index in range(self.capacity):
                    fd = self._try_lock(index)
                    if fd is not None:
                        break
                else:
                    if time.monotonic() > deadline:
                        raise SandboxBusyError(
                            f"all {self.capacity} machine-wide sandbox uids ({self.base_uid}..) are held by other "
                            f"processes (locks in {self.lock_dir}); raise capacity or lower the number of workers")
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
            try:
                yield Slot(index, self.base_uid + index)
            finally:
                os.close(fd)  # releases the flock
        finally:
            self._local.release()
