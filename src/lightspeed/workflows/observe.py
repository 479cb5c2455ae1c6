"""`lightspeed.observe()`: profile a user's own training loop and diagnose its steps.

    with lightspeed.observe() as obs:
        for batch in obs.loop(loader):      # or call obs.step() after each step
            train_step(batch)
    obs.bound, obs.findings, obs.trace_path  # what bounds the steps, why, the trace

The loop runs under torch.profiler with a wait/warm-up/active schedule. The active
steps are written as a Chrome trace (`*.pt.trace.json.gz`, which Perfetto and
TensorBoard's profiler open) and analysed like `lightspeed trace` does, DataLoader
waits included: torch records each DataLoader iteration.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import socket
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from lightspeed import trace
from lightspeed.errors import ConfigError, LightspeedError
from lightspeed.measure.native_stderr import profiler_chatter_dropped
from lightspeed.rules import Bound, Finding
from lightspeed.trace import RankAnalysis, TraceAnalysis

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ObserveSchedule:
    """Steps to skip (`wait`), to run profiled but unrecorded (`warmup`), then record (`active`)."""

    wait: int = 1
    warmup: int = 1
    active: int = 3

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0:
            raise ConfigError("observe(): wait and warmup must be 0 or more.")
        if self.active < 1:
            raise ConfigError("observe(): active must be at least 1 step.")

    @property
    def steps(self) -> int:
        return self.wait + self.warmup + self.active


class Observation:
    """A profiled stretch of a training loop; the context manager `observe()` returns.

    Call `step()` at the end of every training step (or iterate `loop(iterable)`).
    After the block: `trace_path` (the Chrome trace file), `analysis` (the full
    TraceAnalysis), `rank` (this process's part of it), `bound` (what bounds most
    recorded steps) and `findings`.
    """

    def __init__(self, plan: ObserveSchedule, trace_dir: Path, record_shapes: bool = False) -> None:
        self.plan = plan
        self.trace_dir = trace_dir
        self.record_shapes = record_shapes
        self.steps_taken = 0
        self.trace_path: Path | None = None
        self._profiler: profile | None = None
        self._analysis: TraceAnalysis | None = None

    def __enter__(self) -> Observation:
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._profiler = profile(
            activities=activities,
            schedule=schedule(
                wait=self.plan.wait, warmup=self.plan.warmup, active=self.plan.active, repeat=1
            ),
            on_trace_ready=self._save,
            record_shapes=self.record_shapes,
        )
        with profiler_chatter_dropped():
            self._profiler.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._profiler is not None
        with profiler_chatter_dropped():
            self._profiler.__exit__(exc_type, exc, tb)
        self._profiler = None
        if exc_type is None and self.trace_path is None:
            raise ConfigError(
                f"observe() saw {self.steps_taken} step(s), but its schedule records steps"
                f" {self.plan.wait + self.plan.warmup + 1}–{self.plan.steps}: call step()"
                " after every training step, run more steps, or lower wait/warmup."
            )

    def step(self) -> None:
        """Mark the end of one training step."""
        if self._profiler is None:
            raise ConfigError("observe(): step() is called inside the `with observe()` block.")
        self.steps_taken += 1
        # Kineto starts and stops at the schedule's turns, inside step(): only the
        # profiler's own calls are held, never the user's loop.
        with profiler_chatter_dropped():
            self._profiler.step()

    def loop(self, iterable: Iterable[T], *, stop_when_recorded: bool = True) -> Iterator[T]:
        """Yield from `iterable` (a DataLoader…), ending a step after each item's body.
        Once the schedule has recorded its active steps the loop stops there, unless
        `stop_when_recorded` is False: then it runs to the end of `iterable`, the steps
        after the recorded ones unprofiled."""
        for item in iterable:
            yield item
            self.step()
            if stop_when_recorded and self.steps_taken >= self.plan.steps:
                return

    def _save(self, prof: profile) -> None:
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        # TensorBoard's profiler plugin finds `<worker>.<time>.pt.trace.json(.gz)`.
        worker = f"{socket.gethostname()}_{os.getpid()}"
        path = self.trace_dir / f"{worker}.{time.time_ns() // 1_000_000}.pt.trace.json.gz"
        prof.export_chrome_trace(str(path))
        self.trace_path = path

    @property
    def analysis(self) -> TraceAnalysis:
        """The diagnosis of the recorded steps (read from the saved trace)."""
        if self._analysis is None:
            if self.trace_path is None:
                raise LightspeedError("observe(): nothing was recorded yet.")
            self._analysis = trace.analyse([self.trace_path])
        return self._analysis

    @property
    def rank(self) -> RankAnalysis:
        return self.analysis.ranks[0]

    @property
    def bound(self) -> Bound:
        """The bound of most recorded steps (of the whole trace when it has no steps)."""
        steps = self.rank.steps.bounds
        if not steps:
            return self.rank.whole.bound
        return collections.Counter(steps).most_common(1)[0][0]

    @property
    def findings(self) -> list[Finding]:
        """The findings of the whole recorded stretch, largest possible gain first."""
        return self.rank.whole.findings


def observe(
    *,
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    trace_dir: str | Path | None = None,
    record_shapes: bool = False,
) -> Observation:
    """Profile the steps of a training loop and diagnose them (see the module docstring).

    `wait` steps run unprofiled, `warmup` steps profiled but discarded, then `active`
    steps are recorded. The trace goes to `trace_dir` (a new temporary directory when
    None) and stays there. `record_shapes`: ops' input shapes recorded too (a larger
    trace), so a GPU's matrix products are placed on its roofline.
    """
    plan = ObserveSchedule(wait=wait, warmup=warmup, active=active)
    directory = Path(trace_dir) if trace_dir is not None else Path(tempfile.mkdtemp("-lightspeed"))
    return Observation(plan, directory, record_shapes)
