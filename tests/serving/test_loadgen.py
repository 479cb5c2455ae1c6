"""The open-loop load generator: arrival schedules, a run against fake servers whose
service times are known, the Clopper–Pearson bound, the rate search, and real HTTP on
loopback."""

from __future__ import annotations

import asyncio
import itertools
import math
import socket
import statistics
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from lightspeed.errors import ConfigError
from lightspeed.serving.loadgen import (
    LoadResult,
    Outcome,
    Reply,
    arrival_times,
    binomial_upper_tail,
    check_url,
    clopper_pearson_lower,
    find_max_rate,
    nearest_rank,
    run_http,
    run_open_loop,
)

# --- arrival processes ---------------------------------------------------------------


def test_poisson_count_and_mean_gap() -> None:
    times = arrival_times("poisson", 1000.0, 10.0, seed=1)
    # 10,000 expected; a Poisson count's sd is 100, so 5 sd either side.
    assert 9500 < len(times) < 10500
    assert times == sorted(times) and times[0] >= 0 and times[-1] < 10.0
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.fmean(gaps) == pytest.approx(1e-3, rel=0.05)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.05)


def test_seeded_and_deterministic() -> None:
    assert arrival_times("gamma:2", 50, 5, seed=3) == arrival_times("gamma:2", 50, 5, seed=3)
    assert arrival_times("poisson", 50, 5, seed=3) != arrival_times("poisson", 50, 5, seed=4)


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_cv_measured(cv: float) -> None:
    times = arrival_times(f"gamma:{cv}", 2000.0, 10.0, seed=7)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / 2000, rel=0.1)
    assert statistics.pstdev(gaps) / mean == pytest.approx(cv, rel=0.1)


@pytest.mark.parametrize(
    ("arrivals", "rate", "duration", "match"),
    [
        ("uniform", 10, 1, "unknown --arrivals"),
        ("gamma:0", 10, 1, "CV must be a positive"),
        ("gamma:-1", 10, 1, "CV must be a positive"),
        ("gamma:x", 10, 1, "CV must be a positive"),
        ("poisson", 0, 1, "--rate must be a positive"),
        ("poisson", -5, 1, "--rate must be a positive"),
        ("poisson", 10, 0, "--duration must be a positive"),
        ("poisson", 1e9, 1e3, "lower --rate"),
        ("missing.csv", 10, 1, "cannot read the arrivals trace"),
    ],
)
def test_arrival_errors(arrivals: str, rate: float, duration: float, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        arrival_times(arrivals, rate, duration)


def test_csv_trace_with_header_column(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("request,timestamp\na,0.5\nb,0.1\n\nc,2.0\nd,0.3\n")
    # The rate is ignored; the times are used as they are, sorted and cut at the duration.
    assert arrival_times(str(trace), 123.0, 1.0) == [0.1, 0.3, 0.5]


def test_csv_trace_without_header(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("0.2,x\n0.0,y\n")
    assert arrival_times(str(trace), 1.0, 5.0) == [0.0, 0.2]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "has no arrival times"),
        ("time_s\n", "has no arrival times"),
        ("time_s\n0.1\nsoon\n", "row 3: 'soon'"),
        ("0.1\n-1\n", "row 2: '-1'"),
        ("1700000000.0\n", "not timestamps"),
    ],
)
def test_csv_trace_errors(tmp_path: Path, text: str, match: str) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(text)
    with pytest.raises(ConfigError, match=match):
        arrival_times(str(trace), 1.0, 60.0)


# --- statistics ----------------------------------------------------------------------


def test_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert nearest_rank(values, 0.5) == 50.0
    assert nearest_rank(values, 0.07) == 7.0
    assert nearest_rank(values, 0.99) == 99.0
    assert nearest_rank(values, 1.0) == 100.0
    assert nearest_rank([3.0], 0.01) == 3.0
    assert nearest_rank([], 0.5) is None


def test_clopper_pearson_all_successes() -> None:
    # P(X ≥ n | p) = p^n = α  ⇒  p = α^(1/n).
    assert clopper_pearson_lower(10, 10, 0.95) == pytest.approx(0.05**0.1, rel=1e-12)
    assert clopper_pearson_lower(1000, 1000, 0.99) == pytest.approx(0.01**1e-3, rel=1e-12)
    assert clopper_pearson_lower(0, 10) == 0.0
    assert clopper_pearson_lower(0, 0) == 0.0


@pytest.mark.parametrize(("x", "n"), [(1, 1), (1, 5), (9, 10), (15, 20), (50, 60), (190, 200)])
@pytest.mark.parametrize("confidence", [0.9, 0.99])
def test_clopper_pearson_against_binomial_sums(x: int, n: int, confidence: float) -> None:
    bound = clopper_pearson_lower(x, n, confidence)

    def tail(p: float) -> float:
        return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(x, n + 1))

    assert 0 < bound <= x / n
    assert tail(bound) == pytest.approx(1 - confidence, rel=1e-9)
    assert binomial_upper_tail(x, n, 0.37) == pytest.approx(tail(0.37), rel=1e-10)


def test_clopper_pearson_known_value_and_large_n() -> None:
    # qbeta(0.05, 8, 3), found by bisection on the exact binomial sum in rationals.
    assert clopper_pearson_lower(8, 10, 0.95) == pytest.approx(0.4930986989367976, rel=1e-12)
    # The lower end of the textbook two-sided 95% interval for 8 of 10, (0.444, 0.975).
    assert clopper_pearson_lower(8, 10, 0.975) == pytest.approx(0.4439, abs=1e-4)
    # A long run: 99.1% of a million within the SLO bounds the true fraction just below.
    bound = clopper_pearson_lower(991_000, 1_000_000, 0.99)
    assert 0.9907 < bound < 0.991
    with pytest.raises(ConfigError):
        clopper_pearson_lower(5, 4)


# --- open-loop runs against fakes ----------------------------------------------------

UNIFORM_200_PER_S = [i / 200 for i in range(100)]  # 200/s for 0.5 s


def single_worker(service_s: float) -> Callable[[float], Awaitable[Reply]]:
    """A server that answers one request at a time, each in service_s."""
    lock = asyncio.Lock()

    async def send(scheduled_s: float) -> Reply:
        async with lock:
            await asyncio.sleep(service_s)
        return Reply(Outcome.OK, 200)

    return send


def test_queueing_is_visible_from_scheduled_time() -> None:
    async def main() -> LoadResult:
        # 10 ms each is 100/s of capacity offered 200/s: the queue grows by 0.5 s.
        return await run_open_loop(single_worker(0.010), UNIFORM_200_PER_S, 0.050)

    result = asyncio.run(main())
    assert (result.offered, result.ok, result.dropped, result.errors) == (100, 100, 0, 0)
    first, last = result.latencies_s[:10], result.latencies_s[-10:]
    assert statistics.fmean(last) > 0.3 and statistics.fmean(first) < 0.1
    assert result.p99_s is not None and result.p50_s is not None
    assert result.p99_s > result.p50_s > 0.1
    assert result.within_slo < 20 and result.fraction_within < 0.2
    assert result.duration_s > 0.9  # the last reply comes about 1 s in
    assert result.offered_rate_per_s == pytest.approx(100 / 0.495)
    assert result.throughput_per_s == pytest.approx(100 / result.duration_s)
    assert 0 <= result.generator_cpu < 2


def test_a_full_pool_cannot_hide_queueing() -> None:
    async def fast(scheduled_s: float) -> Reply:
        await asyncio.sleep(0.010)
        return Reply(Outcome.OK, 200)

    async def main() -> LoadResult:
        return await run_open_loop(fast, UNIFORM_200_PER_S, 0.050, max_in_flight=1)

    result = asyncio.run(main())
    # One slot serialises the requests in the generator: it shows as latency and as lag.
    assert max(result.latencies_s) > 0.3
    assert result.lag_max_s > 0.3 and result.lag_p99_s > 0.3


def test_drops_errors_and_timeouts_are_misses() -> None:
    calls = 0

    async def mixed(scheduled_s: float) -> Reply:
        nonlocal calls
        calls += 1
        kind = calls % 4
        if kind == 0:
            return Reply(Outcome.DROPPED, 429, "queue full")
        if kind == 1:
            return Reply(Outcome.ERROR, 500, "boom")
        if kind == 2:
            await asyncio.sleep(5)  # outlives the timeout
        raise RuntimeError("bug in send")

    async def main() -> LoadResult:
        return await run_open_loop(mixed, [i / 1000 for i in range(40)], 0.05, timeout_s=0.05)

    result = asyncio.run(main())
    assert (result.offered, result.ok, result.dropped, result.errors) == (40, 0, 10, 30)
    assert result.within_slo == 0 and result.goodput_per_s == 0.0
    assert result.p50_s is None and result.fraction_within == 0.0
    assert set(result.error_details) == {
        "dropped (HTTP 429): queue full",
        "error (HTTP 500): boom",
        "error: timed out",
        "error: RuntimeError: bug in send",
    }
    summary = result.to_dict()
    assert summary["p99_s"] is None and "latencies_s" not in summary
    assert not any(isinstance(v, float) and math.isnan(v) for v in summary.values())


def test_an_empty_schedule_and_bad_options() -> None:
    async def ok(scheduled_s: float) -> Reply:
        return Reply(Outcome.OK)

    result = asyncio.run(run_open_loop(ok, [], 0.05))
    assert result.offered == 0 and result.fraction_within == 0.0
    assert result.to_dict()["throughput_per_s"] == 0.0
    with pytest.raises(ConfigError, match="--slo"):
        asyncio.run(run_open_loop(ok, [0.0], 0.0))
    with pytest.raises(ConfigError, match="--max-in-flight"):
        asyncio.run(run_open_loop(ok, [0.0], 0.05, max_in_flight=0))
    with pytest.raises(ConfigError, match="--timeout"):
        asyncio.run(run_open_loop(ok, [0.0], 0.05, timeout_s=-1.0))
    with pytest.raises(ConfigError, match="ascending"):
        asyncio.run(run_open_loop(ok, [0.2, 0.1], 0.05))


# --- the rate search -----------------------------------------------------------------


def fake_run_at(threshold: float) -> tuple[Callable[[float], Awaitable[LoadResult]], list[float]]:
    """A run_at whose runs meet a 0.99 target below `threshold` requests/s and miss above."""
    rates: list[float] = []

    async def run_at(rate: float) -> LoadResult:
        rates.append(rate)
        within = 1000 if rate < threshold else 900
        return LoadResult(
            offered=1000,
            ok=1000,
            within_slo=within,
            dropped=0,
            errors=0,
            slo_s=0.05,
            duration_s=1000 / rate,
            offered_rate_per_s=rate,
        )

    return run_at, rates


@pytest.mark.parametrize(("low", "high"), [(10.0, 1000.0), (1.0, 20.0), (500.0, 4000.0)])
def test_find_max_rate_brackets_and_bisects(low: float, high: float) -> None:
    run_at, rates = fake_run_at(137.0)
    found = asyncio.run(find_max_rate(run_at, low=low, high=high, tolerance=0.05))
    assert found.converged and found.rate_per_s is not None
    assert 137.0 / 1.05 <= found.rate_per_s < 137.0
    assert len(found.probes) <= 12 and [p.rate_per_s for p in found.probes] == rates
    assert all(p.passed == (p.rate_per_s < 137.0) for p in found.probes)
    assert found.result is not None and found.result.offered_rate_per_s == found.rate_per_s
    assert found.lower_bound == pytest.approx(0.01 ** (1 / 1000))
    assert found.to_dict()["rate_per_s"] == found.rate_per_s


def test_a_search_interrupted_keeps_the_runs_it_finished() -> None:
    from lightspeed.serving.load import LoadSettings, drive

    run_at, _ = fake_run_at(137.0)
    calls = 0

    async def interrupted(rate: float) -> LoadResult:
        nonlocal calls
        calls += 1
        if calls == 3:  # Ctrl-C during the third probe
            raise KeyboardInterrupt
        return await run_at(rate)

    finished: list[LoadResult] = []
    settings = LoadSettings(rate_per_s=100.0, duration_s=1.0, slo_s=0.05, find_max_rate=True)
    with pytest.raises(KeyboardInterrupt):
        drive(interrupted, settings, finished)
    assert [r.offered_rate_per_s for r in finished] == [100.0, 200.0]


def test_find_max_rate_gives_up_within_its_budget() -> None:
    never, _ = fake_run_at(0.0)
    none = asyncio.run(find_max_rate(never, low=10.0, high=100.0, max_probes=5))
    assert none.rate_per_s is None and none.result is None and not none.converged
    assert len(none.probes) == 5

    always, _ = fake_run_at(math.inf)
    capped = asyncio.run(find_max_rate(always, low=10.0, high=100.0, max_probes=4))
    assert capped.rate_per_s == 800.0 and not capped.converged
    assert len(capped.probes) == 4
    with pytest.raises(ConfigError):
        asyncio.run(find_max_rate(always, low=100.0, high=10.0))


# --- HTTP ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000/p", "http://127.9.9.9/", "https://localhost:1/", "http://[::1]/"]
)
def test_check_url_allows_loopback(url: str) -> None:
    check_url(url, allow_remote=False)


def test_check_url_refuses() -> None:
    with pytest.raises(ConfigError, match="--allow-remote"):
        check_url("http://example.com/predict", allow_remote=False)
    with pytest.raises(ConfigError, match="--allow-remote"):
        check_url("http://10.0.0.1:8000/", allow_remote=False)
    check_url("http://example.com/predict", allow_remote=True)
    for bad in ["ftp://127.0.0.1/", "127.0.0.1:8000", "http:///path"]:
        with pytest.raises(ConfigError, match="not an http"):
            check_url(bad, allow_remote=True)


def test_http_outcomes_on_loopback() -> None:
    aiohttp_web = pytest.importorskip("aiohttp.web")

    async def handle(request: object) -> object:
        path = request.path  # type: ignore[attr-defined]
        body = await request.read()  # type: ignore[attr-defined]
        assert body == b'{"x": 1}'
        status = {"/ok": 200, "/busy": 429, "/down": 503, "/fail": 500}[path]
        return aiohttp_web.Response(status=status, text="boom" * 100 if status == 500 else "")

    async def main() -> dict[str, LoadResult]:
        app = aiohttp_web.Application()
        app.router.add_post("/{name}", handle)
        runner = aiohttp_web.AppRunner(app)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        await aiohttp_web.SockSite(runner, sock).start()
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
        closed.close()  # nothing listens there: connection refused
        schedule = [i * 0.005 for i in range(20)]
        try:
            results = {}
            for name, url in [
                ("ok", f"http://127.0.0.1:{port}/ok"),
                ("busy", f"http://127.0.0.1:{port}/busy"),
                ("down", f"http://127.0.0.1:{port}/down"),
                ("fail", f"http://127.0.0.1:{port}/fail"),
                ("refused", f"http://127.0.0.1:{closed_port}/ok"),
            ]:
                results[name] = await run_http(
                    url, b'{"x": 1}', "application/json", schedule, 1.0, max_in_flight=8
                )
            return results
        finally:
            await runner.cleanup()

    results = asyncio.run(main())
    ok = results["ok"]
    assert (ok.ok, ok.within_slo, ok.dropped, ok.errors) == (20, 20, 0, 0)
    assert results["busy"].dropped == 20 and results["down"].dropped == 20
    assert results["busy"].error_details == ("dropped (HTTP 429)",)
    fail = results["fail"]
    assert fail.errors == 20
    assert fail.error_details[0] == "error (HTTP 500): " + ("boom" * 50)
    refused = results["refused"]
    assert refused.errors == 20 and refused.error_details[0].startswith("error: Client")
