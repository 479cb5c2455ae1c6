"""Where the trace tests find real traces: the copies in tests/data/traces, and the
whole shared collection beside the repository when it is there."""

from __future__ import annotations

from pathlib import Path

TRACES = Path(__file__).parent.parent / "data" / "traces"
SHARED_TRACES = Path(__file__).parents[3] / "shared" / "traces"


def trace(name: str) -> Path:
    """A trace of tests/data/traces by its name without `.json.gz`."""
    return TRACES / f"{name}.json.gz"
