"""One workload in one precision on one device: its profile, the torch.profiler trace of
the same step, and the allocator's own peak beside the profile's memory categories.

    PYTHONPATH=src python benchmarks/gpu_capture.py gpt2-small bf16 --device cuda --out DIR

Writes into DIR:
- `NAME-DTYPE-DEVICE.profile.json`: `lightspeed.profile` of the step (`save_profile`);
- `NAME-DTYPE-DEVICE.pt.trace.json.gz`: `observe(record_shapes=True)` over the same
  step (1 step skipped, 2 warm-up, 3 recorded), what `lightspeed trace` reads;
- `NAME-DTYPE-DEVICE.memory.json`: on CUDA, `torch.cuda.max_memory_allocated` over two
  steps of a freshly built step (model, optimizer state and batch included) and the
  profile's memory categories, in bytes.

`benchmarks/gpu_run.py` runs it once per workload and precision, each in its own process
so that one that fails or runs out of memory leaves the others whole.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

import lightspeed
from lightspeed.dtypes import StepDtype
from lightspeed.facts.device import Device
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.suite import get

ACTIVE_STEPS = 3


def capture_profile(name: str, dtype: str, device: Device, out: Path, stem: str) -> dict:
    """Profile the step, write it, and return its memory categories (bytes)."""
    start = time.perf_counter()
    prof = lightspeed.profile(name, device=device, dtype=dtype, budget_s=1.0)
    lightspeed.save_profile(prof, out / f"{stem}.profile.json")
    print(f"{stem}: profile in {time.perf_counter() - start:.1f} s", flush=True)
    if prof.memory is None:
        return {}
    # The totals; the profile itself keeps the categories over the step.
    memory = dataclasses.asdict(prof.memory)
    return {k: v for k, v in memory.items() if k.endswith("_bytes") and not isinstance(v, dict)} | {
        "method": memory.get("method")
    }


def capture_trace(name: str, dtype: str, device: Device, out: Path, stem: str) -> dict:
    """Trace the step under `observe`; return the allocator's peak around it (CUDA)."""
    start = time.perf_counter()
    if device is Device.CUDA:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if device is Device.CUDA else 0
    step = prepare(get(name), StepSettings(device=device, dtype=StepDtype.parse(dtype)))
    step.step()
    step.step()
    step.sync()
    allocator = {}
    if device is Device.CUDA:
        allocator = {
            "allocated_before_bytes": before,
            "max_allocated_bytes": torch.cuda.max_memory_allocated(),
            "allocated_after_two_steps_bytes": torch.cuda.memory_allocated(),
            "max_reserved_bytes": torch.cuda.max_memory_reserved(),
        }
    with tempfile.TemporaryDirectory() as tmp:
        with lightspeed.observe(
            wait=1, warmup=2, active=ACTIVE_STEPS, trace_dir=tmp, record_shapes=True
        ) as obs:
            for _ in range(1 + 2 + ACTIVE_STEPS):
                step.step()
                step.sync()
                obs.step()
        assert obs.trace_path is not None
        target = out / f"{stem}.pt.trace.json.gz"
        if obs.trace_path.suffix == ".gz":
            shutil.copyfile(obs.trace_path, target)
        else:
            import gzip

            with obs.trace_path.open("rb") as src, gzip.open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
        bound = obs.bound.value
    size = target.stat().st_size
    print(
        f"{stem}: trace {size / 1e6:.2f} MB gzipped, bound {bound},"
        f" in {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    return {"trace_bytes_gzipped": size, "observed_bound": bound, **allocator}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("dtype")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--skip-profile", action="store_true")
    args = parser.parse_args()
    device = Device.parse(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"{args.workload}-{args.dtype}-{device.value}"
    record: dict[str, object] = {"workload": args.workload, "dtype": args.dtype}
    if device is Device.CUDA:
        record["device_name"] = torch.cuda.get_device_name()
        record["torch"] = torch.__version__
        record["cuda"] = torch.version.cuda
    if not args.skip_profile:
        record["profile_memory"] = capture_profile(
            args.workload, args.dtype, device, args.out, stem
        )
        gc.collect()
    record.update(capture_trace(args.workload, args.dtype, device, args.out, stem))
    (args.out / f"{stem}.memory.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
