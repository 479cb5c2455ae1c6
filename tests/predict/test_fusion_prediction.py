"""K fused jobs predicted from one job's profile: exact arithmetic on hand-built
profiles (fixed cost once, work K times, time outside ops once, memory K times), the
verdict, the largest K, the JSON round trip and the CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from factories import FAKE_CPU, RunCli
from lightspeed.analysis.step_roofline import analyse_ops
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError
from lightspeed.facts.device import Device
from lightspeed.facts.profile import Profile
from lightspeed.facts.records import MemoryBreakdown, OpRecord, Phase
from lightspeed.facts.timing import Measurement, WorkloadInfo
from lightspeed.predict.fusion import (
    FUSION_HELPS,
    JOB_BY_JOB,
    UPDATE_OPS_PER_STEP,
    UPDATE_OPS_PER_TENSOR,
    fixed_op_cost_s,
    largest_k,
    on_fused,
)
from lightspeed.predict.whatif import predict
from lightspeed.report.profile_json import load_profile, save_profile

US = 1e-6


def op(index: int, time_s: float, flops: int = 1000, name: str = "aten::mm") -> OpRecord:
    return OpRecord(
        index=index,
        name=name,
        module="layer",
        phase=Phase.FORWARD,
        input_shapes=((4, 4),),
        input_dtypes=("float32",),
        output_shapes=((4, 4),),
        output_dtypes=("float32",),
        flops=flops,
        macs=flops // 2,
        bytes_read=64,
        bytes_written=64,
        time_s=time_s,
    )


def hand_profile(times_s: list[float], *, outside_s: float, peak_bytes: int = 2**20) -> Profile:
    """A step of ops taking `times_s`, with `outside_s` outside them; the measured step
    is their sum."""
    ops = tuple(op(i, t) for i, t in enumerate(times_s))
    step = sum(times_s) + outside_s
    return Profile(
        workload=WorkloadInfo(
            name="hand-built",
            batch_size=8,
            device=Device.CPU,
            precision=Precision.FP32,
            parameter_count=1000,
            parameter_tensors=3,
        ),
        hardware=FAKE_CPU,
        timing=Measurement(times_s=(step, step, step), steps_per_replicate=1, warmup_steps=1),
        ops=ops,
        memory=MemoryBreakdown(
            parameters_bytes=100,
            gradients_bytes=100,
            optimizer_state_bytes=200,
            activations_bytes=300,
            temporaries_bytes=50,
            inputs_bytes=10,
            peak_bytes=peak_bytes,
            at_peak_bytes={"parameters": peak_bytes},
            method="tracked-storages",
        ),
        profiled_step_s=step,
        unattributed_s=outside_s,
    )


def test_the_fixed_cost_is_what_the_ops_with_least_work_take() -> None:
    profile = hand_profile([2 * US, 4 * US, 6 * US, 8 * US, 10 * US], outside_s=0.0)
    # Work grows with the index; the quarter with the least (round(5/4) = 1 op): 2 µs.
    working = [dataclasses.replace(o, flops=1000 * (i + 1)) for i, o in enumerate(profile.ops)]
    working[0], working[4] = (
        dataclasses.replace(working[0], flops=5000),
        dataclasses.replace(working[4], flops=1000),
    )
    # Now the 10 µs op has the least work: its time is the fixed cost.
    assert fixed_op_cost_s(analyse_ops(dataclasses.replace(profile, ops=tuple(working)))) == (
        pytest.approx(10 * US)
    )
    views = dataclasses.replace(
        profile,
        ops=tuple(
            dataclasses.replace(o, flops=0, bytes_read=0, bytes_written=0) for o in profile.ops
        ),
    )
    assert fixed_op_cost_s(analyse_ops(views)) == 0.0


def test_fixed_cost_once_work_k_times_outside_once() -> None:
    # Four ops doing little (3 µs each) and four doing more work, with 20 µs outside.
    times = [3 * US] * 4 + [5 * US, 7 * US, 9 * US, 11 * US]
    profile = hand_profile(times, outside_s=20 * US)
    # Each working op an op of its own name: no name has the ops to fit a marginal rate.
    profile = dataclasses.replace(
        profile,
        ops=tuple(
            dataclasses.replace(o, flops=10)
            if i < 4
            else dataclasses.replace(o, flops=10_000, name=f"aten::work{i}")
            for i, o in enumerate(profile.ops)
        ),
    )
    fused = on_fused(profile, 4)
    # c = 3 µs (the least-work quarter: 2 ops of 3 µs); t' = min(t, c) + 4 · (t − c).
    expected = [3 * US] * 4 + [11 * US, 19 * US, 27 * US, 35 * US]
    assert [o.time_s for o in fused.ops] == pytest.approx(expected)
    # Step: 64 µs measured; the ops go from 44 to 104 µs; outside stays 20 µs.
    assert fused.step_time_s == pytest.approx(124 * US)
    assert fused.prediction is not None
    f = fused.prediction.fusion
    assert f is not None
    assert f.serial_step_s == pytest.approx(4 * 64 * US)
    assert f.speedup == pytest.approx(256 / 124)
    # Work: 2 + 4 + 6 + 8 µs of the 64 µs step; the rest is paid once.
    assert f.overhead_share == pytest.approx(1 - 20 / 64)
    assert f.helps
    assert fused.ops[4].flops == 4 * profile.ops[4].flops
    assert fused.ops[4].input_shapes == ((4, 4, 4),)
    assert fused.workload.batch_size == 32
    assert fused.workload.name == "hand-built+fuse4"
    assert fused.memory is not None and profile.memory is not None
    assert fused.memory.categories() == {n: 4 * b for n, b in profile.memory.categories().items()}
    assert fused.memory.peak_bytes == 4 * profile.memory.peak_bytes


def test_one_job_is_the_measured_step() -> None:
    profile = hand_profile([2 * US, 4 * US, 6 * US, 8 * US], outside_s=5 * US)
    fused = on_fused(profile, 1)
    assert fused.step_time_s == pytest.approx(profile.step_time_s)
    assert fused.prediction.fusion.speedup == pytest.approx(1.0)


def test_a_step_of_work_gains_nothing_and_says_fusion_will_not_help() -> None:
    profile = step_of_work()
    f = on_fused(profile, 8).prediction.fusion
    assert f is not None
    assert f.speedup < FUSION_HELPS
    assert not f.helps


def step_of_work() -> Profile:
    """Long ops of much work beside a few of little (5 µs), nothing outside them: the
    fixed cost is a sliver of the step."""
    profile = hand_profile([5 * US] * 2 + [1.0] * 6, outside_s=0.0)
    return dataclasses.replace(
        profile,
        ops=tuple(
            dataclasses.replace(o, flops=10 if i < 2 else 10**12) for i, o in enumerate(profile.ops)
        ),
    )


def test_a_step_of_overhead_gains_almost_k() -> None:
    profile = hand_profile([5 * US] * 20, outside_s=1e-3)
    f = on_fused(profile, 8).prediction.fusion
    assert f is not None
    assert f.speedup == pytest.approx(8.0)


def test_largest_k_is_memory_over_one_jobs_peak() -> None:
    assert largest_k(hand_profile([1 * US], outside_s=0.0, peak_bytes=2**30)) == 8
    assert largest_k(hand_profile([1 * US], outside_s=0.0, peak_bytes=3 * 2**30)) == 2
    no_memory = dataclasses.replace(hand_profile([1 * US], outside_s=0.0), memory=None)
    assert largest_k(no_memory) is None


def test_bad_k_is_refused() -> None:
    profile = hand_profile([1 * US], outside_s=0.0)
    for k in (0, -2, True, 2.5):
        with pytest.raises(ConfigError, match="--fuse"):
            on_fused(profile, k)  # type: ignore[arg-type]


def test_predict_composes_fusion_after_hardware(tmp_path: Path) -> None:
    profile = hand_profile([2 * US, 4 * US, 6 * US, 8 * US, 10 * US], outside_s=20 * US)
    fused = predict(profile, fuse=4)
    assert fused.prediction is not None
    assert fused.prediction.changes == {"fuse": "4"}
    path = tmp_path / "fused.json"
    save_profile(fused, path)
    again = load_profile(path)
    assert again.prediction == fused.prediction
    assert again.workload == fused.workload and again.workload.parameter_tensors == 3
    assert json.loads(path.read_text())["prediction"]["fusion"]["jobs"] == 4


def test_cli_predicts_fusion_of_a_saved_profile(run_cli: RunCli, tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    save_profile(step_of_work(), path)
    code, out, err = run_cli(
        "predict", str(path), "--fuse", "8", "--json", str(tmp_path / "o.json")
    )
    assert code == 0, err
    assert "fusion will not help" in out
    assert "largest K" in out
    saved = json.loads((tmp_path / "o.json").read_text())
    assert saved["prediction"]["fusion"]["helps"] is False


def test_a_kind_of_op_whose_small_ones_are_slow_adds_work_at_its_marginal_rate() -> None:
    # Four matrix products whose time is 20 µs + 2 × their speed of light (a fitted line
    # of slope 2), beside four small ops of another name that set c = 3 µs.
    profile = hand_profile([3 * US] * 8, outside_s=0.0)
    small = [dataclasses.replace(o, flops=10, name="aten::add") for o in profile.ops[:4]]
    sized = [dataclasses.replace(o, flops=10**7 * 2**i) for i, o in enumerate(profile.ops[4:])]
    sols = [a.sol_time_s for a in analyse_ops(dataclasses.replace(profile, ops=tuple(sized)))]
    sized = [
        dataclasses.replace(o, time_s=20 * US + 2 * s) for o, s in zip(sized, sols, strict=True)
    ]
    profile = dataclasses.replace(profile, ops=(*small, *sized))
    fused = on_fused(profile, 8)
    got = [o.time_s for o in fused.ops[4:]]
    # Added work at the rate of 2 s a second of speed of light: t + 2 · 7 · SoL, where the
    # same efficiency (min(t, c) + 8 (t − c)) would have been slower.
    assert got == pytest.approx([20 * US + 2 * s + 2 * 7 * s for s in sols])
    assert all(
        g < 3 * US + 8 * (o.time_s - 3 * US) for g, o in zip(got, sized, strict=True) if o.time_s
    )


def test_an_op_vmap_runs_job_by_job_takes_k_times_as_long() -> None:
    profile = hand_profile([3 * US] * 4 + [50 * US], outside_s=0.0)
    attention = dataclasses.replace(
        profile.ops[4], name=next(iter(JOB_BY_JOB)), flops=10**6, time_s=50 * US
    )
    profile = dataclasses.replace(profile, ops=(*profile.ops[:4], attention))
    assert on_fused(profile, 4).ops[4].time_s == pytest.approx(200 * US)


def test_the_update_becomes_one_kernel_pass_a_job_and_its_checks() -> None:
    profile = hand_profile([3 * US] * 4 + [6 * US] * 4, outside_s=0.0)
    update = [
        dataclasses.replace(o, phase=Phase.OPTIMIZER, module="(optimizer)", flops=100)
        for o in profile.ops[4:]
    ]
    profile = dataclasses.replace(
        profile, ops=(*[dataclasses.replace(o, flops=10) for o in profile.ops[:4]], *update)
    )
    fused = on_fused(profile, 4)
    c = fixed_op_cost_s(analyse_ops(profile))
    kernels = [o for o in fused.ops if o.name == "aten::_fused_adam_"]
    assert len(kernels) == 4  # one a job
    # Parameters 100 B and state 200 B (Adam's two moments): read parameters, gradients
    # and both moments; write parameters and moments. The measured update's arithmetic.
    assert {(o.bytes_read, o.bytes_written, o.flops) for o in kernels} == {(400, 300, 400)}
    assert all(o.time_s is not None and o.time_s >= c for o in kernels)
    (checks,) = [o for o in fused.ops if o.name == "fused update: checks and views"]
    assert checks.time_s == pytest.approx(c * (UPDATE_OPS_PER_TENSOR * 3 + UPDATE_OPS_PER_STEP))
    assert [o.phase for o in fused.ops].count(Phase.OPTIMIZER) == 5


@pytest.mark.parametrize("algorithm", ["adam", "adamw", "sgd"])
def test_the_update_ops_the_model_counts_are_those_the_fused_optimizer_runs(
    algorithm: str,
) -> None:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from lightspeed.optimize.fusion.optimizer import FusedOptimizer

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            # Views (a gradient flattened) compute nothing; the model leaves them out.
            if func.namespace != "profiler" and func._schema.name != "aten::view":
                self.names.append(func._schema.name)
            return func(*args, **(kwargs or {}))

    k, shapes = 4, [(4, 8, 3), (4, 8), (4, 2, 8), (4, 2), (4, 5)]
    params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    hparams = [{"lr": 1e-2, **({"momentum": 0.9} if algorithm == "sgd" else {})}] * k
    optimizer = FusedOptimizer(params, algorithm, hparams)
    for _ in range(2):  # the second step: the state exists
        for p in params:
            p.grad = torch.randn_like(p)
        with Count() as counted:
            optimizer.step()
    kernels = [n for n in counted.names if n.startswith("aten::_fused_")]
    assert len(kernels) == k
    others = len(counted.names) - len(kernels)
    modelled = UPDATE_OPS_PER_TENSOR * len(params) + UPDATE_OPS_PER_STEP
    assert 0 <= modelled - others <= 1, (others, modelled)
