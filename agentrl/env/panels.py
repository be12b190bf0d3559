"""Evaluation panels: explicit, hashed, machine-independent task manifests.

A *panel* is the frozen list of ``(env_id, task_id, seed)`` entries that one split of an
env is trained or evaluated on. It exists so that "eval_unseen" means exactly the same
134 episodes on every machine, in every process and in every paper table: the panel is
written to JSON once, its ``sha256`` is logged next to every reported number, and two
runs compare only if their panel hashes match.

Rules (enforced here):

- ``task_id`` is an env-defined, machine-independent string (ALFWorld: the game folder
  relative to ``json_2.1.1``, e.g. ``"valid_unseen/pick_and_place_simple-Mug-None-Desk-308/trial_T2019..."``;
  WebShop: ``"synthetic/<goal index>"``). Never an absolute path, never a list index.
- ``seed`` is derived from ``(env_id, task_id, base_seed)`` with SHA-256 (``derive_seed``),
  not from Python's salted ``hash`` or from the entry's position, so adding a task does
  not change the other tasks' seeds.
- ``digest`` (optional, may be ``""``) is a SHA-256 of the task's content (ALFWorld: the
  ``game.tw-pddl`` bytes) so a loader can check that the same task id resolves to the
  same task everywhere (``Panel.verify_digests``).
- The panel hash is the SHA-256 of the canonical JSON of ``(name, split, entries)``
  (keys sorted, no whitespace, UTF-8, entries sorted by ``(env_id, task_id, seed)``).
- Train and eval panels are disjoint by task id and by non-empty digest
  (``assert_disjoint``).

Typical use by an env package (``envs/<name>/panels.py``)::

    from agentrl.env.panels import build_panel, save_panel, load_panel, assert_disjoint
    panel = build_panel("alfworld-eval_unseen", env_id="agentrl/ALFWorld-v0",
                        split="eval_unseen", task_ids=ids, digests=digests, base_seed=0)
    save_panel(panel, "panels/alfworld-eval_unseen.json")
    assert load_panel("panels/alfworld-eval_unseen.json").sha256 == panel.sha256
    assert_disjoint([train_panel], [eval_seen_panel, eval_unseen_panel])

Rollout code iterates ``for e in panel.entries: env.reset(seed=e.seed, options={"task_id": e.task_id})``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PANEL_FORMAT = 1


def derive_seed(env_id: str, task_id: str, base_seed: int = 0) -> int:
    """Machine-independent episode seed for one task: the first 4 bytes (big-endian) of
    ``sha256(f"{env_id}\\n{task_id}\\n{base_seed}")``, an int in ``[0, 2**32)``."""
    raw = f"{env_id}\n{task_id}\n{int(base_seed)}".encode()
    return int.from_bytes(hashlib.sha256(raw).digest()[:4], "big")


@dataclass(frozen=True, order=True)
class PanelEntry:
    """One episode of a panel.

    Attributes:
        env_id: registered env id, e.g. ``"agentrl/ALFWorld-v0"``.
        task_id: env-defined machine-independent task name (see module docstring).
        seed: episode seed passed to ``env.reset(seed=...)``, int in ``[0, 2**32)``.
        digest: hex SHA-256 of the task's content, or ``""`` when the env has none.
    """

    env_id: str
    task_id: str
    seed: int
    digest: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"env_id": self.env_id, "task_id": self.task_id, "seed": self.seed, "digest": self.digest}


def _canonical(name: str, split: str, entries: Sequence[PanelEntry]) -> bytes:
    body = {"format": PANEL_FORMAT, "name": name, "split": split, "entries": [e.to_dict() for e in entries]}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class Panel:
    """A frozen, hashed manifest of episodes for one split.

    Attributes:
        name: panel name, e.g. ``"alfworld-eval_unseen"``.
        split: the env split the entries come from, e.g. ``"eval_unseen"``.
        entries: tuple of ``PanelEntry`` sorted by ``(env_id, task_id, seed, digest)``.
        sha256: hex SHA-256 of the canonical JSON (computed; do not pass it).

    Raises:
        ValueError: duplicate ``(env_id, task_id, seed)`` entries or an empty task id.
    """

    name: str
    split: str
    entries: tuple[PanelEntry, ...]
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        entries = tuple(sorted(self.entries))
        keys = [(e.env_id, e.task_id, e.seed) for e in entries]
        if len(set(keys)) != len(keys):
            dup = sorted({k for k in keys if keys.count(k) > 1})[:3]
            raise ValueError(f"panel {self.name!r} has duplicate entries, e.g. {dup}")
        if any(not e.task_id for e in entries):
            raise ValueError(f"panel {self.name!r} has an empty task_id")
        object.__setattr__(self, "entries", entries)
        object.__setattr__(self, "sha256", hashlib.sha256(_canonical(self.name, self.split, entries)).hexdigest())

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def task_ids(self) -> tuple[str, ...]:
        """Task ids in entry order (may repeat when a task has several seeds)."""
        return tuple(e.task_id for e in self.entries)

    def to_json(self) -> str:
        """Canonical JSON text plus the hash (what ``save_panel`` writes)."""
        body = json.loads(_canonical(self.name, self.split, self.entries))
        body["sha256"] = self.sha256
        return json.dumps(body, sort_keys=True, indent=1, ensure_ascii=False) + "\n"

    def verify_digests(self, resolve: Callable[[str], str]) -> None:
        """Check every non-empty ``digest`` against ``resolve(task_id)`` (the digest of the
        task as this machine's env loads it). Raises ``ValueError`` listing mismatches."""
        bad = [e.task_id for e in self.entries if e.digest and resolve(e.task_id) != e.digest]
        if bad:
            raise ValueError(
                f"panel {self.name!r}: {len(bad)} task id(s) resolve to different task content on this "
                f"machine than when the panel was built, e.g. {bad[:3]}; rebuild the data or the panel"
            )


def build_panel(
    name: str,
    *,
    env_id: str,
    split: str,
    task_ids: Iterable[str],
    digests: Mapping[str, str] | None = None,
    base_seed: int = 0,
    seeds_per_task: int = 1,
) -> Panel:
    """Build a panel with ``seeds_per_task`` entries per task id.

    Seeds are ``derive_seed(env_id, task_id, base_seed + k)`` for ``k < seeds_per_task``.
    ``digests`` maps task id → content SHA-256 (optional). Raises ``ValueError`` for
    ``seeds_per_task < 1`` or an empty task list.
    """
    if seeds_per_task < 1:
        raise ValueError(f"seeds_per_task must be >= 1, got {seeds_per_task}")
    ids = list(task_ids)
    if not ids:
        raise ValueError(f"panel {name!r}: no task ids given (is the env's data missing?)")
    digests = digests or {}
    entries = [
        PanelEntry(env_id, t, derive_seed(env_id, t, base_seed + k), digests.get(t, ""))
        for t in ids
        for k in range(seeds_per_task)
    ]
    return Panel(name=name, split=split, entries=tuple(entries))


def draw_panel(name: str, *, env_id: str, split: str, tasks: Sequence, n: int, base_seed: int = 0) -> Panel:
    """A panel of ``n`` distinct tasks of a split, drawn without replacement.

    ``tasks`` are the split's ``agentrl.env.tasks.TaskRef`` (distinct ids and digests, e.g.
    ``tasks_of(env_id, split)``). The draw ranks them by ``derive_seed(env_id, task_id, 0)``
    and keeps the first ``n``: a function of the task ids only (the same panel on every
    machine and in every process; adding a task to the split changes the panel only if it
    ranks among the first ``n``). Each entry carries the task's content digest (so the panel
    hash changes when a task's content does) and the env seed ``derive_seed(env_id, task_id,
    base_seed)``.

    Raises:
        ValueError: ``n < 1``, or ``n`` larger than the split (names the split size), or
            tasks repeating an id or a digest.
    """
    refs = list(tasks)
    if len({r.task_id for r in refs}) != len(refs) or len({r.digest for r in refs}) != len(refs):
        raise ValueError(f"panel {name!r}: the tasks of split {split!r} repeat an id or a content digest; "
                         "pass distinct tasks (agentrl.env.tasks.unique_by_digest)")
    if n < 1:
        raise ValueError(f"panel {name!r}: the panel size must be >= 1, got {n}")
    if n > len(refs):
        raise ValueError(f"panel {name!r}: {n} tasks asked of split {split!r} of {env_id}, which has "
                         f"{len(refs)} distinct task(s); a panel draws without replacement, so lower "
                         f"env.eval_panel_size to at most {len(refs)} (or use a larger split)")
    chosen = sorted(refs, key=lambda r: (derive_seed(env_id, r.task_id, 0), r.task_id))[:n]
    entries = [PanelEntry(env_id, r.task_id, derive_seed(env_id, r.task_id, base_seed), r.digest) for r in chosen]
    return Panel(name=name, split=split, entries=tuple(entries))


def panel_changes(old: Panel, new: Panel) -> str:
    """A one-line account of how ``new`` differs from ``old`` ("" when the hashes match):
    tasks whose content digest changed, tasks only in one of them."""
    if old.sha256 == new.sha256:
        return ""
    a, b = {e.task_id: e.digest for e in old.entries}, {e.task_id: e.digest for e in new.entries}
    changed = sorted(t for t in a.keys() & b.keys() if a[t] != b[t])
    gone, added = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    parts = [f"{len(changed)} task(s) with other content (e.g. {changed[:2]})" if changed else "",
             f"{len(gone)} task(s) no longer in it (e.g. {gone[:2]})" if gone else "",
             f"{len(added)} new task(s) (e.g. {added[:2]})" if added else ""]
    detail = "; ".join(p for p in parts if p) or "other name, split or seeds"
    return f"panel {old.sha256[:12]} -> {new.sha256[:12]}: {detail}"


def save_panel(panel: Panel, path: str | Path) -> Path:
    """Write ``panel.to_json()`` to ``path`` (parents created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(panel.to_json(), encoding="utf-8")
    return path


def load_panel(path: str | Path) -> Panel:
    """Read a panel JSON and re-verify its hash.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unknown format or the stored ``sha256`` does not match the content
            (the file was edited by hand: rebuild it with ``build_panel``).
    """
    body = json.loads(Path(path).read_text(encoding="utf-8"))
    if body.get("format") != PANEL_FORMAT:
        raise ValueError(f"{path}: panel format {body.get('format')!r} is not {PANEL_FORMAT}")
    entries = tuple(PanelEntry(e["env_id"], e["task_id"], int(e["seed"]), e.get("digest", "")) for e in body["entries"])
    panel = Panel(name=body["name"], split=body["split"], entries=entries)
    if body.get("sha256") != panel.sha256:
        raise ValueError(
            f"{path}: stored sha256 {body.get('sha256')!r} does not match the content ({panel.sha256}); "
            "the file was edited — rebuild it with build_panel"
        )
    return panel


def assert_disjoint(train: Sequence[Panel], evaluation: Sequence[Panel]) -> None:
    """Raise ``ValueError`` if any train panel shares a task id (same env id) or a
    non-empty content digest with any eval panel. Returns None when disjoint."""
    def keys(panels: Sequence[Panel]) -> tuple[set[tuple[str, str]], set[str]]:
        ids = {(e.env_id, e.task_id) for p in panels for e in p.entries}
        return ids, {e.digest for p in panels for e in p.entries if e.digest}

    train_ids, train_dig = keys(train)
    eval_ids, eval_dig = keys(evaluation)
    shared_ids = sorted(train_ids & eval_ids)
    shared_dig = sorted(train_dig & eval_dig)
    if shared_ids or shared_dig:
        raise ValueError(
            f"train and eval panels overlap: {len(shared_ids)} shared task id(s) {shared_ids[:3]}, "
            f"{len(shared_dig)} shared task digest(s) {shared_dig[:3]}; remove them from the train split"
        )
