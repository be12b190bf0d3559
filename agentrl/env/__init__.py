"""agentrl.env — the text-env layer (L1): the TextEnv contract on ``gymnasium.Env``,
``UnicodeText`` spaces, id registry helpers, ``check_env``, the crash-isolated
``EnvPool`` and ``TaskGraph`` (a small task's explicit state graph, for exact values).
Imports only agentrl L0 modules, gymnasium and NumPy; never ``envs/``.
"""

from agentrl.env.contract import (
    ACTION_EXACT,
    ACTION_WHITESPACE,
    META_ACTION_NORMALIZE,
    META_RESET_MEMBER,
    OPTION_MEMBER,
    INFO_ADMISSIBLE,
    INFO_ANCHOR,
    INFO_INSTRUCTIONS,
    INFO_MILESTONE,
    INFO_N_MILESTONES,
    INFO_TASK,
    INFO_VALID,
    INFO_WALKTHROUGH,
    INFO_WON,
    DataMissingError,
    MissingExtraError,
    normalize_action,
    require_module,
)
from agentrl.env.check import CheckReport, EnvCheckError, check_env, check_kwargs
from agentrl.env.pool import EnvPool, EnvPoolError, EnvResult
from agentrl.env.registry import action_normalization, env_metadata, list_ids, local_ids, make, validate_id
from agentrl.env.preflight import check_env_kwargs
from agentrl.env.spaces import UnicodeText, text_spaces
from agentrl.env.task_graph import TaskGraph

__all__ = [
    "INFO_ADMISSIBLE", "INFO_ANCHOR", "INFO_INSTRUCTIONS", "INFO_TASK", "INFO_VALID", "INFO_WALKTHROUGH", "INFO_WON",
    "INFO_MILESTONE", "INFO_N_MILESTONES",
    "DataMissingError", "MissingExtraError", "require_module", "list_ids", "make", "validate_id",
    "UnicodeText", "text_spaces", "TaskGraph",
    "ACTION_EXACT", "ACTION_WHITESPACE", "META_ACTION_NORMALIZE", "normalize_action", "action_normalization",
    "META_RESET_MEMBER", "OPTION_MEMBER",
    "env_metadata", "check_env_kwargs", "local_ids",
    "check_env", "check_kwargs", "CheckReport", "EnvCheckError", "EnvPool", "EnvPoolError", "EnvResult",
]
