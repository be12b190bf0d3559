"""The run's judge (``reward.judge``): its client built from the config (``agentrl.rollout.judge``)."""

from __future__ import annotations

from agentrl.config import Config, ConfigError
from agentrl.llm.policy import Policy
from agentrl.rollout.judge import Judge
from agentrl.rollout.judge_clients import EngineJudgeClient, HTTPJudgeClient


def open_judge(cfg: Config, policy: Policy) -> Judge:
    """The ``Judge`` of ``cfg.reward.judge`` (which must be set): ``policy`` judges with the
    policy's own engine, ``local:<model>`` loads a second HF engine (a packaged name or a
    folder), an http(s) URL is an OpenAI-compatible server.

    Raises:
        ConfigError: a local judge on an engine without grammar-constrained decoding (vLLM).
        FileNotFoundError / KeyError: an unknown or unprepared ``local:`` model.
    """
    jc = cfg.reward.judge
    if jc.endpoint.startswith(("http://", "https://")):
        return Judge(jc, HTTPJudgeClient(jc.endpoint, jc.model, jc.api_key_env, jc.timeout_s))
    if jc.endpoint == "policy":
        engine, renderer = policy.engine, policy.renderer
    else:
        from agentrl.llm.hf import load_hf_policy

        engine, renderer = load_hf_policy(jc.endpoint[len("local:"):])
    try:
        return Judge(jc, EngineJudgeClient(engine, renderer, name=jc.endpoint))
    except ValueError as exc:
        raise ConfigError(f"reward.judge.endpoint={jc.endpoint!r}: {exc}") from None
