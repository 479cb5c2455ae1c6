"""`lightspeed serve TARGET --slo 50ms`: the model behind HTTP with an SLO-aware batcher
(its model in a worker process, `serving.worker`); and the same model and batcher in
process, for `lightspeed loadgen TARGET`.

Before serving, ℓ(b) is timed (batch sizes 1, 2, 4, … until a batch's median passes the
SLO less its margin) unless a saved `serve-profile` result is given. The batch limit is then the
plan's: the largest batch with 2·ℓ(b) ≤ SLO (a request may wait one batch's run, then
run in the next), unless `--max-batch` says otherwise. The queue holds what that batch
serves within the SLO less its margin.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from lightspeed.dtypes import StepDtype
from lightspeed.errors import ConfigError
from lightspeed.facts.device import Device
from lightspeed.facts.serving import BatchLatency, LatencyProfile
from lightspeed.hardware.catalog import Hardware
from lightspeed.hardware.resolve import resolve_hardware
from lightspeed.measure.step import StepSettings
from lightspeed.predict.serving import largest_batch, latency_at, replica_rate
from lightspeed.serving.batcher import Batcher, Events, LatencyModel
from lightspeed.serving.codec import Sample, Schema, request_body
from lightspeed.serving.engine import Engine
from lightspeed.workflows.latency import latency_by_batch
from lightspeed.workload.targets import load_target

# The share of the SLO kept by default for what the batcher does not see: answering
# (the event loop's delay once a batch is done: 11-13 ms at the p99 on two cores under
# twice the load they take), the network, the client's own delays, and batches slower
# than the batcher's p90 of them. A tenth left the answered requests' p99 at 101-117 ms
# of a 100 ms SLO under that load, a fifth at 88-91 ms for the same goodput.
MARGIN = 0.2
# How long a thread may keep the GIL while another waits for it (Python's default: 5 ms).
SWITCH_INTERVAL_S = 2e-4
# The largest batch timed at start when the SLO would allow more.
MAX_PROFILED_BATCH = 256


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeSettings:
    """How to serve: the SLO (seconds); the part of it kept for the HTTP path and the
    event loop's delays (None: `MARGIN` of it); the batch limit (None: the plan's); a fixed
    policy's timeout (None: SLO-aware); the queue bound (None: what the batch limit
    serves within the SLO less the margin); the largest request body (bytes); the
    seconds to time each batch size at start; whether a request's `X-Request-Start`
    header sets when its deadline counts from."""

    slo_s: float
    margin_s: float | None = None
    max_batch: int | None = None
    timeout_s: float | None = None
    max_queue: int | None = None
    max_body_bytes: int | None = None
    budget_s: float = 0.3
    request_start: bool = True

    @property
    def within_s(self) -> float:
        """Seconds a request's batch must be done within: the SLO less the margin."""
        return self.slo_s - (MARGIN * self.slo_s if self.margin_s is None else self.margin_s)

    def __post_init__(self) -> None:
        if self.margin_s is not None and not 0 <= self.margin_s < self.slo_s:
            raise ConfigError(
                f"--margin {self.margin_s * 1e3:g} ms must be at least 0 and less than the SLO."
            )
        if self.max_batch is not None and self.max_batch < 1:
            raise ConfigError(f"--max-batch {self.max_batch} must be at least 1.")
        if self.max_queue is not None and self.max_queue < 1:
            raise ConfigError(f"--max-queue {self.max_queue} must be at least 1.")
        if self.timeout_s is not None and self.timeout_s < 0:
            raise ConfigError(f"--batch-timeout {self.timeout_s} must not be negative.")


class Served(Protocol):
    """A model as the server uses it: `engine.Engine` in this process, or
    `worker.ModelProcess` in a process of its own."""

    @property
    def name(self) -> str: ...
    @property
    def target(self) -> str | None: ...
    @property
    def schema(self) -> Schema: ...
    def sample(self, index: int = 0) -> Sample: ...
    def run(self, samples: Sequence[Sample]) -> list[Any]: ...
    def thread_setup(self) -> None: ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prepared:
    """A model ready to serve: its engine, ℓ(b), the batch limit and queue bound."""

    engine: Served
    profile: LatencyProfile
    settings: ServeSettings
    max_batch: int
    max_queue: int

    def batcher(self, events: Events | None = None) -> Batcher:
        """A batcher over the engine (made on the event loop that will run it)."""
        latency = LatencyModel(self.profile)
        return Batcher(
            self.engine.run,
            latency,
            slo_s=self.settings.slo_s,
            max_batch=self.max_batch,
            max_queue=self.max_queue,
            margin_s=self.settings.slo_s - self.settings.within_s,
            timeout_s=self.settings.timeout_s,
            pad=latency.padded,
            thread_setup=self.engine.thread_setup,
            events=events,
        )

    def info(self) -> dict[str, Any]:
        """What the server says of itself (`GET /`) and a load test records: the model,
        its inputs, the SLO, the policy, batch and queue limits, the planned rate."""
        timeout = self.settings.timeout_s
        return {
            "model": self.engine.name,
            "target": self.engine.target,
            "inputs": self.engine.schema.describe(),
            "slo_ms": self.settings.slo_s * 1e3,
            "policy": "slo-aware" if timeout is None else "fixed",
            "max_batch": self.max_batch,
            "max_queue": self.max_queue,
            "planned_rate_per_s": self.predicted_rate_per_s,
            "batch_timeout_ms": None if timeout is None else timeout * 1e3,
        }

    @property
    def warm_up_sizes(self) -> tuple[int, ...]:
        """The batch sizes to run once before serving: those profiled up to the limit,
        and the limit."""
        sizes = {b.batch_size for b in self.profile.batches if b.batch_size <= self.max_batch}
        return tuple(sorted(sizes | {self.max_batch}))

    @functools.cached_property
    def predicted_rate_per_s(self) -> float | None:
        """The rate the plan expects this server to take within the SLO (less the
        margin) at its batch limit (`predict.serving.replica_rate`); None for a fixed
        policy or a batch limit other than the plan's."""
        if self.settings.timeout_s is not None or self.settings.max_batch is not None:
            return None
        return replica_rate(self.profile, self.settings.within_s)

    def describe(self) -> str:
        """The plan in one line: the policy, batch limit and ℓ at it, queue bound, and
        the rate it expects to take."""
        policy = (
            "SLO-aware"
            if self.settings.timeout_s is None
            else f"fixed: batch {self.max_batch} or {self.settings.timeout_s * 1e3:g} ms"
        )
        top = latency_at(self.profile, self.max_batch)
        rate = self.predicted_rate_per_s
        expects = "" if rate is None else f", planned for up to {rate:.0f} requests/s"
        return (
            f"SLO {self.settings.slo_s * 1e3:g} ms, {policy}, batches up to {self.max_batch}"
            f" (ℓ({self.max_batch}) p99 {top * 1e3:.3g} ms), queue ≤ {self.max_queue}"
            f"{expects}"
        )


def prepare(
    target: str,
    settings: ServeSettings,
    *,
    device: str = "cpu",
    dtype: str = "fp32",
    hardware: str | None = None,
    profile: LatencyProfile | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Prepared:
    """Build `target`'s model, time ℓ(b) unless `profile` is given, and size the
    batcher (see the module's docstring)."""
    workload = load_target(target)
    run = StepSettings(device=Device.parse(device), dtype=StepDtype.parse(dtype))
    engine = Engine(workload, run.device, run.dtype)
    if profile is None:
        # the hardware (for the local CPU, a calibration) only places ℓ(b) timed here
        hw = resolve_hardware(hardware, run.device)
        profile = _time_latency(engine, settings, run, hw, progress)
    best = largest_batch(profile, settings.within_s)
    if best is None:
        one = latency_at(profile, 1)
        raise ConfigError(
            f"{workload.name}: a batch of 1 takes {one * 1e3:.3g} ms at its p99, more than"
            f" half the {settings.within_s * 1e3:g} ms the SLO leaves after its margin;"
            " give a larger --slo."
        )
    max_batch = settings.max_batch or best
    top = latency_at(profile, max_batch)
    # more waiting than the batch limit serves within the SLO could not all be answered
    # in time: refused at the door (before their bodies are read) rather than dropped
    max_queue = settings.max_queue or max_batch * max(1, math.floor(settings.within_s / top))
    return Prepared(
        engine=engine,
        profile=profile,
        settings=settings,
        max_batch=max_batch,
        max_queue=max_queue,
    )


def close_engine(prepared: Prepared) -> None:
    """Stop the worker process of a Prepared made by `worker.prepare_worker` (nothing for
    a model in this process)."""
    close = getattr(prepared.engine, "close", None)
    if close is not None:
        close()


def _time_latency(
    engine: Engine,
    settings: ServeSettings,
    run: StepSettings,
    hw: Hardware,
    progress: Callable[[str], None],
) -> LatencyProfile:
    batches: list[BatchLatency] = []
    profile: LatencyProfile | None = None
    size = 1
    while size <= MAX_PROFILED_BATCH:
        progress(f"timing the forward at batch {size}")
        one = latency_by_batch(
            engine.workload,
            (size,),
            hardware=hw,
            device=run.device,
            dtype=run.dtype,
            budget_s=settings.budget_s,
            model=engine.model,  # built once, not at every size
        )
        batches += one.batches
        profile = dataclasses.replace(one, batches=tuple(batches))
        # one size past the plan's limit: a larger batch may still run faster than a
        # smaller one (and be what a smaller one is padded to). By the median: the p99 of
        # a few dozen runs is their slowest, and one stalled run would end the timing
        # before the sizes the plan needs.
        if one.batches[0].median_s > settings.within_s or (
            settings.max_batch is not None and size >= settings.max_batch
        ):
            break
        size *= 2
    assert profile is not None
    return profile


def service_of(
    prepared: Prepared,
    max_body_bytes: int | None = None,
    on_stop: Callable[[str], None] = lambda _: None,
) -> Any:
    """The app's `Service` for a prepared model; `on_stop` gets a line once drained."""
    from lightspeed.serving.app import Service

    engine = prepared.engine
    sample = engine.sample()
    json_size = len(request_body(sample, engine.schema))
    return Service(
        name=engine.name,
        schema=engine.schema,
        sample=sample,
        max_body_bytes=max_body_bytes or max(1 << 20, 8 * json_size),
        make_batcher=prepared.batcher,
        on_stop=on_stop,
        warm_up_sizes=prepared.warm_up_sizes,
        info=prepared.info(),
        request_start=prepared.settings.request_start,
        model_pid=getattr(engine, "pid", None),
    )


def serve(
    prepared: Prepared,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    announce: Callable[[str], None] = print,
    on_stop: Callable[[str], None] = lambda _: None,
) -> None:
    """Serve `prepared` over HTTP on `host`:`port` (0: any free port) until SIGTERM or
    Ctrl-C, then drain; `announce` gets the URL once listening, `on_stop` a line once
    drained. uvicorn ends the process by the signal that stopped it, once drained; a
    worker process serving the model is stopped first."""
    try:
        _serve(prepared, host, port, announce, on_stop)
    finally:
        close_engine(prepared)


def _serve(
    prepared: Prepared,
    host: str,
    port: int,
    announce: Callable[[str], None],
    on_stop: Callable[[str], None],
) -> None:
    import uvicorn

    from lightspeed.serving.app import build_app

    service = service_of(prepared, prepared.settings.max_body_bytes, on_stop)
    app = build_app(service, prepared.settings.slo_s, prepared.max_batch)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        server_header=False,
    )
    server = uvicorn.Server(config)
    # The thread that hands batches to the model (pickling them for a worker process, or
    # dispatching each op in this one) needs the GIL; the event loop's thread holds it
    # while it reads requests, and by default keeps it up to 5 ms before it must let go.
    sys.setswitchinterval(SWITCH_INTERVAL_S)

    async def main() -> None:
        task = asyncio.ensure_future(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            bound = server.servers[0].sockets[0].getsockname()
            name = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
            announce(f"http://{name}:{bound[1]}")
        await task

    factory = getattr(config, "get_loop_factory", lambda: None)()
    try:
        if factory is not None and hasattr(asyncio, "Runner"):  # Python 3.11+
            with asyncio.Runner(loop_factory=factory) as runner:
                runner.run(main())
        else:
            asyncio.run(main())
    except SystemExit:  # uvicorn's answer to a port it cannot bind
        pass
    if not server.started:
        raise ConfigError(
            f"could not listen on {host}:{port} (in use, or not an address of this machine);"
            " give another --port, or --port 0 for any free one."
        )
