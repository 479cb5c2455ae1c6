"""Traces of a step beside the same step changed, each changed step measured: what the
what-ifs predicted from a trace (a fused optimizer, CUDA graphs) are checked against.

    PYTHONPATH=src python benchmarks/gpu_whatif.py --out DIR                 # on a GPU
    PYTHONPATH=src python benchmarks/gpu_whatif.py --out DIR --dry-run       # on a CPU

Two cases, each over a few suite workloads:

- `optimizer`: the step with AdamW updating parameter by parameter (`foreach=False`),
  over lists of tensors (`foreach=True`, the default on a GPU) and in one fused kernel
  per group (`fused=True`);
- `graphs`: the step with a capturable AdamW run eagerly, and the whole step (forward,
  backward, update) captured once as one CUDA graph and replayed.

Every variant of a workload is built side by side; the variants then take turns over
`--rounds` rounds of `--steps` steps each, synchronised at both ends, and each figure is
the median over rounds of the wall time per step. Each variant's trace is taken after
the timing under `observe(record_shapes=True)`: 1 step skipped, 2 warm-up, 3 recorded.

Writes into DIR `WORKLOAD-DTYPE-VARIANT.pt.trace.json.gz` per variant and `whatif.json`:
per workload and case, each variant's step times (s), their median, and the device.
`--dry-run` runs the optimizer case on the CPU with a tiny workload (there are no CUDA
graphs on a CPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import lightspeed
from lightspeed.dtypes import StepDtype
from lightspeed.facts.device import Device
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.suite import get

# (workload, dtype) per case. bf16 is autocast, which a captured graph would need with
# its cast cache off: the graphs case stays in fp32.
CASES: dict[str, tuple[tuple[str, str], ...]] = {
    "optimizer": (("bert-base", "bf16"), ("resnet50", "fp32"), ("mobilenetv3-large", "fp32")),
    "graphs": (
        ("resnet50", "fp32"),
        ("mobilenetv3-large", "fp32"),
        ("transformer-encoder", "fp32"),
    ),
}
DRY_CASES: dict[str, tuple[tuple[str, str], ...]] = {"optimizer": (("mlp-tiny", "fp32"),)}
OPTIMIZERS: dict[str, dict[str, Any]] = {
    "forloop": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
}
WARM_STEPS = 3


def adamw(**options: Any) -> Callable[[Any], torch.optim.Optimizer]:
    """An AdamW factory with the workloads' default learning rate and `options`."""

    def make(params: Any) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=1e-3, **options)

    return make


def captured(step: PreparedStep) -> Callable[[], None]:
    """The whole step captured once as a CUDA graph; returns its replay."""
    workload, model, batch, optimizer = step.workload, step.model, step.batch, step.optimizer
    assert isinstance(optimizer, torch.optim.Optimizer)

    def once() -> None:
        loss = workload.loss(model, batch)
        loss.backward()
        optimizer.step()

    # Warm up on a side stream, as capture requires, so that lazy state (the optimizer's,
    # cuBLAS's workspace) exists before the graph records its allocations.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARM_STEPS):
            optimizer.zero_grad(set_to_none=True)
            once()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # Gradients are allocated inside the capture, so each replay writes them afresh.
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        once()

    def replay() -> None:
        # The model, batch and optimizer state live outside the graph's pool: the step
        # is held here so that their memory is not handed to anything else.
        assert step.model is not None
        graph.replay()

    return replay


def variants(case: str, name: str, dtype: str, device: Device) -> dict[str, Callable[[], None]]:
    """Each variant of `name`'s step, built and ready: a callable running one step."""
    settings = StepSettings(device=device, dtype=StepDtype.parse(dtype))
    base = get(name)
    built: dict[str, Callable[[], None]] = {}
    if case == "optimizer":
        for variant, options in OPTIMIZERS.items():
            step = prepare(dataclasses.replace(base, optimizer=adamw(**options)), settings)
            built[variant] = step.step
    else:
        capturable = dataclasses.replace(base, optimizer=adamw(capturable=True, foreach=True))
        built["eager"] = prepare(capturable, settings).step
        built["graph"] = captured(prepare(capturable, settings))
    return built


def sync(device: Device) -> None:
    if device is Device.CUDA:
        torch.cuda.synchronize()


def time_in_turns(
    steps: dict[str, Callable[[], None]], device: Device, rounds: int, per_round: int
) -> dict[str, list[float]]:
    """Seconds per step of each variant, one figure per round, the variants taking turns."""
    for run in steps.values():
        for _ in range(WARM_STEPS):
            run()
    sync(device)
    times: dict[str, list[float]] = {v: [] for v in steps}
    for _ in range(rounds):
        for variant, run in steps.items():
            sync(device)
            start = time.perf_counter()
            for _ in range(per_round):
                run()
            sync(device)
            times[variant].append((time.perf_counter() - start) / per_round)
    return times


def trace(run: Callable[[], None], device: Device, target: Path) -> None:
    """`run`'s steps under `observe(record_shapes=True)`, gzipped to `target`."""
    with tempfile.TemporaryDirectory() as tmp:
        observing = lightspeed.observe(
            wait=1, warmup=2, active=3, trace_dir=tmp, record_shapes=True
        )
        with observing as obs:
            for _ in range(6):
                run()
                sync(device)
                obs.step()
        assert obs.trace_path is not None
        if obs.trace_path.suffix == ".gz":
            shutil.copyfile(obs.trace_path, target)
        else:
            with obs.trace_path.open("rb") as src, gzip.open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="steps timed in one round")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--only", nargs="*", help="cases to run (default: all)")
    args = parser.parse_args()
    device = Device.CPU if args.dry_run else Device.CUDA
    cases = DRY_CASES if args.dry_run else CASES
    args.out.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"torch": torch.__version__, "results": []}
    if device is Device.CUDA:
        record["device_name"] = torch.cuda.get_device_name()
        record["cuda"] = torch.version.cuda
    failed = 0
    for case, workloads in cases.items():
        if args.only and case not in args.only:
            continue
        for name, dtype in workloads:
            start = time.perf_counter()
            entry: dict[str, Any] = {"case": case, "workload": name, "dtype": dtype}
            steps: dict[str, Callable[[], None]] = {}
            try:
                steps = variants(case, name, dtype, device)
                times = time_in_turns(steps, device, args.rounds, args.steps)
                entry["step_s"] = times
                entry["median_s"] = {v: statistics.median(t) for v, t in times.items()}
                for variant, run in steps.items():
                    trace(run, device, args.out / f"{name}-{dtype}-{variant}.pt.trace.json.gz")
            except Exception as error:  # one workload failing leaves the others whole
                failed += 1
                entry["error"] = f"{type(error).__name__}: {error}"
                traceback.print_exc()
            entry["seconds"] = round(time.perf_counter() - start, 1)
            record["results"].append(entry)
            medians = ", ".join(
                f"{v} {s * 1e3:.2f} ms" for v, s in entry.get("median_s", {}).items()
            )
            print(f"{case} {name} {dtype}: {medians or entry.get('error')}", flush=True)
            (args.out / "whatif.json").write_text(json.dumps(record, indent=1) + "\n")
            steps.clear()
            if device is Device.CUDA:
                torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
