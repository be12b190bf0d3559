"""``agentrl data prepare NAME --from DIR [--replace]``: install an env's data for every run.

For a pip user the ALFWorld and WebShop loaders cannot rely on ``../shared/data`` (it exists
only beside this repository). ``prepare`` checks ``DIR`` with the env's own data check (every
split for ALFWorld; the catalogue files for WebShop), copies it to the prepared-data folder
(``agentrl.env.data_home``: ``$AGENTRL_DATA_HOME``, else ``~/.cache/agentrl/data``) and prints
where; the env loaders look there after their ``data_dir`` argument and environment variable.
NAME is ``alfworld``, ``webshop`` or the id of an env whose class declares
``metadata["agentrl.data_name"]``. Getting the files where the network allows:
ALFWorld — ``pip install alfworld && alfworld-download`` (GitHub; the games land in
``~/.cache/alfworld/json_2.1.1``); WebShop — its ``setup.sh -d small`` (Google Drive).
"""

from __future__ import annotations

import argparse

DOWNLOAD = {
    "alfworld": "`pip install alfworld && alfworld-download` (needs GitHub) puts the games in "
                "~/.cache/alfworld/json_2.1.1; then run `agentrl data prepare alfworld --from ~/.cache/alfworld`",
    "webshop": "WebShop's `./setup.sh -d small` (github.com/princeton-nlp/WebShop, needs Google Drive) writes "
               "data/ with items_shuffle_1000.json and items_ins_v2_1000.json; then run "
               "`agentrl data prepare webshop --from WebShop/data`",
}


def register(subparsers) -> None:
    """Add the ``data`` sub-command (``data prepare``)."""
    p = subparsers.add_parser("data", help="install env data (ALFWorld, WebShop) for every run",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    prep = sub.add_parser("prepare", help="check a data folder and install it where the envs find it")
    prep.add_argument("name", metavar="NAME", help="alfworld | webshop | an env id declaring agentrl.data_name")
    prep.add_argument("--from", dest="source", metavar="DIR", help="the folder holding the data")
    prep.add_argument("--replace", action="store_true", help="replace data prepared before")
    prep.set_defaults(func=run)


def _env_of(name: str) -> tuple[str, object, str]:
    """``(env id, env class, data name)`` for NAME (a data name or an env id). Raises KeyError."""
    from agentrl.env.preflight import env_creator
    from agentrl.env.registry import list_ids

    ids = [name] if "/" in name else [i for i in list_ids() if i.lower().startswith(f"agentrl/{name.lower()}-")]
    for env_id in ids:
        creator = env_creator(env_id)
        data_name = (getattr(creator, "metadata", None) or {}).get("agentrl.data_name")
        if data_name:
            return env_id, creator, data_name
    raise KeyError(f"no env with data to prepare is called {name!r}; use alfworld, webshop or an env id whose "
                   f"class declares metadata['agentrl.data_name']")


def run(args: argparse.Namespace) -> int:
    """Handler: check ``--from`` with the env's data check, install it, print where.

    Raises:
        KeyError: unknown NAME. ValueError: no ``--from`` (says how to get the data).
        DataMissingError (a ValueError): the folder fails the env's check (nothing installed).
        FileExistsError: prepared already (``--replace``).
    """
    import inspect

    from rich.console import Console

    from agentrl.env.data_home import install_prepared

    env_id, creator, data_name = _env_of(args.name)
    if not args.source:
        how = DOWNLOAD.get(data_name, "get the files from the env's upstream project")
        raise ValueError(f"agentrl data prepare {data_name} needs --from DIR, the folder holding the data; "
                         f"to get it: {how}")
    check = getattr(creator, "check_data", None)
    if check is None:
        raise ValueError(f"{env_id} declares no check_data hook; its data cannot be checked before installing")
    splits = (creator.metadata or {}).get("agentrl.splits") or (None,)
    takes_split = "split" in inspect.signature(check).parameters
    for split in (splits if takes_split else (None,)):
        check(data_dir=args.source, **({"split": split} if split is not None else {}))  # DataMissingError names the gap
    info = install_prepared(data_name, args.source, replace=args.replace)
    for split in (splits if takes_split else (None,)):  # the installed copy passes the same check
        check(data_dir=info.path, **({"split": split} if split is not None else {}))
    # soft_wrap: the paths are printed whole (a narrow or non-tty console would fold a long path mid-word)
    Console(highlight=False, soft_wrap=True).print(f"prepared {data_name} for {env_id}: {info.files} files "
                                   f"({info.bytes / 2**20:.1f} MiB) from {info.source} into {info.path}; every run "
                                   f"now finds it there (a data_dir argument or the env's variable still wins)",
                                   markup=False)
    return 0
