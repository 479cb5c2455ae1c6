"""Times carried from a measured step to a changed one: each rule on hand-built ops, the
identity, and whole predictions (batch size, precision, checkpointing, the largest batch
that fits) whose shapes and memory are checked against the changed step itself."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from factories import FAKE_CPU, HAND_BUILT, RunCli, op
from lightspeed.analysis.step_roofline import analyse_op
from lightspeed.dtypes import StepDtype
from lightspeed.errors import ConfigError
from lightspeed.facts.records import Phase
from lightspeed.measure.shape_only import profile_shape_only
from lightspeed.measure.step import StepSettings
from lightspeed.optimize.checkpointing import checkpoint
from lightspeed.predict.carry import (
    carry_over,
    marginal_cost,
    op_key,
    per_op_overhead_s,
    scaled_step,
)
from lightspeed.predict.shapes import largest_batch
from lightspeed.predict.whatif import predict
from lightspeed.report.profile_json import load_profile, save_profile
from lightspeed.suite import get
from lightspeed.workflows.profile import profile


@pytest.fixture(scope="module")
def gpt2() -> object:
    return profile(get("gpt2-tiny"), hardware=FAKE_CPU, budget_s=0.1, steps=1)


def test_no_change_is_the_identity(gpt2: object) -> None:
    assert predict(gpt2) is gpt2  # type: ignore[arg-type]
    same = predict(gpt2, batch_size=gpt2.workload.batch_size)  # type: ignore[arg-type, attr-defined]
    assert same is gpt2


def test_the_same_step_carries_every_time_over(gpt2: object) -> None:
    shapes = profile_shape_only(get("gpt2-tiny"), FAKE_CPU)
    carried = carry_over(gpt2, shapes, {})  # type: ignore[arg-type]
    assert [o.time_s for o in carried.ops] == [o.time_s for o in gpt2.ops]  # type: ignore[attr-defined]
    assert carried.step_time_s == pytest.approx(gpt2.step_time_s)  # type: ignore[attr-defined]


def test_an_op_at_another_size_keeps_its_overhead_and_scales_the_rest() -> None:
    view = dataclasses.replace(op(9, 0, 0, 0.001), name="aten::view")
    measured = dataclasses.replace(HAND_BUILT, ops=(*HAND_BUILT.ops[:2], view))
    assert per_op_overhead_s(measured.ops) == 0.001  # the one op that moves nothing
    bigger = dataclasses.replace(
        measured.ops[1], bytes_read=2 * measured.ops[1].bytes_read, input_shapes=((8, 4),)
    )
    changed = dataclasses.replace(measured, ops=(measured.ops[0], bigger, view), timing=None)
    carried = carry_over(measured, changed, {"batch-size": "16"})
    # memory-bound add: 20 ms measured, SoL 10 ms → 20 ms; 1 ms overhead kept, 19 ms × 2.
    assert carried.ops[1].time_s == pytest.approx(0.001 + 0.019 * 2)
    assert carried.ops[0].time_s == measured.ops[0].time_s  # unchanged shapes: its own time
    # The step grows by the change (19 ms), not by a ratio: the median of 70 and 77 ms.
    assert carried.step_time_s == pytest.approx(0.0735 + 0.019)
    assert carried.prediction is not None
    assert carried.prediction.changes == {"batch-size": "16"}


def test_an_op_that_outgrows_the_cache_scales_with_its_bytes_not_the_roofs() -> None:
    # A cached CPU: 100 MB of cache at 80 GB/s over 20 GB/s of memory. The add reads
    # 80 MB (cached: SoL 1 ms) and ran 20 ms; at twice the batch its 160 MB come from
    # memory (SoL 8 ms), 8× its SoL where its bytes only doubled.
    cached = dataclasses.replace(
        FAKE_CPU, cache_bytes=100_000_000, cache_bandwidth_bytes_per_s=80e9
    )
    view = dataclasses.replace(op(9, 0, 0, 0.001), name="aten::view")
    add = op(1, 0, 80_000_000, 0.020)
    measured = dataclasses.replace(HAND_BUILT, hardware=cached, ops=(add, view))
    bigger = dataclasses.replace(add, bytes_read=160_000_000, input_shapes=((8, 4),))
    changed = dataclasses.replace(measured, ops=(bigger, view), timing=None)
    carried = carry_over(measured, changed, {"batch-size": "16"})
    # 1 ms of overhead kept, the 19 ms beyond it × 2 (not × 16)
    assert carried.ops[0].time_s == pytest.approx(0.001 + 0.019 * 2)


def test_a_kernel_timed_one_by_one_adds_its_difference() -> None:
    # The product took 40 ms in the step, its kernel alone 30 ms before and 100 ms after:
    # the 10 ms the step adds around the kernel does not grow with it.
    product = HAND_BUILT.ops[0]
    bigger = dataclasses.replace(product, input_shapes=((8, 4),), macs=2 * (product.macs or 0))
    changed = dataclasses.replace(HAND_BUILT, ops=(bigger, *HAND_BUILT.ops[1:]), timing=None)
    times = ({op_key(product): 0.030}, {op_key(bigger): 0.100})
    carried = carry_over(HAND_BUILT, changed, {"batch-size": "16"}, kernel_times=times)
    assert carried.ops[0].time_s == pytest.approx(0.040 + 0.100 - 0.030)


def test_a_step_carried_across_hardware_scales_its_profiled_time_too() -> None:
    # Per-op medians may add up past the profiled step (here 70 ms of ops and 5 µs
    # outside them in a 50 ms step): halving every op halves the profiled step, where a
    # shift would leave 50 − 35 = 15 ms for 35 ms of ops.
    measured = dataclasses.replace(HAND_BUILT, profiled_step_s=0.050)
    halved = [
        dataclasses.replace(o, time_s=None if o.time_s is None else o.time_s / 2)
        for o in measured.ops
    ]
    outside = measured.unattributed_s or 0.0
    timing, profiled = scaled_step(measured, halved, outside / 2)
    assert profiled == pytest.approx(0.050 / 2)
    assert timing is not None and timing.median_s == pytest.approx(measured.step_time_s / 2)


def test_marginal_cost_is_fitted_on_ops_of_one_name() -> None:
    # time = 5 ms + 2 × SoL, on three sizes of a memory-bound add (SoL = bytes / 20 GB/s)
    sizes = (20_000_000, 60_000_000, 200_000_000)
    ops = [op(i, 0, b, 0.005 + 2 * b / 20e9) for i, b in enumerate(sizes)]
    assert marginal_cost(ops, FAKE_CPU)["aten::add"] == pytest.approx(2.0)
    assert "aten::add" not in marginal_cost(ops[:2], FAKE_CPU)  # too few to fit


def test_a_larger_batch_has_the_changed_steps_own_shapes_and_memory(gpt2: object) -> None:
    predicted = predict(gpt2, workload=get("gpt2-tiny"), batch_size=16)  # type: ignore[arg-type]
    shapes = profile_shape_only(get("gpt2-tiny").with_batch_size(16), FAKE_CPU)
    assert [op_key(o) for o in predicted.ops] == [op_key(o) for o in shapes.ops]
    assert predicted.memory == shapes.memory
    assert predicted.workload.batch_size == 16
    assert all(o.time_s is not None and o.time_s >= 0 for o in predicted.ops)
    forward_mm = [o for o in predicted.ops if o.phase is Phase.FORWARD and o.name == "aten::mm"]
    measured_mm = [o for o in gpt2.ops if o.phase is Phase.FORWARD and o.name == "aten::mm"]  # type: ignore[attr-defined]
    assert [o.flops for o in forward_mm] == [4 * o.flops for o in measured_mm]
    assert predicted.step_time_s > gpt2.step_time_s  # type: ignore[attr-defined, operator]


def test_checkpointing_recomputes_forward_ops_in_backward(gpt2: object) -> None:
    predicted = predict(gpt2, workload=get("gpt2-tiny"), checkpoint="auto")  # type: ignore[arg-type]
    shapes = profile_shape_only(checkpoint(get("gpt2-tiny"), "auto"), FAKE_CPU)
    assert [op_key(o) for o in predicted.ops] == [op_key(o) for o in shapes.ops]
    # The recompute's tensors are freed by the garbage collector, when it runs: the peak
    # of two runs of one checkpointed step may differ a little.
    assert predicted.memory is not None and shapes.memory is not None
    assert predicted.memory.peak_bytes == pytest.approx(shapes.memory.peak_bytes, rel=0.1)
    assert gpt2.memory is not None  # type: ignore[attr-defined]
    assert predicted.memory.activations_bytes < gpt2.memory.activations_bytes  # type: ignore[attr-defined]
    flops = sum(o.flops for o in predicted.ops)
    measured = sum(o.flops for o in gpt2.ops)  # type: ignore[attr-defined]
    forward = sum(o.flops for o in gpt2.ops if o.phase is Phase.FORWARD)  # type: ignore[attr-defined]
    assert measured < flops <= measured + forward
    assert predicted.step_time_s > gpt2.step_time_s  # type: ignore[attr-defined, operator]


def test_autocast_times_the_kernels_it_swaps(gpt2: object) -> None:
    predicted = predict(gpt2, workload=get("gpt2-tiny"), dtype="bf16")  # type: ignore[arg-type]
    assert predicted.prediction is not None
    assert predicted.prediction.changes == {"dtype": "bf16"}
    assert predicted.workload.dtype is StepDtype.BF16  # "bf16 autocast", as it would run
    assert any("timed one by one" in a for a in predicted.prediction.assumptions)
    mm = [o for o in predicted.ops if o.phase is Phase.FORWARD and o.name == "aten::mm"]
    assert mm and all("bfloat16" in o.input_dtypes for o in mm)
    casts = [o for o in predicted.ops if o.name == "aten::_to_copy"]
    assert casts and all(o.time_s is not None and o.time_s > 0 for o in casts)


def test_the_largest_batch_fits_and_one_more_does_not() -> None:
    small = dataclasses.replace(FAKE_CPU, memory_bytes=64 * 2**20)
    workload = get("mlp-tiny")
    fits = largest_batch(workload, small, StepSettings())
    assert fits is not None and fits > workload.batch_size

    def peak(batch: int) -> int:
        shapes = profile_shape_only(workload.with_batch_size(batch), small, real_batch=False)
        assert shapes.memory is not None
        return shapes.memory.peak_bytes

    # the largest to within 1 %
    assert peak(fits) <= small.memory_bytes < peak(fits + fits // 100 + 1)  # type: ignore[operator]


def test_a_prediction_survives_json(gpt2: object, tmp_path: Path) -> None:
    predicted = predict(gpt2, workload=get("gpt2-tiny"), batch_size=8, fits=True)  # type: ignore[arg-type]
    assert predicted.prediction is not None and predicted.prediction.largest_batch_size
    path = tmp_path / "p.json"
    save_profile(predicted, path)
    assert load_profile(path).prediction == predicted.prediction


def test_sol_of_every_shape_only_op_is_known() -> None:
    shapes = profile_shape_only(get("mlp-tiny"), FAKE_CPU)
    assert all(analyse_op(o, FAKE_CPU).sol_time_s >= 0 for o in shapes.ops)


@pytest.mark.usefixtures("calibrated_cpu")  # the table is under test, not the ceilings
def test_cli_predicts_several_batch_sizes(run_cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    html = tmp_path / "p.html"
    code, _, stderr = run_cli(
        "predict",
        "mlp-tiny",
        "--batch-size",
        "32,64",
        "--budget",
        "0.1",
        "--json",
        str(out),
        "--html",
        str(html),
    )
    assert code == 0, stderr
    page = html.read_text()
    assert 'id="batches"' in page and 'data-chart="batch-sizes"' in page
    assert 'data-table="batch-sizes"' in page and 'id="prediction"' in page
    data = json.loads(out.read_text())
    rows = data["batch_sizes"]
    assert [r["batch_size"] for r in rows] == [32, 64]
    assert rows[0]["step_time_s"] > 0 and rows[1]["peak_bytes"] > rows[0]["peak_bytes"]
    assert data["prediction"]["largest_batch_size"] > 64


@pytest.mark.parametrize("value", ["x", "0", "8,-1"])
def test_cli_refuses_a_bad_batch_size(run_cli: RunCli, value: str) -> None:
    code, stdout, stderr = run_cli("predict", "mlp-tiny", "--batch-size", value)
    assert code == 2
    assert "--batch-size" in stderr and "Traceback" not in stderr + stdout
    assert len(stderr.strip().splitlines()) == 1


def test_cli_profiles_shapes_only(run_cli: RunCli, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    code, _, stderr = run_cli(
        "profile", "gpt2-tiny", "--shape-only", "--hardware", "h100-sxm", "--json", str(out)
    )
    assert code == 0, stderr
    data = json.loads(out.read_text())
    assert data["hardware"]["id"] == "h100-sxm"
    assert data["prediction"]["changes"] == {"shape-only": ""}
    assert data["timing"]["median_s"] == pytest.approx(data["totals"]["sol_time_s"])


def test_an_added_op_runs_at_the_efficiency_of_ops_that_do_work() -> None:
    # A tiny cast was measured (5 µs for 8 bytes: thousands of times its speed of light,
    # bound by its per-op cost); a 2 MB cast the change adds must not inherit that.
    tiny_cast = dataclasses.replace(op(5, 0, 8, 5e-6), name="aten::_to_copy")
    measured = dataclasses.replace(HAND_BUILT, ops=(*HAND_BUILT.ops, tiny_cast))
    added = dataclasses.replace(
        op(6, 0, 1_000_000, None), name="aten::_to_copy", module="new", bytes_written=1_000_000
    )
    changed = dataclasses.replace(measured, ops=(*measured.ops, added), timing=None)
    carried = carry_over(measured, changed, {"dtype": "bf16"})
    overhead = per_op_overhead_s(measured.ops)  # the view's 5 µs
    # the compute- and memory-bound ops ran at (40 ms − c) / 20 ms and (20 ms − c) / 10 ms
    # of their speed of light; the cast's is 2 MB / 20 GB/s = 100 µs.
    slowdown = ((0.040 - overhead) / 0.020 + (0.020 - overhead) / 0.010) / 2
    assert carried.ops[-1].time_s == pytest.approx(overhead + 100e-6 * slowdown)


def test_checkpoints_own_work_is_added_to_the_step_as_timed(
    gpt2: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightspeed.measure import checkpoint_cost
    from lightspeed.predict.whatif import CHECKPOINT_RULE

    def costing(seconds: float) -> object:
        return lambda workload, settings: checkpoint_cost.RegionCosts(2, seconds)

    steps = []
    for seconds in (0.0, 0.25):
        monkeypatch.setattr(checkpoint_cost, "checkpoint_costs", costing(seconds))
        predicted = predict(gpt2, workload=get("gpt2-tiny"), checkpoint="auto")  # type: ignore[arg-type]
        assert predicted.prediction is not None
        assert CHECKPOINT_RULE in predicted.prediction.rules
        assert any(
            f"{seconds * 1e3:.2f} ms a step over its 2 regions" in a
            for a in predicted.prediction.assumptions
        )
        steps.append(predicted.step_time_s)
    assert steps[1] - steps[0] == pytest.approx(0.25, rel=1e-3)  # type: ignore[operator]
    elsewhere = predict(gpt2, workload=get("gpt2-tiny"), checkpoint="auto", time_kernels=False)  # type: ignore[arg-type]
    assert elsewhere.prediction is not None
    assert CHECKPOINT_RULE not in elsewhere.prediction.rules
    assert any("is not counted" in a for a in elsewhere.prediction.assumptions)
    # A changed step too large for this device is not run to time it.
    small = dataclasses.replace(
        gpt2,  # type: ignore[type-var]
        hardware=dataclasses.replace(gpt2.hardware, memory_bytes=2**20),  # type: ignore[attr-defined]
    )
    unrun = predict(small, workload=get("gpt2-tiny"), checkpoint="auto")
    assert unrun.prediction is not None
    assert CHECKPOINT_RULE not in unrun.prediction.rules
    assert any("of this device's memory" in a for a in unrun.prediction.assumptions)


WORKLOAD_FILE = """
import torch
from lightspeed import Workload

def small():
    return Workload(
        name="custom-mlp",
        model=lambda: torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1)),
        batch=lambda n: torch.ones(n, 8),
        loss=lambda m, b: m(b).square().mean(),
        batch_size=2,
    )
"""


def test_a_saved_profile_of_a_file_workload_is_predicted_at_another_batch(
    tmp_path: Path,
) -> None:
    source = tmp_path / "mine.py"
    source.write_text(WORKLOAD_FILE)
    measured = profile(f"{source}:small", hardware=FAKE_CPU, budget_s=0.2)
    assert measured.workload.name == "custom-mlp"
    assert measured.workload.target == f"{source.resolve()}:small"
    saved = load_profile(save_profile(measured, tmp_path / "p.json"))
    assert saved.workload.target == measured.workload.target
    bigger = predict(saved, batch_size=8, time_kernels=False)
    assert bigger.workload.batch_size == 8
    # The file moved: one line that says so.
    source.rename(tmp_path / "moved.py")
    with pytest.raises(ConfigError, match=r"mine\.py, which is not there now \(moved"):
        predict(saved, batch_size=8, time_kernels=False)


def test_a_gpu_s_profile_is_predicted_here_on_the_cpu_s_decomposition(gpt2: object) -> None:
    # A saved CUDA profile read on a machine without a GPU: its changed step is
    # decomposed on the CPU, and the prediction says so (it used to stop, wanting CUDA).
    import torch

    from lightspeed.facts.device import Device
    from lightspeed.predict.shapes import DECOMPOSED_ON_CPU, shape_settings

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the step is decomposed on it")
    on_gpu = dataclasses.replace(
        gpt2,
        workload=dataclasses.replace(gpt2.workload, device=Device.CUDA),  # type: ignore[attr-defined]
    )
    assert shape_settings(on_gpu).device is Device.CPU  # type: ignore[arg-type]
    predicted = predict(on_gpu, workload=get("gpt2-tiny"), batch_size=16)  # type: ignore[arg-type]
    assert predicted.prediction is not None
    assert DECOMPOSED_ON_CPU in predicted.prediction.assumptions
    same_shapes = predict(gpt2, workload=get("gpt2-tiny"), batch_size=16)  # type: ignore[arg-type]
    assert [o.flops for o in predicted.ops] == [o.flops for o in same_shapes.ops]
    assert DECOMPOSED_ON_CPU not in (same_shapes.prediction.assumptions)  # type: ignore[union-attr]
