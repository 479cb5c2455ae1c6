"""Server settings compared under the same load, interleaved in rounds: each variant is
`lightspeed serve` with its own options, started afresh, driven by `lightspeed loadgen`
at one rate; the answered p99 and goodput of each round, then the range per variant.

    PYTHONPATH=src .venv/bin/python benchmarks/serving_variants.py --rate 730 --slo-ms 100 \
        --rounds 3 "10ms=--margin 10ms" "20ms=--margin 20ms"

Interleaving puts the host's drift (more than a fifth between minutes) on every variant
alike. The request body is the server's own `/sample`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_server import ROOT, lightspeed_server, loadgen, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="+", metavar="NAME=OPTIONS")
    parser.add_argument("--model", default=f"{ROOT / 'benchmarks' / 'serving_models.py'}:wide")
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--slo-ms", type=float, default=100.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    variants = [v.split("=", 1) if "=" in v else (v, "") for v in args.variants]
    out = Path(tempfile.mkdtemp(prefix="serving-variants-"))
    body = out / "request.json"
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in variants}
    for rnd in range(args.rounds):
        for name, options in variants:
            with lightspeed_server(args.model, args.slo_ms, None, *shlex.split(options)) as url:
                if not body.exists():
                    with urllib.request.urlopen(f"{url}/sample") as r:
                        body.write_bytes(r.read())
                run = loadgen(
                    url, args.slo_ms, args.rate, args.duration, out / f"{name}-{rnd}.json", body
                )["runs"][0]
            results[name].append((run["p99_s"] * 1e3, run["goodput_per_s"]))
            print(f"round {rnd} {name}: {summary(run)}", flush=True)
    for name, runs in results.items():
        p99 = sorted(p for p, _ in runs)
        goodput = sorted(g for _, g in runs)
        print(
            f"{name}: answered p99 {p99[0]:.1f}–{p99[-1]:.1f} ms, goodput"
            f" {goodput[0]:.0f}–{goodput[-1]:.0f} req/s"
        )


if __name__ == "__main__":
    main()
