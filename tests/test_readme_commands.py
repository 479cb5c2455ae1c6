"""The README's loop, run as a reader runs it: every command of "The loop in six commands",
in its order, at COLUMNS=80, with stdout piped and under a pseudo-terminal, must exit 0
and print no line wider than 80 columns, no cut column heading, no part's share above
its whole's and no warning twice.

The commands are read from README.md, so the test follows the README when it changes;
`QUICK` appends each subcommand's quickest options (a later option wins over the
README's). To keep the file under a minute on a 2-core machine, the commands that take
under a second run both ways and the others once (`FORMS`): profile and tune under the
pseudo-terminal, predict and sweep piped, and the bench runs alternate (the first piped,
the second under the pseudo-terminal). Each run is checked on what its terminal shows
at the end (`screen`): a progress line the command erased is gone, one left standing
counts. The checkers are tested on handmade text first.
"""

from __future__ import annotations

import ast
import dataclasses
import fcntl
import os
import re
import select
import shlex
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

from rich.cells import cell_len

from factories import HAND_BUILT
from lightspeed.analysis.profile_analysis import analyse
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware

ROOT = Path(__file__).parent.parent
SECTION = "## The loop in six commands"
WIDTH = 80
TIMEOUT_S = 300.0

# Options appended to a README command of that subcommand: its quickest form.
QUICK: dict[str, tuple[str, ...]] = {
    "profile": ("--budget", "0.2"),
    "predict": ("--budget", "0.2"),
    "tune": ("--budget", "0.2"),
    "sweep": ("--trials", "4", "--k", "2", "--steps", "2"),
    "bench": ("--budget", "0.2", "--rounds", "1"),
}

# How each subcommand runs: "both" (piped, then under a pseudo-terminal), "pty",
# "pipe", or "alternate" (its runs take turns, piped first).
FORMS: dict[str, str] = {
    "profile": "pty",
    "trace": "both",
    "predict": "pipe",
    "tune": "pty",
    "sweep": "pipe",
    "bench": "alternate",
    "compare": "both",
}

BOX = "│┃╭╮╰╯"
# A terminal's input: an escape sequence (CSI, OSC or two bytes), a line end or a
# carriage return, or text.
TOKEN = re.compile(
    r"\x1b\[(?P<csi>[0-?]*)[ -/]*(?P<final>[@-~])"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]"
    r"|(?P<newline>\n)|(?P<cr>\r)|(?P<text>[^\x1b\r\n]+)"
)


# --- The commands ------------------------------------------------------------------------


def readme_commands(readme: str) -> list[list[str]]:
    """The `lightspeed …` lines of the README's loop section, in order, as argument lists
    (without the leading `lightspeed`); other lines (`pip install`) are skipped."""
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^\s*```[^\n]*\n(.*?)^\s*```", section, flags=re.M | re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("lightspeed ")]


def forms(commands: list[list[str]]) -> Iterator[tuple[list[str], str]]:
    """Each run of the loop: (arguments with the quick options, "pipe" or "pty")."""
    seen: dict[str, int] = {}
    for args in commands:
        name = args[0]
        form = FORMS[name]
        quick = [*args, *QUICK.get(name, ())]
        if form in ("pipe", "both"):
            yield quick, "pipe"
        if form in ("pty", "both"):
            yield quick, "pty"
        if form == "alternate":
            yield quick, ("pipe", "pty")[seen.get(name, 0) % 2]
        seen[name] = seen.get(name, 0) + 1


def lightspeed() -> list[str]:
    script = Path(sys.executable).parent / "lightspeed"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lightspeed"]


def run_piped(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    done = subprocess.run(
        [*lightspeed(), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=TIMEOUT_S,
    )
    return done.returncode, screen(done.stdout.decode("utf-8", "replace"))


def run_in_pty(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run with stdin, stdout and stderr on a pseudo-terminal of 80×24; everything it
    wrote, as the terminal shows it at the end (`screen`)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, WIDTH, 0, 0))
    proc = subprocess.Popen(
        [*lightspeed(), *args],
        cwd=cwd,
        env={**env, "TERM": "xterm-256color"},
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every end of the slave is closed
                break
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
    finally:
        os.close(master)
    code = proc.wait(timeout=10)
    return code, screen(b"".join(chunks).decode("utf-8", "replace"))


def screen(stream: str) -> str:
    """What a terminal shows after `stream`, lines never wrapped (a line too wide stays
    one line): text, line ends, carriage returns, the cursor moving up (CSI A) and lines
    erased (CSI K); other escapes (colours, the cursor shown) change nothing."""
    lines: list[list[str]] = [[]]
    row = col = 0
    for token in TOKEN.finditer(stream):
        if token["text"]:
            line = lines[row]
            line.extend(" " * (col - len(line)))
            line[col : col + len(token["text"])] = token["text"]
            col += len(token["text"])
        elif token["newline"]:
            row, col = row + 1, 0
            lines.extend([] for _ in range(row + 1 - len(lines)))
        elif token["cr"]:
            col = 0
        elif token["final"] == "A":
            row = max(0, row - int(token["csi"] or 1))
        elif token["final"] == "K":
            mode = token["csi"] or "0"
            lines[row] = [] if mode == "2" else lines[row][:col] if mode == "0" else lines[row]
    return "\n".join("".join(line) for line in lines)


# --- The checks ----------------------------------------------------------------------------


def known_headings() -> set[str]:
    """Every column heading a report may print, read from the package's source: the
    literal `header` of each `Column(key, header, …)`, and the short strings of tuples
    (the (key, heading, …) rows some reports build their columns from)."""
    found: set[str] = set()
    for path in (ROOT / "src" / "lightspeed").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Column":
                values = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "header")]
            elif isinstance(node, ast.Tuple):
                values = node.elts
            else:
                continue
            found.update(
                v.value
                for v in values
                if isinstance(v, ast.Constant) and isinstance(v.value, str) and len(v.value) <= 24
            )
    return found - {""}


def screen_lines(text: str) -> list[str]:
    return text.split("\n")


def wide_lines(text: str, width: int = WIDTH) -> list[str]:
    return [line for line in screen_lines(text) if cell_len(line.rstrip()) > width]


def _is_rule(line: str) -> bool:
    """A table's rule under its headings (a panel's border has corners)."""
    core = line.strip("│┃ ")
    return len(core) >= 3 and set(core) == {"─"}


def heading_rows(text: str) -> list[str]:
    """The heading rows of the tables: the lines right above a table's rule, up to the
    blank line before them."""
    lines = screen_lines(text)
    rows: list[str] = []
    for i, line in enumerate(lines):
        if not _is_rule(line):
            continue
        j = i - 1
        while j >= 0 and lines[j].strip(BOX + " ") and not _is_rule(lines[j]):
            if set(lines[j]) & set("╭╮╰╯"):
                break
            rows.append(lines[j].strip(BOX + " "))
            j -= 1
    return rows


def cut_headings(text: str, headings: set[str]) -> list[str]:
    """Heading words that are not whole: cut with an ellipsis, or the strict start of a
    word of a known heading and no word of one itself ("checkpoin" of "checkpoint").
    A heading the package does not spell out (a swept hyper-parameter's name) passes."""
    words = {w for h in headings for w in h.split()}

    def cut(word: str) -> bool:
        return "…" in word or (
            word not in words and any(w.startswith(word) and w != word for w in words)
        )

    return [word for row in heading_rows(text) for word in row.split() if cut(word)]


def _joined(text: str) -> str:
    """The text as one line: box edges dropped, wrapped lines joined."""
    return " ".join(line.strip(BOX + " ") for line in screen_lines(text))


PCT = r"(\d+(?:\.\d+)?)\s?%"
# (whole, part) sentences: the part is a share of the whole's time.
PARTS = (
    re.compile(rf"idles {PCT} of the step, {PCT} of the step waiting"),
    re.compile(rf"busy {PCT} of the step \({PCT} computing"),
)


def shares_above_whole(text: str) -> list[str]:
    """Shares printed above their whole's: a share of the step above 100 %, a part of
    the step above the whole it is part of (the device's idle or busy time), a row of a
    table column of shares above 100 %."""
    flat = _joined(text)
    bad = [m.group(0) for m in re.finditer(rf"{PCT} of the step", flat) if float(m[1]) > 100]
    for pattern in PARTS:
        bad += [m.group(0) for m in pattern.finditer(flat) if float(m[2]) > float(m[1])]
    return bad + _table_shares_above_whole(text)


SHARE_HEADING = re.compile(r"\bshare\b|% of|of step|of the step")


def _table_shares_above_whole(text: str) -> list[str]:
    """Cells above 100 % in a table column whose heading says it holds shares."""
    lines = screen_lines(text)
    bad: list[str] = []
    for i, line in enumerate(lines):
        if not _is_rule(line) or i == 0:
            continue
        heading = lines[i - 1]
        spans = [m.span() for m in re.finditer(r"\S+(?: \S+)*", heading)]
        columns = [s for s in spans if SHARE_HEADING.search(heading[s[0] : s[1]])]
        for row in lines[i + 1 :]:
            if not row.strip(BOX + " ") or _is_rule(row):
                break
            for start, end in columns:
                cell = row[max(0, start - 4) : end + 4]
                bad += [cell.strip() for m in re.finditer(PCT, cell) if float(m[1]) > 100]
    return bad


WARNING_START = re.compile(r"^(?:⚠\s*|warning\b:?\s*|lightspeed:\s*)", re.I)


def warnings_printed(text: str) -> list[str]:
    """Each warning's text (whitespace normalised, its "warning:" prefix dropped), with
    the lines that continue it: lines starting "warning", "⚠" or "lightspeed:" (a logged
    message), and the lines under a "Warnings" heading."""
    found: list[list[str]] = []
    under_heading = False
    for raw in screen_lines(text):
        line = " ".join(raw.strip(BOX + " ").split())
        if not line:
            under_heading = False
            continue
        if line == "Warnings":
            under_heading = True
            continue
        if WARNING_START.match(line):
            found.append([WARNING_START.sub("", line)])
        elif under_heading and found:
            found[-1].append(line)
    return [" ".join(parts) for parts in found]


def doubled_warnings(text: str) -> list[str]:
    """Warnings printed twice. Two are the same when one's first 60 characters start
    the other: wrapped at other widths, or cut to its first line, a warning keeps its
    start."""
    keys = [w[:60] for w in warnings_printed(text) if w]
    return [
        a for i, a in enumerate(keys) for b in keys[i + 1 :] if a.startswith(b) or b.startswith(a)
    ]


# --- The checkers catch the defects they are for ----------------------------------------

TABLE = """\
Candidates

 candidate    pred. step    step   speed-up
 ──────────────────────────────────────────
 checkpoin        85.2 ms   88 ms      0.87×
"""


def test_a_cut_heading_is_caught() -> None:
    headings = {"candidate", "pred. step", "step", "speed-up", "checkpoint"}
    assert cut_headings(TABLE, headings) == []
    assert cut_headings(TABLE.replace("speed-up", "speed-…"), headings) == ["speed-…"]
    cut = TABLE.replace("candidate ", "checkpoin ")
    assert cut_headings(cut, headings) == ["checkpoin"]
    wrapped = TABLE.replace(" candidate", " checkpoi \n nt       ")
    assert cut_headings(wrapped, headings) == ["checkpoi"]


def test_a_part_above_its_whole_is_caught() -> None:
    idle = "│ the device idles 76 % of the step, 78 % of the │\n│ step waiting for the host │"
    assert shares_above_whole(idle) == ["idles 76 % of the step, 78 % of the step waiting"]
    assert shares_above_whole(idle.replace("78 %", "70 %")) == []
    busy = "the device is busy 125% of the step (1% computing)"
    assert shares_above_whole(busy) == ["125% of the step"]
    assert shares_above_whole("busy 97% of the step (98% computing)") == [
        "busy 97% of the step (98% computing"
    ]
    table = " kernel    share\n ───────────────\n gemm      103%\n relu        4%\n"
    assert shares_above_whole(table) == ["103%"]


def test_a_progress_line_left_before_a_report_is_caught() -> None:
    spinner = "\x1b[?25l\x1b[32m⠋\x1b[0m   starting\r\x1b[2K⠦   analysing the traces 0:00:00"
    border = "╭─" + "─" * 76 + "╮\r\n│ devices  8 × V100" + " " * 60 + "│\r\n"
    end = "\r\x1b[2K⠇   analysing the traces 0:00:00\r\n\x1b[?25h\r\x1b[1A\x1b[2K"
    left = screen(spinner + border + end)
    assert left.split("\n")[0].startswith("⠦   analysing the traces 0:00:00╭─")
    assert len(wide_lines(left)) == 1
    cleared = screen(spinner + "\r\n\x1b[?25h\r\x1b[1A\x1b[2K" + border)
    assert cleared.split("\n")[0] == border.split("\r")[0]
    assert wide_lines(cleared) == []


def test_a_step_whose_ops_sum_past_it_is_busy_no_more_than_all_of_it() -> None:
    """Per-op medians over several profiled steps may sum past the median step (and a
    prediction carries that over): the findings still give no share above the step."""
    busy = dataclasses.replace(
        HAND_BUILT,
        workload=dataclasses.replace(HAND_BUILT.workload, device=Device.CUDA),
        profiled_step_s=0.050,  # the ops' medians sum to 60 ms
        unattributed_s=0.0,
    )
    messages = " ".join(f.message for f in analyse(busy).findings)
    assert "busy 100% of the step" in messages
    assert shares_above_whole(messages) == []


def test_a_warning_printed_twice_is_caught() -> None:
    once = "warning: 1 round: fewer than 3 measure no reliable noise between rounds, so a"
    report = f"Warnings\n{once}\ncomparison with this run judges by its threshold alone\n"
    assert doubled_warnings(report) == []
    logged = "lightspeed: 1 round: fewer than 3 measure no reliable noise between rounds"
    assert len(doubled_warnings(report + "\n" + logged)) == 1
    assert len(doubled_warnings(report + report)) == 1
    assert doubled_warnings(report + "\n⚠ ncf-tiny: the step time was still drifting") == []


def test_the_readme_loop_is_read_in_order() -> None:
    commands = readme_commands((ROOT / "README.md").read_text("utf-8"))
    assert [c[0] for c in commands] == [
        "profile", "trace", "predict", "tune", "sweep", "bench", "bench", "compare"
    ]  # fmt: skip
    assert set(FORMS) == {c[0] for c in commands}, "give each README command its FORMS"


# --- The loop ---------------------------------------------------------------------------


def problems(output: str, headings: set[str]) -> list[str]:
    return [
        *(f"wider than {WIDTH}: {line!r}" for line in wide_lines(output)),
        *(f"cut heading: {word!r}" for word in cut_headings(output, headings)),
        *(f"share above its whole: {s!r}" for s in shares_above_whole(output)),
        *(f"warning printed twice: {w!r}" for w in doubled_warnings(output)),
    ]


def test_the_readme_loop_prints_whole_reports_at_80_columns(
    tmp_path: Path, calibrated_cpu: Hardware
) -> None:
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # the README's paths, from the root
    env = {**os.environ, "COLUMNS": str(WIDTH), "LINES": "24"}
    env.pop("NO_COLOR", None)
    headings = known_headings()
    failures: list[str] = []
    for args, form in forms(readme_commands((ROOT / "README.md").read_text("utf-8"))):
        run = run_in_pty if form == "pty" else run_piped
        code, output = run(args, tmp_path, env)
        found = problems(output, headings) + ([f"exit status {code}"] if code else [])
        failures += [f"lightspeed {shlex.join(args)} ({form}): {p}" for p in found]
        if code:
            failures.append(output[-2000:])
    assert failures == [], "\n".join(failures)
