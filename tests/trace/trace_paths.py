"""Where the trace tests find real traces: the copies in tests/data/traces, and a
larger collection named by the environment variable LIGHTSPEED_SHARED_TRACES (`make
test` sets it to ../shared/traces when that directory exists)."""

from __future__ import annotations

import os
from pathlib import Path

TRACES = Path(__file__).parent.parent / "data" / "traces"
SHARED_TRACES = Path(os.environ.get("LIGHTSPEED_SHARED_TRACES") or "/nonexistent")


def trace(name: str) -> Path:
    """A trace of tests/data/traces by its name without `.json.gz`."""
    return TRACES / f"{name}.json.gz"
