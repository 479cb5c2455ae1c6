"""Options and helpers every command shares."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console, RenderableType

if TYPE_CHECKING:  # the renderers load with the first report, not with `--help`
    from lightspeed.document import Document
    from lightspeed.integrations.sinks import Sink

# -h as well as --help, on every command.
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}

DEVICE_HELP = "Where to run: cpu or cuda."
DTYPE_HELP = (
    "Precision of the step: fp32; bf16 or fp16, mixed precision (fp32 parameters and batch,"
    " the forward under autocast); bf16-pure or fp16-pure (the model and batch cast)."
)
HARDWARE_HELP = "Hardware to model on: a catalog id (see `lightspeed hw list`) or 'local'."

TargetArgument = typer.Argument(
    ...,
    metavar="TARGET",
    help="A suite name (see `lightspeed suite`), file.py:NAME or hf:MODEL_TYPE[?FIELD=N&…].",
    show_default=False,
)
DeviceOption = typer.Option("cpu", "--device", metavar="DEVICE", help=DEVICE_HELP)
DtypeOption = typer.Option("fp32", "--dtype", metavar="DTYPE", help=DTYPE_HELP)
BatchSizeOption = typer.Option(None, "--batch-size", metavar="N", help="Samples per step.")
HardwareOption = typer.Option(None, "--hardware", metavar="ID", help=HARDWARE_HELP)
BudgetOption = typer.Option(
    2.0, "--budget", metavar="SECONDS", help="Seconds to spend timing the step."
)
JsonOption = typer.Option(
    None,
    "--json",
    metavar="[PATH]",
    help="Also write the result as JSON to PATH; with no PATH (or '-'), print only the"
    " JSON, on stdout.",
)
HtmlOption = typer.Option(
    None,
    "--html",
    metavar="PATH",
    help="Also write the interactive HTML report to PATH: one self-contained file that"
    " opens offline in a current browser (Chrome 80, Firefox 113, Safari 16.4 or later).",
)
PngOption = typer.Option(
    None,
    "--png",
    metavar="PATH",
    help="Also write the roofline chart to PATH as a PNG image (needs matplotlib).",
)
LogOption = typer.Option(
    None,
    "--log",
    metavar="SINK[,SINK]",
    help="Also log the result's figures (step time, fraction of speed of light, MFU, peak"
    " memory, bound) and its JSON and HTML as artifacts to wandb (offline unless WANDB_MODE"
    " says otherwise), mlflow (a file store unless MLFLOW_TRACKING_URI names one) or"
    " tensorboard, under --log-dir.",
)
LogDirOption = typer.Option(
    Path("."),
    "--log-dir",
    metavar="DIR",
    help="Where --log writes: DIR/wandb, DIR/mlruns, DIR/tensorboard.",
)
WideOption = typer.Option(
    False, "--wide", help="Show names whole instead of cut to the terminal's width."
)
ThreadsOption = typer.Option(
    None,
    "--threads",
    metavar="N",
    help="Threads torch runs each op on (default: torch's choice, usually one per"
    " physical core); CPU results depend on it several-fold.",
)


def autocast_precision(dtype: str, option: str = "--dtype") -> str | None:
    """The precision a prediction's `option` (`--dtype`) runs an fp32 step's forward
    under autocast to (None: fp32, no change); a pure step (the model cast) is measured,
    not predicted."""
    from lightspeed.dtypes import StepDtype
    from lightspeed.errors import ConfigError

    step = StepDtype.parse(dtype)
    if step is StepDtype.FP32:
        return None
    if not step.mixed:
        raise ConfigError(
            f"{option} {step.value}: a prediction changes the precision by autocast only"
            f" ({option} {step.precision.value}); measure the pure model with --dtype"
            f" {step.value} instead."
        )
    return step.precision.value


def use_threads(threads: int | None) -> None:
    """Make torch run ops on `threads` threads (None: leave torch's choice)."""
    if threads is None:
        return
    from lightspeed.errors import ConfigError

    if threads < 1:
        raise ConfigError(f"--threads {threads} must be at least 1.")
    import torch

    torch.set_num_threads(threads)


class _LoggedWarnings(logging.Handler):
    """The warnings lightspeed logged while a command ran (a busy machine while
    calibrating, a rejected calibration, a formula that failed), one line each, and
    those a report drawn in the terminal has shown."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []
        self.shown: set[str] = set()
        self.holding = False

    @staticmethod
    def carries(record: logging.LogRecord) -> bool:
        """Whether `record` is one of the command's warnings: lightspeed's, at WARNING or
        above, and no progress note (what it was doing, not a reason to doubt the result)."""
        name = record.name
        return (
            record.levelno >= logging.WARNING
            and (name == "lightspeed" or name.startswith("lightspeed."))
            and not name.startswith("lightspeed.progress")
        )

    def emit(self, record: logging.LogRecord) -> None:
        if self.carries(record):
            self.messages.append(" ".join(record.getMessage().split()))


_LOGGED = _LoggedWarnings()


def printed_live(record: logging.LogRecord) -> bool:
    """Whether a log record prints on stderr as it is logged: not while a command holds
    its warnings for its report, so a user reads each once (`collecting_warnings`)."""
    return not (_LOGGED.holding and _LOGGED.carries(record))


@contextlib.contextmanager
def collecting_warnings(*, hold: bool = True) -> Iterator[None]:
    """While the block runs, keep what lightspeed logs at WARNING or above, so the
    command's report carries it. With `hold`, they are not printed on stderr as they
    happen (see `printed_live`) but at the end, those that no terminal report showed
    (a command that failed first, or printed only JSON); without it, printed as they
    happen too (--debug, where the log is what is wanted)."""
    logger = logging.getLogger("lightspeed")
    _LOGGED.messages.clear()
    _LOGGED.shown.clear()
    _LOGGED.holding = hold
    logger.addHandler(_LOGGED)
    try:
        yield
    finally:
        logger.removeHandler(_LOGGED)
        if _LOGGED.holding:
            _LOGGED.holding = False
            for message in dict.fromkeys(_LOGGED.messages):
                if message not in _LOGGED.shown:
                    print(f"lightspeed: {message}", file=sys.stderr)


def report(
    doc: Document,
    json_path: Path | None,
    *,
    wide: bool = False,
    html_path: Path | None = None,
    png_path: Path | None = None,
    log: str | None = None,
    log_dir: Path = Path("."),
) -> None:
    """Write `doc` as JSON, HTML and PNG where --json, --html and --png say, and draw it
    in the terminal (names whole when `wide`) unless the JSON went to stdout; either way
    with the warnings logged while it was made. With `log` (--log), its figures and
    files go to those sinks too, under `log_dir` (`integrations.sinks`)."""
    from lightspeed.report import render_terminal

    doc = doc.warned(*_LOGGED.messages)
    # The terminal first: a picture that cannot be drawn fails after the result is seen
    # (and after the JSON and HTML are written).
    if json_path is None or str(json_path) != "-":
        show(render_terminal.render(doc, wide=wide), unbounded=wide)
        _LOGGED.shown.update(_LOGGED.messages)
    if log is None:
        write_files(doc, json_path, html_path, png_path)
        return
    from lightspeed.integrations.sinks import open_sinks

    sinks = open_sinks(log, log_dir)  # a wrong name fails before anything is written
    try:
        _write_and_log(doc, json_path, html_path, png_path, sinks)
    finally:
        for sink in sinks:
            sink.close()


def _write_and_log(
    doc: Document,
    json_path: Path | None,
    html_path: Path | None,
    png_path: Path | None,
    sinks: list[Sink],
) -> None:
    """`write_files`, then the result's figures and its JSON and HTML logged to `sinks`
    (made in a temporary folder where no path asked for them)."""
    from lightspeed.integrations.sinks import log_result
    from lightspeed.report import read_json, render_json
    from lightspeed.report.html import write_html

    result = write_files(doc, json_path, html_path, png_path)
    with tempfile.TemporaryDirectory(prefix="lightspeed-log-") as folder:
        saved = json_path
        if saved is None or str(saved) == "-":
            saved = Path(folder) / f"{doc.kind}.json"
            render_json.write(saved, render_json.render(doc))
        if result is None:
            result = read_json.load(saved)
        page = html_path
        if page is None:
            page = Path(folder) / f"{doc.kind}.html"
            write_html(page, result)
        log_result(sinks, result, (saved, page))
    for sink in sinks:
        print(f"logged to {sink.name}", file=sys.stderr)


def console() -> Console:
    """The Console reports print on (stdout)."""
    return Console(highlight=False)


def show(renderable: RenderableType, *, unbounded: bool = False) -> None:
    """Print `renderable` on stdout; `unbounded` (--wide) and stdout no terminal, as wide
    as its widest line: a pipe or a file wraps no line, so no name need fold in its cell."""
    from lightspeed.cli import progress_display

    progress_display.cleared()
    out = console()
    if unbounded and not sys.stdout.isatty():
        from lightspeed.report.render_terminal import natural_width

        out.width = max(out.width, natural_width(renderable, out))
    out.print(renderable)


def emit_json(
    doc: Document,
    path: Path | None,
    html_path: Path | None = None,
    png_path: Path | None = None,
) -> None:
    """Write `doc`, with the warnings logged while it was made, as JSON to `path` (or
    to stdout when `path` is '-'), and as HTML and PNG where those paths say."""
    write_files(doc.warned(*_LOGGED.messages), path, html_path, png_path)


def emit_partial(
    doc: Document, json_path: Path | None, html_path: Path | None, png_path: Path | None
) -> None:
    """Write what was computed before a failure, as `emit_json` does; a picture that
    cannot be drawn from it (a roofline with no op) is said on stderr, so the failure
    that stopped the command stays the one reported."""
    from lightspeed.errors import LightspeedError

    try:
        emit_json(doc, json_path, html_path, png_path)
    except LightspeedError as exc:
        print(f"lightspeed: not written: {exc}", file=sys.stderr)


def write_files(
    doc: Document, json_path: Path | None, html_path: Path | None, png_path: Path | None
) -> dict[str, Any] | None:
    """`doc` as JSON (stdout for '-'), as an HTML report and as a roofline PNG, each
    where its path says (None: not written); all from one JSON object, which it gives
    back where it drew pictures from it (None: it drew none)."""
    if json_path is None and html_path is None and png_path is None:
        return None
    from lightspeed.report import read_json, render_json

    obj = render_json.render(doc)
    data: bytes | None = None
    if json_path is not None and str(json_path) != "-":
        # Written piece by piece: a long trace's steps are never all held as text.
        render_json.write(json_path, obj)
        print(f"wrote {json_path}", file=sys.stderr)
    else:
        data = render_json.dumps_utf8(obj)
        if json_path is not None:
            sys.stdout.write(data.decode() + "\n")
    if html_path is None and png_path is None:
        return None
    # Drawn from the JSON as its file holds it: the report of a saved result is this.
    result: dict[str, Any] = (
        json.loads(data) if data is not None else read_json.load(Path(str(json_path)))
    )
    write_pictures(result, html_path, png_path)
    return result


def write_pictures(result: dict[str, Any], html_path: Path | None, png_path: Path | None) -> None:
    """The HTML report and the roofline PNG of `result` (a result's JSON object, as its
    file holds it), where the paths say."""
    if html_path is not None:
        from lightspeed.report.html import write_html

        write_html(html_path, result)
        print(f"wrote {html_path}", file=sys.stderr)
    if png_path is not None:
        from lightspeed.report.png import write_roofline_png

        write_roofline_png(png_path, result)
        print(f"wrote {png_path}", file=sys.stderr)
