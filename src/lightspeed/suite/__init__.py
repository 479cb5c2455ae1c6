"""The built-in benchmark workloads, by name.

Each model family lives in its own module and registers factories with `register`;
a factory takes no argument and returns a `Workload` with the family's default batch.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable

from lightspeed.errors import UnknownNameError, did_you_mean
from lightspeed.workload import Workload

WorkloadFactory = Callable[[], Workload]

_FACTORIES: dict[str, WorkloadFactory] = {}
_DESCRIPTIONS: dict[str, str] = {}


def register(name: str, description: str) -> Callable[[WorkloadFactory], WorkloadFactory]:
    """Decorator: make `factory` the suite workload `name`; a name is registered once."""

    def decorate(factory: WorkloadFactory) -> WorkloadFactory:
        if name in _FACTORIES:
            raise RuntimeError(f"suite workload {name!r} is registered twice")
        _FACTORIES[name] = factory
        _DESCRIPTIONS[name] = description
        return factory

    return decorate


def _load_families() -> None:
    """Import every module of this package: each registers its family's workloads.

    Found on disk rather than listed, so a new family module cannot be forgotten; done
    on first lookup so that `import lightspeed` stays light."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def names() -> list[str]:
    """The names of all suite workloads, sorted."""
    _load_families()
    return sorted(_FACTORIES)


def describe(name: str) -> str:
    """One line on what the suite workload `name` is."""
    _load_families()
    return _DESCRIPTIONS[name]


def get(name: str) -> Workload:
    """A fresh Workload for the suite workload `name` (its `target`: the name)."""
    _load_families()
    if name not in _FACTORIES:
        raise UnknownNameError(
            f"{name!r} is neither a suite workload nor a path/to/file.py:NAME target."
            + did_you_mean(name, _FACTORIES)
            + " List them with `lightspeed suite`."
        )
    return dataclasses.replace(_FACTORIES[name](), target=name)
