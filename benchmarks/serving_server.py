"""`lightspeed serve` measured for real, over loopback HTTP, by `lightspeed loadgen`:

1. The plan each server makes from ℓ(b) timed at its start (one thread): b*, the
   largest batch with 2·ℓ(b) ≤ SLO − margin, and the rate one replica takes at it
   (`predict.serving.replica_rate`).
2. The highest rate with ≥ 99 % of requests within the SLO (`loadgen --find-max-rate`):
   the SLO-aware server, and batch-1 serving (`--max-batch 1`).
3. Goodput at a low and a high offered rate: the SLO-aware server against LitServe's
   fixed batch + timeout, every setting of a sweep (and the one the plan sets), in
   rounds, each server started afresh.
4. Twice the highest rate for `--overload` seconds: every request answered or refused
   (none lost), the accepted requests' p99, the server's memory throughout.
5. SIGTERM under load: every request the server accepted is answered.

    PYTHONPATH=src .venv/bin/python benchmarks/serving_server.py --out /tmp/serving

LitServe runs from benchmarks/litserve/.venv (benchmarks/litserve/setup.sh); without it
step 3 is skipped. Every server runs its model on one thread; server and generator
share the machine's cores, and each run reports the generator's CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LIGHTSPEED = [sys.executable, "-m", "lightspeed"]
LITSERVE = ROOT / "benchmarks" / "litserve" / ".venv" / "bin" / "python"
LITSERVE_APP = ROOT / "benchmarks" / "litserve" / "app.py"
JSON = "application/json"


def lightspeed(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*LIGHTSPEED, *args], capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise SystemExit(f"lightspeed {' '.join(args)} failed: {done.stderr.strip()}")
    return done


@contextlib.contextmanager
def lightspeed_server(
    model: str, slo_ms: float, profile: Path | None, *extra: str
) -> Iterator[str]:
    timing = ["--profile", str(profile)] if profile else ["--budget", "0.5"]
    process = subprocess.Popen(
        [*LIGHTSPEED, "serve", model, "--slo", f"{slo_ms}ms", "--port", "0", *timing, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if " at http://" not in line:
        raise SystemExit(f"the server did not start: {process.stderr.read()}")  # type: ignore[union-attr]
    try:
        yield line.split(" at ")[1].split("/predict")[0]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


@contextlib.contextmanager
def litserve_server(model: str, max_batch: int, timeout_s: float, port: int) -> Iterator[str]:
    process = subprocess.Popen(
        [
            str(LITSERVE),
            str(LITSERVE_APP),
            model,
            "--max-batch-size",
            str(max_batch),
            "--batch-timeout",
            str(timeout_s),
            "--port",
            str(port),
            "--threads",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{url}/health", timeout=2) as r,
            ):
                if r.status == 200:
                    break
            if process.poll() is not None:
                raise SystemExit(f"LitServe did not start: {process.stderr.read()}")  # type: ignore[union-attr]
            time.sleep(0.2)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def loadgen(
    url: str, slo_ms: float, rate: float, duration: float, out: Path, body: Path, *extra: str
) -> dict[str, Any]:
    lightspeed(
        "loadgen",
        url,
        "--rate",
        f"{rate:.2f}",
        "--duration",
        str(duration),
        "--slo",
        f"{slo_ms}ms",
        "--body",
        str(body),
        "--content-type",
        JSON,
        "--json",
        str(out),
        *extra,
        timeout=3600,
    )
    return json.loads(out.read_text())["load"]


def rss_sampler(url: str, samples: list[float], stop: threading.Event) -> None:
    while not stop.is_set():
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/metrics") as r:
            # the front end's and the model's worker process's
            samples.append(
                sum(
                    float(line.split()[1])
                    for line in r.read().decode().splitlines()
                    if line.startswith(
                        ("process_resident_memory_bytes", "lightspeed_model_process_resident")
                    )
                )
            )
        stop.wait(1.0)


def summary(run: dict[str, Any]) -> str:
    p99 = run["p99_s"]
    return (
        f"offered {run['offered_rate_per_s']:.0f}/s, goodput {run['goodput_per_s']:.0f}/s,"
        f" within {100 * run['fraction_within']:.2f} %, p99"
        f" {'-' if p99 is None else f'{p99 * 1e3:.1f} ms'}, dropped {run['dropped']},"
        f" errors {run['errors']}, generator CPU {100 * run['generator_cpu']:.0f} %"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=f"{ROOT / 'benchmarks' / 'serving_models.py'}:wide")
    parser.add_argument("--slo-ms", type=float, default=100.0)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds a run")
    parser.add_argument("--overload", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip", default="", help="steps to skip: comma-separated of 2,3,4,5")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    skip = set(args.skip.split(",")) - {""}
    slo = args.slo_ms
    results: dict[str, Any] = {"machine": platform.processor() or platform.machine()}

    # Every server times ℓ(b) at start and plans from it (the host drifts by more than
    # a fifth between minutes: a profile saved earlier would plan for another machine).
    from lightspeed.serving.serve import MARGIN

    body = out / "request.json"
    with lightspeed_server(args.model, slo, None) as url:
        with urllib.request.urlopen(f"{url}/sample") as r:
            body.write_bytes(r.read())
        with urllib.request.urlopen(url) as r:
            info = json.loads(r.read())
    best = info["max_batch"]
    top = info["latency_ms"][str(best)] / 1e3
    timeout_s = max(0.0, slo / 1e3 * (1 - MARGIN) - 2 * top)
    results["plan"] = {**info, "batch_timeout_s": timeout_s}
    print(
        f"plan: b* = {best} (ℓ p99 {top * 1e3:.1f} ms), one replica"
        f" {info['planned_rate_per_s']:.0f} req/s; fixed knobs: batch {best}, timeout"
        f" {timeout_s * 1e3:.1f} ms; ℓ(1) p99 {info['latency_ms']['1']:.1f} ms",
        flush=True,
    )

    if "2" not in skip:
        # Each server times ℓ(b) at start and plans from it, so the plan is made on the
        # host as it is now (it drifts by more than a fifth between minutes).
        for name, extra in (("slo-aware", ()), ("batch-1", ("--max-batch", "1"))):
            with lightspeed_server(args.model, slo, None, *extra) as url:
                with urllib.request.urlopen(url) as r:
                    info = json.loads(r.read())
                planned = info["planned_rate_per_s"]
                guess = planned or 0.5e3 / info["latency_ms"]["1"]
                load = loadgen(
                    url,
                    slo,
                    guess,
                    args.duration,
                    out / f"max-{name}.json",
                    body,
                    "--find-max-rate",
                )
            found = load["max_rate"]
            results[f"max_rate_{name}"] = found["rate_per_s"]
            results[f"planned_{name}"] = planned
            print(
                f"{name}: highest rate with ≥ 99 % within {slo:g} ms:"
                f" {found['rate_per_s']} req/s (lower bound"
                f" {found['lower_bound']}, {len(found['probes'])} probes); planned"
                f" {planned}; batches up to {info['max_batch']}",
                flush=True,
            )
        aware, single = results["max_rate_slo-aware"], results["max_rate_batch-1"]
        planned = results["planned_slo-aware"]
        if aware and single:
            print(
                f"SLO-aware / batch-1: {aware / single:.2f}×; measured / planned:"
                f" {aware / planned:.3f}",
                flush=True,
            )

    high_rate = results.get("max_rate_slo-aware") or info["planned_rate_per_s"]
    rates = {"low": 0.25 * high_rate, "high": 0.9 * high_rate}
    if "3" not in skip and LITSERVE.exists():
        grid = sorted(
            {(b, t) for b in (max(1, best // 2), best, 2 * best) for t in (0.002, 0.01, 0.03)}
            | {(best, round(timeout_s, 4))}
        )
        goodput: dict[str, dict[str, list[float]]] = {}
        for rnd in range(args.rounds):
            for label, rate in rates.items():
                with lightspeed_server(args.model, slo, None) as url:
                    load = loadgen(
                        url, slo, rate, args.duration, out / f"aware-{label}-{rnd}.json", body
                    )
                run = load["runs"][0]
                goodput.setdefault("slo-aware", {}).setdefault(label, []).append(
                    run["goodput_per_s"]
                )
                print(f"round {rnd} {label} slo-aware: {summary(run)}", flush=True)
                for b, t in grid:
                    key = f"litserve b={b} t={t * 1e3:g}ms"
                    with litserve_server(args.model, b, t, 8790) as url:
                        load = loadgen(
                            f"{url}/predict",
                            slo,
                            rate,
                            args.duration,
                            out / f"lit-{b}-{t}-{label}-{rnd}.json",
                            body,
                        )
                    run = load["runs"][0]
                    goodput.setdefault(key, {}).setdefault(label, []).append(run["goodput_per_s"])
                    print(f"round {rnd} {label} {key}: {summary(run)}", flush=True)
        results["goodput"] = {
            k: {label: statistics.median(v) for label, v in by.items()} for k, by in goodput.items()
        }
        for label in rates:
            lit = {k: v[label] for k, v in results["goodput"].items() if k != "slo-aware"}
            top_key = max(lit, key=lambda k: lit[k])
            print(
                f"{label} rate {rates[label]:.0f}/s: SLO-aware goodput"
                f" {results['goodput']['slo-aware'][label]:.1f}/s, best LitServe"
                f" ({top_key}) {lit[top_key]:.1f}/s",
                flush=True,
            )

    if "4" not in skip:
        samples: list[float] = []
        stop = threading.Event()
        with lightspeed_server(args.model, slo, None) as url:
            sampler = threading.Thread(target=rss_sampler, args=(url, samples, stop))
            sampler.start()
            load = loadgen(url, slo, 2 * high_rate, args.overload, out / "overload.json", body)
            stop.set()
            sampler.join()
        run = load["runs"][0]
        ok_p99 = run["p99_s"]
        results["overload"] = {**run, "rss_bytes": samples}
        print(
            f"2× overload for {args.overload:g} s: {summary(run)}; answered + refused ="
            f" {run['ok'] + run['dropped']} of {run['offered']};"
            f" accepted p99 {ok_p99 * 1e3:.1f} ms against {slo:g} ms; server memory"
            f" {min(samples) / 2**20:.0f}–{max(samples) / 2**20:.0f} MiB",
            flush=True,
        )

    if "5" not in skip:
        process = subprocess.Popen(
            [
                *LIGHTSPEED,
                "serve",
                args.model,
                "--slo",
                f"{slo}ms",
                "--port",
                "0",
                "--budget",
                "0.5",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None and process.stderr is not None
        url = process.stdout.readline().split(" at ")[1].split("/predict")[0]
        generator = subprocess.Popen(
            [
                *LIGHTSPEED,
                "loadgen",
                url,
                "--rate",
                f"{high_rate:.1f}",
                "--duration",
                "8",
                "--slo",
                f"{slo}ms",
                "--body",
                str(body),
                "--content-type",
                JSON,
                "--json",
                str(out / "sigterm.json"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(4)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        generator.wait(timeout=120)
        drained = process.stderr.read().strip().splitlines()[-1]
        run = json.loads((out / "sigterm.json").read_text())["load"]["runs"][0]
        answered = int(drained.split("drained and stopped: ")[1].split(" ")[0])
        results["sigterm"] = {"server": drained, "client": run}
        print(
            f"SIGTERM after 4 s of 8 at {high_rate:.0f}/s: server says '{drained}';"
            f" the generator got {run['ok']} answers (server answered {answered}),"
            f" {run['dropped']} refusals, {run['errors']} errors:"
            f" {run['error_details'][:2]}",
            flush=True,
        )

    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {out / 'results.json'}")


if __name__ == "__main__":
    main()
