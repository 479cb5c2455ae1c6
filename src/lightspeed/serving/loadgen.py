"""The open-loop load generator behind `lightspeed loadgen`: arrival schedules, a run that
sends each request at its scheduled time whatever the server did with the earlier ones,
the SLO accounting of that run, and a search for the highest rate a server sustains.

Open loop is what MLPerf LoadGen's Server scenario, Triton's perf_analyzer (in its
request-rate mode) and `vllm bench serve` do: a closed loop (send, wait, send) slows down
with the server and so never sees the queue a real population of users would build. Every
latency here counts from the request's *scheduled* time, so neither a lagging generator nor
a full connection pool can hide queueing.

Times are in seconds, rates in requests per second. Only the HTTP functions need aiohttp,
and import it themselves.
"""

from __future__ import annotations

import asyncio
import csv
import enum
import ipaddress
import itertools
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lightspeed.errors import ConfigError

if TYPE_CHECKING:
    import aiohttp

# A schedule longer than this is almost certainly a typo in --rate or --duration, and its
# list of floats alone would take hundreds of MB.
MAX_REQUESTS = 10_000_000
# Distinct error details a result keeps: enough to diagnose, bounded against a flood.
MAX_ERROR_DETAILS = 5
# Characters of a failing response's body kept as its detail.
DETAIL_CHARS = 200
# Column names a CSV trace's arrival times may have (else its first column is used).
TRACE_COLUMNS = ("time_s", "timestamp")


# --- arrival processes -------------------------------------------------------------------


def arrival_times(
    arrivals: str, rate_per_s: float, duration_s: float, seed: int = 0
) -> list[float]:
    """Request arrival times in seconds from the start of a run, sorted, in [0, duration_s).

    `arrivals` is "poisson" (exponential gaps at `rate_per_s`), "gamma:CV" (gamma gaps
    with mean 1/rate and coefficient of variation CV > 0: CV=1 is Poisson, CV>1 bursty,
    CV<1 more regular than Poisson) or the path of a CSV trace. A trace has one column of
    arrival times in seconds from the start (a header is optional; the column named
    `time_s` or `timestamp`, else the first), used as it is: sorted, cut at `duration_s`,
    and `rate_per_s` is ignored (nor rescaled to it). The same seed gives the same schedule.
    """
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(f"--duration must be a positive number of seconds, not {duration_s}")
    kind = arrivals.strip()
    if kind == "poisson":
        return _gamma_schedule(1.0, rate_per_s, duration_s, seed)
    if kind.startswith("gamma:"):
        text = kind.removeprefix("gamma:")
        try:
            cv = float(text)
        except ValueError:
            cv = math.nan
        if not (math.isfinite(cv) and cv > 0):
            raise ConfigError(
                f"--arrivals {arrivals!r}: CV must be a positive number, e.g. gamma:2 "
                "(1 is Poisson, above 1 bursty)"
            )
        return _gamma_schedule(cv, rate_per_s, duration_s, seed)
    path = Path(kind)
    if path.suffix.lower() == ".csv" or path.is_file():
        return _trace_schedule(path, duration_s)
    raise ConfigError(
        f"unknown --arrivals {arrivals!r}: use poisson, gamma:CV (e.g. gamma:2) or the path "
        "of a CSV trace of arrival times in seconds"
    )


def _gamma_schedule(cv: float, rate_per_s: float, duration_s: float, seed: int) -> list[float]:
    """Arrivals with gamma gaps of mean 1/rate and coefficient of variation `cv`."""
    if not (math.isfinite(rate_per_s) and rate_per_s > 0):
        raise ConfigError(f"--rate must be a positive number of requests/s, not {rate_per_s}")
    if rate_per_s * duration_s > MAX_REQUESTS:
        raise ConfigError(
            f"--rate {rate_per_s:g} × --duration {duration_s:g} s asks for more than "
            f"{MAX_REQUESTS:,} requests: lower --rate or shorten --duration"
        )
    rng = random.Random(seed)
    # Gamma(shape k, scale θ) has mean kθ and CV 1/√k: k = 1/CV², θ = mean/k.
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate_per_s * shape)
    times: list[float] = []
    t = 0.0
    while True:
        # expovariate is the exact k=1 case and cheaper than gammavariate.
        t += rng.expovariate(rate_per_s) if cv == 1.0 else rng.gammavariate(shape, scale)
        if t >= duration_s:
            return times
        times.append(t)


def _trace_schedule(path: Path, duration_s: float) -> list[float]:
    """The arrival times of a CSV trace, sorted and cut at `duration_s`."""
    try:
        with path.open(newline="") as f:
            rows = [row for row in csv.reader(f) if any(cell.strip() for cell in row)]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(
            f"cannot read the arrivals trace {str(path)!r} ({exc}): give a CSV file of "
            "arrival times in seconds"
        ) from None
    column = 0
    first_line = 1
    if rows and not _is_number(rows[0][0] if len(rows[0]) > 0 else ""):
        header = [cell.strip().lower() for cell in rows[0]]
        column = next((header.index(name) for name in TRACE_COLUMNS if name in header), 0)
        rows = rows[1:]
        first_line = 2
    if not rows:
        raise ConfigError(
            f"the arrivals trace {str(path)!r} has no arrival times: give one time in "
            "seconds per line"
        )
    times: list[float] = []
    for line, row in enumerate(rows, start=first_line):
        cell = row[column].strip() if column < len(row) else ""
        value = float(cell) if _is_number(cell) else math.nan
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError(
                f"the arrivals trace {str(path)!r}, row {line}: {cell!r} is not a time in "
                "seconds ≥ 0 from the start of the run"
            )
        times.append(value)
    times.sort()
    kept = [t for t in times if t < duration_s]
    if not kept:
        raise ConfigError(
            f"the arrivals trace {str(path)!r} starts at {times[0]:g} s, after --duration "
            f"{duration_s:g} s: its times are seconds from the start of the run (not "
            "timestamps); shift them or lengthen --duration"
        )
    return kept


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --- the interface to a server -----------------------------------------------------------


class Outcome(enum.Enum):
    """What became of one request."""

    OK = "ok"
    # The server refused it because of load (HTTP 429 or 503): shedding, not failing.
    DROPPED = "dropped"
    # Anything else that is not a success: other statuses, connection errors, timeouts.
    ERROR = "error"


@dataclass(frozen=True)
class Reply:
    """A server's answer to one request: its outcome, HTTP status if any, and a detail."""

    outcome: Outcome
    status: int | None = None
    detail: str = ""

    def describe(self) -> str:
        """One line for a report: 'error (HTTP 500): boom', 'error: timed out'."""
        status = f" (HTTP {self.status})" if self.status is not None else ""
        detail = f": {self.detail}" if self.detail else ""
        return f"{self.outcome.value}{status}{detail}"


# Sends one request and returns its reply; called once per request with the moment it
# was scheduled for, in Unix seconds (what a server may count its deadline from).
Send = Callable[[float], Awaitable[Reply]]


# --- statistics --------------------------------------------------------------------------


def nearest_rank(sorted_values: Sequence[float], q: float) -> float | None:
    """The nearest-rank q-quantile (0 < q ≤ 1) of ascending values; None when empty."""
    if not sorted_values:
        return None
    # The epsilon keeps q·n = 7.000000000000001 (0.07 × 100) at rank 7, not 8.
    rank = max(1, math.ceil(q * len(sorted_values) - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def binomial_upper_tail(successes: int, trials: int, p: float) -> float:
    """P(X ≥ successes) for X ~ Binomial(trials, p), through the regularized incomplete
    beta function: P(X ≥ x) = I_p(x, n − x + 1)."""
    if successes <= 0:
        return 1.0
    if successes > trials:
        return 0.0
    return _regularized_beta(float(successes), float(trials - successes + 1), p)


def _regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for a, b > 0 and x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_prefix = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    # The continued fraction converges fast only left of the mean; right of it use
    # I_x(a, b) = 1 − I_{1−x}(b, a).
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_prefix) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_prefix) * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction 1/(1 + d1/(1 + d2/(1 + …))) of I_x(a, b), evaluated by the
    modified Lentz method, with d(2m) = m(b−m)x / ((a+2m−1)(a+2m)) and
    d(2m+1) = −(a+m)(a+b+m)x / ((a+2m)(a+2m+1))."""
    tiny = 1e-300

    def guard(v: float) -> float:
        return tiny if abs(v) < tiny else v

    # After the leading term (d0 = 0 and the numerator 1): f = 1/(1 + d1 …).
    c = 1.0
    d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0))
    f = d
    # Terms needed grow like √max(a, b); the cap only stops a runaway on bad input.
    for m in range(1, 10_000_000):
        for coefficient in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 / guard(1.0 + coefficient * d)
            c = guard(1.0 + coefficient / c)
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return f


def clopper_pearson_lower(successes: int, trials: int, confidence: float = 0.99) -> float:
    """The one-sided Clopper–Pearson lower confidence bound on a binomial proportion, given
    `successes` of `trials`: the p at which P(X ≥ successes) = 1 − confidence.

    With every trial a success the bound is (1 − confidence)^(1/n); with none it is 0. It is
    the binomial bound MLPerf LoadGen's early stopping rests on: how sure a run of n requests
    makes us that the true fraction within the SLO is at least this.
    """
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must be between 0 and 1 (exclusive), not {confidence}")
    if trials < 0 or not 0 <= successes <= trials:
        raise ConfigError(f"need 0 ≤ successes ≤ trials, not {successes} of {trials}")
    if successes == 0:
        return 0.0
    alpha = 1.0 - confidence
    if successes == trials:
        return float(alpha ** (1.0 / trials))
    low, high = 0.0, 1.0
    # P(X ≥ x | p) rises with p: bisect until the bracket is adjacent doubles.
    for _ in range(1100):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        if binomial_upper_tail(successes, trials, mid) < alpha:
            low = mid
        else:
            high = mid
    return low


# --- a run -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class LoadResult:
    """The outcome of one open-loop run: counts, latencies, rates in requests/s, and the
    generator's own health (CPU and lag), in seconds where not said otherwise."""

    offered: int
    ok: int
    within_slo: int
    dropped: int
    errors: int
    slo_s: float
    # Wall time from the schedule's origin to the last reply (at least the schedule's span).
    duration_s: float
    offered_rate_per_s: float
    # Latencies of the OK replies, from each request's scheduled time, in schedule order.
    latencies_s: tuple[float, ...] = ()
    # The generator's CPU time over the run's wall time: a fraction of one core (the whole
    # process's, so a server in the same process counts too).
    generator_cpu: float = 0.0
    # How late requests actually started behind their schedule: a saturated generator or a
    # full pool of max_in_flight shows here.
    lag_max_s: float = 0.0
    lag_p99_s: float = 0.0
    # The first few distinct descriptions of drops and errors (Reply.describe()).
    error_details: tuple[str, ...] = ()

    @cached_property
    def _sorted_latencies(self) -> tuple[float, ...]:
        return tuple(sorted(self.latencies_s))

    def percentile_s(self, q: float) -> float | None:
        """The nearest-rank q-quantile (0 < q ≤ 1) of OK latencies; None without one."""
        return nearest_rank(self._sorted_latencies, q)

    @property
    def p50_s(self) -> float | None:
        return self.percentile_s(0.50)

    @property
    def p90_s(self) -> float | None:
        return self.percentile_s(0.90)

    @property
    def p99_s(self) -> float | None:
        return self.percentile_s(0.99)

    @property
    def throughput_per_s(self) -> float:
        """OK replies per second of the run."""
        return self.ok / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def goodput_per_s(self) -> float:
        """Replies within the SLO per second of the run (drops and errors are misses)."""
        return self.within_slo / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def fraction_within(self) -> float:
        """The fraction of offered requests answered OK within the SLO (0 with none)."""
        return self.within_slo / self.offered if self.offered else 0.0

    def within_lower_bound(self, confidence: float = 0.99) -> float:
        """The one-sided Clopper–Pearson lower bound on the true fraction within the SLO."""
        return clopper_pearson_lower(self.within_slo, self.offered, confidence)

    def to_dict(self, *, latencies: bool = False) -> dict[str, object]:
        """A JSON-ready summary (plain numbers, None for a missing percentile, never NaN);
        the raw latencies only when asked, as they can run to millions."""
        out: dict[str, object] = {
            "offered": self.offered,
            "ok": self.ok,
            "within_slo": self.within_slo,
            "dropped": self.dropped,
            "errors": self.errors,
            "slo_s": float(self.slo_s),
            "duration_s": float(self.duration_s),
            "offered_rate_per_s": float(self.offered_rate_per_s),
            "throughput_per_s": self.throughput_per_s,
            "goodput_per_s": self.goodput_per_s,
            "fraction_within": self.fraction_within,
            "within_lower_bound_99": self.within_lower_bound(0.99),
            "p50_s": self.p50_s,
            "p90_s": self.p90_s,
            "p99_s": self.p99_s,
            "generator_cpu": float(self.generator_cpu),
            "lag_max_s": float(self.lag_max_s),
            "lag_p99_s": float(self.lag_p99_s),
            "error_details": list(self.error_details),
        }
        if latencies:
            out["latencies_s"] = [float(v) for v in self.latencies_s]
        return out


async def run_open_loop(
    send: Send,
    schedule_s: Sequence[float],
    slo_s: float,
    *,
    max_in_flight: int = 1024,
    timeout_s: float = 30.0,
    span_s: float | None = None,
) -> LoadResult:
    """Send request i at start + schedule_s[i] (seconds, ascending) and account its reply.

    Open loop: each request is started by the event loop at its scheduled time whatever the
    earlier ones did, never after waiting for a reply. When `max_in_flight` requests are
    outstanding the next one waits for a slot, but its latency still counts from its
    *scheduled* time, so neither a lagging generator nor a full connection pool can hide
    the queueing a server causes; the wait shows as lag (lag_max_s, lag_p99_s) too.

    Latency is reply time − scheduled time; a reply within `slo_s` of its scheduled time is
    within the SLO. A request unanswered `timeout_s` after it was sent, or whose `send`
    raises, is an ERROR. `span_s` is the schedule's nominal length (the run's --duration),
    which the offered rate divides by; without it, the last scheduled time.
    """
    if not (math.isfinite(slo_s) and slo_s > 0):
        raise ConfigError(f"--slo must be a positive latency, not {slo_s} s")
    if max_in_flight < 1:
        raise ConfigError(f"--max-in-flight must be at least 1, not {max_in_flight}")
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ConfigError(f"--timeout must be a positive number of seconds, not {timeout_s}")
    if any(b < a for a, b in itertools.pairwise(schedule_s)) or (schedule_s and schedule_s[0] < 0):
        raise ConfigError("the schedule must be ascending times in seconds ≥ 0")
    n = len(schedule_s)
    span = span_s if span_s is not None else (schedule_s[-1] if n else 0.0)

    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(max_in_flight)
    latency: list[float | None] = [None] * n
    lags = [0.0] * n
    counts = dict.fromkeys(Outcome, 0)
    details: list[str] = []
    pending: set[asyncio.Task[None]] = set()

    async def one(i: int, due: float) -> None:
        # Lag is taken when the request really starts, not when it was handed to the loop:
        # a busy loop delays the start, and that delay belongs to the generator.
        lags[i] = max(0.0, loop.time() - due)
        try:
            reply = await asyncio.wait_for(send(due + unix_offset), timeout_s)
        except asyncio.TimeoutError:
            reply = Reply(Outcome.ERROR, detail="timed out")
        except Exception as exc:  # a Send should not raise; count it rather than stop
            reply = Reply(Outcome.ERROR, detail=f"{type(exc).__name__}: {exc}"[:DETAIL_CHARS])
        finally:
            slots.release()
        counts[reply.outcome] += 1
        if reply.outcome is Outcome.OK:
            latency[i] = loop.time() - due
        elif len(details) < MAX_ERROR_DETAILS and (text := reply.describe()) not in details:
            details.append(text)

    cpu_start = time.process_time()
    start = loop.time()
    unix_offset = time.time() - start
    try:
        for i, t in enumerate(schedule_s):
            due = start + t
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            await slots.acquire()
            task = loop.create_task(one(i, due))
            pending.add(task)
            task.add_done_callback(pending.discard)
        while pending:
            await asyncio.gather(*pending)
    finally:
        for task in pending:
            task.cancel()
    wall = loop.time() - start
    cpu = time.process_time() - cpu_start

    ok_latencies = tuple(v for v in latency if v is not None)
    duration = max(wall, span)
    return LoadResult(
        offered=n,
        ok=counts[Outcome.OK],
        within_slo=sum(1 for v in ok_latencies if v <= slo_s),
        dropped=counts[Outcome.DROPPED],
        errors=counts[Outcome.ERROR],
        slo_s=slo_s,
        duration_s=duration,
        offered_rate_per_s=n / span if span > 0 else 0.0,
        latencies_s=ok_latencies,
        generator_cpu=cpu / wall if wall > 0 else 0.0,
        lag_max_s=max(lags, default=0.0),
        lag_p99_s=nearest_rank(sorted(lags), 0.99) or 0.0,
        error_details=tuple(details),
    )


# --- the highest sustainable rate ---------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One run of a rate search: the offered rate (requests/s), its result, and whether
    its fraction within the SLO reached the target."""

    rate_per_s: float
    result: LoadResult
    passed: bool


@dataclass(frozen=True, kw_only=True)
class MaxRate:
    """The result of find_max_rate: every probe in order, the highest passing rate (None
    when none passed), its run, and that run's Clopper–Pearson lower bound on the fraction
    within the SLO. `converged` is whether a failing rate within the tolerance above it was
    found (not when the probe budget ran out first)."""

    probes: tuple[Probe, ...]
    target: float
    confidence: float
    rate_per_s: float | None
    result: LoadResult | None
    lower_bound: float | None
    converged: bool

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready summary of the search, each probe's run summarised."""
        return {
            "target": self.target,
            "confidence": self.confidence,
            "rate_per_s": self.rate_per_s,
            "lower_bound": self.lower_bound,
            "converged": self.converged,
            "result": self.result.to_dict() if self.result is not None else None,
            "probes": [
                {"rate_per_s": p.rate_per_s, "passed": p.passed, "result": p.result.to_dict()}
                for p in self.probes
            ],
        }


async def find_max_rate(
    run_at: Callable[[float], Awaitable[LoadResult]],
    *,
    low: float,
    high: float,
    target: float = 0.99,
    tolerance: float = 0.05,
    max_probes: int = 12,
    confidence: float = 0.99,
) -> MaxRate:
    """The highest offered rate (requests/s) whose run has fraction_within ≥ `target`.

    `run_at(rate)` runs the load at one rate. If `high` passes it is doubled until a rate
    fails; if `low` fails it is halved until one passes (or the search gives up, with no
    rate); then the bracket is bisected at its geometric midpoint until high/low ≤
    1 + tolerance. At most `max_probes` runs in all; the search assumes, as a bisection
    must, that passing falls off with the rate.
    """
    if not (0 < low < high and math.isfinite(high)):
        raise ConfigError(f"need 0 < low < high rates for the search, not {low} and {high}")
    if not 0 < target <= 1:
        raise ConfigError(f"the target fraction within the SLO must be in (0, 1], not {target}")
    if not tolerance > 0:
        raise ConfigError(f"the search tolerance must be positive, not {tolerance}")
    if max_probes < 2:
        raise ConfigError(f"the search needs at least 2 probes, not {max_probes}")

    probes: list[Probe] = []

    async def probe(rate: float) -> bool:
        result = await run_at(rate)
        passed = result.fraction_within >= target
        probes.append(Probe(rate, result, passed))
        return passed

    # passing: the highest rate known to pass; failing: the lowest known to fail.
    passing: float | None = None
    failing: float | None = None
    if await probe(high):
        passing = high
        while len(probes) < max_probes:
            if await probe(passing * 2):
                passing *= 2
            else:
                failing = passing * 2
                break
    else:
        failing = high
        rate = low
        while len(probes) < max_probes:
            if await probe(rate):
                passing = rate
                break
            failing = rate
            rate /= 2
    if passing is not None and failing is not None:
        while failing / passing > 1 + tolerance and len(probes) < max_probes:
            mid = math.sqrt(passing * failing)
            if await probe(mid):
                passing = mid
            else:
                failing = mid

    best = next((p for p in reversed(probes) if p.passed and p.rate_per_s == passing), None)
    return MaxRate(
        probes=tuple(probes),
        target=target,
        confidence=confidence,
        rate_per_s=passing,
        result=best.result if best else None,
        lower_bound=best.result.within_lower_bound(confidence) if best else None,
        converged=(
            passing is not None and failing is not None and failing / passing <= 1 + tolerance
        ),
    )


# --- HTTP --------------------------------------------------------------------------------


def check_url(url: str, allow_remote: bool) -> None:
    """Refuse a URL that is not http(s), or whose host is not this machine (127.0.0.0/8,
    ::1, localhost) unless `allow_remote`: a load generator aimed at someone else's server
    is a denial-of-service tool. Host names are not resolved; only 'localhost' is trusted."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{url!r} is not an http(s) URL: give one like http://127.0.0.1:8000/predict"
        )
    if allow_remote or _is_loopback(parts.hostname):
        return
    raise ConfigError(
        f"{parts.hostname!r} is not this machine: pass --allow-remote to send load to a "
        "server you are allowed to load"
    )


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def http_sender(session: aiohttp.ClientSession, url: str, body: bytes, content_type: str) -> Send:
    """A Send that POSTs `body` to `url` on `session` and reads the whole response: 2xx is
    OK, 429 and 503 DROPPED (the server shedding load), any other status an ERROR with the
    first 200 characters of the body; connection errors and timeouts are ERRORs too. Each
    request carries its scheduled time as `X-Request-Start: t=<Unix µs>`, the header
    load balancers set, so a server that reads it counts its deadline as the client
    does."""
    import aiohttp

    async def send(scheduled_s: float) -> Reply:
        headers = {"Content-Type": content_type, "X-Request-Start": f"t={scheduled_s * 1e6:.0f}"}
        try:
            async with session.post(url, data=body, headers=headers) as response:
                status = response.status
                payload = await response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return Reply(Outcome.ERROR, detail=f"{type(exc).__name__}: {exc}"[:DETAIL_CHARS])
        if 200 <= status < 300:
            return Reply(Outcome.OK, status)
        text = payload[: DETAIL_CHARS * 4].decode("utf-8", "replace")[:DETAIL_CHARS].strip()
        if status in (429, 503):
            return Reply(Outcome.DROPPED, status, text)
        return Reply(Outcome.ERROR, status, text)

    return send


async def run_http(
    url: str,
    body: bytes,
    content_type: str,
    schedule_s: Sequence[float],
    slo_s: float,
    *,
    max_in_flight: int = 1024,
    timeout_s: float = 30.0,
    span_s: float | None = None,
) -> LoadResult:
    """run_open_loop against an HTTP endpoint: one aiohttp session whose pool holds
    `max_in_flight` connections, each request a POST of `body`. The caller checks the URL
    (check_url) first."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=max_in_flight)
    # run_open_loop bounds each request; the session's own timeout only backs it up.
    timeout = aiohttp.ClientTimeout(total=timeout_s * 2)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        return await run_open_loop(
            http_sender(session, url, body, content_type),
            schedule_s,
            slo_s,
            max_in_flight=max_in_flight,
            timeout_s=timeout_s,
            span_s=span_s,
        )
