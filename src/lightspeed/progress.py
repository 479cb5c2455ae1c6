"""What a long piece of work is doing now, for whoever shows progress.

Library code marks its stages (`with stage("timing the step"): …`) and knows nothing of
terminals; the CLI listens and draws a live line on a terminal (`cli/progress_display`),
while the library used from Python shows nothing. Stages nest: a listener is told the
whole path of stages open now, outermost first, each time it changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

Listener = Callable[[tuple[str, ...]], None]

_open: list[str] = []
_listeners: list[Listener] = []


@contextlib.contextmanager
def stage(description: str) -> Iterator[None]:
    """Mark the work inside the block as `description` (lower case, no full stop:
    "capturing the step's ops")."""
    _open.append(description)
    _tell()
    try:
        yield
    finally:
        _open.pop()
        _tell()


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Tell `listener` the open stages each time they change, while the block runs."""
    _listeners.append(listener)
    try:
        yield
    finally:
        _listeners.remove(listener)


def _tell() -> None:
    now = tuple(_open)
    for listener in _listeners:
        listener(now)
