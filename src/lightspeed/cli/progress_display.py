"""A live progress line on the terminal while a command works: a spinner, the stages
open now (`profile mlp › timing the step`) and the time spent.

Shown only when both stdout and stderr are terminals and no JSON goes to stdout, so
piped output and JSON carry nothing extra. Drawn on stderr and cleared when done.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from lightspeed import progress


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
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    display = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = display.add_task("starting", total=None)

    def show(stages: tuple[str, ...]) -> None:
        if stages:
            display.update(task, description=" › ".join(stages), refresh=True)

    with display, progress.listening(show):
        yield
