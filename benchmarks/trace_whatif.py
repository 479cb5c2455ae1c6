"""What-ifs predicted from GPU traces (`lightspeed predict --trace`) against what was
measured, and each change's predicted gain on the shared traces.

    PYTHONPATH=src .venv/bin/python benchmarks/trace_whatif.py ../shared/traces

1. **Another GPU.** The same recommendation model's steps 1009–1013 traced on an A100
   (`hta-a100-recsys-train-rank3of8`) and a V100 (`hta-v100-recsys-train-rank1of2`): each
   step's compute-kernel time (communication left out: the world sizes differ, 8 and 2)
   predicted from the other GPU's trace, beside two naive baselines: the source's time ×
   the ratio of the two GPUs' fp32 peaks, and × the ratio of their memory bandwidths.
2. **CUDA graphs.** `tests/data/gpu/whatif/`: three steps traced eagerly on an H200, and
   the same steps captured as one CUDA graph and measured without a profiler; predicted
   from the eager trace, beside the naive baselines: the traced eager step, and its
   kernels' busy time.
3. **Mixed precision.** `tests/data/gpu/`: GPT-2 small, BERT-base and ResNet-50 traced in
   fp32 on an H200; predicted in bf16 against the same steps traced in bf16 and measured
   in bf16 by `lightspeed profile` (`*.profile.json.gz`).
4. **A fused optimizer.** `tests/data/gpu/whatif/`: BERT-base in bf16 traced on an H200
   with AdamW one parameter at a time, foreach, and fused; the fused step predicted from
   the first two against the fused step's own trace (both under the profiler), and the
   speed-ups beside those measured without it.
5. **Data parallel.** The shared A100 DDP run (`hta-a100-ddp-train-rank0of2`, 2 ranks):
   each all-reduce kernel's traced time against the ring model's for its bucket (the
   bytes its kernel records) over catalog links, and the steps replayed with every
   all-reduce at the model's time, or at none, against the traced steps.
6. **Gains on the shared traces**: each change's predicted step over the unchanged
   replay, per trace (median over its steps); data parallel where the trace records
   its gradients' sizes (`record_shapes`), 8 processes over NVLink 4 and over 100 Gb
   Ethernet.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path

import numpy as np

from lightspeed.dtypes import Precision
from lightspeed.errors import LightspeedError
from lightspeed.hardware import catalog_hardware
from lightspeed.hardware.links import catalog_link
from lightspeed.predict.data_parallel import ring_all_reduce_s
from lightspeed.trace.carry import carry_trace, trace_hardware
from lightspeed.trace.events import Kind
from lightspeed.trace.load import load_trace
from lightspeed.trace.replay import replay_steps
from lightspeed.trace.whatif import predict_trace

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "tests" / "data" / "gpu"
LEFT_OUT = ("128ranks-sampled", "cpu-only", "mtia")


def cross_gpu(shared: Path) -> None:
    a = load_trace(shared / "hta-a100-recsys-train-rank3of8.json.gz")
    v = load_trace(shared / "hta-v100-recsys-train-rank1of2.json.gz")
    print(
        "| from → to | step | source | predicted | measured | error | fp32-peak ratio |"
        " bandwidth ratio | by shapes |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for src, dst in ((a, v), (v, a)):
        s_hw, d_hw = trace_hardware(src), trace_hardware(dst)
        peak = s_hw.peak_flops_per_s[Precision.FP32] / d_hw.peak_flops_per_s[Precision.FP32]
        bw = s_hw.memory_bandwidth_bytes_per_s / d_hw.memory_bandwidth_bytes_per_s
        measured = {s.number: s.compute_s for s in carry_trace(dst, d_hw).steps}
        for s in carry_trace(src, d_hw).steps:
            m = measured.get(s.number)
            if m is None:
                continue
            print(
                f"| {s_hw.id} → {d_hw.id} | {s.number} | {s.compute_s * 1e3:.1f} ms |"
                f" {s.predicted_s * 1e3:.1f} ms | {m * 1e3:.1f} ms | {s.predicted_s / m - 1:+.1%} |"
                f" {s.compute_s * peak / m - 1:+.1%} | {s.compute_s * bw / m - 1:+.1%} |"
                f" {s.by_shapes_s / s.compute_s:.0%} |"
            )


def graphs() -> None:
    measured = json.loads((GPU / "whatif" / "graphs.json").read_text())
    print(
        "\n| workload | predicted | measured, graphed | error | traced eager step |"
        " kernels' busy time | measured eager |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in measured["results"]:
        name = r["workload"]
        p = predict_trace(
            load_trace(GPU / "whatif" / f"{name}-fp32-eager.pt.trace.json.gz"), cuda_graphs=True
        )
        predicted = statistics.median(s.predicted_s for s in p.steps)
        traced = statistics.median(s.traced_s for s in p.steps)
        busy = statistics.median(s.replayed_busy_s for s in p.steps)
        g, e = r["median_s"]["graph"], r["median_s"]["eager"]
        print(
            f"| {name} | {predicted * 1e3:.2f} ms | {g * 1e3:.2f} ms | {predicted / g - 1:+.1%} |"
            f" {traced * 1e3:.2f} ms ({traced / g - 1:+.0%}) | {busy * 1e3:.2f} ms"
            f" ({busy / g - 1:+.1%}) | {e * 1e3:.2f} ms |"
        )


def profile_step(name: str, dtype: str) -> float:
    with gzip.open(GPU / f"{name}-{dtype}-cuda.profile.json.gz") as f:
        return float(json.load(f)["timing"]["median_s"])


def mixed_precision() -> None:
    print(
        "\n| workload | fp32 traced | bf16 predicted | bf16 traced | error | device busy:"
        " predicted / bf16 traced | fp32 measured | bf16 measured |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in ("gpt2-small", "bert-base", "resnet50"):
        p = predict_trace(
            load_trace(GPU / f"{name}-fp32-cuda.pt.trace.json.gz"), precision=Precision.BF16
        )
        b = replay_steps(load_trace(GPU / f"{name}-bf16-cuda.pt.trace.json.gz"))
        traced32 = statistics.median(s.traced_s for s in p.steps)
        predicted = statistics.median(s.predicted_s for s in p.steps)
        traced16 = statistics.median(s.traced_s for s in b.steps)
        busy_p = statistics.median(s.predicted_busy_s for s in p.steps)
        busy_b = statistics.median(s.replayed_busy_s for s in b.steps)
        print(
            f"| {name} | {traced32 * 1e3:.1f} ms | {predicted * 1e3:.1f} ms |"
            f" {traced16 * 1e3:.1f} ms | {predicted / traced16 - 1:+.1%} |"
            f" {busy_p * 1e3:.1f} / {busy_b * 1e3:.1f} ms |"
            f" {profile_step(name, 'fp32') * 1e3:.1f} ms |"
            f" {profile_step(name, 'bf16') * 1e3:.1f} ms |"
        )


def fused_optimizer() -> None:
    measured = json.loads((GPU / "whatif" / "optimizer.json").read_text())
    (bert,) = [r["median_s"] for r in measured["results"] if r["workload"] == "bert-base"]
    fused = replay_steps(load_trace(GPU / "whatif" / "bert-base-bf16-fused.pt.trace.json.gz"))
    fused_traced = statistics.median(s.step_s for s in fused.steps)
    print(
        "\n| from | replayed | fused, predicted | fused, traced | error | speed-up predicted |"
        " speed-up measured |"
    )
    print("|---|---|---|---|---|---|---|")
    for variant in ("forloop", "foreach"):
        p = predict_trace(
            load_trace(GPU / "whatif" / f"bert-base-bf16-{variant}.pt.trace.json.gz"),
            fused_optimizer=True,
        )
        replayed = statistics.median(s.replayed_s for s in p.steps)
        predicted = statistics.median(s.predicted_s for s in p.steps)
        print(
            f"| {variant} | {replayed * 1e3:.2f} ms | {predicted * 1e3:.2f} ms |"
            f" {fused_traced * 1e3:.2f} ms | {predicted / fused_traced - 1:+.1%} |"
            f" {replayed / predicted:.2f}× | {bert[variant] / bert['fused']:.2f}× |"
        )


def data_parallel(shared: Path) -> None:
    path = shared / "hta-a100-ddp-train-rank0of2.json.gz"
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    # Each NCCL kernel records its collective's element count (fp32 here).
    nbytes = {
        e["args"]["correlation"]: 4 * e["args"].get("In msg nelems", 0)
        for e in events
        if e.get("cat") == "kernel" and "AllReduce" in e.get("name", "")
    }
    trace = load_trace(path)
    kernels = trace.table(Kind.KERNEL)
    sizes = np.array([nbytes.get(int(c), 0) for c in kernels.correlation.tolist()])
    reduce = sizes > 0
    traced_us = kernels.dur_us[reduce]
    print("\n| link | all-reduces | their traced time | the model's | traced / model |")
    print("|---|---|---|---|---|")
    links = ("nvlink3", "pcie4", "ethernet-25g")
    for link_id in links:
        link = catalog_link(link_id)
        model = np.array([ring_all_reduce_s(b, 2, link) * 1e6 for b in sizes[reduce]])
        ratios = traced_us / model
        print(
            f"| {link.name} | {int(reduce.sum())} | {traced_us.sum() / 1e3:.1f} ms |"
            f" {model.sum() / 1e3:.2f} ms | {ratios.min():.1f}–{ratios.max():.1f}× |"
        )
    replayed = replay_steps(trace)
    print("\n| all-reduces at | " + " | ".join(f"step {s.number}" for s in replayed.steps) + " |")
    print("|---|" + "---|" * len(replayed.steps))
    print("| traced | " + " | ".join(f"{s.traced_s * 1e3:.2f} ms" for s in replayed.steps) + " |")
    variants: list[tuple[str, float | None]] = [("none", None)]
    variants += [(catalog_link(i).name, None) for i in links]
    for name, _ in variants:
        durations = kernels.dur_us.astype(float)
        if name == "none":
            durations[reduce] = 0.0
        else:
            link = next(catalog_link(i) for i in links if catalog_link(i).name == name)
            durations[reduce] = [ring_all_reduce_s(b, 2, link) * 1e6 for b in sizes[reduce]]
        steps = replay_steps(trace, {Kind.KERNEL: durations}).steps
        print(f"| {name} | " + " | ".join(f"{s.step_s * 1e3:.2f} ms" for s in steps) + " |")


def gains(folders: list[Path]) -> None:
    h100 = catalog_hardware("h100-sxm")
    dp = [(8, catalog_link("nvlink4")), (8, catalog_link("ethernet-100g"))]
    print(
        "\n| trace | GPU | CUDA graphs | fused optimizer | bf16 | on an H100 SXM |"
        " 8 × NVLink 4 | 8 × 100 GbE |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for folder in folders:
        for path in sorted(folder.glob("*.json.gz")):
            if any(p in path.name for p in LEFT_OUT) or ".profile." in path.name:
                continue
            trace = load_trace(path)
            cells = []
            try:
                gpu = trace_hardware(trace).id
            except LightspeedError:
                continue
            for change in (
                {"cuda_graphs": True},
                {"fused_optimizer": True},
                {"precision": Precision.BF16},
                {"hardware": h100},
                *({"data_parallel": d} for d in dp),
            ):
                try:
                    p = predict_trace(trace, **change)  # type: ignore[arg-type]
                except LightspeedError:
                    cells.append("—")
                    continue
                cells.append(f"{statistics.median(s.speedup for s in p.steps):.2f}×")
            name = path.name.removesuffix(".json.gz").removesuffix(".pt.trace")
            print(f"| {name} | {gpu} | {' | '.join(cells)} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shared", type=Path, help="the shared traces' folder")
    args = parser.parse_args()
    cross_gpu(args.shared)
    graphs()
    mixed_precision()
    fused_optimizer()
    data_parallel(args.shared)
    gains([args.shared, GPU])


if __name__ == "__main__":
    main()
