"""The `lightspeed` command: a thin shell over the library, one module per command.

Errors lightspeed raises on purpose (`LightspeedError`) and usage errors (an unknown
option or command, a bad value) print as one line on stderr and exit with status 2;
`--debug`, anywhere on the line, shows the traceback. `--version`, anywhere, prints the
versions and exits.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from importlib import metadata

import typer

from lightspeed.cli import (
    _click,
    bench_cmd,
    explain_cmd,
    history_cmd,
    hw,
    loadgen_cmd,
    predict_cmd,
    profile_cmd,
    progress_display,
    report_cmd,
    roofline,
    serve_cmd,
    serve_plan_cmd,
    serve_profile_cmd,
    suite,
    sweep_cmd,
    time_cmd,
    trace_cmd,
    tune_cmd,
)
from lightspeed.cli.common import CONTEXT_SETTINGS, collecting_warnings, printed_live
from lightspeed.errors import LightspeedError

app = typer.Typer(
    name="lightspeed",
    help="How far a PyTorch training step runs from the speed of light of its hardware.",
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=CONTEXT_SETTINGS,
)
app.add_typer(hw.app, name="hw")
app.command("profile")(profile_cmd.profile_command)
app.command("time")(time_cmd.time_command)
app.command("serve-profile")(serve_profile_cmd.serve_profile_command)
app.command("serve-plan")(serve_plan_cmd.serve_plan_command)
app.command("serve")(serve_cmd.serve_command)
app.command("loadgen")(loadgen_cmd.loadgen_command)
app.command("trace")(trace_cmd.trace_command)
app.command("roofline")(roofline.roofline_command)
app.command("suite")(suite.suite_command)
app.command("explain")(explain_cmd.explain_command)
app.command("bench")(bench_cmd.bench_command)
app.command("history")(history_cmd.history_command)
app.command("compare")(history_cmd.compare_command)
app.command("report")(report_cmd.report_command)
app.command("predict")(predict_cmd.predict_command)
app.command("tune")(tune_cmd.tune_command)
app.command("sweep")(sweep_cmd.sweep_command)

EXIT_USER_ERROR = 2


@app.callback(invoke_without_command=True)
def root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", help="Print the versions of lightspeed and torch, and exit."
    ),
    debug: bool = typer.Option(
        False,
        "--debug",
        help="On an error, show the traceback and debug logs (anywhere on the line).",
    ),
) -> None:
    """How far a PyTorch training step runs from the speed of light of its hardware."""
    # --version and --debug are taken off the line before it gets here (main).
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())


def version_text() -> str:
    """`lightspeed X (torch Y, Python Z)`, read from the installed packages' metadata
    (importing torch would take seconds)."""

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    python = ".".join(map(str, sys.version_info[:3]))
    return f"lightspeed {installed('lightspeed')} (torch {installed('torch')}, Python {python})"


# Retries `bench --retry-noisy` makes when no count follows it.
RETRIES_WHEN_BARE = 2


def json_to_stdout(args: list[str]) -> list[str]:
    """Options whose value may be left out, given it for the parser, which wants one:
    `--json` with no path after it (last on the line, or before another option) means
    stdout, `--json=-`; `--retry-noisy` with no count after it means
    `RETRIES_WHEN_BARE` retries."""
    out = []
    for i, arg in enumerate(args):
        following = args[i + 1] if i + 1 < len(args) else None
        if arg == "--json" and (
            following is None or (following.startswith("-") and following != "-")
        ):
            arg = "--json=-"
        elif arg == "--retry-noisy" and (following is None or not following.lstrip("-").isdigit()):
            arg = f"--retry-noisy={RETRIES_WHEN_BARE}"
        out.append(arg)
    return out


def usage_message(exc: Exception) -> str:
    """One line for a usage error: what is wrong, a close match when there is one, and
    where the help is."""
    ctx = _click.context_of(exc)
    message = _click.message_of(exc).rstrip(".")
    guess = _click.unknown_option(exc)
    if guess is not None:
        name, possibilities = guess
        close = difflib.get_close_matches(name, possibilities, n=1)
        message = f"no such option {name}" + (f"; did you mean {close[0]}?" if close else "")
    command = _click.unknown_command(exc)
    if command is not None and ctx is not None:
        close = difflib.get_close_matches(command, _click.subcommands(ctx), n=1)
        message = f"no such command {command!r}" + (
            f"; did you mean {close[0]!r}?" if close else ""
        )
    path = ctx.command_path if ctx is not None else "lightspeed"
    return f"{message} (see '{path} --help')"


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if "--version" in args:
        print(version_text())
        return
    stderr = logging.StreamHandler(_Stderr())
    # A warning is the report's to show: printed as it is logged only under --debug.
    stderr.addFilter(printed_live)
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="lightspeed: %(message)s",
        handlers=[stderr],
    )
    if not debug:
        # torch logs at DEBUG through the root logger; keep our own messages only.
        logging.getLogger("torch").setLevel(logging.WARNING)
        # Kineto writes a line on stderr each time a profiler starts and stops; only a
        # level above its highest (5) silences it. Read when the first profiler starts.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    args = json_to_stdout(args)
    on_stdout = any(a == "--json=-" for a in args) or any(
        a == "--json" and b == "-" for a, b in itertools.pairwise(args)
    )
    try:
        with collecting_warnings(hold=not debug), progress_display.shown(json_to_stdout=on_stdout):
            code = app(args=args, prog_name="lightspeed", standalone_mode=False)
    except LightspeedError as exc:
        fail(" ".join(str(exc).split()), debug)
    except _click.USAGE_ERRORS as exc:
        fail(usage_message(exc), debug)
    except _click.ABORTS:
        print("lightspeed: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    if isinstance(code, int) and code != 0:
        raise SystemExit(code)


class _Stderr:
    """Whatever `sys.stderr` is when written to: a progress display on the terminal
    puts its own there, so log lines print above the live line instead of through it."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def fail(message: str, debug: bool) -> None:
    """Print `message` as lightspeed's one-line error (with the traceback under
    --debug) and exit with status 2."""
    if debug:
        traceback.print_exc()
    print(f"lightspeed: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USER_ERROR) from None
