"""Package names and Gymnasium discovery (issue 23 item 1).

The source folders ``envs/`` and ``sandboxes/`` install as ``agentrl_envs`` and
``agentrl_sandboxes`` (pyproject's ``package-dir``); nothing in the tree may import them by
their folder names. ``import agentrl`` registers our ids with Gymnasium, in either import order,
without importing Gymnasium itself. The built wheel is tested in test_wheel_install.py.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
MAPPED = {"envs": "agentrl_envs", "sandboxes": "agentrl_sandboxes"}  # folder -> installed name
SCANNED = ("agentrl", "envs", "sandboxes", "tests", "benchmarks", "studies", "examples", "scripts")
# `envs.<sub>` / `sandboxes.<sub>` as a module path in a string, a doc or a command line
# (`python -m envs.alfworld.generate`, an entry point "envs.toy.env:ToyEnv"); a folder path
# (`envs/toy`) or an attribute (`gymnasium.envs.x`, `pool.envs.values()`) is not one.
OLD_NAME = re.compile(r"(?<![\w./-])(envs\.(toy|textworld|alfworld|webshop|code)|sandboxes\.(base|bwrap|docker|local|"
                      r"select|slots|lease|interpreter|cgroups|images|_proc|make_sandbox))\b|(?<![\w.])from (envs|sandboxes) import")


def _source_files(suffixes: tuple[str, ...]) -> list[Path]:
    out = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for top in SCANNED + ("docs",):
        out += [p for p in (ROOT / top).rglob("*") if p.suffix in suffixes and "__pycache__" not in p.parts]
    return [p for p in out if p.is_file() and p.suffix in suffixes]


def _disk_packages() -> set[str]:
    """Every folder the wheel must carry as a package (code or data), under its installed name."""
    names = set()
    for top in ("agentrl", "envs", "sandboxes"):
        for d in [ROOT / top, *(p for p in (ROOT / top).rglob("*") if p.is_dir())]:
            if d.name == "__pycache__" or not any(f.is_file() for f in d.iterdir()):
                continue
            parts = d.relative_to(ROOT).parts
            names.add(".".join((MAPPED.get(parts[0], parts[0]),) + parts[1:]))
    return names


def test_pyproject_lists_every_package_under_its_installed_name():
    cfg = PYPROJECT["tool"]["setuptools"]
    assert cfg["package-dir"] == {"agentrl_envs": "envs", "agentrl_sandboxes": "sandboxes"}
    listed = set(cfg["packages"])
    missing, extra = _disk_packages() - listed, listed - _disk_packages()
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    assert not extra, f"listed in pyproject.toml but no such folder: {sorted(extra)}"
    assert not any(n.split(".")[0] in MAPPED for n in listed)


def test_nothing_in_the_tree_imports_the_folder_names():
    bad = []
    for path in _source_files((".py",)):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in MAPPED]
    assert not bad, "import agentrl_envs / agentrl_sandboxes instead:\n" + "\n".join(bad)


def test_no_module_path_string_or_doc_uses_the_folder_names():
    bad = []
    for path in _source_files((".py", ".md", ".toml", ".sh", ".yaml", ".txt")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if OLD_NAME.search(line) and path.name != Path(__file__).name:
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "use the installed names agentrl_envs / agentrl_sandboxes:\n" + "\n".join(bad)


def test_import_linter_and_entry_point_use_the_installed_names():
    lint = PYPROJECT["tool"]["importlinter"]
    assert lint["root_packages"] == ["agentrl", "agentrl_envs", "agentrl_sandboxes"]
    for contract in lint["contracts"]:
        for key in ("source_modules", "forbidden_modules", "containers"):
            assert not set(contract.get(key, [])) & set(MAPPED), contract["name"]
    assert PYPROJECT["project"]["entry-points"]["gymnasium.envs"] == {"agentrl": "agentrl_envs"}
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="gymnasium.envs")}
    assert eps.get("agentrl") == "agentrl_envs", "re-run: .venv/bin/python -m pip install -e '.[all,dev]'"


def test_the_dev_checkout_resolves_the_installed_names_to_the_folders():
    import agentrl_envs
    import agentrl_sandboxes
    import gymnasium

    assert Path(agentrl_envs.__file__).resolve() == ROOT / "envs" / "__init__.py"
    assert Path(agentrl_sandboxes.__file__).resolve() == ROOT / "sandboxes" / "__init__.py"
    assert all(str(s.entry_point).startswith("agentrl_envs.") for i, s in gymnasium.registry.items()
               if i.startswith("agentrl/"))


def _fresh(code: str, tmp_path: Path) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


@pytest.mark.parametrize("order", ["import agentrl, gymnasium as gym", "import gymnasium as gym, agentrl",
                                   "import agentrl; from gymnasium.envs.registration import registry; import gymnasium as gym"])
def test_gymnasium_make_works_after_import_agentrl(order, tmp_path):
    code = (f"{order}; gym.register_envs(agentrl); env = gym.make('agentrl/Toy-v0'); obs, info = env.reset(seed=3);"
            "import sys; print(type(env.unwrapped).__module__, 'agentrl_envs.textworld.env' in sys.modules, "
            "gym.__loader__.__class__.__name__)")
    assert _fresh(code, tmp_path) == "agentrl_envs.toy.env False SourceFileLoader"  # no heavy env module


def test_import_agentrl_imports_no_gymnasium_and_registers_when_it_comes(tmp_path):
    code = ("import sys, agentrl; print('gymnasium' in sys.modules, 'numpy' in sys.modules);"
            "import gymnasium; print('agentrl/TextWorld-CU1-v0' in gymnasium.registry, 'agentrl_envs.toy.env' in sys.modules)")
    assert _fresh(code, tmp_path).splitlines() == ["False False", "True False"]


def test_without_agentrl_gymnasium_needs_the_module_prefix(tmp_path):
    code = ("import gymnasium as gym\ntry:\n    gym.make('agentrl/Toy-v0')\nexcept gym.error.NamespaceNotFound:\n"
            "    print('not found')\nprint(gym.make('agentrl_envs:agentrl/Toy-v0').spec.id)")
    assert _fresh(code, tmp_path).splitlines() == ["not found", "agentrl/Toy-v0"]
