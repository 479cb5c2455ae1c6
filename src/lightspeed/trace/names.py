"""What an event is, from its name: kernel type, launch, host sync, data loading, step.

Kernel types follow HolisticTraceAnalysis 0.5 (`hta/utils/utils.py::get_kernel_type`)
so that times can be cross-checked with it: communication is a name matching
`^nccl.*Kernel` (NCCL and RCCL), memory `^(Memcpy|Memset|dma)`, computation any name
that mentions none of nccl kernels, Memcpy, Memset or Sync; the rest is other.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from lightspeed.trace.events import IntArray, Trace

BoolArray = npt.NDArray[np.bool_]


class KernelType(str, enum.Enum):
    """What a device event does (HTA's classification)."""

    COMPUTATION = "computation"
    COMMUNICATION = "communication"
    MEMORY = "memory"
    OTHER = "other"


# A type's position here is its code in the integer type columns of the analyses.
KERNEL_TYPES = tuple(KernelType)

_COMMUNICATION = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTATION = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")

# Runtime calls that launch device work (HTA's launch pattern, plus ROCm and async copies).
_LAUNCH = re.compile(
    r"(cuda.*LaunchKernel)|(^cuLaunchKernel)|(^runFunction)|(^hip(Ext)?(Module)?LaunchKernel)"
    r"|(^(cuda|hip)Mem(cpy|set)Async)|(^hipMemcpyWithStream)"
)
# Calls that block the host until the device has caught up.
_HOST_SYNC = re.compile(
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|Memcpy)$"
    r"|^aten::(item|_local_scalar_dense)$"
)
# Collectives as the host sees them: torch.distributed's calls (`c10d::`, the
# backends' `nccl:`/`gloo:` annotations, `record_param_comms`) and the waits of
# distributed awaitables, in which the host waits for other ranks.
_HOST_COLLECTIVE = re.compile(
    r"^(nccl|gloo|ucc|mpi):|^c10d::|^record_param_comms$|wait\(\)|_Wait(Back(ward)?)?$"
)
# One iteration of a torch DataLoader, as the profiler names it.
_DATA_LOADING = re.compile(r"DataLoader.*__next__|^enumerate\(DataLoader\)")
_PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")


# Names are classified by at most their first this many characters: the longest real
# kernel names (templated C++) run to a few thousand, and a regular expression that
# searches a 50 MB name of an untrusted trace would take seconds per pattern.
CLASSIFIED_NAME_CHARS = 65_536


def kernel_type(name: str) -> KernelType:
    """HTA 0.5's type of a device event called `name`."""
    if _COMMUNICATION.match(name):
        return KernelType.COMMUNICATION
    if _MEMORY.match(name):
        return KernelType.MEMORY
    if not _NOT_COMPUTATION.match(name):
        return KernelType.COMPUTATION
    return KernelType.OTHER


def name_types(trace: Trace) -> IntArray:
    """The KernelType index (0..3, in enum order) of every name of `trace`."""
    return np.array(
        [KERNEL_TYPES.index(kernel_type(n[:CLASSIFIED_NAME_CHARS])) for n in trace.names],
        dtype=np.int64,
    )


def is_launch(name: str) -> bool:
    return bool(_LAUNCH.search(name))


def is_host_sync(name: str) -> bool:
    return bool(_HOST_SYNC.match(name))


def is_host_collective(name: str) -> bool:
    return bool(_HOST_COLLECTIVE.search(name))


def is_data_loading(name: str) -> bool:
    return bool(_DATA_LOADING.search(name))


def is_worker_data_loading(name: str) -> bool:
    """An iteration of a DataLoader with worker processes (`num_workers > 0`): torch
    names it after its iterator, `_MultiProcessingDataLoaderIter`."""
    return is_data_loading(name) and "MultiProcessing" in name


def profiler_step(name: str) -> int | None:
    """N of a `ProfilerStep#N` annotation, else None."""
    match = _PROFILER_STEP.match(name)
    return int(match.group(1)) if match else None


def names_where(trace: Trace, predicate: Callable[[str], bool]) -> BoolArray:
    """A boolean per name id of `trace`: whether `predicate(name)` holds (of its first
    CLASSIFIED_NAME_CHARS characters)."""
    return np.array([predicate(n[:CLASSIFIED_NAME_CHARS]) for n in trace.names], dtype=bool)


def short_kernel_name(name: str, limit: int = 120) -> str:
    """A kernel's name without its return type, template arguments and parameters:
    `void at::native::f<float, 4>(int, float*)` → `at::native::f`; cut to `limit`
    characters with an ellipsis."""
    # `(anonymous namespace)::` is a namespace, not a parameter list: cut there, a name
    # would end at `at::native::`.
    name = name.replace("(anonymous namespace)::", "")
    cut = len(name)
    for mark in ("<", "("):
        at = name.find(mark, 0, cut)
        if at > 0:
            cut = min(cut, at)
    head = name[: min(cut, limit + 5)].strip()
    short = head.removeprefix("void ").strip() or name[:limit]
    return short if len(short) <= limit else short[: limit - 1] + "…"
