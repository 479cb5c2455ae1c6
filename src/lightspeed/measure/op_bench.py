"""Ops of a training step timed one by one, on the device, from their shapes alone.

The step runs on fake tensors (`measure.shape_only.fake_step`); each op it dispatches
that `wanted` picks runs its real kernel on tensors of zeros with the op's shapes,
strides and dtypes (values do not change a kernel's time, except the values that decide
shapes, which are the batch's own), a few times, and its median time is kept. This is
how a change that swaps kernels — autocast's bf16 matrix products on a CPU without
native bf16, which run 10× faster or 100× slower than fp32 depending on the operands'
layout — is timed on the device where a roofline ceiling cannot tell.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lightspeed import progress
from lightspeed.measure.capture import op_inputs
from lightspeed.measure.device import synchronizer
from lightspeed.measure.shape_only import fake_step
from lightspeed.measure.step import StepSettings
from lightspeed.predict.carry import OpKey
from lightspeed.workload import Workload
from lightspeed.workload.torch_internals import op_name, real_arguments

# Calls of each op kept for its median, after one untimed call: at least MIN_CALLS, and
# more, up to MAX_CALLS, until the timed calls add up to MIN_TOTAL_S — a kernel of a few
# microseconds timed three times is at the mercy of one interruption.
MIN_CALLS = 3
MAX_CALLS = 50
MIN_TOTAL_S = 2e-3


def time_ops(
    workload: Workload, settings: StepSettings, wanted: Callable[[OpKey], bool]
) -> dict[OpKey, float]:
    """Seconds per call of each op of one training step of `workload` whose key
    `wanted` picks, each kernel configuration timed once (see the module's docstring)."""
    timer = _OpTimer(wanted, synchronizer(settings.device), settings.device.value)
    with (
        fake_step(workload, settings) as prepared,
        progress.stage("timing ops one by one"),
        timer,
    ):
        prepared.step()
    return timer.times


class _OpTimer(TorchDispatchMode):
    """Times the real kernel of every wanted op it sees; passes every op on."""

    def __init__(
        self, wanted: Callable[[OpKey], bool], sync: Callable[[], None], device_type: str
    ) -> None:
        super().__init__()
        self._wanted = wanted
        self._sync = sync
        self._device_type = device_type
        self.times: dict[OpKey, float] = {}

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func.namespace not in ("profiler", "prim"):
            key = op_key(op_name(func), args, kwargs)
            if key not in self.times and self._wanted(key):
                timed = self._time(func, args, kwargs)
                if timed is not None:
                    self.times[key] = timed
        return func(*args, **kwargs)

    def _time(
        self, func: torch._ops.OpOverload, args: Any, kwargs: Mapping[str, Any]
    ) -> float | None:
        """Median seconds per call; None for an op whose kernel refuses zeros in place of
        its values (the step then predicts it without its own time)."""
        # The op arrives as autocast made it: called again, it must not be cast again.
        no_autocast = torch.autocast(self._device_type, enabled=False)
        with real_arguments(args, kwargs) as (real_args, real_kwargs), no_autocast:
            try:
                func(*real_args, **real_kwargs)
            except RuntimeError:
                return None
            times: list[float] = []
            while len(times) < MIN_CALLS or (len(times) < MAX_CALLS and sum(times) < MIN_TOTAL_S):
                self._sync()
                start = time.perf_counter()
                func(*real_args, **real_kwargs)
                self._sync()
                times.append(time.perf_counter() - start)
        return statistics.median(times)


def op_key(name: str, args: Any, kwargs: Mapping[str, Any]) -> OpKey:
    """The key of an op called `name` with these arguments."""
    shapes, dtypes = op_inputs((args, kwargs))
    return name, shapes, dtypes
