"""Loading a target: a built-in suite name (`mlp`), `path/to/file.py:attr`, where
`attr` is a `Workload` or a zero-argument callable that returns one, or a Hugging Face
architecture, `hf:MODEL_TYPE[?field=value&…]` (`hf_target`)."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from lightspeed import suite
from lightspeed.errors import TargetError, WorkloadError
from lightspeed.units import a_kind
from lightspeed.workload import Workload
from lightspeed.workload.hf import hf_workload, is_hf_target


def load_target(target: str, *, allocates: bool = True) -> Workload:
    """The Workload named by `target`: a suite name, `path/to/file.py:attr` or
    `hf:MODEL_TYPE[?overrides]` (`hf_target`). `allocates=False`: its step will only run
    on fake tensors, so a model too large for this machine is not refused."""
    if is_hf_target(target):
        return dataclasses.replace(hf_workload(target, allocates=allocates), target=target)
    if ":" in target or target.endswith(".py"):
        path, _, attr = target.rpartition(":")
        found = _load_from_file(target)
        return dataclasses.replace(found, target=f"{Path(path).resolve()}:{attr}")
    return suite.get(target)  # its target: its name


def _load_from_file(target: str) -> Workload:
    path_text, sep, attr = target.rpartition(":")
    if not sep:
        raise TargetError(
            f"{target!r} names a file but no attribute; write {target}:NAME, where NAME is a"
            " Workload or a function returning one."
        )
    path = Path(path_text)
    if not path.is_file():
        raise TargetError(f"{path_text!r}: no such file; check the path of the target.")
    if not attr:
        raise TargetError(f"{target!r} names no attribute after ':'; write {path_text}:NAME.")
    module = _import_file(path)
    if not hasattr(module, attr):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        hint = f" It defines: {', '.join(public[:12])}." if public else ""
        raise TargetError(f"{path_text!r} has no attribute {attr!r}.{hint}")
    value = getattr(module, attr)
    if isinstance(value, Workload):
        return value
    if callable(value) and not isinstance(value, type):
        try:
            made = value()
        except Exception as exc:
            raise WorkloadError(
                f"{target}: calling {attr}() raised {type(exc).__name__}: {exc}"
            ) from exc
        if isinstance(made, Workload):
            return made
        raise TargetError(f"{target}: {attr}() returned {a_kind(made)}, not a lightspeed.Workload.")
    raise TargetError(
        f"{target}: {attr!r} is {a_kind(value)}, not a lightspeed.Workload or a"
        " zero-argument function returning one."
    )


def _import_file(path: Path) -> Any:
    resolved = path.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    module_name = f"lightspeed_target_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise TargetError(f"{path}: not a Python file that can be imported.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise TargetError(f"importing {path} raised {type(exc).__name__}: {exc}") from exc
    return module
