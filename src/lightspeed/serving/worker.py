"""The model of `lightspeed serve` in a process of its own.

The HTTP front end is Python: under load its event loop holds the GIL most of the time,
and a model run from a thread of the same process waits for the GIL at every op it
dispatches (a 12-layer MLP ran its batches 10 to 40 % slower, and a garbage collection
pass over the front end's objects stalled a batch for 200 ms). In its own process the
model shares only the cores. The worker builds the model, times ℓ(b) and makes the plan
(`serve.prepare`) where it will serve, then runs each batch it is sent over a pipe:
samples and outputs are NumPy arrays, pickled. It is started with `spawn` (a fork of a
process that has started torch's threads can deadlock), ignores Ctrl-C (the terminal
sends it to every process of the group, and the front end drains before it stops the
worker), and ends when told or when its pipe closes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import multiprocessing
import pickle
import signal
import threading
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from lightspeed.errors import LightspeedError, WorkloadError
from lightspeed.facts.serving import LatencyProfile
from lightspeed.serving.codec import Sample, Schema
from lightspeed.serving.serve import Prepared, ServeSettings, prepare

# Seconds to wait for the worker to end once told, before it is killed.
STOP_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    """What the worker serves: the target, device, dtype and hardware as `serve.prepare`
    takes them, torch's intra-op threads, the serve settings (`serve.ServeSettings`) and
    a latency profile to plan with instead of timing ℓ(b)."""

    target: str
    device: str
    dtype: str
    hardware: str | None
    threads: int
    settings: ServeSettings
    profile: LatencyProfile | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Ready:
    name: str
    target: str | None
    schema: Schema
    sample: Sample
    profile: LatencyProfile
    max_batch: int
    max_queue: int


class ModelProcess:
    """The model served from a worker process: `run` sends it a batch and waits for the
    outputs; `name`, `target`, `schema` and `sample()` as `engine.Engine` has them. Made
    by `start`."""

    def __init__(self, process: Any, conn: Connection, ready: _Ready) -> None:
        self._process = process
        self._conn = conn
        self._lock = threading.Lock()
        self.ready = ready

    @property
    def name(self) -> str:
        """The workload's name."""
        return self.ready.name

    @property
    def target(self) -> str | None:
        """The target the workload was loaded from."""
        return self.ready.target

    @property
    def schema(self) -> Schema:
        """What a request carries."""
        return self.ready.schema

    @classmethod
    def start(cls, spec: WorkerSpec, progress: Callable[[str], None]) -> ModelProcess:
        """Start the worker and wait until it is ready to serve, passing on its progress
        lines; an error it met while building or timing the model is raised here."""
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        process = context.Process(
            target=_main, args=(theirs, spec), name="lightspeed-model", daemon=True
        )
        process.start()
        theirs.close()
        try:
            while True:
                kind, payload = _receive(ours, process)
                if kind == "progress":
                    progress(payload)
                elif kind == "ready":
                    return cls(process, ours, payload)
                else:
                    raise payload
        except BaseException:
            ours.close()
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                process.kill()
            raise

    @property
    def pid(self) -> int | None:
        """The worker's process id."""
        pid: int | None = self._process.pid
        return pid

    def sample(self, index: int = 0) -> Sample:
        """A valid request's sample: the workload's own batch's first, whatever `index`
        (the worker sends one)."""
        return self.ready.sample

    def thread_setup(self) -> None:
        """Nothing to set on the calling thread: the worker set its own threads."""

    def run(self, samples: Sequence[Sample]) -> list[Any]:
        """The model on `samples` as one batch, in the worker: each sample's output.
        Raises WorkloadError when the model raised or the worker is gone."""
        with self._lock:
            try:
                self._conn.send(("run", list(samples)))
            except OSError:
                raise _ended(self._process) from None
            kind, payload = _receive(self._conn, self._process)
        if kind != "outputs":
            raise payload
        outputs: list[Any] = payload
        return outputs

    def close(self) -> None:
        """Tell the worker to stop, wait for it (`STOP_TIMEOUT_S`, then kill it)."""
        with self._lock:
            with contextlib.suppress(OSError):
                self._conn.send(("stop", None))
            self._conn.close()
        self._process.join(STOP_TIMEOUT_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


def prepare_worker(
    target: str,
    settings: ServeSettings,
    *,
    device: str = "cpu",
    dtype: str = "fp32",
    hardware: str | None = None,
    profile: LatencyProfile | None = None,
    threads: int = 1,
    progress: Callable[[str], None] = lambda _: None,
) -> Prepared:
    """`prepare` run in a worker process of its own (`serving.worker`), which then serves
    the model: the Prepared's engine sends it each batch. `serve.close_engine` stops it."""
    spec = WorkerSpec(
        target=target,
        device=device,
        dtype=dtype,
        hardware=hardware,
        threads=threads,
        settings=settings,
        profile=profile,
    )
    model = ModelProcess.start(spec, progress)
    ready = model.ready
    return Prepared(
        engine=model,
        profile=ready.profile,
        settings=settings,
        max_batch=ready.max_batch,
        max_queue=ready.max_queue,
    )


def _receive(conn: Connection, process: Any) -> tuple[str, Any]:
    try:
        kind, payload = conn.recv()
    except (EOFError, OSError):
        return "error", _ended(process)
    return kind, payload


def _ended(process: Any) -> WorkloadError:
    process.join(1.0)
    code = process.exitcode
    how = "" if code is None else f" (exit status {code})"
    return WorkloadError(f"the model's worker process ended{how}; restart the server.")


def _main(conn: Connection, spec: WorkerSpec) -> None:
    # The front end drains on Ctrl-C, then stops this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    torch.set_num_threads(spec.threads)
    try:
        prepared = prepare(
            spec.target,
            spec.settings,
            device=spec.device,
            dtype=spec.dtype,
            hardware=spec.hardware,
            profile=spec.profile,
            progress=lambda text: conn.send(("progress", text)),
        )
        engine = prepared.engine
        ready = _Ready(
            name=engine.name,
            target=engine.target,
            schema=engine.schema,
            sample=engine.sample(),
            profile=prepared.profile,
            max_batch=prepared.max_batch,
            max_queue=prepared.max_queue,
        )
    except Exception as exc:
        conn.send(("error", _sendable(exc)))
        return
    conn.send(("ready", ready))
    gc.freeze()  # the model and torch live as long as the process: no collection walks them
    while True:
        try:
            kind, samples = conn.recv()
        except (EOFError, OSError):
            return
        if kind == "stop":
            return
        try:
            outputs = engine.run(samples)
        except Exception as exc:
            conn.send(("error", _sendable(exc)))
            continue
        conn.send(("outputs", outputs))


def _sendable(exc: Exception) -> Exception:
    """`exc` if it survives pickling (lightspeed's errors do), else its first line as a
    WorkloadError."""
    if isinstance(exc, LightspeedError):
        try:
            pickle.loads(pickle.dumps(exc))
            return exc
        except Exception:
            pass
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return WorkloadError(text)
