"""agentrl.credit — credit-assignment (advantage) estimators, pure NumPy (layer L3).

Owns the estimator registry and one module per estimator of ALGORITHMS.md: GRPO family
(``grpo``, ``grpo_mean``, ``dr_grpo``), ``gigpo``, ``hgpo``, ``g2po``, ``graphgpo``,
``tree_grpo``, ``bipace`` (PROPOSED), ``rtpo`` (PROPOSED), ``turn_ppo``, ``beacon`` (§15),
``threespo`` (3SPO, PROPOSED), ``hiper`` (HiPER's HAE, §14, critic-based), ``oprl`` (OPRL / iStar,
§17: the ``prm`` scorer's implicit step rewards) and ``stepopsd`` (StepOPSD, §18: GRPO rescaled by the
``hindsight`` scorer's teacher gaps); plus the
per-token ``token_gae`` baseline, the optional per-estimator breakdown of an advantage
into named terms (``explain_advantages``, ``breakdown``), and the multi-output helpers ``turn_gae_returns``, ``hiper_hae``,
``rtpo_update_order``, ``tree_grpo_nodes`` and ``stepopsd_advantages`` (with ``gaps_from_csr``);
and the exact values and advantages of a policy on a known task graph (``exact_values``, ``exact_advantages``: the oracle arm); and
staleness-aware credit (``agentrl.credit.versions``: ``version_mixing`` of the comparison groups,
``split_by_version`` behind ``compute_advantages(..., group_by_version=True)``).
Every registered estimator maps a ``TurnTable`` to float64[N]; rows of failed episodes and non-trainable rows take part in
no statistic and get 0 (PITFALLS P5, P6). No torch here.
"""

from agentrl.credit.registry import (
    EstimatorSpec,
    compute_advantages,
    estimator_params,
    get_estimator,
    list_estimators,
    register_estimator,
    unregister_estimator,
    check_group_by_version,
    update_groups,
    validate_estimator_kwargs,
)
from agentrl.credit.breakdown import Breakdown, Term, breakdown_estimators, explain_advantages, has_breakdown
from agentrl.credit import beacon  # noqa: F401  (register)
from agentrl.credit import bipace, g2po, gigpo, graphgpo, grpo, hgpo, rtpo, tree_grpo, turn_ppo  # noqa: F401  (register)
from agentrl.credit import threespo  # noqa: F401  (register; 3SPO, ALGORITHMS.md §16)
from agentrl.credit import hiper  # noqa: F401  (register; HiPER, ALGORITHMS.md §14)
from agentrl.credit import oprl, stepopsd  # noqa: F401  (register; OPRL §17, StepOPSD §18)
from agentrl.credit.hiper import HAE, hiper_hae
from agentrl.credit.exact import ExactValues, exact_advantages, exact_values, uniform_policy
from agentrl.credit.ppo_token import TokenGAE, token_gae
from agentrl.credit.rtpo import rtpo_update_order
from agentrl.credit.stepopsd import StepOPSDAdvantages, gaps_from_csr, stepopsd_advantages
from agentrl.credit.success import check_success_reward
from agentrl.credit.tree_grpo import TreeNodeAdvantages, tree_grpo_nodes
from agentrl.credit.turn_ppo import TurnGAE, turn_gae_returns
from agentrl.credit.versions import VersionMixing, episode_versions, split_by_version, version_mixing

__all__ = [
    "Breakdown",
    "EstimatorSpec",
    "ExactValues",
    "HAE",
    "Term",
    "breakdown_estimators",
    "explain_advantages",
    "has_breakdown",
    "hiper_hae",
    "StepOPSDAdvantages",
    "TokenGAE",
    "TreeNodeAdvantages",
    "TurnGAE",
    "VersionMixing",
    "check_group_by_version",
    "check_success_reward",
    "compute_advantages",
    "episode_versions",
    "estimator_params",
    "exact_advantages",
    "exact_values",
    "gaps_from_csr",
    "get_estimator",
    "list_estimators",
    "register_estimator",
    "rtpo_update_order",
    "split_by_version",
    "stepopsd_advantages",
    "token_gae",
    "tree_grpo_nodes",
    "turn_gae_returns",
    "unregister_estimator",
    "uniform_policy",
    "update_groups",
    "validate_estimator_kwargs",
    "version_mixing",
]
