"""``agentrl envs list``, ``agentrl envs check ID [--episodes N]`` and ``agentrl envs play ID [--seed S]``.

``list`` shows every registered env id that is not Gymnasium's own — ours (``agentrl/``) and
every third-party env registered with Gymnasium, whatever its namespace, including those of
packages named in the ``gymnasium.envs`` entry-point group — with its entry point;
``--all`` adds Gymnasium's built-in ids. ``check`` runs the TextEnv contract checker
(``agentrl.env.check.check_env``) on N seeds and prints its report: exit 0 when the env
passes, 1 with the broken rule named. ``play`` lets a
person play an env in the terminal: it prints the observation and the admissible actions
(numbered) and reads one action per line from standard input — the action text or its
number; ``quit`` or end of input stops. ``serve ID --protocol openenv`` serves an env id to
OpenEnv clients (TRL, SkyRL, ``openenv-core``'s ``GenericEnvClient``, ``agentrl/Remote-v0``) on
loopback by default; it prints the URL and runs until Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys

QUIT_WORDS = ("quit", "exit", "q")


def register(subparsers) -> None:
    """Add the ``envs list`` / ``check`` / ``play`` / ``serve`` sub-commands to ``subparsers``."""
    p = subparsers.add_parser("envs", help="list registered envs, check one against the contract, play one in the "
                              "terminal, or serve one over OpenEnv",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="registered env ids (ours and third-party) and their entry points")
    ls.add_argument("--all", action="store_true", help="also list Gymnasium's own built-in ids (CartPole-v1, ...)")
    ls.set_defaults(func=list_envs)
    chk = sub.add_parser("check", help="check an env against the TextEnv contract (exit 1 naming the broken rule)")
    chk.add_argument("env_id", metavar="ID", help="registered env id, e.g. agentrl/Toy-v0")
    chk.add_argument("--episodes", type=int, default=1, metavar="N",
                     help="seeds checked, SEED..SEED+N-1; each plays ~5 episodes (default: 1)")
    chk.add_argument("--seed", type=int, default=0, help="first reset seed (default: 0)")
    chk.add_argument("--max-steps", type=int, default=30, help="steps of the random-action episode (default: 30)")
    chk.add_argument("--split", default=None, help="dataset split passed to the env as split=...")
    chk.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE", dest="env_kwargs",
                     help="env constructor keyword (YAML value), repeatable, e.g. --env-kwarg base_url=http://127.0.0.1:8000")
    chk.set_defaults(func=check_envs)
    play = sub.add_parser("play", help="play an env by typing actions (quit or Ctrl-D to stop)")
    play.add_argument("env_id", metavar="ID", help="registered env id, e.g. agentrl/Toy-v0")
    play.add_argument("--seed", type=int, default=0, help="reset seed (selects the task; default: 0)")
    play.add_argument("--split", default=None, help="dataset split passed to the env as split=...")
    play.set_defaults(func=play_env)
    from agentrl.cli._envs_serve import add_serve_parser

    add_serve_parser(sub)


def _entry_point(env_id: str) -> str:
    import gymnasium

    ep = gymnasium.spec(env_id).entry_point
    return ep if isinstance(ep, str) else f"{getattr(ep, '__module__', '?')}:{getattr(ep, '__qualname__', ep)}"


def list_envs(args: argparse.Namespace) -> int:
    """Handler of ``agentrl envs list``: a table of env ids and entry points; returns 0."""
    from rich.console import Console
    from rich.table import Table

    from agentrl.env.registry import list_ids, text_env_ids

    ids = list_ids("") if args.all else text_env_ids()
    scope = "" if args.all else " (ours and third-party; --all adds Gymnasium's own)"
    table = Table(title=f"{len(ids)} registered env ids{scope}", title_justify="left")
    table.add_column("id", style="bold")
    table.add_column("entry point")
    for env_id in ids:
        table.add_row(env_id, _entry_point(env_id))
    Console().print(table)
    return 0


def check_envs(args: argparse.Namespace) -> int:
    """Handler of ``agentrl envs check``: ``check_env`` on seeds ``seed..seed+episodes-1``;
    prints the report and returns 0, or prints the broken rule and returns 1.

    Raises:
        KeyError: unknown id. ValueError: ``--episodes`` < 1, ``--seed`` < 0, ``--max-steps`` < 1, a
            bad ``--env-kwarg``, or an env that cannot be built (``EnvBuildError``: e.g.
            ``agentrl/Remote-v0`` without ``base_url``, a module that fails on import). MissingExtraError: the env's extra is not installed. DataMissingError:
            its data is missing.
    """
    from rich.console import Console
    from rich.text import Text

    from agentrl.env.check import RULES, EnvCheckError, check_env
    from agentrl.cli.rollout import _env_kwargs
    from agentrl.env.registry import validate_id

    if args.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
    if args.seed < 0 or args.max_steps < 1:
        raise ValueError(f"--seed must be >= 0 and --max-steps >= 1, got {args.seed} and {args.max_steps}")
    validate_id(args.env_id)
    console = Console(soft_wrap=True)
    kwargs = _env_kwargs(args)
    resets = steps = won = walks = 0
    for seed in range(args.seed, args.seed + args.episodes):
        try:
            report = check_env(args.env_id, seed=seed, max_steps=args.max_steps, **kwargs)
        except EnvCheckError as exc:
            console.print(Text(f"FAIL {args.env_id} (seed {seed}): {exc}", style="bold red"))
            return 1
        resets, steps = resets + report.episodes, steps + report.steps
        walks += report.walkthrough_won is not None
        won += bool(report.walkthrough_won)
    walk = f"walkthrough won on {won}/{walks} seeds" if walks else "no walkthrough given"
    console.print(Text(f"ok {args.env_id}: {args.episodes} seed(s) from {args.seed}, {resets} resets, {steps} steps, "
                       f"{walk}", style="bold green"))
    console.print(Text("rules checked: " + "; ".join(RULES)))
    return 0


def _show(console, obs: str, info: dict) -> list[str]:
    from rich.text import Text

    from agentrl.env.contract import INFO_ADMISSIBLE

    console.print(Text(obs))
    actions = [str(a) for a in info.get(INFO_ADMISSIBLE) or []]
    if actions:
        console.print(Text("admissible actions:", style="bold"))
        for i, a in enumerate(actions, 1):
            console.print(Text(f"  {i:>2}. {a}"))
    return actions


def _read_action(console, actions: list[str]) -> str | None:
    """The next action from stdin; ``None`` on EOF or a quit word. A number picks from
    ``actions`` unless that number is itself an admissible action."""
    console.print("> ", end="", style="bold green")
    line = sys.stdin.readline()
    if not line:
        console.print()
        return None
    text = line.strip()
    if text.lower() in QUIT_WORDS:
        return None
    if text.isdigit() and text not in actions and 1 <= int(text) <= len(actions):
        return actions[int(text) - 1]
    return text


def play_env(args: argparse.Namespace) -> int:
    """Handler of ``agentrl envs play``: reads actions from stdin until the episode ends,
    ``quit`` or end of input; returns 0. Raises ``KeyError`` for an unknown id."""
    from rich.console import Console
    from rich.text import Text

    from agentrl.env.contract import INFO_INSTRUCTIONS, INFO_TASK, INFO_VALID, INFO_WON
    from agentrl.env.registry import make

    console = Console()
    env = make(args.env_id, **({} if args.split is None else {"split": args.split}))
    try:
        obs, info = env.reset(seed=args.seed)
        console.print(Text(f"{args.env_id} seed {args.seed} task {info.get(INFO_TASK, '?')} "
                           f"(type an action or its number; quit to stop)", style="bold"))
        if info.get(INFO_INSTRUCTIONS):  # what the system prompt's {env_instructions} becomes
            console.print(Text(f"instructions: {info[INFO_INSTRUCTIONS]}", style="italic"))
        total, turns = 0.0, 0
        while True:
            actions = _show(console, obs, info)
            action = _read_action(console, actions)
            if action is None:
                console.print(f"quit after {turns} turns, return {total:g}", highlight=False)
                return 0
            obs, reward, terminated, truncated, info = env.step(action)
            total, turns = total + float(reward), turns + 1
            valid = "" if info.get(INFO_VALID, True) else " (invalid action)"
            console.print(Text(f"reward {float(reward):g}{valid}", style="cyan"))
            if terminated or truncated:
                console.print(Text(obs))
                end = "won" if info.get(INFO_WON) else ("truncated" if truncated else "ended")
                console.print(f"episode {end} after {turns} turns, return {total:g}", highlight=False)
                return 0
    finally:
        env.close()
