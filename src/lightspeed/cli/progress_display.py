"""A live progress line on the terminal while a command works: a spinner, the stages
open now (`profile mlp › timing the step`) and the time spent.

Shown only when both stdout and stderr are terminals and no JSON goes to stdout, so
piped output and JSON carry nothing extra. Drawn on stderr and cleared when done.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from lightspeed import progress

if TYPE_CHECKING:
    from rich.progress import Progress

# The display drawn now, if any: `cleared` takes it off before a report prints.
_DRAWN: list[Progress] = []


def wanted(json_to_stdout: bool) -> bool:
    """Whether to draw progress: a person is watching both streams, and stdout is not
    JSON for a program."""
    return not json_to_stdout and sys.stdout.isatty() and sys.stderr.isatty()


@contextlib.contextmanager
def shown(json_to_stdout: bool) -> Iterator[None]:
    """Draw the stages lightspeed marks while the block runs, when `wanted`."""
    if not wanted(json_to_stdout):
        yield
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        Task,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.text import Text

    class WhenCounted(ProgressColumn):
        """`column`, drawn only while the work is counted (a bar has nothing to show
        for one long job)."""

        def __init__(self, column: ProgressColumn) -> None:
            super().__init__()
            self.column = column

        def render(self, task: Task) -> Text:
            return self.column.render(task) if task.total else Text("")  # type: ignore[return-value]

    display = Progress(
        SpinnerColumn(),
        WhenCounted(BarColumn(bar_width=20)),
        WhenCounted(MofNCompleteColumn()),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = display.add_task("starting", total=None)

    def show(stages: tuple[str, ...]) -> None:
        nonlocal task
        count = progress.counted()
        if count is not None:
            display.update(task, completed=count[0], total=count[1])
        elif display.tasks[0].total is not None:
            # A count has ended: a new task without one (rich keeps a task's total).
            description = display.tasks[0].description
            display.remove_task(task)
            task = display.add_task(description, total=None)
        if stages:
            display.update(task, description=" › ".join(stages), refresh=True)

    _DRAWN.append(display)
    try:
        with display, progress.listening(show):
            yield
    finally:
        _DRAWN.remove(display)


def cleared() -> None:
    """Take the progress line off the terminal for good, before a report prints on
    stdout: a report's own Console writes past the display (rich gives a Console the
    file under its stdout proxy), so a line still drawn would stand at the start of the
    report's first line."""
    for display in _DRAWN:
        display.stop()
