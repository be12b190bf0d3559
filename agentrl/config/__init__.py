"""agentrl.config — the run configuration: nested frozen dataclasses, one YAML file per run,
dotted overrides (layer L0).

What it owns, one module each (their public names are re-exported here, except
``agentrl.config.docs.describe_config``):

- ``errors``: ``ConfigError`` (a ``ValueError`` naming the dotted key and the fix) and the
  one check every section uses;
- ``sections``: one frozen dataclass per pipeline stage (``RunConfig``, ``EnvConfig``,
  ``PolicyConfig``, ``RolloutConfig``, ``AlgorithmConfig``, ``LogConfig``, ``Config``) with
  range checks in ``__post_init__``; ``update`` (``UpdateConfig``), ``vllm`` (``VLLMSpec``)
  ``placement`` (``PlacementSpec``), ``harness`` (``HarnessConfig``) and ``reward``
  (``RewardConfig``, ``JudgeConfig``) are sections of their own;
- ``loader``: YAML loading, overrides (``apply_overrides``), ``load_config``,
  ``config_from_dict``, ``to_dict``, ``dump_config``;
- ``checks``: the checks that need no registry (``validate_config``: defaults in effect
  filled, ``auto`` settings resolved, ``run.out_dir`` a folder; ``resolve_rollout_correction``,
  ``resolve_master_weights``);
- ``docs``: every key with its value and documentation (``describe_config``, for
  ``agentrl train CFG --print-config``).

What it does not own: the checks against the registries of the layers above (env id and env
kwargs, loss name, estimator kwargs and its rules). They live in ``agentrl.train.checks``
(``check_config``, ``load_checked_config``, ``checked_config_from_dict``), which every path
that trains, evaluates or prints a config runs.

May import: the standard library, PyYAML and ``agentrl.registry`` — nothing else of ours,
neither statically nor through ``importlib`` (tests/test_house.py), so importing it never
pulls in gymnasium, NumPy or torch.
"""

# _check, _plain and _yaml_load: private helpers other modules of ours use (a ConfigError unless ok;
# a dataclass as plain dicts and lists; the YAML loader that reads 1e-5 as a float)
from agentrl.config.checks import (  # noqa: F401
    _plain,
    resolve_master_weights,
    resolve_rollout_correction,
    validate_config,
)
from agentrl.config.loader import (  # noqa: F401
    _yaml_load,
    apply_overrides,
    config_from_dict,
    dump_config,
    load_config,
    to_dict,
)
from agentrl.config.placement import PlacementSpec  # noqa: F401  (re-exported, as before)
from agentrl.config.sections import (
    AlgorithmConfig,
    Config,
    ConfigError,
    EnvConfig,
    HarnessConfig,
    LogConfig,
    LoraSpec,
    PolicyConfig,
    RolloutConfig,
    RunConfig,
    TreeConfig,
    UpdateConfig,
    _check,  # noqa: F401
)
from agentrl.config.reward import JudgeConfig, RewardConfig
from agentrl.config.vllm import VLLMSpec

__all__ = [
    "ConfigError", "RunConfig", "EnvConfig", "LoraSpec", "PolicyConfig", "HarnessConfig", "TreeConfig", "RolloutConfig",
    "AlgorithmConfig", "UpdateConfig", "LogConfig", "Config", "load_config", "config_from_dict",
    "apply_overrides", "validate_config", "to_dict", "dump_config", "resolve_rollout_correction",
    "resolve_master_weights", "VLLMSpec", "RewardConfig", "JudgeConfig",
]

