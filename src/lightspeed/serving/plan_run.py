"""A serving plan run for real: one single-thread CPU worker process standing for each
planned GPU, each running its sessions' models as `lightspeed.predict.serving.simulate`
runs its cycle, fed seeded Poisson arrivals in real time.

The parent makes each session's arrivals (`poisson_arrivals`, seeded per session) and
deals each request to one of the GPUs serving the session, in proportion to the rate
each share takes (a seeded draw). Once every worker has built and warmed its models, one
thread sends each request to its worker at its scheduled time: its session, an id and
that time on the monotonic clock (system-wide on Linux, so the same in every process);
no payload travels, a worker runs its model's own sample repeated to the batch's size.

A worker runs its `GpuPlan` as the simulation does. Saturated: batches of what waits,
up to the session's largest batch (`largest_batch`), back to back. Shared: a cycle
starts every `duty_cycle_s` (or when the last one's batches end), each share in turn
running what waits of its session, up to that largest batch, as one batch. Each batch's
end goes back to the parent; a request's latency is that end less its scheduled time.
Nothing is dropped: once the arrivals end, a worker runs what waits and stops; a request
not answered by then (or within a grace period) counts as a miss.
"""

from __future__ import annotations

import contextlib
import math
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from lightspeed.errors import ConfigError, LightspeedError, WorkloadError
from lightspeed.predict.batching import poisson_arrivals
from lightspeed.predict.serving import (
    GpuPlan,
    ServingPlan,
    Session,
    SessionOutcome,
    largest_batch,
)

# Seconds a worker may take to start, build its models and warm them up.
READY_TIMEOUT_S = 300.0
# Seconds the parent waits after the last arrival for workers to finish what waits,
# beyond the largest SLO.
GRACE_S = 5.0
# Seconds between the workers being ready and the first arrival.
LEAD_S = 0.1


def run_plan(
    served: ServingPlan,
    sessions: Sequence[Session],
    targets: Mapping[str, str],
    *,
    duration_s: float,
    seed: int = 0,
) -> tuple[SessionOutcome, ...]:
    """Run `served` for real for `duration_s` seconds of arrivals (see the module's
    docstring): each session's requests, those answered, those within its SLO and the
    p99 of the answered ones' latencies. A session no GPU serves gets no requests."""
    if not duration_s > 0:
        raise ConfigError(f"run for {duration_s} s: give a positive number of seconds.")
    by_name = {s.name: s for s in sessions}
    planned = sorted({share.session for gpu in served.gpus for share in gpu.shares})
    missing = [name for name in planned if name not in targets]
    if missing:
        raise ConfigError(
            f'session {", ".join(map(repr, missing))} has no target; add target = "…" (a'
            " suite name or file.py:NAME) to its [[session]] table to run the plan."
        )
    predicted = [
        f"{name!r} ({by_name[name].latency.hardware_id})"
        for name in planned
        if by_name[name].latency.predicted_from is not None
    ]
    if predicted:
        raise ConfigError(
            f"session {', '.join(predicted)} plans with a latency predicted for other"
            " hardware, and --run runs the plan on this machine's CPU; give it a latency"
            " measured here (serve-profile without --predict-hardware or --predict-dtype)."
        )
    from lightspeed.workload.targets import load_target

    for name in planned:
        load_target(targets[name])  # a bad target is refused here, in one line
    requests = _requests(served, sessions, duration_s, seed)
    caps = {s.name: largest_batch(s.latency, s.slo_s) or 1 for s in sessions}
    slo_s = max((by_name[name].slo_s for name in planned), default=0.0)
    answered = _run(served, targets, caps, requests, duration_s, slo_s)
    outcomes = []
    for s in sessions:
        ids = [i for i, (name, _, _) in enumerate(requests) if name == s.name]
        latencies = sorted(answered[i] for i in ids if i in answered)
        offered = len(ids)
        outcomes.append(
            SessionOutcome(
                session=s.name,
                requests=offered,
                within_slo=sum(1 for t in latencies if t <= s.slo_s),
                answered=len(latencies),
                p99_s=latencies[math.ceil(0.99 * len(latencies)) - 1] if latencies else None,
            )
        )
    return tuple(outcomes)


# A request: its session, the GPU (index) it goes to and its arrival (seconds from
# the start); its id is its index in the list, sorted by arrival.
_Request = tuple[str, int, float]


def _requests(
    served: ServingPlan, sessions: Sequence[Session], duration_s: float, seed: int
) -> list[_Request]:
    """Every session's arrivals, each dealt to one of its GPUs by the rate it takes."""
    requests: list[_Request] = []
    for k, s in enumerate(sessions):
        gpus = [g for g, gpu in enumerate(served.gpus) for x in gpu.shares if x.session == s.name]
        rates = [x.rate_per_s for gpu in served.gpus for x in gpu.shares if x.session == s.name]
        if not gpus:
            continue
        rng = random.Random(f"{seed}:{s.name}:gpu")
        arrivals = poisson_arrivals(sum(rates), duration_s, seed=seed * 1009 + k)
        dealt = rng.choices(gpus, weights=rates, k=len(arrivals))
        requests += [(s.name, g, t) for g, t in zip(dealt, arrivals, strict=True)]
    requests.sort(key=lambda r: r[2])
    return requests


def _run(
    served: ServingPlan,
    targets: Mapping[str, str],
    caps: Mapping[str, int],
    requests: Sequence[_Request],
    duration_s: float,
    slo_s: float,
) -> dict[int, float]:
    """Each answered request's latency (seconds from its scheduled arrival), by id."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    outbox: Any = ctx.Queue()
    inboxes: list[Any] = [ctx.Queue() for _ in served.gpus]
    workers = [
        ctx.Process(
            target=_worker,
            args=(
                g,
                gpu,
                {x.session: targets[x.session] for x in gpu.shares},
                dict(caps),
                inbox,
                outbox,
            ),
            name=f"lightspeed-plan-gpu{g}",
            daemon=True,
        )
        for g, (gpu, inbox) in enumerate(zip(served.gpus, inboxes, strict=True))
    ]
    stop = threading.Event()
    feeder: threading.Thread | None = None
    try:
        for w in workers:
            w.start()
        ready: set[int] = set()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(ready) < len(workers):
            kind, g, value = _receive(outbox, workers, deadline)
            if kind == "ready":
                ready.add(g)
        start = time.monotonic() + LEAD_S
        for inbox in inboxes:
            inbox.put(("start", start))
        feeder = threading.Thread(
            target=_feed,
            args=(requests, inboxes, start, stop),
            name="lightspeed-plan-feed",
            daemon=True,
        )
        feeder.start()
        latencies: dict[int, float] = {}
        done: set[int] = set()
        deadline = start + duration_s + slo_s + GRACE_S
        while len(done) < len(workers):
            try:
                kind, g, value = _receive(
                    outbox, workers, deadline, running=set(range(len(workers))) - done
                )
            except TimeoutError:
                break  # what is not answered by now is missed
            if kind == "batch":
                ids, end = value
                for i in ids:
                    latencies[i] = end - (start + requests[i][2])
            elif kind == "done":
                done.add(g)
        return latencies
    finally:
        stop.set()
        if feeder is not None:
            feeder.join()
        started = [w for w in workers if w.pid is not None]
        for w in started:
            if w.is_alive():
                w.terminate()
        for w in started:
            w.join(timeout=10)
            if w.is_alive():  # pragma: no cover - a worker deaf to SIGTERM
                w.kill()
                w.join()
        for q in [outbox, *inboxes]:
            q.close()
            q.cancel_join_thread()


def _receive(
    outbox: Any, workers: Sequence[Any], deadline: float, running: set[int] | None = None
) -> tuple[str, int, Any]:
    """The next message from the workers; raises the error a worker sent, or one for a
    worker that died, and TimeoutError past `deadline`."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        try:
            kind, g, value = outbox.get(timeout=min(left, 0.5))
        except queue.Empty:
            alive = set(range(len(workers))) if running is None else running
            dead = [g for g in alive if not workers[g].is_alive()]
            if dead:
                raise WorkloadError(
                    f"the worker of GPU {dead[0] + 1} died (exit code {workers[dead[0]].exitcode})."
                ) from None
            continue
        if kind == "error":
            raise WorkloadError(f"the worker of GPU {g + 1}: {value}")
        return kind, g, value


def _feed(
    requests: Sequence[_Request], inboxes: Sequence[Any], start: float, stop: threading.Event
) -> None:
    """Send each request to its worker at its scheduled time, then tell each the
    arrivals have ended."""
    for i, (session, g, at) in enumerate(requests):
        wait = start + at - time.monotonic()
        if wait > 0 and stop.wait(wait):
            return
        inboxes[g].put(("request", session, i, start + at))
    for inbox in inboxes:
        inbox.put(("end",))


def _worker(
    g: int,
    gpu: GpuPlan,
    targets: Mapping[str, str],
    caps: Mapping[str, int],
    inbox: Any,
    outbox: Any,
) -> None:
    """One GPU: build and warm its sessions' models, then run its plan on what comes."""
    try:
        engines, samples = _build(targets, caps)
    except LightspeedError as exc:
        outbox.put(("error", g, str(exc)))
        return
    except Exception as exc:  # anything a user's model raises
        outbox.put(("error", g, f"{type(exc).__name__}: {exc}"))
        return
    outbox.put(("ready", g, None))
    waiting: dict[str, deque[tuple[int, float]]] = {s: deque() for s in targets}
    ended = False

    def take(message: tuple[Any, ...]) -> None:
        nonlocal ended
        if message[0] == "request":
            _, session, i, at = message
            waiting[session].append((i, at))
        elif message[0] == "end":
            ended = True

    def drain(timeout: float = 0.0) -> None:
        """Take what came; wait up to `timeout` for the first message."""
        with contextlib.suppress(queue.Empty):
            take(inbox.get(timeout=timeout) if timeout > 0 else inbox.get_nowait())
            while True:
                take(inbox.get_nowait())

    def run(session: str) -> bool:
        batch = [
            waiting[session].popleft() for _ in range(min(caps[session], len(waiting[session])))
        ]
        if not batch:
            return False
        engines[session].run(samples[session][: len(batch)])
        outbox.put(("batch", g, ([i for i, _ in batch], time.monotonic())))
        return True

    message = inbox.get()
    start = message[1]
    try:
        while True:
            if gpu.saturated:
                drain()
                if not any(run(s.session) for s in gpu.shares):
                    if ended:
                        break
                    drain(timeout=0.05)
                continue
            for share in gpu.shares:
                drain()
                run(share.session)
            start = max(start + gpu.duty_cycle_s, time.monotonic())
            if ended and not any(waiting.values()):
                break
            while (left := start - time.monotonic()) > 0:
                drain(timeout=left)
    except Exception as exc:  # anything a user's model raises
        outbox.put(("error", g, f"{type(exc).__name__}: {exc}"))
        return
    outbox.put(("done", g, None))


def _build(
    targets: Mapping[str, str], caps: Mapping[str, int]
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Each session's engine, on one thread, warmed up at every batch size it may run,
    and its sample repeated to its largest batch."""
    import torch

    from lightspeed.serving.engine import Engine
    from lightspeed.workload.targets import load_target

    torch.set_num_threads(1)
    engines, samples = {}, {}
    for session, target in targets.items():
        engine = Engine(load_target(target))
        sample = engine.sample()
        samples[session] = [sample] * caps[session]
        for n in range(1, caps[session] + 1):  # each batch's template made, each shape run
            engine.run(samples[session][:n])
        engines[session] = engine
    return engines, samples
