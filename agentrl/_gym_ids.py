"""Register our env ids with Gymnasium when ``agentrl`` is imported, without importing Gymnasium.

Gymnasium 1.x does not read the ``gymnasium.envs`` entry-point group by itself any more, so
``import agentrl`` does what ``import ale_py`` / ``import minigrid`` do: after it,
``gymnasium.make("agentrl/Toy-v0")`` works. The ids live in ``agentrl_envs`` (the ``envs/``
folder): ``gymnasium.register`` calls with entry-point strings, so no env module is imported
until an env is made.

Importing ``agentrl_envs`` imports Gymnasium (and NumPy), which ``import agentrl.config`` must
not (layer L0 stays light). So: when Gymnasium is already imported the ids are registered at
once; otherwise a one-shot import hook registers them right after Gymnasium's own
``__init__`` has run, whatever imports it first. Stdlib only.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

ENVS_MODULE = "agentrl_envs"


def register_ids() -> bool:
    """Import ``agentrl_envs`` (runs its ``gymnasium.register`` calls once; later calls are free).
    Returns False when it is not installed (a checkout without the envs package)."""
    try:
        importlib.import_module(ENVS_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != ENVS_MODULE:
            raise
        return False
    return True


class _AfterGymnasium(importlib.abc.Loader):
    """Gymnasium's own loader, plus our registration once its module has executed."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        self._inner.exec_module(module)
        module.__loader__ = self._inner  # hand back the real loader (resources, reload)
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        _uninstall()
        try:
            register_ids()
        except Exception as exc:  # never break `import gymnasium` because of our envs
            warnings.warn(f"agentrl: registering the agentrl/ env ids failed: {exc!r}", RuntimeWarning, stacklevel=2)

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _GymnasiumHook(importlib.abc.MetaPathFinder):
    """Wraps the loader of the ``gymnasium`` module spec the other finders return."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "gymnasium":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _AfterGymnasium(spec.loader)
                return spec
        return None


_HOOK = _GymnasiumHook()


def _uninstall() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def install() -> None:
    """Register now when Gymnasium is imported already, else when it is (called by ``agentrl/__init__``)."""
    gym = sys.modules.get("gymnasium")
    if gym is not None and hasattr(gym, "register"):
        register_ids()
    elif gym is None and _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
