"""``agentrl/WebShop-v0``: text-mode WebShop on the 1000-product catalogue (README.md).

Paper: Yao et al., "WebShop: Towards Scalable Real-World Web Interaction with Grounded
Language Agents", arXiv:2207.01206. Spec: ENVIRONMENTS.md §3.
"""

from __future__ import annotations

import os
from dataclasses import asdict

import gymnasium
import numpy as np

from agentrl.env import (INFO_ADMISSIBLE, INFO_ANCHOR, INFO_MILESTONE, INFO_N_MILESTONES, INFO_TASK, INFO_VALID,
                         INFO_WALKTHROUGH, INFO_WON, require_module, text_spaces)
from agentrl.env.tasks import TaskRef, check_split_disjoint
from agentrl_envs.webshop.data import check_data_dir, resolve_data_dir
from agentrl_envs.webshop.goals import SPLITS as GOAL_SPLITS
from agentrl_envs.webshop.goals import Goal, split_goals
from agentrl_envs.webshop.milestones import MilestoneDetector
from agentrl_envs.webshop.policies import oracle_actions
from agentrl_envs.webshop.pages import anchor_obs
from agentrl_envs.webshop.reward import OPTION_MATCH_MODES, TYPE_MATCHERS, get_reward
from agentrl_envs.webshop.session import ActResult, WebShopSession
from agentrl_envs.webshop.world import World, get_world

#: Version id of the observation/reward semantics (README.md "Deviations"); bump with -vN.
VERSION = "webshop-text-v0 (bm25s-lucene-porter; type=heuristic-nouns; options=values; price_seed recorded)"


class WebShopEnv(gymnasium.Env):
    """Text-mode WebShop (TextEnv contract, ``agentrl.env.contract``).

    Actions: ``search[<query>]`` on the search page, ``click[<clickable>]`` elsewhere. Reward
    is 0 except on ``click[buy now]``, which ends the episode (``terminated``) with the
    purchase reward R in [0, 1]; ``won`` iff R == 1.0. Invalid actions change nothing
    (same observation, ``action_valid=False``, reason in ``info["feedback"]``).
    ``max_turns`` steps without buying → ``truncated``. BEACON's milestones (``milestones.py``,
    ALGORITHMS.md §15.2): ``info["milestone"]`` on the step that completed the next of the phases
    SEARCH, DETAIL, OPTIONS, PURCHASE; ``info["n_milestones"]`` their number for this goal.

    Args:
        data_dir: data folder (default ``$AGENTRL_WEBSHOP_DATA`` or ``../shared/data/webshop``).
        goal_mode: ``"synthetic"`` (offline default) or ``"human"`` (needs ``items_human_ins.json``).
        split: ``"all" | "train" | "eval" | "test"`` — goals by shuffled index (test 0–499,
            eval 500–1499, train 1500+) drawn when reset gets no ``task_id``.
        max_turns: turn limit (default 15, as in ReAct/verl-agent).
        price_seed: seed of the range-price draws and goal price bounds (recorded in info).
        option_match: ``"values"`` (default) or ``"upstream"`` (reproduce upstream's quirk).
        type_matcher: ``"heuristic"`` (default) or ``"spacy"`` (needs ``en_core_web_sm``).
    Raises:
        DataMissingError: data folder missing/empty (names the folder and the fix).
        MissingExtraError: ``bm25s``/``PyStemmer``/``thefuzz`` missing (``pip install 'agentrl[webshop]'``).
        ValueError: bad ``goal_mode``, ``split``, ``option_match``, ``type_matcher`` or ``max_turns``.
    """

    # exact: a few option values hold double spaces ("8.4 ounce  |  250 ml"); their click[...]
    # must arrive as listed (step strips and lower-cases the action itself)
    metadata = {"render_modes": [], "agentrl.data_name": "webshop", "agentrl.check_kwargs": {},
                "agentrl.action_normalize": "exact", "agentrl.splits": tuple(GOAL_SPLITS),
                "agentrl.expert_kwargs": {}}

    @classmethod
    def check_data(cls, data_dir: str | os.PathLike[str] | None = None, goal_mode: str = "synthetic",
                   **_: object) -> None:
        """Pre-flight hook (``agentrl.env.preflight``): the data folder holds what ``goal_mode``
        needs. Raises ``DataMissingError`` as the constructor would, loading nothing."""
        check_data_dir(resolve_data_dir(data_dir), goal_mode)

    @classmethod
    def list_tasks(cls, split: str = "all", data_dir: str | os.PathLike[str] | None = None,
                   goal_mode: str = "synthetic", price_seed: int = 0, **_: object) -> list[TaskRef]:
        """Task-list hook (``agentrl.env.tasks``): the goals of ``split`` by shuffled index,
        each digested by ``Goal.digest()`` (target, instruction, attributes, options, price
        bound); a goal whose content an earlier one of the split has is listed once."""
        world = get_world(resolve_data_dir(data_dir), goal_mode, price_seed)
        return [TaskRef(g.task_id, g.digest()) for g in split_goals(world.goals, split)]

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, goal_mode: str = "synthetic",
                 split: str = "all", max_turns: int = 15, price_seed: int = 0,
                 option_match: str = "values", type_matcher: str = "heuristic") -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if option_match not in OPTION_MATCH_MODES:
            raise ValueError(f"option_match {option_match!r} is not one of {OPTION_MATCH_MODES}")
        if type_matcher not in TYPE_MATCHERS:
            raise ValueError(f"type_matcher {type_matcher!r} is not one of {TYPE_MATCHERS}")
        require_module("thefuzz.fuzz", "webshop")  # fail at construction, not at the first purchase
        self.observation_space, self.action_space = text_spaces()
        self.world: World = get_world(resolve_data_dir(data_dir), goal_mode, price_seed)
        self.goals = split_goals(self.world.goals, split)
        if not self.goals:
            raise ValueError(f"split {split!r} of the {goal_mode} goals is empty ({len(self.world.goals)} goals)")
        check_split_disjoint(type(self), split, {"data_dir": data_dir, "goal_mode": goal_mode,
                                                 "price_seed": price_seed}, tuple(GOAL_SPLITS))
        self._goal_ids = {g.task_id for g in self.goals}
        weights = np.array([g.weight for g in self.goals], dtype=np.float64)
        self._probs = weights / weights.sum()
        self.split, self.max_turns = split, max_turns
        self.option_match, self.type_matcher = option_match, type_matcher
        self.session: WebShopSession | None = None
        self.milestones: MilestoneDetector | None = None
        self.turns = 0

    def _draw_goal(self, options: dict | None) -> Goal:
        task_id = (options or {}).get(INFO_TASK)
        if task_id:
            goal = self.world.goal(str(task_id))
            if goal.task_id not in self._goal_ids:  # a train env never plays a held-out goal
                raise ValueError(f"WebShop task {task_id!r} is not in split {self.split!r} "
                                 f"({len(self.goals)} goals, e.g. {self.goals[0].task_id!r})")
            return goal
        return self.goals[int(self.np_random.choice(len(self.goals), p=self._probs))]

    def _scorer(self, goal: Goal):
        return lambda product, values: get_reward(
            product, goal, self.world.prices[product.asin], values,
            option_match=self.option_match, type_matcher=self.type_matcher)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode on ``options["task_id"]`` (``"synthetic/<i>"``) or a goal drawn from
        the split (weighted as upstream) with the seeded RNG. Returns ``(obs, info)``."""
        super().reset(seed=seed)
        goal = self._draw_goal(options)
        self.session = WebShopSession(self.world.catalogue, self.world.engine, goal, self._scorer(goal))
        self.milestones = MilestoneDetector(goal, self.world.catalogue, self.world.prices, self.option_match)
        self.turns = 0
        obs = self.session.page.text
        info = self._info(obs)
        info.update({INFO_WON: False, INFO_TASK: goal.task_id, INFO_N_MILESTONES: self.milestones.n_milestones,
                     "instruction": goal.instruction_text,
                     INFO_WALKTHROUGH: oracle_actions(goal, self.world.catalogue, self.world.engine),
                     "price_seed": self.world.price_seed, "goal_mode": self.world.goal_mode})
        return obs, info

    def _info(self, obs: str) -> dict:
        s = self.session
        assert s is not None
        return {INFO_ANCHOR: anchor_obs(obs, s.instruction), INFO_ADMISSIBLE: s.admissible_actions(),
                "clickables": list(s.page.clickables)}

    def step(self, action: str):
        """Apply ``search[...]`` / ``click[...]``; returns ``(obs, reward, terminated, truncated, info)``."""
        if self.session is None:
            raise RuntimeError("WebShopEnv.step called before reset()")
        if self.session.page.kind == "done" or self.turns >= self.max_turns:
            result = ActResult(False, "the episode is over; call reset()")
        else:
            result = self.session.act(action if isinstance(action, str) else "")
            self.turns += 1
        reward = result.purchase.reward if result.purchase is not None else 0.0
        terminated = self.session.page.kind == "done"
        truncated = not terminated and self.turns >= self.max_turns
        obs = self.session.page.text
        info = self._info(obs)
        assert self.milestones is not None
        milestone = result.valid and self.milestones.update(self.session, result.purchase is not None)
        info.update({INFO_WON: bool(result.purchase is not None and reward == 1.0), INFO_VALID: result.valid,
                     "feedback": result.feedback, INFO_MILESTONE: bool(milestone),
                     INFO_N_MILESTONES: self.milestones.n_milestones})
        if result.purchase is not None:
            info["reward_info"] = asdict(result.purchase)
        return obs, float(reward), terminated, truncated, info

    def expert_plan(self) -> list[str]:
        """The expert from the current page (``agentrl.env.expert``), ``[]`` once bought: on the
        target's item page, its goal option values not selected yet, then Buy Now; on a results
        page listing the target, click it, then the same; anywhere else ``click[back to search]``
        (unless the page has the search bar) and the goal's oracle actions (``oracle_actions``:
        search the target's title, open it, its options, Buy Now)."""
        s = self.session
        if s is None or s.page.kind == "done":
            return []
        goal, target = s.goal, s.goal.asin.lower()
        offered = {v for _, values in self.world.catalogue.get(goal.asin).options for v in values}
        options = [f"click[{v}]" for v in goal.option_values if v in offered and v not in s.options.values()]
        if s.page.kind == "item" and (s.asin or "").lower() == target:
            return [*options, "click[buy now]"]
        if s.page.kind == "results" and target in s.page.clickables:
            return [f"click[{target}]", *[f"click[{v}]" for v in goal.option_values if v in offered], "click[buy now]"]
        plan = oracle_actions(goal, self.world.catalogue, self.world.engine)
        return plan if s.page.has_search_bar else ["click[back to search]", *plan]

    def close(self) -> None:
        """Idempotent; the shared world stays cached for other instances."""
        self.session = None

