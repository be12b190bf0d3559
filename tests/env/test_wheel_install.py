"""The built wheel in a fresh virtual environment, apart from the dev checkout (issue 23 item 1).

The wheel is built from a copy of the sources in a temporary folder (the tree stays clean)
and installed with ``--no-deps --no-index`` into a fresh venv (no system site-packages).
Its third-party dependencies are the dev venv's own installed copies, reached through a
folder of links to them (one ``.pth`` line): offline and fast, and with nothing of agentrl
in it — not the editable finder, not its metadata, not ``envs``/``sandboxes``. Then:
``import agentrl, gymnasium as gym; gym.make(...)`` works for Toy and TextWorld cu1, the
wheel and ``pip show`` carry no top-level ``envs``/``sandboxes``, and a third-party env
packaged as README "Adding your own env" says appears in ``agentrl envs list``.
~25 s on the 2-core machine (the wheel build is ~10 s of it), so not marked slow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = re.compile(r"^(agentrl|__editable__|_agentrl|envs$|sandboxes$|pip$|pip-)|\.pth$", re.I)

PLUGIN_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "guessnum-plugin"
version = "0.1"

[project.entry-points."gymnasium.envs"]
guessnum = "guessnum_plugin"

[tool.setuptools]
packages = ["guessnum_plugin"]
"""
# the README way: gymnasium.register from the module named in the gymnasium.envs group
PLUGIN_INIT = """\
import gymnasium

gymnasium.register(id="mypkg/GuessNumber-v0", entry_point="guessnum_plugin.env:GuessNumberEnv")
"""


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _source_files() -> list[str]:
    """The files a wheel build reads: tracked or new, not ignored."""
    listed = _run(["git", "ls-files", "-co", "--exclude-standard", "--", "pyproject.toml", "README.md",
                   "agentrl", "envs", "sandboxes"], ROOT).split("\n")
    return [rel for rel in listed if rel and (ROOT / rel).is_file()]


def _sources(dest: Path) -> None:
    for rel in _source_files():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)


def _wheel(src: Path, out: Path) -> Path:
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
          str(src), "-w", str(out)], src)
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """(venv python, env vars, wheel path) of a fresh venv with the agentrl wheel and the plugin."""
    tmp = tmp_path_factory.mktemp("wheel")
    _sources(tmp / "src")
    wheel = _wheel(tmp / "src", tmp / "dist")
    plugin = tmp / "plugin"
    (plugin / "guessnum_plugin").mkdir(parents=True)
    (plugin / "pyproject.toml").write_text(PLUGIN_PYPROJECT)
    (plugin / "guessnum_plugin" / "__init__.py").write_text(PLUGIN_INIT)
    shutil.copy2(ROOT / "examples" / "custom_env.py", plugin / "guessnum_plugin" / "env.py")
    plugin_wheel = _wheel(plugin, tmp / "plugin-dist")

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp)
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).strip())
    deps = tmp / "deps"  # links to the dev venv's third-party packages, nothing of ours
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not OURS.search(entry.name):
            (deps / entry.name).symlink_to(entry)
    (site / "zz_dev_deps.pth").write_text(f"{deps}\n")
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel), str(plugin_wheel)], tmp)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{venv / 'bin'}:{env.get('PATH', '')}", OMP_NUM_THREADS="1")
    return py, env, wheel, tmp


def test_wheel_has_no_top_level_envs_or_sandboxes(fresh):
    _, _, wheel, _ = fresh
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = next(n for n in names if n.endswith(".dist-info/RECORD")).rsplit("/", 1)[0]
        tops = {n.split("/", 1)[0] for n in names}
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    assert tops == {"agentrl", "agentrl_envs", "agentrl_sandboxes", info}, tops
    assert "[gymnasium.envs]\nagentrl = agentrl_envs" in entry_points
    # every source and data file is in the wheel, the two folders' under their new names
    for folder, name in (("agentrl", "agentrl"), ("envs", "agentrl_envs"), ("sandboxes", "agentrl_sandboxes")):
        on_disk = {rel[len(folder) + 1:] for rel in _source_files() if rel.startswith(folder + "/")}
        in_wheel = {n[len(name) + 1:] for n in names if n.startswith(name + "/")}
        assert on_disk <= in_wheel, sorted(on_disk - in_wheel)


def test_pip_show_lists_no_top_level_envs_or_sandboxes(fresh):
    py, env, _, tmp = fresh
    out = _run([str(py), "-m", "pip", "show", "-f", "agentrl"], tmp, env)
    files = [line.strip() for line in out.split("Files:", 1)[1].splitlines() if line.strip()]
    tops = {f.split("/", 1)[0] for f in files if not f.startswith("../")}  # ../../../bin/agentrl
    assert {t for t in tops if not t.endswith(".dist-info")} == {"agentrl", "agentrl_envs", "agentrl_sandboxes"}
    location = re.search(r"^Location: (.+)$", out, re.M).group(1)
    assert Path(location).is_relative_to(tmp / "venv")


def test_gym_make_after_import_agentrl_from_the_wheel(fresh):
    py, env, _, tmp = fresh
    code = """
import importlib.util, json, sys
import agentrl, gymnasium as gym
tw = gym.make('agentrl/TextWorld-CU1-v0')
toy = gym.make('agentrl/Toy-v0')
obs, info = toy.reset(seed=3)
print(json.dumps({"agentrl": agentrl.__file__, "envs": sys.modules["agentrl_envs"].__file__,
                  "tw": type(tw.unwrapped).__module__, "toy_won": bool(info["won"]), "obs": obs,
                  "old_names": [n for n in ("envs", "sandboxes") if importlib.util.find_spec(n)],
                  "path": sys.path}))
"""
    out = json.loads(_run([str(py), "-c", code], tmp, env).strip().splitlines()[-1])
    for key in ("agentrl", "envs"):
        assert Path(out[key]).is_relative_to(tmp / "venv"), out[key]
    assert out["tw"] == "agentrl_envs.textworld.env" and out["obs"] and out["toy_won"] is False
    assert out["old_names"] == []
    assert not any(Path(p).resolve() == ROOT for p in out["path"] if p)
    # the TextWorld env also plays (games from the shared game cache, generated if missing)
    code = ("import agentrl, gymnasium as gym; env = gym.make('agentrl/TextWorld-CU1-v0', n_tasks=1);"
            "obs, info = env.reset(seed=0); print(bool(obs), len(info['walkthrough']) > 0)")
    assert _run([str(py), "-c", code], tmp, env, timeout=600).split()[-2:] == ["True", "True"]


def test_third_party_plugin_appears_in_envs_list(fresh):
    py, env, _, tmp = fresh
    env = {**env, "COLUMNS": "200"}
    out = _run([str(py.parent / "agentrl"), "envs", "list"], tmp, env)
    assert "mypkg/GuessNumber-v0" in out and "guessnum_plugin.env:GuessNumberEnv" in out
    assert "agentrl/TextWorld-CU1-v0" in out and "CartPole-v1" not in out
    assert "CartPole-v1" in _run([str(py.parent / "agentrl"), "envs", "list", "--all"], tmp, env)
    code = "from agentrl.env import check_env; print(check_env('mypkg/GuessNumber-v0').walkthrough_won)"
    assert _run([str(py), "-c", code], tmp, env).strip().splitlines()[-1] == "True"
