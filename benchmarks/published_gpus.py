"""Cross-GPU predictions checked against published GPU measurements (NeuSight's data).

    PYTHONPATH=src .venv/bin/python benchmarks/published_gpus.py \\
        --data ../shared/gpu-data/neusight --json published_gpus.json

For every configuration (model, inf/train, sequence, batch) with a per-op CSV on GPU A,
`neusight.profile_of` makes the Profile measured on A; `lightspeed.predict(profile,
hardware=B)` predicts it on every other GPU B that measured the same configuration, and
the prediction is set against B's measured whole-model time (`e2e_latency`). Beside it,
the baselines the model must beat, on the same pairs: the identity (B takes A's time),
A's time scaled by the fp32 peaks (A over B), by the memory bandwidths, and the step's
speed of light on B (`lightspeed`'s roofline, no measurement). The matrix products of
`gemm_fp32.csv` are carried over one by one in the same way (`predict.hardware.carry_time`,
the rule the profile's ops go through) for every shape two GPUs measured.

DIR has NeuSight's layout (`label/<GPU>/…`, `model_configs/`, `gemm_fp32.csv`) and may
hold other GPUs in it: `GPUS` maps every GPU folder NeuSight published, the ones held
out of the shared data included, to its catalog entry. Pairs are reported by group: the
NVIDIA GPUs' inference (the acceptance set), the AMD GPUs, and across vendors. Nothing
is fitted to these runs: the model's rules and constants are frozen in
`predict/hardware.py` before this runs.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lightspeed
import neusight
from lightspeed.analysis.step_roofline import analyse_op
from lightspeed.dtypes import Precision
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.records import OpRecord
from lightspeed.hardware import catalog_hardware
from lightspeed.measure.capture import capture_forward
from lightspeed.predict.hardware import carry_time

# Every GPU folder of NeuSight's labels (and the device names of its gemm table) → the
# catalog entry. The held-out GPUs are here so the frozen benchmark runs on them as is.
GPUS = {
    "Tesla_P4": "p4",
    "Tesla_P100-PCIE-16GB": "p100-pcie-16gb",
    "Tesla_T4": "t4",
    "Tesla_V100-PCIE-32GB": "v100-pcie-32gb",
    "NVIDIA_A100-PCIE-40GB": "a100-40gb-pcie",
    "AMD_Instinct_MI100": "mi100",
    "AMD_Instinct_MI210": "mi210",
    # Held out of ../shared/gpu-data: predicted, never fitted on.
    "NVIDIA_H100_80GB_HBM3": "h100-sxm",
    "NVIDIA_L4": "l4",
    "NVIDIA_A100_80GB_PCIe": "a100-80gb-pcie",
    "NVIDIA_A100-SXM4-40GB": "a100-40gb-sxm",
    "AMD_Instinct_MI250": "mi250-gcd",
}


def folder_of_device(name: str) -> str:
    """The label folder name of a device name as the gemm table writes it."""
    return name.replace(" ", "_")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pair:
    """One configuration measured on `source` and predicted on `target`."""

    key: neusight.RunKey
    source: str
    target: str
    measured_ms: float
    predicted_ms: float
    baselines_ms: dict[str, float]

    def row(self) -> dict[str, Any]:
        return {
            "model": self.key.model,
            "mode": self.key.mode,
            "seq": self.key.seq,
            "batch": self.key.batch,
            "source_gpu": self.source,
            "target_gpu": self.target,
            "measured_ms": self.measured_ms,
            "predicted_ms": self.predicted_ms,
            "baselines_ms": self.baselines_ms,
        }


def vendor(gpu: str) -> str:
    return "amd" if gpu.startswith("AMD") else "nvidia"


def group_of(source: str, target: str, mode: str) -> str:
    """The report group of a pair: NVIDIA inference, AMD, or across vendors."""
    if vendor(source) != vendor(target):
        return f"across vendors, {mode}"
    return f"{vendor(source).upper() if vendor(source) == 'amd' else 'NVIDIA'} {mode}"


def model_pairs(data: Path, hardware: dict[str, Hardware]) -> tuple[list[Pair], list[dict]]:
    """Every ordered pair of GPUs that measured one configuration, A with a per-op CSV;
    and, per run, what the reader could not map and the residual."""
    runs = [r for r in neusight.runs_in(data) if r.gpu in hardware]
    by_key: dict[neusight.RunKey, list[neusight.Run]] = defaultdict(list)
    for run in runs:
        by_key[run.key].append(run)
    pairs: list[Pair] = []
    mapped: list[dict] = []
    for key, measured in sorted(by_key.items()):
        nodes = None
        for a in measured:
            if not a.rows:
                continue
            nodes = nodes if nodes is not None else neusight.nodes_of(a)
            source = hardware[a.gpu]
            made = neusight.profile_of(a, source, nodes)
            mapped.append(
                {
                    "gpu": a.gpu,
                    "run": key.stem,
                    "ops": len(made.profile.ops),
                    "e2e_ms": a.e2e_ms,
                    "profiled_ms": made.profiled_ms,
                    "residual": made.residual,
                    "unmapped_ms": made.unmapped_ms,
                    "unmapped_nodes": list(made.unmapped_nodes),
                }
            )
            for b in measured:
                if b.gpu == a.gpu or not b.rows:
                    continue
                target = hardware[b.gpu]
                predicted = lightspeed.predict(made.profile, hardware=target)
                assert predicted.step_time_s is not None
                e2e_a = a.e2e_ms
                pairs.append(
                    Pair(
                        key=key,
                        source=a.gpu,
                        target=b.gpu,
                        measured_ms=b.e2e_ms,
                        predicted_ms=predicted.step_time_s * 1e3,
                        baselines_ms={
                            "identity": e2e_a,
                            "fp32 peak ratio": e2e_a
                            * source.peak(Precision.FP32)
                            / target.peak(Precision.FP32),
                            "bandwidth ratio": e2e_a
                            * source.memory_bandwidth_bytes_per_s
                            / target.memory_bandwidth_bytes_per_s,
                            "speed of light on B": _sol_s(made.profile.ops, target) * 1e3,
                        },
                    )
                )
    return pairs, mapped


def _sol_s(ops: Iterable[OpRecord], hw: Hardware) -> float:
    return sum(analyse_op(op, hw).sol_time_s for op in ops)


# --- matrix products one by one -------------------------------------------------------


def _product(op: str, b: int, m: int, n: int, k: int) -> OpRecord:
    """The aten op lightspeed captures for NeuSight's `bmm` or `linear` of this shape."""
    if op == "bmm":
        x = torch.empty(b, m, k, device="meta")
        y = torch.empty(b, k, n, device="meta")
        records = capture_forward(_Fn(torch.bmm), x, y)
    else:
        shape = (m, k) if b == 1 else (b, m, k)
        x = torch.empty(*shape, device="meta")
        w = torch.empty(n, k, device="meta")
        bias = torch.empty(n, device="meta")
        records = capture_forward(_Fn(F.linear), x, w, bias)
    products = [r for r in records if r.macs]
    assert len(products) == 1, records
    return products[0]


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.fn(*args)


def gemm_pairs(data: Path, hardware: dict[str, Hardware]) -> list[dict[str, Any]]:
    """Each product measured on two GPUs, carried from one to the other."""
    times: dict[tuple[str, int, int, int, int], dict[str, float]] = defaultdict(dict)
    with (data / "gemm_fp32.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            gpu = folder_of_device(row["gpu"])
            if gpu not in hardware:
                continue
            shape = (row["op"], int(row["B"]), int(row["M"]), int(row["N"]), int(row["K"]))
            times[shape][gpu] = float(row["latency_ms"])
    out = []
    for shape, measured in sorted(times.items()):
        if len(measured) < 2:
            continue
        op = _product(*shape)
        for a, t_a in measured.items():
            timed = dataclasses.replace(op, time_s=t_a * 1e-3)
            for b, t_b in measured.items():
                if a == b:
                    continue
                predicted = carry_time(timed, hardware[a], hardware[b])
                out.append(
                    {
                        "op": shape[0],
                        "B": shape[1],
                        "M": shape[2],
                        "N": shape[3],
                        "K": shape[4],
                        "source_gpu": a,
                        "target_gpu": b,
                        "measured_ms": t_b,
                        "predicted_ms": predicted * 1e3,
                        "peak_ratio_ms": t_a
                        * hardware[a].peak(Precision.FP32)
                        / hardware[b].peak(Precision.FP32),
                    }
                )
    return out


# --- the summary -----------------------------------------------------------------------


def errors(measured: Sequence[float], predicted: Sequence[float]) -> dict[str, float]:
    """|predicted − measured| / measured: median, mean and worst, as fractions."""
    errs = [abs(p / m - 1) for m, p in zip(measured, predicted, strict=True)]
    return {
        "n": len(errs),
        "median": statistics.median(errs),
        "mean": statistics.fmean(errs),
        "max": max(errs),
    }


def summary(pairs: Sequence[Pair]) -> dict[str, dict[str, dict[str, float]]]:
    """Per group: the model's errors and each baseline's, on the same pairs."""
    groups: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        groups[group_of(p.source, p.target, p.key.mode)].append(p)
    table = {}
    for name, members in sorted(groups.items()):
        measured = [p.measured_ms for p in members]
        row = {"lightspeed": errors(measured, [p.predicted_ms for p in members])}
        for baseline in members[0].baselines_ms:
            row[baseline] = errors(measured, [p.baselines_ms[baseline] for p in members])
        table[name] = row
    return table


def gemm_summary(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """The products' errors, all and by the size class of their smallest dimension."""
    classes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        classes["all"].append(r)
        classes[_gemm_class(r)].append(r)
    out = {}
    for name, members in sorted(classes.items()):
        measured = [r["measured_ms"] for r in members]
        out[name] = {
            "lightspeed": errors(measured, [r["predicted_ms"] for r in members]),
            "fp32 peak ratio": errors(measured, [r["peak_ratio_ms"] for r in members]),
        }
    return out


def _gemm_class(r: dict[str, Any]) -> str:
    small = min(r["M"], r["N"], r["K"])
    flops = 2 * r["B"] * r["M"] * r["N"] * r["K"]
    size = "< 1 GFLOP" if flops < 1e9 else ("< 100 GFLOP" if flops < 1e11 else "≥ 100 GFLOP")
    edge = "smallest dim < 128" if small < 128 else "smallest dim ≥ 128"
    return f"{size}, {edge}"


def _print_table(title: str, table: dict[str, dict[str, dict[str, float]]]) -> None:
    print(f"\n{title}")
    print(f"{'group':34} {'pairs':>6}  {'method':22} {'median':>7} {'mean':>7} {'worst':>7}")
    for group, row in table.items():
        for i, (method, e) in enumerate(row.items()):
            label = group if i == 0 else ""
            n = f"{int(e['n']):6d}" if i == 0 else " " * 6
            print(
                f"{label:34} {n}  {method:22} {e['median']:7.1%} {e['mean']:7.1%} {e['max']:7.1%}"
            )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="NeuSight's layout")
    parser.add_argument("--json", type=Path, help="write the pairs here")
    parser.add_argument("--no-gemm", action="store_true", help="skip gemm_fp32.csv")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    folders = {p.name for p in (args.data / "label").iterdir() if p.is_dir()}
    unknown = sorted(folders - GPUS.keys())
    if unknown:
        parser.error(f"GPU folders without a catalog entry in GPUS: {', '.join(unknown)}")
    hardware = {gpu: catalog_hardware(GPUS[gpu]) for gpu in sorted(folders)}
    if (args.data / "gemm_fp32.csv").exists():
        with (args.data / "gemm_fp32.csv").open(newline="") as f:
            for row in csv.DictReader(f):
                gpu = folder_of_device(row["gpu"])
                if gpu not in hardware and gpu in GPUS:
                    hardware[gpu] = catalog_hardware(GPUS[gpu])
    pairs, mapped = model_pairs(args.data, hardware)
    gemm = [] if args.no_gemm or not (args.data / "gemm_fp32.csv").exists() else None
    if gemm is None:
        gemm = gemm_pairs(args.data, hardware)
    table = summary(pairs)
    _print_table("Whole models: |error| of the step predicted on B from a profile on A", table)
    gemm_table = gemm_summary(gemm) if gemm else {}
    if gemm_table:
        _print_table("Matrix products one by one", gemm_table)
    print("\nResidual (e2e over the op-by-op run − 1) and unmapped time per source run:")
    for m in mapped:
        print(
            f"  {m['gpu']:24} {m['run']:26} residual {m['residual']:+6.1%}"
            f"  unmapped {m['unmapped_ms']:7.2f} ms of {m['profiled_ms']:8.1f}"
        )
    print(f"\n{time.perf_counter() - started:.1f} s")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "pairs": [p.row() for p in pairs],
                    "gemm_pairs": gemm,
                    "summary": table,
                    "gemm_summary": gemm_table,
                    "runs": mapped,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
