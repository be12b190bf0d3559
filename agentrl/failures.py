"""Failure causes: why an episode failed, in one field every layer shares (L0: standard library only).

An episode that is not ok carries a human-readable ``error``; where the failure has a known
cause, the error text begins with ``[cause] `` (``tag_cause``), and ``Episode.cause`` /
``EpisodeRecord.cause`` read it back (``failure_cause``) — so a viewer or a metric can count
failures by cause while the status set stays {ok, env_error, timeout, aborted} and the store's
schema is unchanged. Causes are registered in ``FAILURE_CAUSES``.
"""

from __future__ import annotations

import re

#: The registered causes. The env pools' answer checks (``agentrl.env.guards``): a reward that is
#: not a real number, not finite, or outside the env's declared range; an observation that is
#: not text or longer than ``env.max_observation_chars``. An external harness's episode
#: (``agentrl.proxy``, ``agentrl.rollout.harness``): a model call the proxy answered with an
#: error (engine failure, prompt over the context, a refused request — the harness may have
#: retried it), a client that hung up before the whole reply was delivered (its own timeout, a
#: crash mid-stream), a turn whose weights changed while it was generated, the harness program
#: exiting non-zero, passing its deadline, or writing an unreadable action log. A judge model
#: that gave no verdict (``agentrl.rollout.judge``).
ENV_CAUSES = ("reward_not_numeric", "reward_not_finite", "reward_out_of_range", "observation_not_text",
              "observation_too_large")
HARNESS_CAUSES = ("model_call_failed", "client_disconnected", "mixed_versions", "harness_exit", "harness_timeout",
                  "bad_action_log")
REWARD_CAUSES = ("judge_error",)
FAILURE_CAUSES = ENV_CAUSES + HARNESS_CAUSES + REWARD_CAUSES
_CAUSE = re.compile(r"^\[([a-z_]+)\] ")


def tag_cause(cause: str, text: str) -> str:
    """``text`` as an episode error carrying ``cause`` (one of ``FAILURE_CAUSES``).

    Raises:
        ValueError: ``cause`` is not a registered failure cause.
    """
    if cause not in FAILURE_CAUSES:
        raise ValueError(f"unknown failure cause {cause!r}; register it in agentrl.failures.FAILURE_CAUSES "
                         f"({', '.join(FAILURE_CAUSES)})")
    return f"[{cause}] {text}"


def failure_cause(error: str) -> str:
    """The registered cause an episode error carries (``tag_cause``), or "" when it names none."""
    m = _CAUSE.match(error or "")
    return m.group(1) if m and m.group(1) in FAILURE_CAUSES else ""


def with_context(context: str, error: str) -> str:
    """``context + error`` with ``error``'s cause tag (if any) kept in front, e.g.
    ``with_context("step failed: ", "[reward_not_finite] ...")`` = ``"[reward_not_finite] step failed: ..."``."""
    cause = failure_cause(error)
    if not cause:
        return f"{context}{error}"
    return f"[{cause}] {context}{error[len(cause) + 3:]}"
