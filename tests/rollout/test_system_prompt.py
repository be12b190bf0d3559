"""The system prompt template (``policy.system_prompt``, ``agentrl.rollout.prompt``), the env's
own instructions (reset ``info["instructions"]``) and the t = 0 window prompt (the reset text once)."""

from __future__ import annotations

import gymnasium
import pytest

from agentrl.env import INFO_INSTRUCTIONS, make, text_spaces
from agentrl.env.contract import MissingExtraError
from agentrl.env.pool import EnvResult
from agentrl.llm.chat import ChatRenderer
from agentrl.rollout.agent_loop import EpisodeDriver, LoopConfig
from agentrl.rollout.parsing import parse_format
from agentrl.rollout.prompt import DEFAULT_INSTRUCTIONS, DEFAULT_SYSTEM_PROMPT, check_template, render_system
from agentrl.types import Episode

LAMP = "agentrl-test/Lamp-v0"
LAMP_INSTRUCTIONS = "You control a lamp. Answer with on or off."


class LampEnv(gymnasium.Env):
    """A game that is not about walking; it says how to play in its reset info."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space, self.action_space = text_spaces()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "The lamp is off.", {"anchor_obs": "off", "won": False, "task_id": "lamp",
                                    "admissible_actions": ["on", "off"], INFO_INSTRUCTIONS: LAMP_INSTRUCTIONS}

    def step(self, action):
        won = action == "on"
        obs = "The lamp is on." if won else "The lamp is off."
        return obs, float(won), won, False, {"anchor_obs": obs, "won": won, "action_valid": action in ("on", "off")}


def _first_prompt(env_id: str, renderer: ChatRenderer, **loop) -> tuple[str, str, dict]:
    """(decoded t = 0 prompt, reset observation, reset info) of ``env_id`` at seed 0."""
    env = make(env_id)
    obs, info = env.reset(seed=0)
    env.close()
    drv = EpisodeDriver(Episode(episode_id=0, group_id=0, env_id=env_id, task_id="t", seed=0), renderer,
                        LoopConfig(**loop), 1 << 20)
    drv.start(EnvResult(obs=obs, reward=0.0, terminated=False, truncated=False, info=info))
    return renderer.tokenizer.decode(drv.prompt()), obs, info


@pytest.fixture(scope="module", autouse=True)
def _lamp():
    if LAMP not in gymnasium.registry:
        gymnasium.register(id=LAMP, entry_point=LampEnv)


@pytest.mark.parametrize("fmt", ["tag:action", "whole", "hiper", "regex:>(.*)"])
def test_default_template_is_the_old_system_prompt(fmt):
    sentence = parse_format(fmt).instructions
    assert render_system(DEFAULT_SYSTEM_PROMPT, None, sentence) == f"{DEFAULT_INSTRUCTIONS} {sentence}"
    assert LoopConfig().system_prompt == DEFAULT_SYSTEM_PROMPT


def test_template_fills_placeholders_keeps_other_braces_and_may_drop_the_format_sentence():
    assert render_system("{env_instructions}", "Toggle it.", "Reply with the action only.") == "Toggle it."
    assert render_system("  {env_instructions}\n{action_format} ", " ", "S.") == f"{DEFAULT_INSTRUCTIONS}\nS."
    assert render_system('Answer as {"action": "..."}. {action_format}', None, "S.") == 'Answer as {"action": "..."}. S.'


def test_unknown_placeholder_is_refused_naming_it_and_the_allowed_ones():
    with pytest.raises(ValueError, match=r"unknown placeholder \{env_instruction\}.*\{env_instructions\}, "
                                         r"\{action_format\}"):
        check_template("{env_instruction} {action_format}")
    with pytest.raises(ValueError, match=r"\{task\}"):
        LoopConfig(system_prompt="{task}")


def test_env_instructions_reach_the_system_message(tiny_tokenizer):
    r = ChatRenderer(tiny_tokenizer)
    text, _, _ = _first_prompt(LAMP, r, action_format="whole")
    assert f"{LAMP_INSTRUCTIONS} Reply with the action only" in text and DEFAULT_INSTRUCTIONS not in text
    text, _, _ = _first_prompt(LAMP, r, action_format="whole", system_prompt="{env_instructions}")
    assert LAMP_INSTRUCTIONS in text and "go north" not in text
    text, _, _ = _first_prompt("agentrl/Toy-v0", r)  # no instructions: today's generic prompt
    assert f"{DEFAULT_INSTRUCTIONS} {parse_format('tag:action').instructions}" in text


@pytest.mark.parametrize("env_id", ["agentrl/Toy-v0", "agentrl/TextWorld-v0", LAMP])
@pytest.mark.parametrize("window_k", [0, 3])
def test_window_prompt_at_t0_holds_the_reset_text_once(tiny_tokenizer, env_id, window_k):
    try:
        text, obs, info = _first_prompt(env_id, ChatRenderer(tiny_tokenizer), context="window", window_k=window_k)
    except MissingExtraError as exc:
        pytest.skip(str(exc))
    assert text.count(obs) == 1 and text.count("Task:") == 1 and "Current observation:" not in text
    assert f"Task:\n{obs}\nAdmissible actions: {', '.join(info['admissible_actions'])}" in text
