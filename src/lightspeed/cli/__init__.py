"""The `lightspeed` command: a thin shell over the library, one module per command.

Errors lightspeed raises on purpose (`LightspeedError`) print as one line on stderr
and exit with status 2; `--debug`, anywhere on the line, shows the traceback.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence

import typer

from lightspeed.cli import hw, profile_cmd, roofline, suite, time_cmd, trace_cmd
from lightspeed.errors import LightspeedError

app = typer.Typer(
    name="lightspeed",
    help="How far a PyTorch training step runs from the speed of light of its hardware.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(hw.app, name="hw")
app.command("profile")(profile_cmd.profile_command)
app.command("time")(time_cmd.time_command)
app.command("trace")(trace_cmd.trace_command)
app.command("roofline")(roofline.roofline_command)
app.command("suite")(suite.suite_command)

EXIT_USER_ERROR = 2


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="lightspeed: %(message)s",
        stream=sys.stderr,
    )
    if not debug:
        # torch logs at DEBUG through the root logger; keep our own messages only.
        logging.getLogger("torch").setLevel(logging.WARNING)
        # Kineto writes a line on stderr each time a profiler starts and stops; only a
        # level above its highest (5) silences it. Read when the first profiler starts.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    try:
        app(args=args, prog_name="lightspeed")
    except LightspeedError as exc:
        if debug:
            traceback.print_exc()
        message = " ".join(str(exc).split())
        print(f"lightspeed: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR) from None
