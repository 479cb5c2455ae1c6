"""What an H200 measured (`benchmarks/gpu_run.py`, captured in `tests/data/gpu/`, whose
README says how), checked here without a GPU: the calibration against the datasheet, each
profile against the torch.profiler trace of the same step as `lightspeed trace` reads it,
and the profile's memory against the CUDA allocator's own peak."""

from __future__ import annotations

import collections
import gzip
import json
import shutil
import statistics
from pathlib import Path

import pytest

from lightspeed import load_profile
from lightspeed.analysis.step_roofline import analyse_ops
from lightspeed.dtypes import Precision
from lightspeed.facts.profile import Profile
from lightspeed.hardware.catalog import catalog_hardware
from lightspeed.trace import RankAnalysis, analyse_traces, load_traces

DATA = Path(__file__).parent / "data" / "gpu"
CAPTURES = [
    f"{name}-{dtype}-cuda"
    for dtype in ("bf16", "fp32")
    for name in ("gpt2-small", "bert-base", "resnet50")
]
MATMULS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Profile]:
    folder = tmp_path_factory.mktemp("gpu-profiles")
    loaded = {}
    for stem in CAPTURES:
        target = folder / f"{stem}.profile.json"
        with gzip.open(DATA / f"{stem}.profile.json.gz", "rb") as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        loaded[stem] = load_profile(target)
    return loaded


@pytest.fixture(scope="module")
def traces() -> dict[str, RankAnalysis]:
    return {
        stem: analyse_traces(load_traces([DATA / f"{stem}.pt.trace.json.gz"])).ranks[0]
        for stem in CAPTURES
    }


def test_calibration_reaches_the_datasheet() -> None:
    measured = json.loads((DATA / "calibrate-cuda.json").read_text())
    datasheet = catalog_hardware("h200-sxm")
    peaks = measured["peak_flops_per_s"]
    assert peaks["bf16"] >= 0.70 * datasheet.peak(Precision.BF16)
    assert measured["memory_bandwidth_bytes_per_s"] >= 0.80 * (
        datasheet.memory_bandwidth_bytes_per_s
    )
    # No ceiling above its datasheet peak: fp32 convolutions used to be timed on TF32
    # tensor cores (cuDNN's default), which put the fp32 ceiling at 181 TFLOP/s.
    for precision in ("fp32", "tf32", "bf16", "fp16"):
        assert peaks[precision] <= 1.05 * datasheet.peak(Precision(precision))


@pytest.mark.parametrize("stem", CAPTURES)
def test_profile_kernel_times_match_the_trace(
    stem: str, profiles: dict[str, Profile], traces: dict[str, RankAnalysis]
) -> None:
    profile, rank = profiles[stem], traces[stem]
    steps = list(rank.steps)
    assert len(steps) == 3
    # The matrix products: the same count and FLOPs each step, the same kernel time.
    products = [op for op in profile.ops if op.name in MATMULS]
    for step in steps:
        stats = step.results["matmuls"]
        assert stats.ops == len(products)
        assert stats.flops == pytest.approx(sum(op.flops for op in products), rel=1e-9)
    traced = statistics.median(step.results["matmuls"].time_s for step in steps)
    assert sum(op.time_s or 0.0 for op in products) == pytest.approx(traced, rel=0.05)
    # Each product by name and FLOPs (its shape): the trace's whole window keeps every one.
    whole = rank.whole.results["matmuls"]
    window_steps = len(steps) - 1 if rank.last_step_left_out else len(steps)
    traced_by_op: dict[tuple[str, int], float] = collections.defaultdict(float)
    for point in whole.points:
        traced_by_op[(point.name, int(point.flops))] += point.time_s / window_steps
    profiled_by_op: dict[tuple[str, int], float] = collections.defaultdict(float)
    for op in products:
        profiled_by_op[(op.name, op.flops)] += op.time_s or 0.0
    assert profiled_by_op.keys() == traced_by_op.keys()
    for key, seconds in profiled_by_op.items():
        assert seconds == pytest.approx(traced_by_op[key], rel=0.05), key
    # Every op's kernels: the profile's op times sum to the device's busy time a step.
    busy = statistics.median(
        s.results["temporal_breakdown"].total_s - s.results["temporal_breakdown"].idle_s
        for s in steps
    )
    assert sum(op.time_s or 0.0 for op in profile.ops) == pytest.approx(busy, rel=0.05)


@pytest.mark.parametrize("stem", CAPTURES)
def test_memory_matches_the_allocator(stem: str, profiles: dict[str, Profile]) -> None:
    allocator = json.loads((DATA / f"{stem}.memory.json").read_text())
    memory = profiles[stem].memory
    assert memory is not None and memory.method == "cuda-allocator"
    # The categories at the peak add up to it, and the peak is the allocator's own (net
    # of what was allocated before the step was built: cuBLAS's workspace).
    assert sum(memory.at_peak_bytes.values()) == memory.peak_bytes
    peak = allocator["max_allocated_bytes"] - allocator["allocated_before_bytes"]
    assert memory.peak_bytes == pytest.approx(peak, rel=0.01)


@pytest.mark.parametrize("stem", CAPTURES)
def test_no_matrix_op_beats_its_speed_of_light(stem: str, profiles: dict[str, Profile]) -> None:
    analyses = analyse_ops(profiles[stem])
    matrix = [a for a in analyses if a.op.macs is not None and a.time_s]
    assert matrix
    for a in matrix:
        assert a.sol_time_s <= a.time_s, (a.op.name, a.precision, a.sol_time_s, a.time_s)
    by_name = {a.op.name: a.precision for a in matrix}
    if stem == "resnet50-fp32-cuda":
        # cuDNN ran the fp32 convolutions on TF32 tensor cores (its default).
        assert by_name["aten::convolution"] is Precision.TF32
    if stem.endswith("bf16-cuda") and not stem.startswith("resnet50"):
        # Not the fp32 log-sum-exp that attention's backward takes last.
        backward = next(name for name in by_name if "attention_backward" in name)
        assert by_name[backward] is Precision.BF16


def test_an_optimizer_reading_its_step_counts_does_not_sync(
    traces: dict[str, RankAnalysis],
) -> None:
    # AdamW reads each parameter's CPU step count with `.item()`: 150 calls a step that
    # make no runtime call. The steps' only syncs are the timer's cudaDeviceSynchronize.
    host = traces["gpt2-small-bf16-cuda"].whole.results["host"]
    assert host.sync_calls == {"cudaDeviceSynchronize": 2}


WHATIF = DATA / "whatif"


def _busy_per_step(path: Path) -> float:
    """The median over a trace's steps of the device's busy time, in seconds."""
    steps = analyse_traces(load_traces([path])).ranks[0].steps
    return statistics.median(s.step_s - s.device_idle_s for s in steps)


@pytest.mark.parametrize("workload", ["resnet50", "mobilenetv3-large", "transformer-encoder"])
def test_a_captured_graph_runs_the_traced_eager_steps_kernels_back_to_back(
    workload: str,
) -> None:
    # The premise of predicting CUDA graphs from an eager trace: with the launches gone,
    # the step is its kernels. The eager trace's busy time per step (profiler on) is
    # within 3 % of the graphed step measured without a profiler, while the traced
    # eager step itself is 2.5 to 4.5 times longer.
    measured = json.loads((WHATIF / "graphs.json").read_text())
    (result,) = [r for r in measured["results"] if r["workload"] == workload]
    graphed_s = result["median_s"]["graph"]
    eager_busy = _busy_per_step(WHATIF / f"{workload}-fp32-eager.pt.trace.json.gz")
    assert abs(eager_busy / graphed_s - 1) < 0.03
    # The trace of the replayed graph has the same kernels' time.
    graph_busy = _busy_per_step(WHATIF / f"{workload}-fp32-graph.pt.trace.json.gz")
    assert abs(graph_busy / eager_busy - 1) < 0.01
    assert result["median_s"]["eager"] > 1.3 * graphed_s


def test_a_fused_optimizer_shortens_the_kernels_and_the_step() -> None:
    measured = json.loads((WHATIF / "optimizer.json").read_text())
    (bert,) = [r for r in measured["results"] if r["workload"] == "bert-base"]
    busy = {
        kind: _busy_per_step(WHATIF / f"bert-base-bf16-{kind}.pt.trace.json.gz")
        for kind in ("forloop", "foreach", "fused")
    }
    assert busy["fused"] < busy["foreach"] < busy["forloop"]
    steps = bert["median_s"]
    assert steps["fused"] < steps["foreach"] < steps["forloop"]
