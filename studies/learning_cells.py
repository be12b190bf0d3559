"""The per-estimator part of a ``studies/learning.py`` grid cell.

Every cell trains under the same base config (``examples/gigpo_textworld.yaml`` with the
benchmark's budget: model, LoRA, lr, decoding, prompts, 6 tasks × 4 episodes, iterations).
On top of that an estimator gets only

* its own hyperparameters (``algorithm.kwargs``) from its example config, where it has one
  (``EXAMPLES``); ``grpo`` and ``gigpo`` keep ``{}`` (the defaults), as the grid rows already in
  ``results/learning.json`` were trained with;
* what it cannot run without (``NEEDS``), which the chain TextWorld setup lacks:

  - ``dr_grpo``: the Dr.GRPO loss aggregation ``seq-mean-token-sum-norm`` (its example config;
    the method is the mean-only advantage *and* this aggregation);
  - ``bipace``: ``policy.return_hidden=true`` (it clusters final-layer hidden states);
  - ``turn_ppo``: the trainer adds the turn-level critic (a copy of the model with a value
    head) because the estimator requires ``value``; the cell trains only its top 6 layers
    (``update.critic_top_n_layers=6``, the layers the policy's LoRA covers): the whole-copy
    critic took > 20 min for its first step alone on one core (full backward through 30
    layers), which no 8-iteration cell can afford here. It takes an optimizer step per 16
    distinct prompts (``update.critic_minibatch=16``, ~6 steps per iteration for the cost of
    one) at ``update.critic_lr=1e-4``: at the default 1e-5 and one step per iteration its
    critic explained no variance in 8 iterations (2026-12-03, bf16 seed 0 — also because its
    bf16 weights then dropped updates below their rounding, fixed by ``MasterAdamW``).
    It has no example config, so its defaults (γ 0.99, λ 0.9);
  - ``hiper``: ``policy.action_format=hiper`` (the agent loop parses its ``<switch>``/``<subgoal>``/
    ``<action>`` tags), so free decoding (``policy.action_constraint=none``) with room for the tags
    (``policy.max_tokens=64``), and the turn critic's settings of ``turn_ppo`` for its three heads;
  - ``tree_grpo``: ``rollout.sampler=tree`` with 2 trees per task, 1 expansion round of 2
    branches, 2 leaves kept per tree (4 leaf trajectories per task, as the 4-episode groups
    of the chain cells; the example's 2/1/2 trees/rounds/branches with ``leaves`` 2 instead of 3);
  - ``rtpo``: ``rollout.sampler=rtpo`` with the example's reverse tree (stride 2, 3 siblings,
    2 branch points) on ``group_size`` 2 base trajectories per task (the example's).

On the junction maze (``learning.py --env jm1 / jm5``) HiPER instead takes ``hiper_junction.yaml``'s kwargs
and ``NEEDS_JUNCTION``: decoding constrained to HiPER's tagged forms of the admissible actions
(``policy.action_constraint=admissible`` with that example's ``policy.hiper_subgoals``), so the 135M
model chooses switch, subgoal and action itself; the critic settings as above. ``TAGGED_JUNCTION`` is that
decoding alone: ``learning.py --tagged`` trains any other estimator under it (the control that separates
HiPER's credit from its format: the tagged prompt and decoding without HiPER's hierarchy).

Tree cells therefore play a different number of turns per iteration than the chain cells
(recorded per run as ``turns``); everything else is the same.
"""

from __future__ import annotations

from pathlib import Path

EXAMPLES_DIR = Path(__file__).parents[1] / "examples"

#: The example config an estimator takes its ``algorithm.kwargs`` from.
EXAMPLES = {"hgpo": "hgpo_textworld.yaml", "g2po": "g2po_textworld.yaml", "graphgpo": "graphgpo_textworld.yaml",
            "dr_grpo": "dr_grpo_textworld.yaml", "bipace": "bipace_alfworld.yaml", "rtpo": "rtpo_alfworld.yaml",
            "tree_grpo": "tree_grpo_webshop.yaml", "hiper": "hiper_alfworld.yaml", "beacon": "beacon_junction.yaml",
            "threespo": "threespo_junction.yaml"}

#: Overrides an estimator needs on the TextWorld chain setup (see the module docstring).
NEEDS = {
    "dr_grpo": ["update.aggregation=seq-mean-token-sum-norm"],
    "bipace": ["policy.return_hidden=true"],
    "turn_ppo": ["update.critic_top_n_layers=6", "update.critic_lr=1e-4", "update.critic_minibatch=16"],
    "hiper": ["policy.action_format=hiper", "policy.action_constraint=none", "policy.max_tokens=64",
              "update.critic_top_n_layers=6", "update.critic_lr=1e-4", "update.critic_minibatch=16"],
    "tree_grpo": ["rollout.sampler=tree", "rollout.tree.trees=2", "rollout.tree.rounds=1", "rollout.tree.branches=2",
                  "rollout.tree.leaves=2"],
    "rtpo": ["rollout.sampler=rtpo", "rollout.group_size=2", "rollout.tree.stride=2", "rollout.tree.siblings=3",
             "rollout.tree.branch_points=2"],
}


#: The junction-maze cells' example configs and needs, where they differ (module docstring).
EXAMPLES_JUNCTION = {"hiper": "hiper_junction.yaml"}
TAGGED_JUNCTION = ["policy.action_format=hiper", "policy.action_constraint=admissible",
                   'policy.hiper_subgoals=["reach the next junction","take the exit the sign names"]', "policy.max_tokens=48"]
NEEDS_JUNCTION = {
    "hiper": [*TAGGED_JUNCTION, "update.critic_top_n_layers=6", "update.critic_lr=1e-4", "update.critic_minibatch=16"],
}


def example_kwargs(estimator: str, junction: bool = False) -> dict:
    """The ``algorithm.kwargs`` of ``estimator``'s example config ({} when it has none, or for
    grpo / gigpo, whose grid rows used the defaults); ``junction``: the maze's example where it has one."""
    import yaml

    name = (EXAMPLES_JUNCTION if junction else {}).get(estimator) or EXAMPLES.get(estimator)
    if name is None:
        return {}
    cfg = yaml.safe_load((EXAMPLES_DIR / name).read_text())
    return dict((cfg.get("algorithm") or {}).get("kwargs") or {})


def estimator_overrides(estimator: str, junction: bool = False, tagged: bool = False) -> list[str]:
    """Config overrides of one estimator's cell: the estimator, its kwargs, its needs
    (``junction``: a junction-maze cell, ``EXAMPLES_JUNCTION`` / ``NEEDS_JUNCTION`` first;
    ``tagged``: also HiPER's tagged decoding, ``TAGGED_JUNCTION``).

    Raises:
        ValueError: ``tagged`` outside the junction maze (the tagged forms need its admissible actions
            and subgoals).
    """
    import json

    if tagged and not junction:
        raise ValueError("--tagged: HiPER's tagged decoding is set up for the junction maze only (--env jm1 / jm5)")
    kw = json.dumps(example_kwargs(estimator, junction), separators=(",", ":"))
    needs = (NEEDS_JUNCTION if junction else {}).get(estimator) or NEEDS.get(estimator, [])
    extra = [o for o in TAGGED_JUNCTION if o not in needs] if tagged else []
    return [f"algorithm.estimator={estimator}", f"algorithm.kwargs={kw}", *needs, *extra]


#: A tiny budget that only checks a cell starts and finishes (``learning.py --smoke``).
SMOKE = ["run.iterations=1", "rollout.groups_per_iteration=1", "env.max_turns=3", "env.eval_panel_size=2"]
