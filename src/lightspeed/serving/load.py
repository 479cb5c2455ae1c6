"""`lightspeed loadgen URL|TARGET`: open-loop load on an HTTP endpoint or on a target
served in this process (the same engine and batcher as `lightspeed serve`, without
HTTP), at one rate or searching for the highest rate that keeps the SLO.

Against a URL the body sent is `--body` or, from a lightspeed server, its own
`GET /sample`. In process, each probe of a search gets a fresh batcher, so no queue
or latency estimate carries over from one rate to the next.
"""

from __future__ import annotations

import asyncio
import dataclasses
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from lightspeed.errors import ConfigError
from lightspeed.serving.loadgen import (
    LoadResult,
    MaxRate,
    Outcome,
    Reply,
    arrival_times,
    find_max_rate,
    run_http,
    run_open_loop,
)

DOCUMENT = "load-test"


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoadSettings:
    """The load: `rate_per_s` requests a second for `duration_s` seconds, arrivals as
    `arrival_times` reads `arrivals`, seeded; each request due within `slo_s`. With
    `find_max_rate`, `rate_per_s` is the first guess of a search for the highest rate with
    `target` of requests within the SLO."""

    rate_per_s: float
    duration_s: float
    slo_s: float
    arrivals: str = "poisson"
    seed: int = 0
    find_max_rate: bool = False
    target: float = 0.99
    tolerance: float = 0.05
    max_probes: int = 10
    max_in_flight: int = 1024
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.rate_per_s > 0:
            raise ConfigError(f"--rate {self.rate_per_s} must be a positive number a second.")
        if not self.duration_s > 0:
            raise ConfigError(f"--duration {self.duration_s} must be a positive number of s.")

    def schedule(self, rate_per_s: float) -> list[float]:
        """The seconds each request is due to be sent at `rate_per_s`."""
        return arrival_times(self.arrivals, rate_per_s, self.duration_s, self.seed)


Run = Callable[[float], Awaitable[LoadResult]]


def is_url(target: str) -> bool:
    """Whether `target` names an HTTP endpoint rather than a workload."""
    return target.startswith(("http://", "https://"))


def endpoint(url: str) -> str:
    """The URL to POST to: `url` itself, or its /predict when it names only a server."""
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit(parts._replace(path="/predict"))
    return url


def sample_body(url: str, content_type: str) -> bytes:
    """A lightspeed server's own sample request (`GET /sample`) in `content_type`."""
    parts = urllib.parse.urlsplit(url)
    query = "format=npy" if content_type != "application/json" else ""
    where = urllib.parse.urlunsplit(parts._replace(path="/sample", query=query))
    try:
        with urllib.request.urlopen(where, timeout=10) as response:
            return bytes(response.read())
    except (urllib.error.URLError, OSError) as exc:
        raise ConfigError(
            f"{where}: no sample request ({exc}); give --body FILE with a request body for"
            " this endpoint."
        ) from None


def http_run(url: str, body: bytes, content_type: str, settings: LoadSettings) -> Run:
    """Runs against `url` (checked by `loadgen.check_url` first), one per rate."""

    async def run_at(rate: float) -> LoadResult:
        return await run_http(
            url,
            body,
            content_type,
            settings.schedule(rate),
            settings.slo_s,
            max_in_flight=settings.max_in_flight,
            timeout_s=settings.timeout_s,
            span_s=settings.duration_s,
        )

    return run_at


def in_process_run(prepared: Any, settings: LoadSettings) -> Run:
    """Runs against `prepared` (`serving.serve.Prepared`) served in this process: a fresh
    batcher for each, the same sample every request."""
    from lightspeed.serving.batcher import Failed, Rejected, arrival_of

    sample = prepared.engine.sample()

    async def run_at(rate: float) -> LoadResult:
        batcher = prepared.batcher()
        await batcher.warm_up([[sample] * n for n in prepared.warm_up_sizes])
        batcher.start()

        async def send(scheduled_s: float) -> Reply:
            try:
                await batcher.submit(sample, arrival_of(scheduled_s))
            except Rejected as exc:
                return Reply(Outcome.DROPPED, exc.status, exc.reason)
            except Failed as exc:
                return Reply(Outcome.ERROR, 500, str(exc))
            return Reply(Outcome.OK, 200)

        try:
            return await run_open_loop(
                send,
                settings.schedule(rate),
                settings.slo_s,
                max_in_flight=settings.max_in_flight,
                timeout_s=settings.timeout_s,
                span_s=settings.duration_s,
            )
        finally:
            await batcher.close()

    return run_at


def drive(
    run_at: Run, settings: LoadSettings, finished: list[LoadResult] | None = None
) -> tuple[list[LoadResult], MaxRate | None]:
    """The run at the settings' rate, or the search for the highest rate: every run made,
    and the search's outcome. Each run is appended to `finished` as it ends, so what ran
    before an interruption (Ctrl-C during a search) can still be written."""
    done = finished if finished is not None else []

    async def recorded(rate: float) -> LoadResult:
        result = await run_at(rate)
        done.append(result)
        return result

    async def main() -> tuple[list[LoadResult], MaxRate | None]:
        if not settings.find_max_rate:
            return [await recorded(settings.rate_per_s)], None
        found = await find_max_rate(
            recorded,
            low=settings.rate_per_s / 2,
            high=settings.rate_per_s,
            target=settings.target,
            tolerance=settings.tolerance,
            max_probes=settings.max_probes,
        )
        return [p.result for p in found.probes], found

    return asyncio.run(main())


def load_data(
    target: dict[str, Any],
    settings: LoadSettings,
    runs: list[LoadResult],
    found: MaxRate | None,
) -> dict[str, Any]:
    """The JSON `load` object of a load-test result: what was driven, how, each run and
    the search."""
    return {
        "target": target,
        "slo_s": settings.slo_s,
        "arrivals": settings.arrivals,
        "duration_s": settings.duration_s,
        "seed": settings.seed,
        "runs": [r.to_dict() for r in runs],
        "max_rate": None if found is None else found.to_dict(),
    }


def read_body(path: Path) -> bytes:
    """`--body FILE`'s bytes, refused in one line if unreadable."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"--body {path}: not readable ({exc.strerror}).") from None


def server_info(url: str) -> dict[str, Any]:
    """What a lightspeed server says of itself at `GET /` (empty for another server)."""
    parts = urllib.parse.urlsplit(url)
    where = urllib.parse.urlunsplit(parts._replace(path="/", query=""))
    try:
        with urllib.request.urlopen(where, timeout=10) as response:
            info = orjson.loads(response.read())
    except (urllib.error.URLError, OSError, orjson.JSONDecodeError):
        return {}
    if not isinstance(info, dict) or "model" not in info:
        return {}
    info.pop("latency_ms", None)
    return info
