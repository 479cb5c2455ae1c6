"""Serving a model under a latency SLO: an SLO-aware batching server and an open-loop
load generator."""

from __future__ import annotations

import importlib.util

from lightspeed.errors import ConfigError


def require(*modules: str) -> None:
    """Refuse in one line, with the fix, when the `serve` extra's `modules` are missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"serving needs {', '.join(missing)}: install the serve extra,"
            " pip install 'lightspeed[serve]'."
        )
