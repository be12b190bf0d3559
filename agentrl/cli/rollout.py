"""``agentrl rollout ID --policy P --episodes N --group G --store PATH``: fill a turn store.

Model-free policies (``random``, ``walkthrough``) run here without any model; any other
policy name is handed to the LLM runner (``agentrl.rollout.get_runner``). Finished episodes
are written to the store in batches (one transaction each), so an interrupted rollout keeps
every batch written before the interruption.
"""

from __future__ import annotations

import argparse
import secrets
import shlex
import time

#: Episodes per store transaction.
FLUSH_EVERY = 16


def register(subparsers) -> None:
    """Add the ``rollout`` sub-command to ``subparsers``."""
    p = subparsers.add_parser("rollout", help="play episodes of an env with a policy and store them",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("env_id", metavar="ID", help="registered env id, e.g. agentrl/Toy-v0 (see `agentrl envs list`)")
    p.add_argument("--policy", default="random", help="random | walkthrough | noisy_walkthrough (the walkthrough with 25 %% random slips) | an LLM policy name (default: random)")
    p.add_argument("--episodes", type=int, default=8, help="total episodes, a multiple of --group (default: 8)")
    p.add_argument("--group", type=int, default=1, help="episodes per group; a group shares one env seed (default: 1)")
    p.add_argument("--store", required=True, help="SQLite turn store file (created if missing)")
    p.add_argument("--seed", type=int, default=0, help="base seed: group g plays env seed SEED+g (default: 0)")
    p.add_argument("--split", default=None, help="dataset split passed to the env as split=... (data-backed envs)")
    p.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE", dest="env_kwargs",
                   help="env constructor keyword (repeatable; VALUE is YAML: 3, true, null, [a, b]), "
                        "e.g. --env-kwarg data_dir=/data/alfworld")
    p.add_argument("--max-turns", type=int, default=50, help="turns before an episode is cut (default: 50)")
    p.add_argument("--run", default=None, help="run id (default: POLICY-DATE-TIME-XXXX); must be new in the store")
    p.add_argument("--slots", type=int, default=None, help="parallel env slots (default: min(episodes, 8))")
    p.add_argument("--workers", type=int, default=None, help="env worker processes (default: one per slot, ≤ CPUs)")
    llm = p.add_argument_group("LLM policies (--policy smollm2-135m-instruct or a path to an HF folder)")
    llm.add_argument("--max-tokens", type=int, default=64, help="new tokens per turn (default: 64)")
    llm.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: 1.0)")
    llm.add_argument("--context", choices=("chat", "window"), default="chat", help="prompt strategy (default: chat)")
    llm.add_argument("--action-format", default="tag:action", help="tag:NAME | regex:PATTERN | whole (default: tag:action)")
    llm.add_argument("--system-prompt", default=None, metavar="TEMPLATE",
                     help="system message template with {env_instructions} (the env's own, else a generic "
                          "text-game sentence) and {action_format} (default: '{env_instructions} {action_format}')")
    p.set_defaults(func=run)


def _run_id(args: argparse.Namespace, existing: list[str]) -> str:
    if args.run is not None:
        if args.run in existing:
            raise ValueError(f"run {args.run!r} already exists in {args.store}; pick a new --run (runs are append-only)")
        return args.run
    return f"{args.policy.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def _env_kwargs(args: argparse.Namespace) -> dict:
    """The env constructor kwargs of ``--env-kwarg K=V ...`` and ``--split``.

    Raises:
        ValueError: an item without ``=`` or with a value that is not YAML.
    """
    import yaml

    kwargs: dict = {}
    for item in args.env_kwargs:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--env-kwarg {item!r} is not KEY=VALUE (e.g. --env-kwarg data_dir=/data/alfworld)")
        try:
            kwargs[key.strip()] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as exc:
            raise ValueError(f"--env-kwarg {item!r}: the value is not valid YAML ({exc})".replace("\n", " ")) from None
    if args.split is not None:
        kwargs["split"] = args.split
    return kwargs


def _check_policy(policy: str) -> None:
    """Reject an unknown policy before anything is written: not random/walkthrough, not a
    packaged model name and not a folder.

    Raises:
        KeyError: with the closest names and every valid choice.
    """
    from pathlib import Path

    from agentrl.registry import unknown_name_error
    from agentrl.rollout import SCRIPTED_POLICIES

    if policy in SCRIPTED_POLICIES or Path(policy).is_dir():
        return
    try:
        from agentrl.llm.models import lookup
    except ImportError:
        return  # get_runner explains the missing llm extra
    try:
        lookup(policy)
    except KeyError:
        from agentrl.llm.models import PACKAGED

        names = [*SCRIPTED_POLICIES, *PACKAGED]
        raise unknown_name_error("policy", policy, names) from None


def run(args: argparse.Namespace) -> int:
    """Handler of ``agentrl rollout``; returns the exit code (0).

    Raises:
        KeyError: unknown env id. ValueError: bad counts, an existing ``--run``, an LLM
            policy without the LLM runner, env kwargs the env refuses (keyword, split).
            DataMissingError: the env's data is missing. StorePathError: unwritable ``--store``.
    """
    from rich.console import Console

    from agentrl.env.preflight import check_env_kwargs
    from agentrl.env.registry import validate_id
    from agentrl.rollout import SCRIPTED_POLICIES, RolloutRequest, get_runner
    from agentrl.rollout.progress import PhaseProgress
    from agentrl.rollout.scripted import env_kwargs_for
    from agentrl.store import TurnStore
    from agentrl.types import Episode, EpisodeStatus

    console = Console()
    validate_id(args.env_id)
    _check_policy(args.policy)
    if args.system_prompt is not None:  # an unknown placeholder: one line before anything starts
        from agentrl.rollout.prompt import check_template

        check_template(args.system_prompt)
    env_kwargs = _env_kwargs(args)
    # keywords, split and data before any worker starts or the store opens (one line, exit 2)
    check_env_kwargs(args.env_id, env_kwargs_for(args.policy, args.env_id, env_kwargs)
                     if args.policy in SCRIPTED_POLICIES else env_kwargs)
    request = RolloutRequest(env_id=args.env_id, policy=args.policy, episodes=args.episodes, group=args.group,
                             seed=args.seed, max_turns=args.max_turns, env_kwargs=env_kwargs,
                             num_slots=args.slots, num_workers=args.workers)
    runner = get_runner(args.policy)
    if args.policy not in SCRIPTED_POLICIES:
        import functools

        from agentrl.rollout.llm_runner import LLMPolicyOptions

        runner = functools.partial(runner, options=LLMPolicyOptions(
            max_tokens=args.max_tokens, temperature=args.temperature, context=args.context,
            action_format=args.action_format,
            **({} if args.system_prompt is None else {"system_prompt": args.system_prompt})))
    counts = {s: 0 for s in EpisodeStatus}
    n_won = 0
    with TurnStore(args.store) as store:
        run_id = _run_id(args, store.runs())
        if args.policy not in SCRIPTED_POLICIES:  # replay and the viewer decode the ids with it
            from agentrl.llm.models import resolve_model

            store.set_tokenizer(run_id, resolve_model(args.policy))
        pending: list[Episode] = []

        def flush() -> None:
            if pending:
                store.add_episodes(pending, run_id=run_id)
                pending.clear()

        with PhaseProgress(f"rollout {args.env_id} · {args.policy}", request.episodes, console=console) as progress:

            def on_episode(ep: Episode) -> None:
                nonlocal n_won
                counts[ep.status] += 1
                n_won += ep.success
                pending.append(ep)
                if len(pending) >= FLUSH_EVERY:
                    flush()
                progress.advance(1)

            try:
                runner(request, on_episode)
            finally:
                flush()
    done = sum(counts.values())
    summary = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
    from agentrl.cli._text import markup_safe

    console.print(f"stored {done} episodes of run [bold]{markup_safe(run_id)}[/] in {markup_safe(args.store)} "
                  f"({summary}; {n_won} won)", highlight=False)
    console.print(f"replay: agentrl replay {shlex.quote(str(args.store))} --run {shlex.quote(run_id)}", highlight=False,
                  markup=False)
    return 0
