"""``agentrl train CONFIG [key=value ...]``: train a policy as one YAML config describes.

Overrides use dotted keys, e.g. ``agentrl train examples/gigpo_textworld.yaml
run.iterations=2 update.lr=1e-4``. The run folder (``run.out_dir/run.name``) receives
config.yaml (every default in effect, written once), store.sqlite, metrics.jsonl,
checkpoints/ and launches/ + launches.jsonl (each launch's effective config, overrides and
the checkpoint it resumed from). A run that already has a checkpoint resumes from it when
the config matches its config.yaml (run.iterations, eval/save frequency and log.* may
differ; a finished run says it is complete); a different config is refused with the
differing keys unless ``--resume`` (continue anyway, the differences logged) or
``--no-resume`` (start afresh: the old run folder moves to ``<name>.prev-<time>``).

Data-parallel on N processes (FSDP2; gloo on CPU, NCCL on GPU): ``torchrun --nproc-per-node N
-m agentrl train CONFIG``. Rank 0 rolls out, writes the store and logs; every rank trains its
share of each minibatch. docs/scaling.md has the commands for one GPU, eight GPUs and nodes.

On a Ray cluster (several nodes): ``agentrl train CONFIG --ray-ranks N [--ray-address ADDR]
[--gpus-per-rank 1]`` places N ranks as Ray actors (agentrl.distributed.ray_launch) and runs the same
data-parallel training; without an address (and no ``$RAY_ADDRESS``) a local Ray is started.

SIGTERM (a scheduler's preemption, ``kill``) abandons the iteration in progress, closes the
engine workers and env pools, prints one line and exits 143; the same command resumes.
Under torchrun each rank leaves with its status once the run has ended (``os._exit``: no
interpreter finalisation, where a gloo destructor now and then aborted a finished rank).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading


def register(subparsers) -> None:
    """Add the ``train`` sub-command."""
    p = subparsers.add_parser("train", help="train a policy from a YAML config", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG", help="YAML config (see examples/)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="dotted overrides, e.g. update.lr=1e-4 (also +key=value; ~key resets a key to its default)")
    p.add_argument("--print-config", action="store_true",
                   help="print every key of the effective config with its value and doc, then exit (trains nothing)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--no-resume", action="store_true",
                     help="start afresh: an existing run in the folder moves to <name>.prev-<time>")
    how.add_argument("--resume", action="store_true", dest="force_resume",
                     help="resume the run's checkpoint even when the config differs from its config.yaml "
                          "(the differences are printed)")
    ray = p.add_argument_group("Ray cluster (data-parallel ranks as Ray actors)")
    ray.add_argument("--ray-ranks", type=int, metavar="N", help="train on N ranks placed on a Ray cluster")
    ray.add_argument("--ray-address", metavar="ADDR", help="Ray cluster (default: $RAY_ADDRESS, or a local Ray)")
    ray.add_argument("--gpus-per-rank", type=int, default=0, choices=(0, 1), help="GPUs per rank (0: CPU ranks)")
    ray.add_argument("--cpus-per-rank", type=float, default=1.0, metavar="C", help="Ray CPUs each rank reserves")
    p.set_defaults(func=run)


class Terminated(KeyboardInterrupt):
    """SIGTERM reached ``agentrl train``: raised where the process is, so every ``finally`` runs
    (engine workers, env pools and the process group close; a store write in progress rolls
    back) and the iteration in progress is abandoned — a resume sets it aside and re-plays it."""


RETRY_S = 0.05  #: delay before a swallowed ``Terminated`` is raised again (seconds)


@contextlib.contextmanager
def sigterm_abandons_the_iteration():
    """While inside: SIGTERM raises ``Terminated`` in the main thread (elsewhere: a no-op).

    Python runs a signal handler at the next bytecode of the main thread, which may lie inside code
    whose exceptions Python reports and drops ("Exception ignored in: ..."): a weakref callback,
    ``__del__``, an import lock's callback. A ``Terminated`` dropped there would let the run train on
    to its end and exit 0; so it is caught in ``sys.unraisablehook`` and SIGTERM is sent again
    ``RETRY_S`` later, to be raised where the process has gone on to. Other unraisable exceptions
    go to the previous hook.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
        raise Terminated(f"signal {signum}")

    previous_hook = sys.unraisablehook

    def unraisable(info) -> None:
        if not isinstance(info.exc_value, Terminated):
            previous_hook(info)
            return
        signal.signal(signal.SIGTERM, handler)  # the handler had set SIG_IGN; nothing was cleaned up yet
        retry = threading.Timer(RETRY_S, os.kill, (os.getpid(), signal.SIGTERM))
        retry.daemon = True
        retry.start()

    previous = signal.signal(signal.SIGTERM, handler)
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = previous_hook


def run(args: argparse.Namespace) -> int:
    """Handler: load and validate the config (before any rollout), train, print the summary.
    SIGTERM abandons the iteration in progress, closes what the run opened and returns 143 with
    one line saying how to resume."""
    try:
        with sigterm_abandons_the_iteration():
            code = _run(args)
    except (Terminated, SystemExit) as exc:
        if isinstance(exc, SystemExit) and exc.code != signal.SIGTERM:
            raise
        # (ray.init puts its own SIGTERM handler in place: sys.exit(15), unwinding the same way)
        if os.environ.get("RANK", "0") == "0":  # torchrun: one line, from rank 0
            print(f"agentrl train: stopped by SIGTERM; the iteration in progress was abandoned and the engines and "
                  f"env workers closed. Run the same command again to resume from the last checkpoint "
                  f"({args.config}).", file=sys.stderr, flush=True)
        code = 143
    return _leave_if_a_rank(code)


def _leave_if_a_rank(code: int) -> int:
    """``code``; a torchrun rank (its run ended, its process group closed) exits here with it,
    skipping the interpreter's finalisation, where a gloo destructor now and then aborted a
    finished rank and torchrun reported the finished run as failed
    (``agentrl.distributed.context.leave_rank``)."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:  # one process (--print-config too): torch stays unimported
        from agentrl.distributed import launched_rank, leave_rank

        if launched_rank():
            leave_rank(code)
    return code


def _run(args: argparse.Namespace) -> int:
    from agentrl.train.checks import load_checked_config

    cfg = load_checked_config(args.config, args.overrides)  # env id, loss, estimator kwargs: before any rollout
    from rich.console import Console

    if args.print_config:
        _print_config(Console(width=None if sys.stdout.isatty() else 220), cfg)
        return 0
    from agentrl.cli._summary import print_run_summary
    from agentrl.train import Launch, train

    launch = Launch(config_path=str(args.config), overrides=tuple(args.overrides))

    if args.ray_ranks is not None:
        from agentrl.distributed.ray_launch import RayLaunchError

        try:
            result = _ray_train(train, cfg, args, launch)
        except RayLaunchError as exc:  # a rank's error, already stopped everywhere: no traceback of the driver
            Console(stderr=True, soft_wrap=True).print(f"error: {exc}", style="red", highlight=False, markup=False)
            return 1
    else:
        if args.ray_address is not None or args.gpus_per_rank:
            raise ValueError("--ray-address / --gpus-per-rank need --ray-ranks N")
        if cfg.rollout.placement.trainer_resources:
            import logging

            logging.getLogger(__name__).warning("rollout.placement.trainer_resources places --ray-ranks trainer "
                                                "ranks; without --ray-ranks the trainer is this process, on this node")
        result = train(cfg, resume=not args.no_resume, force_resume=args.force_resume, launch=launch)
    if not result.is_main:  # torchrun: ranks other than 0 trained their shards; rank 0 reports
        return 0
    wide = None if sys.stdout.isatty() else 160  # a log file keeps the whole table, not 80 columns
    print_run_summary(Console(width=wide), result.run_dir, result.run_id, result.evals)
    return 0


def _ray_train(train, cfg, args: argparse.Namespace, launch):
    """``train`` on ``--ray-ranks`` Ray actors; rank 0's TrainResult.

    Raises:
        ValueError: bad Ray options, or already inside a torchrun launch; a rank's failure as
        ``RayLaunchError`` (a RuntimeError naming the rank and its error).
    """
    import os

    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        raise ValueError("--ray-ranks under torchrun: use one launcher (drop --ray-ranks, or run without torchrun)")
    from agentrl.distributed.ray_launch import launch as ray_launch

    return ray_launch(train, (cfg,), {"resume": not args.no_resume, "force_resume": args.force_resume, "launch": launch},
                      ranks=args.ray_ranks, address=args.ray_address,
                      gpus_per_rank=args.gpus_per_rank, cpus_per_rank=args.cpus_per_rank,
                      resources=dict(cfg.rollout.placement.trainer_resources))


def _print_config(console, cfg) -> None:
    """One row per key: dotted key, value in effect, what it does (``agentrl.config.docs``)."""
    from rich.table import Column, Table
    from rich.text import Text

    from agentrl.config.docs import describe_config
    from agentrl.train.checks import estimator_docstring

    # the help wraps at word boundaries; a word longer than its column folds, never ends in "…"
    rows = describe_config(cfg, estimator_doc=estimator_docstring)
    # a key folds only where the terminal is too narrow for it (< 40 % of the width), so no column vanishes
    key_width = min(max(len(k.key) for k in rows), max(10, int(console.width * 0.4)))
    table = Table(Column("key", width=key_width, overflow="fold"), Column("value", overflow="fold"),
                  Column("what it is", overflow="fold"), box=None, pad_edge=False, show_lines=False)
    for k in rows:  # Text: stored values and docs are never read as rich markup
        table.add_row(Text(k.key), Text(k.value), Text(k.doc))
    console.print(table)
