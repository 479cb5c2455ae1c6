"""Kineto's log lines kept off stderr while lightspeed starts and stops a profiler.

Kineto, torch.profiler's native half, writes `USDT:… profiler_start` and
`… profiler_stop` on file descriptor 2 each time a profiler starts and stops, from C++,
where neither `sys.stderr` nor `logging` reach. The CLI silences it with
`KINETO_LOG_LEVEL`, but Kineto reads that once, when the process's first profiler
starts: a library cannot rely on it. So while `profiler_chatter_dropped` runs, fd 2 is
a temporary file; on exit its lines go back to the real stderr, Kineto's left out.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# A line of Kineto's log: `SEVERITY:date time pid:tid file.cpp:line] message`. The
# CLI's KINETO_LOG_LEVEL=6 silences every severity; so does this.
KINETO_LINE = re.compile(
    rb"(?:VERBOSE|INFO|WARNING|ERROR|STAGE|USDT):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    rb" \d+:\d+ [\w.]+:\d+\] "
)


@contextlib.contextmanager
def profiler_chatter_dropped() -> Iterator[None]:
    """While the block runs, hold what anything writes on file descriptor 2; on exit,
    even on an exception, restore fd 2 and write back, in order, every held line that is
    not Kineto's. Where fd 2 is not open, the block runs as it is."""
    _flush_stderr()
    try:
        saved = os.dup(2)
    except OSError:  # no fd 2: nothing would print anyway
        yield
        return
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                yield
            finally:
                # Python's own writes meant for this block land in `held` too.
                _flush_stderr()
                os.dup2(saved, 2)
                held.seek(0)
                kept = b"".join(line for line in held if not KINETO_LINE.match(line))
                if kept:
                    os.write(2, kept)
    finally:
        os.close(saved)


def _flush_stderr() -> None:
    if sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):  # closed or detached
            sys.stderr.flush()
