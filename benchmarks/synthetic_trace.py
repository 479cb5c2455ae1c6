"""Write a synthetic torch.profiler (Kineto) trace of a chosen size, to measure how
`lightspeed trace` scales on traces larger than the real ones at hand:

    .venv/bin/python benchmarks/synthetic_trace.py --out /tmp/synth100.json --mb 100
    time .venv/bin/lightspeed trace /tmp/synth100.json --json /tmp/s.json

Each step has the layout torch.profiler writes for a data-parallel training step of
an MLP on an H100: a `ProfilerStep#N` annotation and a DataLoader iteration on the main
thread; per layer `aten::linear` → `aten::addmm` (with `Input Dims`) → `cudaLaunchKernel`
and `aten::relu` → `aten::clamp_min` → `cudaLaunchKernel`; the backward pass on the
autograd thread (`autograd::engine::evaluate_function: AddmmBackward0` → `aten::mm` ×2);
an NCCL all-reduce per bucket of layers on a second stream; the optimizer's foreach
kernels; a host-to-device copy of the batch and a `loss.item()` that synchronizes.
Launches and device events share a `correlation`, with Kineto's `ac2g` flow events.
Times are µs with ns decimals; durations come from a seeded generator, so one set of
arguments always writes the same file. `--layers N` sets the layers a step trains (fewer:
more, shorter steps in the same size). `--ranks N` writes N files `rank<r>.pt.trace.json`
into the directory `--out`, each of about `--mb`.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any, TextIO

PID, MAIN_TID, AUTOGRAD_TID = 4242, 4242, 4250
DEVICE, COMPUTE_STREAM, NCCL_STREAM = 0, 7, 20
LAYERS, BUCKET_LAYERS = 24, 6
BATCH, WIDTH = 4096, 4096
GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1"
    "_execute_segment_k_off_kernel__5x_cublas"
)
RELU = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
    "::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, "
    "at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#14}"
    "::operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, "
    "at::detail::Array<char*, 2>)"
)
RELU_BACKWARD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)"
    "::threshold_kernel_impl<c10::BFloat16>(at::TensorIteratorBase&, c10::BFloat16, "
    "c10::BFloat16)::{lambda(c10::BFloat16, c10::BFloat16)#1}, at::detail::Array<char*, 3> >"
    "(int, at::detail::Array<char*, 3>)"
)
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
    "(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
    "FusedAdamMathFunctor<c10::BFloat16, 4, (at::native::ADAM_MODE)1, false>, double*, "
    "double, double, double, double, double, double, bool>(at::native::(anonymous "
    "namespace)::TensorListMetadata<4>, double*, double, double, double, double, double)"
)


class TraceWriter:
    """Writes events one by one as Kineto lays them out, keeping a host clock per thread
    and a device clock per stream (µs)."""

    def __init__(self, out: TextIO, seed: int, layers: int = LAYERS) -> None:
        self.out = out
        self.layers = layers
        self.random = random.Random(seed)
        self.written = 0  # bytes
        self.correlation = 0
        self.external = 0
        self.stream_free = {COMPUTE_STREAM: 0.0, NCCL_STREAM: 0.0}

    def event(self, event: dict[str, Any]) -> None:
        text = json.dumps(event, separators=(", ", ": "))
        self.out.write(",\n  " + text if self.written else "\n  " + text)
        self.written += len(text) + 4

    def span(self, cat: str, name: str, tid: int, ts: float, dur: float, **args: Any) -> None:
        self.external += 1
        args = {"External id": self.external, **args}
        self.event(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": round(ts, 3),
                "dur": round(dur, 3),
                "args": args,
            }
        )

    def launch(self, tid: int, ts: float, kernel: str, kernel_us: float, stream: int) -> float:
        """A launch call at `ts` on `tid`, its kernel on `stream` and their flow events;
        the launch's end (µs)."""
        self.correlation += 1
        call_us = self.random.uniform(3.0, 6.0)
        cat, call = (
            ("gpu_memcpy", "cudaMemcpyAsync")
            if kernel.startswith("Memcpy")
            else (
                "kernel",
                "cudaLaunchKernel",
            )
        )
        self.span("cuda_runtime", call, tid, ts, call_us, cbid=211, correlation=self.correlation)
        start = max(self.stream_free[stream], ts + call_us + self.random.uniform(2.0, 8.0))
        if stream == NCCL_STREAM:  # an all-reduce waits for the kernels computing its gradients
            start = max(start, self.stream_free[COMPUTE_STREAM])
        self.stream_free[stream] = start + kernel_us
        device_args = {"device": DEVICE, "context": 1, "stream": stream}
        self.event(
            {
                "ph": "X",
                "cat": cat,
                "name": kernel,
                "pid": DEVICE,
                "tid": stream,
                "ts": round(start, 3),
                "dur": round(kernel_us, 3),
                "args": {**device_args, "correlation": self.correlation, "queued": 0},
            }
        )
        flow = {"id": self.correlation, "cat": "ac2g", "name": "ac2g"}
        self.event({"ph": "s", "pid": PID, "tid": tid, "ts": round(ts, 3), **flow})
        self.event(
            {"ph": "f", "pid": DEVICE, "tid": stream, "ts": round(start, 3), "bp": "e", **flow}
        )
        return ts + call_us

    def op_launching(
        self,
        names: tuple[str, str],
        tid: int,
        ts: float,
        kernel: str,
        kernel_us: float,
        stream: int = COMPUTE_STREAM,
        **inner_args: Any,
    ) -> float:
        """An op, the op it calls, and the launch inside; the outer op's end (µs)."""
        outer, inner = names
        gap = self.random.uniform
        launch_at = ts + gap(4.0, 9.0) + gap(2.0, 5.0)
        end_inner = self.launch(tid, launch_at, kernel, kernel_us, stream) + gap(1.0, 3.0)
        inner_start = ts + gap(2.0, 4.0)
        self.span("cpu_op", inner, tid, inner_start, end_inner - inner_start, **inner_args)
        end = end_inner + gap(1.0, 3.0)
        self.span("cpu_op", outer, tid, ts, end - ts)
        return end

    def step(self, number: int, ts: float) -> float:
        """One training step from `ts`; its end on the host (µs)."""
        gap = self.random.uniform
        t = ts + gap(5.0, 10.0)
        loading = gap(150.0, 400.0)
        self.span(
            "user_annotation",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            MAIN_TID,
            t,
            loading,
        )
        t += loading + gap(2.0, 5.0)
        t = self.op_launching(
            ("aten::to", "aten::copy_"), MAIN_TID, t, "Memcpy HtoD (Pinned -> Device)", 95.0
        )
        dims = [[WIDTH], [BATCH, WIDTH], [WIDTH, WIDTH]]
        types = ["c10::BFloat16"] * 3
        for _ in range(self.layers):
            t = self.op_launching(
                ("aten::linear", "aten::addmm"),
                MAIN_TID,
                t + gap(3.0, 8.0),
                GEMM,
                gap(180.0, 220.0),
                **{"Input Dims": dims, "Input type": types},
            )
            t = self.op_launching(
                ("aten::relu", "aten::clamp_min"),
                MAIN_TID,
                t + gap(2.0, 5.0),
                RELU,
                gap(20.0, 30.0),
            )
        # Backward on the autograd thread, while the main thread waits in `backward()`.
        b = t + gap(20.0, 40.0)
        for layer in range(self.layers):
            b = self.op_launching(
                ("autograd::engine::evaluate_function: ReluBackward0", "aten::threshold_backward"),
                AUTOGRAD_TID,
                b + gap(3.0, 6.0),
                RELU_BACKWARD,
                gap(30.0, 40.0),
            )
            for _ in range(2):  # grad input, grad weight
                b = self.op_launching(
                    ("autograd::engine::evaluate_function: AddmmBackward0", "aten::mm"),
                    AUTOGRAD_TID,
                    b + gap(3.0, 6.0),
                    GEMM,
                    gap(180.0, 220.0),
                )
            # a bucket of gradients is ready
            if layer % BUCKET_LAYERS == BUCKET_LAYERS - 1 or layer == self.layers - 1:
                b = self.op_launching(
                    ("c10d::allreduce_", "record_param_comms"),
                    AUTOGRAD_TID,
                    b + gap(5.0, 10.0),
                    ALL_REDUCE,
                    gap(600.0, 900.0),
                    stream=NCCL_STREAM,
                )
        t = b + gap(10.0, 20.0)
        # DDP's optimizer waits (on the device) for the last bucket's all-reduce.
        self.stream_free[COMPUTE_STREAM] = max(self.stream_free.values())
        t = self.op_launching(
            ("Optimizer.step#AdamW.step", "aten::_fused_adam_"), MAIN_TID, t, ADAM, 400.0
        )
        # loss.item(): a copy to the host, then waiting for the device to catch up.
        t = self.sync(t + gap(3.0, 6.0))
        end = t + gap(5.0, 10.0)
        self.span("user_annotation", f"ProfilerStep#{number}", MAIN_TID, ts, end - ts)
        return end

    def sync(self, ts: float) -> float:
        """`aten::item` → `aten::_local_scalar_dense` → a copy and a stream sync that lasts
        until both streams are done; its end (µs)."""
        launched = self.launch(
            MAIN_TID, ts + 4.0, "Memcpy DtoH (Device -> Pageable)", 2.0, COMPUTE_STREAM
        )
        done = max(launched, *self.stream_free.values()) + 3.0
        self.span(
            "cuda_runtime", "cudaStreamSynchronize", MAIN_TID, launched + 1.0, done - launched - 1.0
        )
        self.span("cpu_op", "aten::_local_scalar_dense", MAIN_TID, ts + 2.0, done - ts - 1.0)
        self.span("cpu_op", "aten::item", MAIN_TID, ts, done - ts + 1.0)
        return done + 1.0


def write_trace(
    path: Path, megabytes: float, rank: int, world_size: int, seed: int, layers: int = LAYERS
) -> int:
    """Write one rank's trace of about `megabytes` MB to `path`, each step training an
    MLP of `layers` layers; the number of steps."""
    with path.open("w") as out:
        header = {
            "schemaVersion": 1,
            "deviceProperties": [
                {
                    "id": DEVICE,
                    "name": "NVIDIA H100 80GB HBM3",
                    "totalGlobalMem": 85029158912,
                    "computeMajor": 9,
                    "computeMinor": 0,
                    "numSms": 132,
                }
            ],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
        }
        out.write(json.dumps(header)[:-1] + ', "traceEvents": [')
        writer = TraceWriter(out, seed + rank, layers)
        for tid, name in ((MAIN_TID, "python main thread"), (AUTOGRAD_TID, "autograd thread")):
            writer.event(
                {"ph": "M", "name": "thread_name", "pid": PID, "tid": tid, "args": {"name": name}}
            )
        # µs on a clock like Kineto's (since boot), where a float still holds ns.
        t, steps = 5_000_000_000_000.0, 0
        while writer.written < megabytes * 1e6:
            t = writer.step(steps + 1, t)
            steps += 1
        out.write('\n], "traceName": "' + path.name + '"}\n')
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="a file; a directory with --ranks")
    parser.add_argument("--mb", type=float, default=100.0, help="size per rank, MB of JSON")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--layers",
        type=int,
        default=LAYERS,
        help=f"layers of the MLP a step trains (default {LAYERS}); fewer: more, shorter steps",
    )
    args = parser.parse_args()
    if args.ranks == 1:
        paths = [args.out]
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        paths = [args.out / f"rank{r}.pt.trace.json" for r in range(args.ranks)]
    for rank, path in enumerate(paths):
        steps = write_trace(path, args.mb, rank, args.ranks, args.seed, args.layers)
        print(f"wrote {path}: {path.stat().st_size / 1e6:.1f} MB, {steps} steps")


if __name__ == "__main__":
    main()
