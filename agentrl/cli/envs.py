"""``agentrl envs list`` and ``agentrl envs play ID [--seed S]``.

``list`` shows every registered env id that is not Gymnasium's own — ours (``agentrl/``) and
every third-party env registered with Gymnasium, whatever its namespace, including those of
packages named in the ``gymnasium.envs`` entry-point group — with its entry point;
``--all`` adds Gymnasium's built-in ids. ``play`` lets a
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
    """Add the ``envs list`` / ``envs play`` sub-commands to ``subparsers``."""
    p = subparsers.add_parser("envs", help="list registered envs, play one in the terminal, or serve one over OpenEnv",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="envs_command", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="registered env ids (ours and third-party) and their entry points")
    ls.add_argument("--all", action="store_true", help="also list Gymnasium's own built-in ids (CartPole-v1, ...)")
    ls.set_defaults(func=list_envs)
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

    from agentrl.env.contract import INFO_TASK, INFO_VALID, INFO_WON
    from agentrl.env.registry import make

    console = Console()
    env = make(args.env_id, **({} if args.split is None else {"split": args.split}))
    try:
        obs, info = env.reset(seed=args.seed)
        console.print(Text(f"{args.env_id} seed {args.seed} task {info.get(INFO_TASK, '?')} "
                           f"(type an action or its number; quit to stop)", style="bold"))
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
