"""Config hardening (issue 20 item 9): estimator hyperparameters outside their range and a
``run.out_dir`` that is a file are one-line config errors (exit 2), not accepted or a traceback."""

from __future__ import annotations

import textwrap

import pytest

from agentrl.cli import main
from agentrl.config import ConfigError, config_from_dict
from agentrl.credit import validate_estimator_kwargs
from agentrl.train.checks import checked_config_from_dict

TOY = {"id": "agentrl/Toy-v0"}


@pytest.mark.parametrize("estimator, key, value", [
    ("gigpo", "gamma", 7), ("gigpo", "gamma", -0.1), ("turn_ppo", "lam", 1.5), ("turn_ppo", "gamma", 2.0),
    ("g2po", "beta", 3.0), ("grpo", "eps", 0.0), ("grpo", "c_inv", -1.0), ("gigpo", "similarity_thresh", 1.2),
    ("hgpo", "history_length", -1), ("bipace", "tau", -0.1),
])
def test_out_of_range_estimator_kwargs_are_refused(estimator, key, value):
    with pytest.raises(ConfigError, match=rf"algorithm.kwargs for estimator '{estimator}': {key}={value!r} .*must be"):
        checked_config_from_dict({"env": TOY, "algorithm": {"estimator": estimator, "kwargs": {key: value}}})
    with pytest.raises(ValueError, match=f"{key}="):  # the Python API validates the same way
        validate_estimator_kwargs(estimator, {key: value})


def test_in_range_edges_are_accepted():
    for kw in ({"gamma": 0.0}, {"gamma": 1.0}):
        checked_config_from_dict({"env": TOY, "algorithm": {"estimator": "gigpo", "kwargs": kw}})
    checked_config_from_dict({"env": TOY, "algorithm": {"estimator": "turn_ppo", "kwargs": {"lam": 0.0, "c_inv": 0.0}}})


def test_a_custom_estimator_declares_its_own_ranges():
    from agentrl.credit.registry import list_estimators, register_estimator, unregister_estimator

    @register_estimator("_range_probe", ranges={"k": (1, 5)})
    def _probe(table, *, k=2, gamma=0.5):  # pragma: no cover - never run
        raise AssertionError

    try:
        with pytest.raises(ValueError, match=r"k=9 .*must be in \[1, 5\]"):
            validate_estimator_kwargs("_range_probe", {"k": 9})
        with pytest.raises(ValueError, match="gamma=3"):  # the shared convention applies too
            validate_estimator_kwargs("_range_probe", {"gamma": 3})
        assert validate_estimator_kwargs("_range_probe", {"k": 5})["k"] == 5
    finally:
        spec = unregister_estimator("_range_probe")
    assert spec.fn is _probe and "_range_probe" not in list_estimators()
    with pytest.raises(KeyError, match="unknown estimator '_range_probe'"):
        unregister_estimator("_range_probe")


def test_out_dir_that_is_a_file_is_a_config_error(tmp_path, capsys):
    afile = tmp_path / "notadir"
    afile.write_text("x")
    with pytest.raises(ConfigError, match=r"run.out_dir: .*notadir is a file"):
        config_from_dict({"env": TOY, "run": {"out_dir": str(afile)}})
    with pytest.raises(ConfigError, match=r"run.out_dir: .*notadir is a file"):
        config_from_dict({"env": TOY, "run": {"out_dir": str(afile / "deeper")}})
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(textwrap.dedent(f"""
        run: {{name: r, out_dir: {afile}}}
        env: {{id: agentrl/Toy-v0}}
    """))
    assert main(["train", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "is a file" in err
