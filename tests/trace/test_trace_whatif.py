"""What-ifs predicted from a trace (`trace.whatif`, `trace.carry`): each change on a
hand-built trace whose answer follows by hand, the refusals, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kineto import KinetoTrace, all_reduce_step

from factories import RunCli, printed_labels
from lightspeed import glossary
from lightspeed.analysis.roofline import place_on
from lightspeed.document import Table
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError, TraceError
from lightspeed.facts.link import Link
from lightspeed.hardware import catalog_hardware
from lightspeed.report import render_json
from lightspeed.report.trace_whatif_report import trace_prediction_document
from lightspeed.trace.carry import carried_durations, in_precision_durations
from lightspeed.trace.data_parallel import ACCUMULATE_GRAD, gradient_buckets
from lightspeed.trace.events import Kind
from lightspeed.trace.load import load_trace, load_traces
from lightspeed.trace.whatif import (
    TracePrediction,
    predict_trace,
    predict_trace_files,
    predict_traces,
)

H100 = "NVIDIA H100 80GB HBM3"


def _launch_bound(path: Path) -> Path:
    # 20 kernels of 2 µs launched every 20 µs (5 µs each), a sync at 400 that waits for
    # nothing (1 µs), the step ending at 430; then a second step, cut by the profiler.
    t = KinetoTrace(device_name=H100)
    t.step(1, 0, 430)
    for i in range(20):
        t.launch(20 * i, 20 * i + 6, 2, name="relu")
    t.runtime("cudaDeviceSynchronize", 400, 1)
    t.step(2, 430, 50)
    t.launch(440, 446, 2, name="relu")
    return t.write(path)


def test_a_cuda_graph_leaves_the_kernels_and_the_host_outside_it(tmp_path: Path) -> None:
    trace = load_trace(_launch_bound(tmp_path / "t.json"))
    (step,) = predict_trace(trace, cuda_graphs=True).steps
    # A sync lasts what it waits for: this one's own 1 µs is not replayed.
    assert step.replayed_s == pytest.approx(429e-6)
    # The graph's launch returns at 5, its 20 kernels run back to back to 45; the host
    # keeps its 15 µs after the last launch (385..400), so the sync starts at 20 and
    # returns at 45; the 29 µs between the sync and the step's end stay: 74 µs.
    assert step.predicted_s == pytest.approx(74e-6)
    assert step.predicted_busy_s == pytest.approx(40e-6)


def test_another_gpu_carries_kernels_without_shapes_by_bandwidth(tmp_path: Path) -> None:
    trace = load_trace(_launch_bound(tmp_path / "t.json"))
    h100, a100 = catalog_hardware("h100-sxm"), catalog_hardware("a100-80gb-sxm")
    durations, by_shapes = carried_durations(trace, a100)
    ratio = h100.memory_bandwidth_bytes_per_s / a100.memory_bandwidth_bytes_per_s
    assert not by_shapes.any()
    assert durations[Kind.KERNEL] == pytest.approx(trace.table(Kind.KERNEL).dur_us * ratio)
    predicted = predict_trace(trace, hardware=a100)
    assert predicted.by_time_s == predicted.carried_s > 0
    # Step 1's 20 kernels of 2 µs, as computation and on stream 7, carried.
    times = {what: (before, after) for what, before, after in predicted.device_time}
    assert times["computation"] == pytest.approx((40e-6, 40e-6 * ratio))
    assert times["stream 7"] == pytest.approx((40e-6, 40e-6 * ratio))
    # Launch-bound: the kernels run between launches, so the step stays the host's.
    (step,) = predicted.steps
    assert step.predicted_s == pytest.approx(step.replayed_s)
    assert step.predicted_busy_s == pytest.approx(40e-6 * ratio)


def test_autocast_runs_an_fp32_product_at_its_bf16_speed_of_light(tmp_path: Path) -> None:
    h100 = catalog_hardware("h100-sxm")
    t = KinetoTrace(device_name=H100)
    t.step(1, 0, 3000)
    dims = [[4096, 4096], [4096, 4096]]
    t.cpu_op("aten::mm", 0, 10, **{"Input Dims": dims, "Input type": ["float", "float"]})
    t.launch(2, 20, 2500)  # below the fp32 peak's 2050 µs: fp32 it was, not TF32
    t.runtime("cudaDeviceSynchronize", 30, 2495)
    t.step(2, 3000, 10)
    trace = load_trace(t.write(tmp_path / "t.json"))
    (kernel_us,) = in_precision_durations(trace, Precision.BF16)[Kind.KERNEL]
    flops, fp32_bytes = 2 * 4096**3, 4 * 3 * 4096**2
    before = place_on(h100, flops, fp32_bytes, Precision.FP32, matrix=True).sol_time_s
    after = place_on(h100, flops, fp32_bytes / 2, Precision.BF16, matrix=True).sol_time_s
    casts = 2 * 4096**2 * 6 / h100.memory_bandwidth_bytes_per_s
    assert kernel_us * 1e-6 == pytest.approx(2500e-6 * after / before + casts)
    (step,) = predict_trace(trace, precision=Precision.BF16).steps
    # The sync waits for the product, now shorter by the difference.
    assert step.replayed_s - step.predicted_s == pytest.approx(2500e-6 - kernel_us * 1e-6)


def test_faster_communication_shortens_what_waits_for_it(tmp_path: Path) -> None:
    # An all-reduce of 100 µs the host waits for in a sync, then 14 µs to the step's end.
    t = KinetoTrace(device_name=H100)
    t.step(1, 0, 120)
    t.launch(0, 5, 100, name="ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)")
    t.runtime("cudaDeviceSynchronize", 10, 96)
    t.step(2, 120, 10)
    trace = load_trace(t.write(tmp_path / "t.json"))
    (step,) = predict_trace(trace, comm_speedup=2).steps
    assert step.replayed_s == pytest.approx(119e-6)
    assert step.predicted_s == pytest.approx(69e-6)
    with pytest.raises(ConfigError, match="positive factor"):
        predict_trace(trace, comm_speedup=0)


def test_a_fused_optimizer_is_one_pass_of_7_20ths_and_one_launch(tmp_path: Path) -> None:
    # An optimizer step (0..100 µs) launching 10 update kernels of 20 µs every 10 µs,
    # then a sync at 100 and the step's end 94 µs after the sync returns.
    t = KinetoTrace(device_name=H100)
    t.step(1, 0, 300)
    t.annotation("Optimizer.step#AdamW.step", 0, 100)
    for i in range(10):
        t.launch(10 * i, 10 * i + 6 + 10 * i, 20, name="multi_tensor_apply_kernel")
    t.runtime("cudaDeviceSynchronize", 100, 106)
    t.step(2, 300, 10)
    trace = load_trace(t.write(tmp_path / "t.json"))
    (step,) = predict_trace(trace, fused_optimizer=True).steps
    # Unchanged: the kernels run 5..205 behind their launches, the sync returns at 205.
    assert step.replayed_s == pytest.approx(299e-6)
    # Fused: one pass of 0.35 × 200 µs from the first launch's return (5..75); the host
    # skips to its 5 µs before the sync (at 10), which returns at 75.
    assert step.predicted_s == pytest.approx(169e-6)
    assert step.predicted_busy_s == pytest.approx(70e-6)


# 1 MiB of fp32 gradient, and a link over which 2 processes all-reduce it in 100 µs:
# 2·(2−1)/2 · 1 MiB / bandwidth, no latency.
_MIB = [[262144]]
_LINK = Link(id="test", name="a test link", bandwidth_bytes_per_s=2**20 / 100e-6, latency_s=0.0)


def _backward(path: Path) -> Path:
    # Forward 5..105; backward's two kernels 105..155 and 155..205, each gradient (1 MiB)
    # accumulated on the host right after its launch (ending at 18 and 23); the
    # optimizer's kernel launched at 30 (205..215); a sync from 40 to 215; the step
    # ending at 300, 85 µs after it.
    t = KinetoTrace(device_name=H100)
    t.step(1, 0, 300)
    t.launch(0, 5, 100, name="forward")
    t.launch(10, 105, 50, name="grad_w1")
    t.cpu_op(ACCUMULATE_GRAD, 16, 2, **{"Input Dims": _MIB, "Input type": ["float"]})
    t.launch(20, 155, 50, name="grad_w2")
    t.cpu_op(ACCUMULATE_GRAD, 21, 2, **{"Input Dims": _MIB, "Input type": ["float"]})
    t.launch(30, 205, 10, name="optimizer")
    t.runtime("cudaDeviceSynchronize", 40, 175)
    t.step(2, 300, 20)
    t.launch(301, 306, 5)
    return t.write(path)


def test_data_parallel_all_reduces_overlap_backward_and_hold_the_optimizer(
    tmp_path: Path,
) -> None:
    trace = load_trace(_backward(tmp_path / "t.json"))
    buckets = gradient_buckets(trace)
    # The first bucket closes at 1 MiB, the second holds the rest.
    assert [(b.step, b.gradients, b.nbytes, b.ready_us) for b in buckets] == [
        (1, 1, 2**20, 18.0),
        (1, 1, 2**20, 23.0),
    ]
    predicted = predict_trace(trace, data_parallel=(2, _LINK))
    (step,) = predicted.steps
    assert step.replayed_s == pytest.approx(300e-6)
    # The first all-reduce waits for grad_w1 (155..255), the second for it and grad_w2
    # (255..355); the optimizer's kernel, launched after the last accumulation, waits
    # for both (355..365), and so does the sync: the step ends 85 µs later, at 450.
    assert step.predicted_s == pytest.approx(450e-6)
    device = {what: (before, after) for what, before, after in predicted.device_time}
    assert device["communication"] == pytest.approx((0.0, 200e-6))
    assert predicted.changes["data_parallel"] == "2 processes over test"
    # One process: nothing to reduce, nothing changes.
    (alone,) = predict_trace(trace, data_parallel=(1, _LINK)).steps
    assert alone.predicted_s == pytest.approx(300e-6)


def test_data_parallel_from_the_cli(run_cli: RunCli, tmp_path: Path) -> None:
    path = _backward(tmp_path / "t.json")
    out = tmp_path / "p.json"
    code, text, err = run_cli(
        "predict", str(path), "--trace", "--dp", "2", "--link", "nvlink4", "--json", str(out)
    )
    assert code == 0, err
    assert "2 processes over nvlink4" in text and "ring all-reduce" in text
    (doc,) = json.loads(out.read_text())["ranks"]
    assert doc["changes"]["data_parallel"] == "2 processes over nvlink4"
    code, _, err = run_cli("predict", str(path), "--trace", "--dp", "2")
    assert code == 2 and "--link ID" in err
    code, _, err = run_cli("predict", str(path), "--trace", "--dp", "2", "--link", "nope")
    assert code == 2 and "unknown link" in err
    code, _, err = run_cli("predict", str(path), "--trace", "--dp", "0", "--link", "pcie4")
    assert code == 2 and "at least 1" in err
    code, _, err = run_cli(
        "predict", str(path), "--trace", "--dp", "2", "--link", "pcie4", "--comm-speedup", "2"
    )
    assert code == 2 and "name a faster link" in err
    doc = trace_prediction_document([predict_trace(load_trace(path), data_parallel=(2, _LINK))])
    assert {label for label in printed_labels(doc) if glossary.lookup(label) is None} == set()


def test_data_parallel_refusals(tmp_path: Path) -> None:
    no_sizes = load_trace(_launch_bound(tmp_path / "t.json"))
    with pytest.raises(ConfigError, match="record_shapes=True"):
        predict_trace(no_sizes, data_parallel=(2, _LINK))
    folder = tmp_path / "run"
    folder.mkdir()
    communicating = load_trace(all_reduce_step(0, 0).write(folder / "rank0.json"))
    with pytest.raises(ConfigError, match="runs collectives already"):
        predict_trace(communicating, data_parallel=(2, _LINK))


def test_refusals(tmp_path: Path) -> None:
    trace = load_trace(_launch_bound(tmp_path / "t.json"))
    with pytest.raises(ConfigError, match="give a change"):
        predict_trace(trace)
    with pytest.raises(ConfigError, match="bf16 or fp16"):
        predict_trace(trace, precision=Precision.FP32)


def test_cli(run_cli: RunCli, tmp_path: Path) -> None:
    path = _launch_bound(tmp_path / "t.json")
    out, html = tmp_path / "p.json", tmp_path / "p.html"
    code, text, err = run_cli(
        "predict", str(path), "--trace", "--cuda-graphs", "--json", str(out), "--html", str(html)
    )
    assert code == 0, err
    assert "Predicted from a trace" in text and "Validated" in text
    document = json.loads(out.read_text())
    assert document["document"] == "trace-prediction"
    (doc,) = document["ranks"]
    (step,) = doc["steps"]
    assert step["predicted_s"] == pytest.approx(74e-6)
    # The first step's timelines: the 20 kernels spread over the host's launches, then
    # run back to back from the graph's launch.
    replayed, predicted = doc["timelines"]["replayed"], doc["timelines"]["predicted"]
    events = predicted["events"]
    kernels = [
        (start, length)
        for start, length, category in zip(
            events["start_s"], events["duration_s"], events["category"], strict=True
        )
        if category == "kernel"
    ]
    assert len(kernels) == 20
    assert max(start + length for start, length in kernels) == pytest.approx(45e-6)
    assert replayed["duration_s"] == pytest.approx(429e-6)
    page = html.read_text()
    assert "The first step: traced, replayed and predicted" in page
    assert "ProfilerStep#1, traced" in page and "ProfilerStep#1, predicted" in page
    # The traced timeline is the trace's own: the same step, at its traced length.
    assert doc["timelines"]["traced"]["duration_s"] == pytest.approx(430e-6)
    code, _, err = run_cli("predict", str(path), "--trace", "--hardware", "local")
    assert code == 2 and "catalog GPU" in err
    code, _, err = run_cli("predict", str(path), "--cuda-graphs")
    assert code == 2 and "add --trace" in err
    code, _, err = run_cli("predict", str(path), "--trace", "--dtype", "fp32")
    assert code == 2 and "no change" in err
    plain = KinetoTrace()  # no deviceProperties
    plain.step(1, 0, 10)
    plain.step(2, 10, 10)
    code, _, err = run_cli(
        "predict", str(plain.write(tmp_path / "p.json")), "--trace", "--cuda-graphs"
    )
    assert code == 2 and "names no GPU" in err


def test_the_report_prints_only_glossary_terms(tmp_path: Path) -> None:
    trace = load_trace(_launch_bound(tmp_path / "t.json"))
    doc = trace_prediction_document([predict_trace(trace, cuda_graphs=True)])
    assert {label for label in printed_labels(doc) if glossary.lookup(label) is None} == set()


def test_a_folder_of_ranks_is_predicted_joined(run_cli: RunCli, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    all_reduce_step(0, 0).write(folder / "rank0.json")
    all_reduce_step(1, 200).write(folder / "rank1.json")
    out = tmp_path / "p.json"
    code, text, err = run_cli(
        "predict", str(folder), "--trace", "--comm-speedup", "2", "--json", str(out)
    )
    assert code == 0, err
    assert "rank 1 of 2, joined" in text
    ranks = json.loads(out.read_text())["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    # Rank 0 waited 200 µs for rank 1; only the 100 µs transfer halves.
    assert [r["steps"][0]["predicted_s"] for r in ranks] == pytest.approx([265e-6, 265e-6])


def test_ranks_read_by_a_pool_are_predicted_as_ranks_read_here(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    all_reduce_step(0, 0).write(folder / "rank0.json")
    all_reduce_step(1, 200).write(folder / "rank1.json")
    here = predict_traces(load_traces([folder]), comm_speedup=2)
    pooled = predict_trace_files([folder], comm_speedup=2, workers=2)

    def document(predictions: tuple[TracePrediction, ...]) -> bytes:
        return render_json.dumps_utf8(trace_prediction_document(predictions).data)

    assert document(pooled) == document(here)
    assert [p.steps[0].predicted_s for p in pooled] == pytest.approx([265e-6, 265e-6])
    all_reduce_step(1, 0).write(folder / "again-rank1.json")
    with pytest.raises(TraceError, match="are both rank 1"):
        predict_trace_files([folder], comm_speedup=2, workers=2)


def test_a_long_prediction_lists_a_few_steps_and_keeps_every_one(tmp_path: Path) -> None:
    # 40 steps, each 20 launches of a kernel of 2 µs, step k's host k µs longer.
    t = KinetoTrace(device_name=H100)
    at = 0.0
    for number in range(1, 41):
        length = 430 + number
        t.step(number, at, length)
        for i in range(20):
            t.launch(at + 20 * i, at + 20 * i + 6, 2, name="relu")
        at += length
    t.step(41, at, 10)
    doc = trace_prediction_document([predict_trace(load_trace(t.write(tmp_path / "t.json")),
                                                   cuda_graphs=True)])  # fmt: skip
    (section,) = doc.sections
    table = next(b for b in section.blocks if isinstance(b, Table))
    listed = [row[0].raw for row in table.rows if row[0] != "…"]
    steps = doc.data["ranks"][0]["steps"]
    assert len(steps) == 40  # every step in the JSON
    # The first and last five, and no step left out slower than the fifth slowest.
    assert listed[:5] == [1, 2, 3, 4, 5] and listed[-5:] == [36, 37, 38, 39, 40]
    fifth = sorted(s["predicted_s"] for s in steps)[-5]
    assert all(s["predicted_s"] <= fifth for s in steps if s["number"] not in listed)
    assert len(listed) < 16 and table.caption is not None and "40 steps, shown" in table.caption
