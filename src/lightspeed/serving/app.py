"""`lightspeed serve`'s HTTP side: a Starlette app in front of the batcher, run by uvicorn.

Endpoints:

- `POST /predict`: one sample in (see `serving.codec`), its output as JSON. Refusals:
  400 unreadable, 413 over the size limit, 415 content type, 422 names, shape or
  dtype; 429 queue full and 503 would miss its deadline or shutting down (both with
  Retry-After); 500 the model raised. Unknown paths 404, wrong methods 405 (Starlette's
  routing).
- `GET /health`: 200 `{"status": "ok", …}` while serving, 503 while draining.
- `GET /metrics`: Prometheus text: requests by outcome, latency and batch-size
  histograms, the queue's length, and the process's memory and CPU (the model's worker
  process's as `lightspeed_model_process_…`).
- `GET /sample`: a valid request body (`?format=npy` for NumPy), made from the
  workload's own batch: what `lightspeed loadgen URL` sends unless told otherwise.
- `GET /`: the model, its SLO, batch limit and ℓ(b) as the batcher plans with it.

A request's deadline counts from its `X-Request-Start` header when it has one
(`serving.codec.request_start`), else from when it was read.

On SIGTERM (or Ctrl-C) uvicorn stops accepting connections and waits for the requests
in flight; the batcher then answers every request it accepted before it stops.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from lightspeed.serving.batcher import Batcher, Failed, Rejected, arrival_of
from lightspeed.serving.codec import (
    RequestError,
    Sample,
    Schema,
    answer,
    decode,
    request_body,
    request_start,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Service:
    """What the app serves: the model's name, the request schema, a sample request, the
    largest body accepted (bytes), a factory for the batcher (made on the server's
    event loop), what `GET /` says, what to tell once drained (one line), the batch
    sizes to run once before serving, and whether a request's `X-Request-Start` sets
    the moment its deadline counts from (`serving.codec.request_start`), and the process
    id of a worker process running the model (its memory and CPU in the metrics)."""

    name: str
    schema: Schema
    sample: Sample
    max_body_bytes: int
    make_batcher: Any  # Callable[[Events], Batcher]
    info: dict[str, Any]
    on_stop: Callable[[str], None] = lambda _: None
    warm_up_sizes: tuple[int, ...] = (1,)
    request_start: bool = True
    model_pid: int | None = None


class _Metrics:
    """The Prometheus metrics, in a registry of the app's own."""

    def __init__(self, slo_s: float, max_batch: int, model_pid: int | None = None) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        if model_pid is not None:
            ProcessCollector("lightspeed_model", pid=lambda: model_pid, registry=self.registry)
        self.requests = Counter(
            "lightspeed_requests",
            "Requests by outcome: answered, bad_request, queue_full, dropped, failed.",
            ["outcome"],
            registry=self.registry,
        )
        fractions = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 4.0)
        self.latency = Histogram(
            "lightspeed_request_latency_seconds",
            "Arrival to answer, of answered requests.",
            buckets=[slo_s * f for f in fractions],
            registry=self.registry,
        )
        sizes = sorted({2**k for k in range(int(math.log2(max_batch)) + 1)} | {max_batch})
        self.batch_size = Histogram(
            "lightspeed_batch_size",
            "Requests per batch run.",
            buckets=sizes,
            registry=self.registry,
        )
        self.batch_seconds = Histogram(
            "lightspeed_batch_seconds",
            "Seconds each batch ran.",
            buckets=[slo_s * f for f in fractions],
            registry=self.registry,
        )
        self.queue = Gauge(
            "lightspeed_queue_length", "Requests waiting for a batch.", registry=self.registry
        )

    def count(self, outcome: str) -> None:
        self.counts[outcome] += 1
        self.requests.labels(outcome).inc()

    def answered(self, latency_s: float) -> None:
        self.count("answered")
        self.latency.observe(latency_s)

    def rejected(self, status: int) -> None:
        self.count("queue_full" if status == 429 else "dropped")

    def ran(self, batch_size: int, seconds: float) -> None:
        self.batch_size.observe(batch_size)
        self.batch_seconds.observe(seconds)


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(data), status_code=status, headers=headers, media_type="application/json"
    )


def _error(status: int, reason: str, retry_after_s: float | None = None) -> Response:
    headers = None
    if retry_after_s is not None:
        headers = {"Retry-After": str(max(1, math.ceil(retry_after_s)))}
    return _json({"error": reason}, status, headers)


def build_app(service: Service, slo_s: float, max_batch: int) -> Starlette:
    """The ASGI app serving `service` (see the module's docstring)."""
    metrics = _Metrics(slo_s, max_batch, service.model_pid)
    state: dict[str, Any] = {"draining": False}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        batcher: Batcher = service.make_batcher(metrics)
        metrics.queue.set_function(lambda: batcher.queued)
        state["batcher"] = batcher
        await batcher.warm_up([[service.sample] * n for n in service.warm_up_sizes])
        # What exists now (torch, the app, a model run in this process) lives until the
        # server stops: kept out of the collector's full passes, which would otherwise walk
        # all of it under the GIL (100-200 ms on a busy server), stalling the batches and
        # every request with them.
        gc.freeze()
        batcher.start()
        try:
            yield
        finally:
            state["draining"] = True
            await batcher.close()
            counts = metrics.counts
            service.on_stop(
                f"drained and stopped: {counts['answered']} requests answered,"
                f" {counts['dropped'] + counts['queue_full']} refused for load,"
                f" {counts['bad_request']} malformed, {counts['failed']} failed."
            )

    async def predict(request: Request) -> Response:
        batcher: Batcher = state["batcher"]
        try:
            # before the body is read: under overload, reading and decoding the requests
            # it will refuse would take the CPU the answered ones need
            batcher.admit()
        except Rejected as exc:
            return _error(exc.status, exc.reason, exc.retry_after_s)
        try:
            body = await _read(request, service.max_body_bytes)
            sample = decode(body, request.headers.get("content-type", ""), service.schema)
        except RequestError as exc:
            metrics.count("bad_request")
            return _error(exc.status, exc.reason)
        stamp = request_start(request.headers.get("x-request-start"))
        arrived = None if stamp is None or not service.request_start else arrival_of(stamp)
        try:
            done = await batcher.submit(sample, arrived)
        except Rejected as exc:
            return _error(exc.status, exc.reason, exc.retry_after_s)
        except Failed as exc:
            metrics.count("failed")
            return _error(500, f"the model raised: {exc}")
        return Response(
            answer(done.output, done.batch_size, done.queue_s, done.compute_s),
            media_type="application/json",
        )

    async def health(request: Request) -> Response:
        batcher: Batcher | None = state.get("batcher")
        draining = state["draining"] or batcher is None
        body = {
            "status": "draining" if draining else "ok",
            "model": service.name,
            "queued": batcher.queued if batcher else 0,
            "running": batcher.running if batcher else 0,
        }
        return _json(body, 503 if draining else 200)

    async def metrics_endpoint(request: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def sample(request: Request) -> Response:
        if request.query_params.get("format") == "npy":
            kind = "application/x-npy"
        else:
            kind = "application/json"
        return Response(request_body(service.sample, service.schema, kind), media_type=kind)

    async def index(request: Request) -> Response:
        batcher: Batcher | None = state.get("batcher")
        info = dict(service.info)
        if batcher is not None:
            info["latency_ms"] = {
                str(b): round(batcher.latency(b) * 1e3, 3) for b in range(1, max_batch + 1)
            }
        return _json(info)

    routes = [
        Route("/predict", predict, methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/sample", sample, methods=["GET"]),
        Route("/", index, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


async def _read(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"the body's {declared} bytes are over the limit of {limit}.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise RequestError(413, f"the body is over the limit of {limit} bytes.")
    return bytes(body)
