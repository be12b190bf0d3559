"""Issue 23 item 2: data for a pip user. ``agentrl data prepare alfworld|webshop --from DIR``
checks a folder with the env's own data check, installs it in the prepared-data folder, and the
loaders find it there when the repository's ../shared/data does not exist; missing data names
the command; a bad folder installs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.env.data_home import DATA_HOME_ENV, MARKER, data_home, prepared_dir

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"

PIP_USER = """
import sys
from pathlib import Path
import agentrl_envs.{mod}.data as d
d.default_data_dir = lambda: Path("/nonexistent/shared/data/{mod}")  # no checkout beside: a pip user
from agentrl.env import make
env = make("{env_id}", **{kwargs})
env.reset(seed=0)
print("RESOLVED", d.resolve_data_dir())
"""


@pytest.mark.parametrize("name, env_id, kwargs", [
    ("webshop", "agentrl/WebShop-v0", {}),
    ("alfworld", "agentrl/ALFWorld-v0", {"split": "eval_seen"}),
])
def test_prepare_then_an_env_finds_it_without_the_checkout(name, env_id, kwargs, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(DATA_HOME_ENV, str(tmp_path / "home"))
    for var in ("AGENTRL_ALFWORLD_DATA", "AGENTRL_WEBSHOP_DATA"):
        monkeypatch.delenv(var, raising=False)
    assert prepared_dir(name) is None
    assert main(["data", "prepare", name, "--from", str(SHARED / name)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"prepared {name} for {env_id}" in out and str(tmp_path / "home" / name) in out
    assert prepared_dir(name) == data_home() / name and (data_home() / name / MARKER).is_file()
    script = PIP_USER.format(mod=name, env_id=env_id, kwargs=kwargs)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, DATA_HOME_ENV: str(tmp_path / "home")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"RESOLVED {tmp_path / 'home' / name}" in proc.stdout
    # prepared already: refused, then replaced on request
    assert main(["data", "prepare", name, "--from", str(SHARED / name)]) == 2
    assert "is prepared already" in capsys.readouterr().err
    assert main(["data", "prepare", name, "--from", str(SHARED / name), "--replace"]) == 0


def test_bad_input_installs_nothing_and_missing_data_names_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(DATA_HOME_ENV, str(tmp_path / "home"))
    (tmp_path / "empty").mkdir()
    assert main(["data", "prepare", "alfworld", "--from", str(tmp_path / "empty")]) == 2
    assert "holds no ALFWorld games" in capsys.readouterr().err and prepared_dir("alfworld") is None
    assert main(["data", "prepare", "alfworld"]) == 2
    err = capsys.readouterr().err
    assert "needs --from DIR" in err and "alfworld-download" in err  # how to get the files
    assert main(["data", "prepare", "toy"]) == 2
    assert "no env with data to prepare is called 'toy'" in capsys.readouterr().err
    import agentrl_envs.alfworld.data as alf
    import agentrl_envs.webshop.data as shop

    with pytest.raises(FileNotFoundError, match="agentrl data prepare alfworld --from DIR"):
        alf.resolve_data_dir(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="agentrl data prepare webshop --from DIR"):
        shop.check_data_dir(tmp_path / "empty", "synthetic")
