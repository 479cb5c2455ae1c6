"""The batcher of `lightspeed serve`: requests queue, one worker runs them in batches.

Which batch runs when is `predict.batching`'s decision, the same function its event
simulation runs: SLO-aware (requests dispatched when waiting longer would make the
oldest miss its deadline given ℓ(b); those that can no longer make it dropped at once)
or a fixed batch + timeout. The queue is bounded: a request that finds it full is
refused at once (429), and one the policy drops is answered 503, both with a
Retry-After, so a client under overload learns at once rather than by timing out.

ℓ(b) is first the latency profile's p99 as the plan reads it (a batch padded to a larger
size where that runs faster). Once a few batches have run, it follows what they measure:
the profile's median at b times the 90th percentile of the last batches' ratios of
measured run to the profile's median at their size, or their median while no more wait
than one batch takes (then a drop would be a certain miss, a run a likely hit). A host
busier than when it was profiled (or one whose front end takes a share of the model's
CPU) is then planned for, at the tail its batches show now. Deadlines are the SLO less a
margin (`margin_s`) kept for what the batcher does not see: reading and answering the
request, the network, the event loop's delays.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from lightspeed.facts.serving import LatencyProfile
from lightspeed.predict.batching import Decision, fixed, slo_aware
from lightspeed.predict.serving import latency_at, padded_batch

# Batches whose measured run rescales ℓ(b): enough to be steady, few enough to follow a
# change of load within seconds; and the fewest before it does, so one slow batch (a
# first call's allocations, a page fault) does not rescale everything.
WINDOW = 32
MIN_OBSERVED = 5
# The batch times' quantile planned with. Under overload a batch's oldest request has
# waited all but one batch's run of its budget, so a batch slower than planned makes it
# late: the median left 0.7 % of answers late at twice the highest rate (batches ran 1.3×
# their median at the p99 with the front end busy on the other core).
SCALE_QUANTILE = 0.9
# How far one batch's measured/profiled ratio may move the scale.
RATIO_BOUNDS = (0.25, 4.0)


class LatencyModel:
    """ℓ(b), seconds, as the batcher plans with it (see the module's docstring)."""

    def __init__(self, profile: LatencyProfile) -> None:
        self.profile = profile
        self._medians = {b.batch_size: b.median_s for b in profile.batches}
        self._ratios: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self._p99: dict[int, float] = {}  # the profile's, as the plan reads it
        self._padded: dict[int, int] = {}
        self._scale: float | None = None
        self._typical_scale: float | None = None

    def __call__(self, batch_size: int) -> float:
        return self._at(batch_size, self._scale)

    def typical(self, batch_size: int) -> float:
        """ℓ(b) at the median of the last batches' ratios (the profile's p99 before
        `MIN_OBSERVED` of them): what a batch of `batch_size` usually takes here."""
        return self._at(batch_size, self._typical_scale)

    def _at(self, batch_size: int, scale: float | None) -> float:
        """ℓ(b): the profile's median at b × `scale`, or its p99 while nothing scales it."""
        if scale is None:
            return self._profiled_p99(batch_size)
        return self._median(self.padded(batch_size)) * scale

    def padded(self, batch_size: int) -> int:
        """The batch size `batch_size` requests run as (`predict.serving.padded_batch`)."""
        if batch_size not in self._padded:
            self._padded[batch_size] = padded_batch(self.profile, batch_size)
        return self._padded[batch_size]

    @property
    def scale(self) -> float | None:
        """The `SCALE_QUANTILE` of the last batches' measured run over the profile's
        median at their size; None before `MIN_OBSERVED` of them."""
        return self._scale

    def observe(self, batch_size: int, seconds: float) -> None:
        """A batch of `batch_size` requests ran in `seconds` (padded as `padded` says)."""
        profiled = self._median(self.padded(batch_size))
        if profiled > 0:
            low, high = RATIO_BOUNDS
            self._ratios.append(min(max(seconds / profiled, low), high))
            if len(self._ratios) >= MIN_OBSERVED:
                ordered = sorted(self._ratios)
                self._scale = ordered[min(len(ordered) - 1, int(SCALE_QUANTILE * len(ordered)))]
                self._typical_scale = statistics.median(ordered)

    def _profiled_p99(self, batch_size: int) -> float:
        if batch_size not in self._p99:
            self._p99[batch_size] = latency_at(self.profile, batch_size)
        return self._p99[batch_size]

    def _median(self, batch_size: int) -> float:
        if batch_size in self._medians:
            return self._medians[batch_size]
        # the p99's interpolation, at the median's level of the nearest size timed
        near = min(self._medians, key=lambda b: abs(b - batch_size))
        ratio = self._profiled_p99(batch_size) / self._profiled_p99(near)
        return self._medians[near] * ratio


class Rejected(Exception):
    """A request refused for load: the HTTP `status` (429 queue full, 503 would miss
    its deadline or shutting down), the `reason` and the seconds after which to retry."""

    def __init__(self, status: int, reason: str, retry_after_s: float) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.retry_after_s = retry_after_s


class Failed(Exception):
    """The model raised on a batch: every request in it is answered 500 with `reason`."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Answer:
    """One request's output, the batch it ran in, the seconds it waited in the queue
    and its batch's run."""

    output: Any
    batch_size: int
    queue_s: float
    compute_s: float


class Events(Protocol):
    """What the batcher reports as it goes (the metrics endpoint keeps them)."""

    def answered(self, latency_s: float) -> None: ...
    def rejected(self, status: int) -> None: ...
    def ran(self, batch_size: int, seconds: float) -> None: ...


@dataclasses.dataclass
class _Waiting:
    arrived_s: float
    sample: Any
    future: asyncio.Future[Answer]


Run = Callable[[list[Any]], list[Any]]


class Batcher:
    """Queues samples and runs them through `run` (one batch at a time, in a thread of
    its own) as the policy decides: SLO-aware when `timeout_s` is None (deadlines
    `slo_s` − `margin_s` after arrival), else a fixed `max_batch` + `timeout_s`.
    `max_queue` bounds the requests waiting; a batch of n runs as `pad(n)` samples.
    `thread_setup` runs first on the model's thread."""

    def __init__(
        self,
        run: Run,
        latency: Callable[[int], float],
        *,
        slo_s: float,
        max_batch: int,
        max_queue: int,
        margin_s: float = 0.0,
        timeout_s: float | None = None,
        pad: Callable[[int], int] = lambda n: n,
        thread_setup: Callable[[], None] | None = None,
        events: Events | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self._pad = pad
        self.latency = latency
        self.slo_s = slo_s
        self.margin_s = margin_s
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self._events = events
        self._clock = clock
        self._queue: collections.deque[_Waiting] = collections.deque()
        self._wakeup = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            1, "lightspeed-model", initializer=thread_setup
        )
        self.running = 0  # requests in the batch running now
        self._last_run_s = clock()

    @property
    def queued(self) -> int:
        """Requests waiting for a batch."""
        return len(self._queue)

    async def warm_up(self, batches: Sequence[list[Any]]) -> None:
        """Run each of `batches` once on the model's thread, before serving: its first
        calls (allocations, kernels chosen) are slow, and would rescale ℓ."""
        loop = asyncio.get_running_loop()
        for batch in batches:
            await loop.run_in_executor(self._executor, self._run, batch)
        self._last_run_s = self._clock()

    def start(self) -> None:
        """Start dispatching (on the running event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._dispatch())

    async def close(self) -> None:
        """Refuse new requests, answer every one accepted (run or, by the policy,
        dropped), then stop."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        self._executor.shutdown(wait=True)

    def admit(self) -> None:
        """Raise Rejected if a request arriving now would be refused at once (shutting
        down, or the queue full): a server asks before it reads the request's body."""
        if self._closing:
            raise self._reject(503, "the server is shutting down")
        if len(self._queue) >= self.max_queue:
            raise self._reject(429, f"the queue is full ({self.max_queue} waiting)")

    async def submit(self, sample: Any, arrived_s: float | None = None) -> Answer:
        """`sample`'s answer once its batch has run; raises Rejected (refused for load)
        or Failed (the model raised). `arrived_s` (on the batcher's clock; None: now) is
        when the request reached the front of the service: its deadline counts from then."""
        self.admit()
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        now = self._clock()
        arrived = now if arrived_s is None else min(arrived_s, now)
        self._queue.append(_Waiting(arrived, sample, future))
        self._wakeup.set()
        return await future

    def _decide(self, now: float, arrivals: Sequence[float]) -> Decision:
        if self.timeout_s is None:
            budget = self.slo_s - self.margin_s
            # More waiting than one batch takes: some must go, and a batch's oldest
            # request has waited all but one run of its budget, so a batch slower than
            # planned makes it late: plan with the batches' tail. Fewer: a request
            # dropped is a certain miss where a run is a likely hit: plan with the
            # batches' median.
            overloaded = len(arrivals) > self.max_batch
            latency = self.latency if overloaded else getattr(self.latency, "typical", self.latency)
            return slo_aware(now, arrivals, latency, budget, self.max_batch)
        return fixed(now, arrivals, self.max_batch, self.timeout_s)

    async def _dispatch(self) -> None:
        while self._queue or not self._closing:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            now = self._clock()
            decision = self._decide(now, [w.arrived_s for w in self._queue])
            if decision.drop == len(self._queue) and now - self._last_run_s > self.slo_s:
                # Everything would be dropped and nothing has run for an SLO: the
                # estimate of ℓ may be what is wrong, and only a run can correct it.
                decision = Decision(run=1, drop=decision.drop - 1)
            for _ in range(decision.drop):
                waiting = self._queue.popleft()
                _settle(waiting.future, self._reject(503, "it would miss its deadline"))
            if decision.run:
                await self._run_batch([self._queue.popleft() for _ in range(decision.run)])
                continue
            if not self._queue:
                continue
            self._wakeup.clear()
            timeout = None if decision.wake_at_s is None else decision.wake_at_s - self._clock()
            if timeout is None or timeout > 0:
                # asyncio's own TimeoutError: not yet the builtin on Python 3.10
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _run_batch(self, batch: list[_Waiting]) -> None:
        loop = asyncio.get_running_loop()
        self.running = len(batch)
        start = self._clock()
        samples = [w.sample for w in batch]
        # padded with copies of the last to the size that runs fastest
        samples += samples[-1:] * (self._pad(len(batch)) - len(batch))
        try:
            outputs = await loop.run_in_executor(self._executor, self._run, samples)
        except Exception as exc:
            for w in batch:
                _settle(w.future, Failed(str(exc).splitlines()[0] if str(exc) else repr(exc)))
            return
        finally:
            self.running = 0
        end = self._last_run_s = self._clock()
        if hasattr(self.latency, "observe"):
            self.latency.observe(len(batch), end - start)
        if self._events:
            self._events.ran(len(batch), end - start)
        for w, output in zip(batch, outputs, strict=False):
            answer = Answer(
                output=output,
                batch_size=len(batch),
                queue_s=start - w.arrived_s,
                compute_s=end - start,
            )
            if _settle(w.future, answer) and self._events:
                self._events.answered(end - w.arrived_s)

    def _reject(self, status: int, reason: str) -> Rejected:
        if self._events:
            self._events.rejected(status)
        # until the queue now waiting has run, at full batches
        drain_s = math.ceil(len(self._queue) / self.max_batch) * self.latency(self.max_batch)
        return Rejected(status, reason, retry_after_s=max(drain_s, self.latency(1)))


def arrival_of(unix_s: float, clock: Callable[[], float] = time.monotonic) -> float:
    """A moment given in Unix seconds (`time.time()`), on `clock` (the batcher's)."""
    return clock() - (time.time() - unix_s)


def _settle(future: asyncio.Future[Answer], outcome: Answer | Exception) -> bool:
    """Give `future` its answer or exception unless its client has gone; True if given."""
    if future.done():
        return False
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
    return True
