"""Cross-GPU predictions checked against published GPU measurements (NeuSight's data).

    PYTHONPATH=src .venv/bin/python benchmarks/published_gpus.py \\
        --data ../shared/gpu-data/neusight --json published_gpus.json

For every configuration (model, inf/train, sequence, batch) with a per-op CSV on GPU A,
`neusight.profile_of` makes the Profile measured on A; `predict.hardware.on_hardware`
(what `lightspeed.predict(profile, hardware=B)` runs) predicts it on every other GPU B that
measured the same configuration, against B's measured whole-model time (`e2e_latency`),
and each kind of op's time against B's own op-by-op measurement. Beside it, the
baselines the model must beat, on the same pairs: the identity (B takes A's time), A's
time scaled by the fp32 peaks (A over B), by the memory bandwidths, and the step's speed
of light on B (no measurement). The fp32 products of `gemm_fp32.csv` are carried over one
by one through `carry_time`, the rule every op goes through.

What GPUs sustain (`predict.hardware.SustainedRates`) is fitted on the one-by-one
products, leaving one GPU out: each pair is predicted with rates fitted without its
target (`--frozen`: the rates frozen in `predict/hardware.py` for every target). The
whole-model runs are never fitted on. `--write-validation` writes the errors found to
`predict/validation.json`, which every GPU-to-GPU prediction reports.

DIR has NeuSight's layout (`label/<GPU>/…`, `model_configs/`, `gemm_fp32.csv`) and may
hold other GPUs in it: `GPUS` maps every GPU folder NeuSight published, the held-out ones
included, to its catalog entry; `--held-out` (default: those five) names the GPUs that are
only ever targets, never a source and never fitted on. Pairs are reported by group: the
NVIDIA GPUs, the AMD GPUs, across vendors, and the held-out targets.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

import neusight
from lightspeed.analysis.profile_analysis import analyse
from lightspeed.analysis.step_roofline import analyse_op
from lightspeed.dtypes import Precision
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.records import OpRecord
from lightspeed.hardware import catalog_hardware
from lightspeed.measure.capture import capture_forward
from lightspeed.predict.hardware import (
    FP32_PRODUCTS,
    STEP,
    SUSTAINED,
    SustainedRates,
    carry_kind,
    carry_time,
    on_hardware,
    sustained_hardware,
    validation_group,
)
from lightspeed.report import render_json
from lightspeed.report.profile_report import profile_document

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


HELD_OUT = (
    "NVIDIA_H100_80GB_HBM3",
    "NVIDIA_L4",
    "NVIDIA_A100_80GB_PCIe",
    "NVIDIA_A100-SXM4-40GB",
    "AMD_Instinct_MI250",
)


def folder_of_device(name: str) -> str:
    """The label folder name of a device name as the gemm table writes it."""
    return name.replace(" ", "_")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Pair:
    """One configuration measured on `source` and predicted on `target`; `kinds`: per
    kind of op (`predict.hardware.carry_kind` on the source), its time predicted on the
    target and measured there op by op, in ms."""

    key: neusight.RunKey
    source: str
    target: str
    measured_ms: float
    predicted_ms: float
    baselines_ms: dict[str, float]
    kinds: dict[str, tuple[float, float]]

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
            "kinds_ms": {k: {"predicted": p, "measured": m} for k, (p, m) in self.kinds.items()},
        }


def vendor(gpu: str) -> str | None:
    """The vendor of a GPU folder's catalog entry."""
    return catalog_hardware(GPUS[gpu]).vendor


def group_of(source: str, target: str, mode: str, held_out: Iterable[str] = ()) -> str:
    """The report group of a pair: NVIDIA, AMD or across vendors, by mode; a held-out
    target's pairs apart."""
    if target in held_out:
        return f"held out, {mode}"
    if vendor(source) != vendor(target):
        return f"across vendors, {mode}"
    return f"{'AMD' if vendor(source) == 'amd' else 'NVIDIA'} {mode}"


def model_pairs(
    data: Path,
    hardware: dict[str, Hardware],
    rates_for: Callable[[str], SustainedRates],
    held_out: frozenset[str],
) -> tuple[list[Pair], list[dict[str, Any]]]:
    """Every ordered pair of GPUs that measured one configuration, both with a per-op
    CSV, the source not held out, predicted with the rates fitted without the target;
    and, per source run, what the reader could not map and the residual."""
    runs = [r for r in neusight.runs_in(data) if r.gpu in hardware and r.rows]
    by_key: dict[neusight.RunKey, list[neusight.Run]] = defaultdict(list)
    for run in runs:
        by_key[run.key].append(run)
    pairs: list[Pair] = []
    mapped: list[dict[str, Any]] = []
    for key, measured in sorted(by_key.items()):
        graph = {r.gpu: neusight.graph_of(r) for r in measured}
        nodes: dict[tuple[tuple[str, ...], ...], list[neusight.Node]] = {}
        made = {}
        for r in measured:
            if graph[r.gpu] not in nodes:
                nodes[graph[r.gpu]] = neusight.nodes_of(r)
            made[r.gpu] = neusight.profile_of(r, hardware[r.gpu], nodes[graph[r.gpu]])
        for a in measured:
            if a.gpu in held_out:
                continue
            source, profile = hardware[a.gpu], made[a.gpu].profile
            mapped.append(
                {
                    "gpu": a.gpu,
                    "run": key.stem,
                    "ops": len(profile.ops),
                    "e2e_ms": a.e2e_ms,
                    "profiled_ms": made[a.gpu].profiled_ms,
                    "residual": made[a.gpu].residual,
                    "unmapped_ms": made[a.gpu].unmapped_ms,
                    "unmapped_nodes": list(made[a.gpu].unmapped_nodes),
                }
            )
            kind_of = [carry_kind(op, source) for op in profile.ops]
            for b in measured:
                if b.gpu == a.gpu:
                    continue
                target = hardware[b.gpu]
                predicted = on_hardware(profile, target, rates_for(b.gpu))
                assert predicted.step_time_s is not None
                kinds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
                if graph[a.gpu] == graph[b.gpu]:  # the same ops, op by op
                    there = made[b.gpu].profile.ops
                    for kind, p_op, m_op in zip(kind_of, predicted.ops, there, strict=True):
                        kinds[kind][0] += (p_op.time_s or 0.0) * 1e3
                        kinds[kind][1] += (m_op.time_s or 0.0) * 1e3
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
                            "speed of light on B": _sol_s(profile.ops, target) * 1e3,
                        },
                        kinds={k: (v[0], v[1]) for k, v in kinds.items()},
                    )
                )
    return pairs, mapped


def _sol_s(ops: Iterable[OpRecord], hw: Hardware) -> float:
    return sum(analyse_op(op, hw).sol_time_s for op in ops)


# --- matrix products one by one -------------------------------------------------------


@functools.cache
def _product(op: str, b: int, m: int, n: int, k: int) -> OpRecord:
    """The aten op lightspeed captures for NeuSight's `bmm` or `linear` of this shape."""
    if op == "bmm":
        x = torch.empty(b, m, k, device="meta")
        y = torch.empty(b, k, n, device="meta")
        records = capture_forward(neusight.Call(torch.bmm), x, y)
    else:
        shape = (m, k) if b == 1 else (b, m, k)
        x = torch.empty(*shape, device="meta")
        w = torch.empty(n, k, device="meta")
        bias = torch.empty(n, device="meta")
        records = capture_forward(neusight.Call(F.linear), x, w, bias)
    products = [r for r in records if r.macs]
    assert len(products) == 1, records
    return products[0]


Shape = tuple[str, int, int, int, int]


def gemm_times(data: Path, gpus: Iterable[str]) -> dict[Shape, dict[str, float]]:
    """Milliseconds of each product (op, B, M, N, K) on each GPU of `gpus` that ran it."""
    wanted = set(gpus)
    times: dict[Shape, dict[str, float]] = defaultdict(dict)
    path = data / "gemm_fp32.csv"
    if not path.exists():
        return {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            gpu = folder_of_device(row["gpu"])
            if gpu in wanted:
                shape = (row["op"], int(row["B"]), int(row["M"]), int(row["N"]), int(row["K"]))
                times[shape][gpu] = float(row["latency_ms"])
    return {shape: t for shape, t in times.items() if len(t) >= 2}


def gemm_pairs(
    times: dict[Shape, dict[str, float]],
    hardware: dict[str, Hardware],
    rates_for: Callable[[str], SustainedRates],
    held_out: frozenset[str],
) -> list[dict[str, Any]]:
    """Each product measured on two GPUs carried from one (never a held-out one) to the
    other by `carry_time`, with the rates fitted without the target."""
    out = []
    for shape, measured in sorted(times.items()):
        op = _product(*shape)
        for a, t_a in measured.items():
            if a in held_out:
                continue
            timed = dataclasses.replace(op, time_s=t_a * 1e-3)
            for b, t_b in measured.items():
                if a == b:
                    continue
                predicted = carry_time(timed, hardware[a], hardware[b], rates_for(b))
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


# --- fitting what GPUs sustain, leaving one out ------------------------------------------

FLOPS_PER_JOULE = tuple(x * 1e9 for x in range(20, 201, 2))
PEAK_SHARES = (0.8, 0.85, 0.9, 0.95, 1.0)


# With fewer than two GPUs to fit on, nothing is known of what GPUs sustain: their
# datasheet peaks.
DATASHEET = SustainedRates(flops_per_joule=math.inf, peak_share=1.0)


def fit_rates(
    times: dict[Shape, dict[str, float]], hardware: dict[str, Hardware], gpus: Iterable[str]
) -> SustainedRates:
    """The `SustainedRates` that carry the products measured on `gpus` between them
    best: the least median |log(predicted / measured)| over every ordered pair, on a grid.
    The products are compute bound on these GPUs, so each is carried at the ratio of
    its speed of light at the sustained rates (what `carry_time` does), vectorised."""
    chosen = sorted(set(gpus))
    if len(chosen) < 2:
        return DATASHEET
    flops, nbytes, t = [], [], {g: [] for g in chosen}
    for shape, measured in times.items():
        if sum(g in measured for g in chosen) < 2:
            continue
        op = _product(*shape)
        flops.append(op.flops)
        nbytes.append(op.bytes)
        for g in chosen:
            t[g].append(measured.get(g, np.nan))
    fl, by = np.array(flops, float), np.array(nbytes, float)
    ms = {g: np.array(v) for g, v in t.items()}
    best: tuple[float, SustainedRates] | None = None
    for share in PEAK_SHARES:
        for fpj in FLOPS_PER_JOULE:
            rates = SustainedRates(flops_per_joule=fpj, peak_share=share)
            sol = {}
            for g in chosen:
                held = sustained_hardware(hardware[g], rates)
                sol[g] = np.maximum(
                    fl / held.matmul_peak(Precision.FP32), by / held.memory_bandwidth_bytes_per_s
                )
            logs = []
            for a in chosen:
                for b in chosen:
                    if a != b:
                        ratio = ms[a] * sol[b] / sol[a] / ms[b]
                        logs.append(np.abs(np.log(ratio[np.isfinite(ratio)])))
            score = float(np.median(np.concatenate(logs)))
            if best is None or score < best[0]:
                best = (score, rates)
    assert best is not None
    return best[1]


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


def summary(
    pairs: Sequence[Pair], held_out: frozenset[str] = frozenset()
) -> dict[str, dict[str, dict[str, float]]]:
    """Per group: the model's errors and each baseline's, on the same pairs."""
    groups: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        groups[group_of(p.source, p.target, p.key.mode, held_out)].append(p)
    table = {}
    for name, members in sorted(groups.items()):
        measured = [p.measured_ms for p in members]
        row = {"lightspeed": errors(measured, [p.predicted_ms for p in members])}
        for baseline in members[0].baselines_ms:
            row[baseline] = errors(measured, [p.baselines_ms[baseline] for p in members])
        table[name] = row
    return table


def kind_summary(pairs: Sequence[Pair]) -> dict[str, dict[str, float]]:
    """Per kind of op, the error of its time predicted on B against B's op-by-op
    measurement of the same ops, over `pairs`."""
    found: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for p in pairs:
        for kind, (predicted, measured) in p.kinds.items():
            if measured > 0:
                found[kind][0].append(measured)
                found[kind][1].append(predicted)
    return {kind: errors(m, p) for kind, (m, p) in found.items()}


def gemm_summary(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """The products' errors, all and by size class (FLOPs, smallest dimension)."""
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


# The groups of `predict/validation.json`, in the order it lists them.
VALIDATION_GROUPS = ("nvidia", "amd", "across vendors")


def validation_data(
    pairs: Sequence[Pair], gemm: Sequence[dict[str, Any]], command: str
) -> dict[str, Any]:
    """`predict/validation.json`: per group of GPUs (`predict.hardware.validation_group`)
    and kind of op, how well its carried time matched, leave-one-GPU-out."""

    def group_of_pair(source: str, target: str) -> str:
        return validation_group(vendor(source), vendor(target))

    groups: dict[str, dict[str, dict[str, Any]]] = {}
    for group in VALIDATION_GROUPS:
        members = [p for p in pairs if group_of_pair(p.source, p.target) == group]
        if not members:
            continue
        modes = " and ".join(
            sorted({"inference" if p.key.mode == "inf" else "training" for p in members})
        )
        gpus = sorted({p.target for p in members} | {p.source for p in members})
        runs = (
            f"NeuSight's published whole-model {modes} runs (fp32) on {', '.join(gpus)}, each"
            " predicted from each other GPU, leave-one-GPU-out"
        )
        kinds: dict[str, dict[str, Any]] = {}
        for kind, e in kind_summary(members).items():
            kinds[kind] = _validated(e, runs + ": the ops' time against the target's op by op")
        step = errors([p.measured_ms for p in members], [p.predicted_ms for p in members])
        kinds[STEP] = _validated(step, runs + ": the step against the target's measured step")
        products = [r for r in gemm if group_of_pair(r["source_gpu"], r["target_gpu"]) == group]
        if products:
            e = errors([r["measured_ms"] for r in products], [r["predicted_ms"] for r in products])
            kinds[FP32_PRODUCTS] = _validated(
                e,
                "NeuSight's fp32 matrix products measured one by one on"
                f" {', '.join(sorted({r['target_gpu'] for r in products}))}, each predicted"
                " from each other GPU, leave-one-GPU-out",
            )
        groups[group] = kinds
    return {"schema_version": 2, "command": command, "groups": groups}


def _validated(e: dict[str, float], data: str) -> dict[str, Any]:
    return {
        "pairs": int(e["n"]),
        "median_error": e["median"],
        "worst_error": e["max"],
        "data": data,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="NeuSight's layout")
    parser.add_argument("--json", type=Path, help="write the pairs here")
    parser.add_argument(
        "--held-out",
        default=",".join(HELD_OUT),
        help="GPU folders that are only predicted: never a source, never fitted on",
    )
    parser.add_argument(
        "--frozen",
        action="store_true",
        help="predict with predict/hardware.py's SUSTAINED for every target (no refit)",
    )
    parser.add_argument("--write-validation", type=Path, help="write validation.json here")
    parser.add_argument(
        "--save-profiles",
        type=Path,
        help="write each run with a per-op CSV as a profile, DIR/<GPU>/<run>.json, for"
        " `lightspeed predict DIR/<GPU>/<run>.json --hardware ID`",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    held_out = frozenset(g for g in args.held_out.split(",") if g)
    folders = {p.name for p in (args.data / "label").iterdir() if p.is_dir()}
    times = gemm_times(args.data, GPUS)
    folders |= {g for measured in times.values() for g in measured}
    unknown = sorted(folders - GPUS.keys())
    if unknown:
        parser.error(f"GPU folders without a catalog entry in GPUS: {', '.join(unknown)}")
    hardware = {gpu: catalog_hardware(GPUS[gpu]) for gpu in sorted(folders)}
    fitted_on = sorted({g for m in times.values() for g in m} - held_out)
    folds: dict[str, SustainedRates] = {}
    if not args.frozen:
        every = fit_rates(times, hardware, fitted_on)
        for gpu in hardware:
            if gpu in held_out:  # predicted as the frozen code predicts, nothing refitted
                folds[gpu] = SUSTAINED
            elif gpu in fitted_on:
                folds[gpu] = fit_rates(times, hardware, [g for g in fitted_on if g != gpu])
            else:
                folds[gpu] = every
        print(f"fitted on every GPU with products ({', '.join(fitted_on)}): {every}")
        print(f"frozen in predict/hardware.py, for the held-out GPUs: {SUSTAINED}")
        for gpu in fitted_on:
            print(f"  leaving out {gpu:24} {folds[gpu]}")

    def rates_for(gpu: str) -> SustainedRates:
        return folds.get(gpu, SUSTAINED)

    if args.save_profiles:
        save_profiles(args.data, hardware, args.save_profiles)
    pairs, mapped = model_pairs(args.data, hardware, rates_for, held_out)
    gemm = gemm_pairs(times, hardware, rates_for, held_out)
    table = summary(pairs, held_out)
    _print_table("Whole models: |error| of the step predicted on B from a profile on A", table)
    kinds = {
        group: {kind: e for kind, e in kind_summary(members).items()}
        for group, members in _grouped(pairs, held_out).items()
    }
    print("\nKinds of op: their time predicted on B against B's op-by-op measurement")
    for group, by_kind in kinds.items():
        for kind, e in by_kind.items():
            print(
                f"  {group:26} {kind:36} {int(e['n']):4d} pairs  median {e['median']:6.1%}"
                f"  worst {e['max']:6.1%}"
            )
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
                    "kinds": kinds,
                    "gemm_summary": gemm_table,
                    "runs": mapped,
                    # No fit (one GPU): the datasheet, an infinite FLOP per joule, null here.
                    "rates": {
                        g: {k: v if math.isfinite(v) else None for k, v in vars(r).items()}
                        for g, r in folds.items()
                    },
                },
                indent=1,
            )
        )
    if args.write_validation:
        command = "benchmarks/published_gpus.py --data ../shared/gpu-data/neusight"
        data = validation_data([p for p in pairs if p.target not in held_out], gemm, command)
        args.write_validation.write_text(json.dumps(data, indent=1) + "\n")


def save_profiles(data: Path, hardware: dict[str, Hardware], out: Path) -> None:
    """Each run with a per-op CSV as the JSON `lightspeed profile --json` writes."""
    for run in neusight.runs_in(data):
        if run.rows and run.gpu in hardware:
            profile = neusight.profile_of(run, hardware[run.gpu]).profile
            path = out / run.gpu / f"{run.key.stem}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            render_json.write(path, render_json.render(profile_document(analyse(profile))))


def _grouped(pairs: Sequence[Pair], held_out: frozenset[str]) -> dict[str, list[Pair]]:
    groups: dict[str, list[Pair]] = defaultdict(list)
    for p in pairs:
        groups[group_of(p.source, p.target, p.key.mode, held_out)].append(p)
    return dict(sorted(groups.items()))


if __name__ == "__main__":
    main()
