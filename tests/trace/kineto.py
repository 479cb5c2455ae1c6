"""Small Kineto traces written event by event, for tests whose expected figures follow
by hand from the timeline (times in µs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HOST_PID, HOST_TID = 100, 100
DEVICE_PID, STREAM = 0, 7


class KinetoTrace:
    """A trace in the layout torch.profiler writes: CPU events on one thread, device
    events on one stream, launches linked to their kernels by `correlation`."""

    def __init__(
        self,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        device_name: str | None = None,
    ) -> None:
        self.events: list[dict[str, Any]] = []
        self.rank = rank
        self.world_size = world_size
        self.device_name = device_name
        self._correlation = 0

    def _add(
        self, cat: str, name: str, ts: float, dur: float, stream: int = STREAM, **args: Any
    ) -> None:
        device = cat in ("kernel", "gpu_memcpy")
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "ts": ts,
                "dur": dur,
                "pid": DEVICE_PID if device else HOST_PID,
                "tid": stream if device else HOST_TID,
                "args": args,
            }
        )

    def step(self, number: int, ts: float, dur: float) -> None:
        self._add("user_annotation", f"ProfilerStep#{number}", ts, dur)

    def annotation(self, name: str, ts: float, dur: float) -> None:
        """A user annotation on the host thread (`record_function`)."""
        self._add("user_annotation", name, ts, dur)

    def cpu_op(self, name: str, ts: float, dur: float, **args: Any) -> None:
        self._add("cpu_op", name, ts, dur, **args)

    def runtime(self, name: str, ts: float, dur: float) -> None:
        self._add("cuda_runtime", name, ts, dur)

    def launch(
        self,
        ts: float,
        kernel_ts: float,
        kernel_dur: float,
        name: str = "gemm",
        cpu: float = 5,
        stream: int = STREAM,
    ) -> None:
        """A cudaLaunchKernel at `ts` taking `cpu` µs, and the kernel it launched."""
        self._correlation += 1
        self._add("cuda_runtime", "cudaLaunchKernel", ts, cpu, correlation=self._correlation)
        self._add(
            "kernel", name, kernel_ts, kernel_dur, stream=stream, correlation=self._correlation
        )

    def graph_launch(self, ts: float, cpu: float, kernels: list[tuple[float, float]]) -> None:
        """A cudaGraphLaunch at `ts` taking `cpu` µs, and its kernels (start, duration)."""
        self._correlation += 1
        self._add("cuda_runtime", "cudaGraphLaunch", ts, cpu, correlation=self._correlation)
        for start, dur in kernels:
            self._add("kernel", "node", start, dur, correlation=self._correlation)

    def copy_to_host(self, ts: float, copy_ts: float, copy_dur: float, cpu: float = 4) -> None:
        self._correlation += 1
        self._add("cuda_runtime", "cudaMemcpyAsync", ts, cpu, correlation=self._correlation)
        self._add(
            "gpu_memcpy",
            "Memcpy DtoH (Device -> Pageable)",
            copy_ts,
            copy_dur,
            correlation=self._correlation,
        )

    def document(self) -> dict[str, Any]:
        """The trace as the JSON object torch.profiler writes."""
        document: dict[str, Any] = {"traceEvents": self.events}
        if self.rank is not None:
            document["distributedInfo"] = {"rank": self.rank, "world_size": self.world_size}
        if self.device_name is not None:
            document["deviceProperties"] = [{"id": 0, "name": self.device_name}]
        return document

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.document()))
        return path


ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def all_reduce_step(rank: int, arrives: float) -> KinetoTrace:
    """Rank `rank` of 2 on an H100: one all-reduce launched (5 µs) when the rank arrives
    at `arrives` µs, its kernel ending at 305 on every rank (a rank that arrived first
    waited), a device sync, and the step ending 10 µs after it; then a second step."""
    t = KinetoTrace(rank=rank, world_size=2, device_name="NVIDIA H100 80GB HBM3")
    t.step(1, 0, 315)
    t.launch(arrives, arrives + 5, 300 - arrives, name=ALL_REDUCE)
    t.runtime("cudaDeviceSynchronize", arrives + 10, 295 - arrives)
    t.step(2, 315, 10)
    return t
