"""How long the HTML report takes to write and to open, on real and synthetic traces.

    PYTHONPATH=src .venv/bin/python benchmarks/html_report.py --synthetic-mb 100 \\
        ../shared/traces/hta-v100-train-memprof-rank1of2.json.gz

For each trace, in interleaved rounds (each command a process of its own, as a user
runs it):
- `lightspeed trace TRACE --json J --html H`: reading, analysing and writing both;
- `lightspeed report J --html H2`: the report drawn again from the saved result;
- the page opened in headless Chromium (tests/report/browser.py): seconds from
  navigation until every chart is drawn, and the page's console errors.
Then the median of each, the files' sizes, and the same for a tiny profile's report.
`--synthetic-mb N` adds a trace of about N MB written by benchmarks/synthetic_trace.py.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIGHTSPEED = [sys.executable, "-m", "lightspeed"]
sys.path.insert(0, str(ROOT / "tests" / "report"))


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def opened_s(chromium: object, path: Path) -> tuple[float, list[str]]:
    from browser import open_report

    with open_report(chromium, path, timeout_s=60) as page:  # type: ignore[arg-type]
        assert page.load_s is not None
        return page.load_s, page.console_errors + page.outside_requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--synthetic-mb", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lightspeed-html-"))
    traces: list[Path] = list(args.traces)
    if args.synthetic_mb:
        synthetic = work / f"synthetic-{args.synthetic_mb:g}mb.json"
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "synthetic_trace.py"),
                "--out",
                str(synthetic),
                "--mb",
                str(args.synthetic_mb),
            ],
            check=True,
        )
        traces.append(synthetic)
    profile_json = work / "mlp-tiny.json"
    subprocess.run(
        [
            *LIGHTSPEED,
            "profile",
            "mlp-tiny",
            "--hardware",
            "a100-80gb-sxm",
            "--quick",
            "--json",
            str(profile_json),
        ],
        check=True,
        capture_output=True,
    )

    from browser import CHROMIUM_FLAGS, find_chromium
    from playwright.sync_api import sync_playwright

    results: dict[str, dict[str, list[float]]] = {}
    errors: dict[str, list[str]] = {}
    with sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=find_chromium(), headless=True, args=list(CHROMIUM_FLAGS)
        )
        for _ in range(args.rounds):
            for trace in traces:
                figures = results.setdefault(trace.name, {"trace": [], "report": [], "open": []})
                json_path, html_path = work / f"{trace.name}.json", work / f"{trace.name}.html"
                figures["trace"].append(
                    timed(
                        [
                            *LIGHTSPEED,
                            "trace",
                            str(trace),
                            "--json",
                            str(json_path),
                            "--html",
                            str(html_path),
                        ]
                    )
                )
                figures["report"].append(
                    timed(
                        [
                            *LIGHTSPEED,
                            "report",
                            str(json_path),
                            "--html",
                            str(work / f"{trace.name}-again.html"),
                        ]
                    )
                )
                load_s, seen = opened_s(chromium, html_path)
                figures["open"].append(load_s)
                errors[trace.name] = seen
            figures = results.setdefault(
                "mlp-tiny profile", {"trace": [], "report": [], "open": []}
            )
            tiny_html = work / "mlp-tiny.html"
            figures["report"].append(
                timed([*LIGHTSPEED, "report", str(profile_json), "--html", str(tiny_html)])
            )
            load_s, seen = opened_s(chromium, tiny_html)
            figures["open"].append(load_s)
            errors["mlp-tiny profile"] = seen
        chromium.close()

    print(
        "| result | input | JSON | HTML | trace → JSON + HTML | report from JSON"
        " | opens in Chromium | errors |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for trace in [*traces, None]:
        name = "mlp-tiny profile" if trace is None else trace.name
        figures = results[name]
        size_in = "—" if trace is None else f"{trace.stat().st_size / 1e6:.1f} MB"
        stem = "mlp-tiny" if trace is None else trace.name
        json_mb = (work / f"{stem}.json").stat().st_size / 1e6
        html_mb = (work / f"{stem}.html").stat().st_size / 1e6
        cells = [
            f"{statistics.median(figures[k]):.2f} s" if figures[k] else "—"
            for k in ("trace", "report", "open")
        ]
        print(
            f"| {name} | {size_in} | {json_mb:.2f} MB | {html_mb:.2f} MB | {' | '.join(cells)}"
            f" | {len(errors[name])} |"
        )
    print(f"\n{args.rounds} rounds, medians; files in {work}")


if __name__ == "__main__":
    main()
