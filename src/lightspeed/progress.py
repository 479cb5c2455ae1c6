"""What a long piece of work is doing now, for whoever shows progress.

Library code marks its stages (`with stage("timing the step"): …`) and knows nothing of
terminals; the CLI listens and draws a live line on a terminal (`cli/progress_display`),
while the library used from Python shows nothing. Stages nest: a listener is told the
whole path of stages open now, outermost first, each time it changes. Work made of
many like units (a bench's workloads) is also `counting`, which listeners read as a
fraction done.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

Listener = Callable[[tuple[str, ...]], None]

_open: list[str] = []
_listeners: list[Listener] = []
_count: list[int] = []  # [done, total] while `counting`


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


def relabel(description: str) -> None:
    """Give the innermost open stage a new `description` (a count in it moved on:
    "reading: 3 of 8 traces"); nothing when no stage is open."""
    if _open:
        _open[-1] = description
        _tell()


@contextlib.contextmanager
def counting(total: int) -> Iterator[Callable[..., None]]:
    """Count `total` units of work (a bench's workload rounds) while the block runs;
    it gets a function to call after each unit (`advance()`, or `advance(n)` after n of
    them). Listeners read `counted()`."""
    _count[:] = [0, total]
    _tell()  # (0, total): a count drawn before this one is not shown as this one's

    def advance(units: int = 1) -> None:
        _count[0] += units
        _tell()

    try:
        yield advance
    finally:
        _count.clear()


def detach() -> None:
    """In a forked process: forget the listeners and stages its parent had open. The
    parent's listeners draw the parent's display; called from here, two processes
    would draw on one terminal line."""
    _listeners.clear()
    _open.clear()
    _count.clear()


def counted() -> tuple[int, int] | None:
    """(units done, total) while `counting`, else None."""
    return (_count[0], _count[1]) if _count else None


def _tell() -> None:
    now = tuple(_open)
    for listener in _listeners:
        listener(now)
