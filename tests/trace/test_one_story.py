"""A trace report says one thing: no part of a share larger than its whole, no
negative zero, and kernel names that keep the kernel's own name (issue 31)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kineto import KinetoTrace

from lightspeed.report.names_fit import fit_names
from lightspeed.rules import FindingKind
from lightspeed.trace import analyse_rank, load_trace
from lightspeed.trace.breakdown import temporal_breakdown
from lightspeed.trace.diagnosis import step_facts
from lightspeed.trace.idle_causes import IDLE_CAUSES
from lightspeed.trace.names import short_kernel_name
from lightspeed.trace.window import DeviceEvents
from lightspeed.units import percent


def _synced_step(tmp_path: Path) -> KinetoTrace:
    t = KinetoTrace()
    t.step(1, 0, 1000)
    t.launch(0, 5, 95)  # launching 0–5; busy 5–100
    t.runtime("cudaStreamSynchronize", 100, 200)  # idle 100–300: in a sync
    t.launch(310, 600, 100)  # busy 600–700, launched after the idle gap began: host wait
    t.launch(320, 720, 100)  # busy 720–820, launched long before its 20 µs gap: not
    # 820–1000: the step runs on with no device work.
    return t


def test_the_device_waits_for_the_host_only_inside_its_idle_time(tmp_path: Path) -> None:
    (step,) = analyse_rank(load_trace(_synced_step(tmp_path).write(tmp_path / "t.json"))).steps
    facts = step_facts(step)
    # Idle: 0–5, 100–600, 700–720, 820–1000 = 705 µs; 200 of it in the sync, the other
    # 505 µs the device waiting on the host's per-op work.
    assert facts.overhead_s == pytest.approx(505e-6)
    # Of those, waiting for the host: 300–600 (the sync's part of that gap is the sync's)
    # and the edges 0–5 and 820–1000; not 700–720, whose kernel was queued long before.
    assert facts.host_wait_s == pytest.approx((300 + 5 + 180) * 1e-6)
    assert facts.edge_idle_s == pytest.approx(185e-6)
    c = step[IDLE_CAUSES]
    assert c.host_wait_s == pytest.approx(facts.host_wait_s)
    (idle,) = [f for f in step.findings if f.kind is FindingKind.DEVICE_IDLE]
    assert idle.evidence["host_wait_s"] <= idle.evidence["idle_s"]
    assert "the device idles 50% of the step, 48% of the step waiting for the host" in (
        idle.message
    )


def test_a_step_lagging_its_device_counts_only_its_own_span(tmp_path: Path) -> None:
    """Step 2's device work runs 150–260 while its CPU step is 100–200: the step is 110
    µs long on the device, and none of it idle; the time before 150 belongs to step 1."""
    t = KinetoTrace()
    t.step(1, 0, 100)
    t.launch(0, 10, 140)  # step 1's kernel, 10–150
    t.step(2, 100, 100)
    t.launch(100, 150, 110)  # step 2's kernel, 150–260
    _, step2 = analyse_rank(load_trace(t.write(tmp_path / "t.json"))).steps
    assert step2.step_s == pytest.approx(110e-6)
    assert step2[IDLE_CAUSES].idle_s == pytest.approx(step2.device_idle_s) == 0.0


def test_device_shares_are_never_negative() -> None:
    """HTA's whole-µs rounding (start up, end down) turns a 0.4 µs memset at 10.3–10.7
    into 11–10, an event that ends before it starts; HTA counts it, so the union of the
    device's events loses 1 µs, which once came out of memory as a negative share,
    shown "-0.0%" (the Qwen H100 trace: -17 µs of its 49.7 ms)."""
    memset, kernel = 2, 0  # HTA's type indexes: computation 0, memory 2
    ev = DeviceEvents(
        start_us=np.array([0.0, 11.0, 20.0]),
        end_us=np.array([5.0, 10.0, 30.0]),
        type=np.array([kernel, memset, kernel]),
        device=np.zeros(3, dtype=np.int64),
        stream=np.zeros(3, dtype=np.int64),
        launch_us=np.full(3, np.nan),
        name=np.zeros(3, dtype=np.int64),
    )
    t = temporal_breakdown(ev)
    assert t.memory_s == 0.0
    assert t.compute_s == pytest.approx(15e-6)
    # HTA's idle, kept: 30 µs less 15 of kernels, less the memset's -1.
    assert t.idle_s == pytest.approx(16e-6)


@pytest.mark.parametrize("fraction", [-0.0, -1e-17, -0.0003, -4e-4])
def test_a_share_that_rounds_to_zero_reads_zero(fraction: float) -> None:
    assert percent(fraction) == "0.0%"


def test_percentages_keep_their_sign_otherwise() -> None:
    assert percent(-0.0006) == "-0.1%"
    assert percent(0.123) == "12.3%"


# Kernel names from hta-a100-ddp-train-rank0of2 and tracelens-h100-qwen-0.5b-inference.
_BN = (
    "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, {}, true, 1>(float, float, float,"
    " float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*,"
    " cudnnTensorStruct, float*, float const*, float*, float*, float const*, float const*,"
    " float)"
)
_ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,"
    " at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>,"
    " at::detail::Array<char*, 3>)"
)
_MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float,"
    " float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >"
    "(int, at::native::BinaryFunctor<float, float, float,"
    " at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)"
)
_POW = "void at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float>(int)"


def test_kernel_names_keep_their_own_name() -> None:
    names = [_BN.format(128), _BN.format(32), _ADD, _MUL, _POW]
    shown = fit_names(names, 30, short_kernel_name)
    assert len(set(shown)) == len(shown) and all(len(s) <= 30 for s in shown)
    # Two instantiations of one kernel: its name, then where their arguments differ.
    assert shown[0].startswith("bn_bw_1C1") and "128" in shown[0]
    assert shown[1].startswith("bn_bw_1C1") and "32" in shown[1]
    assert shown[2].startswith("vectorize") and "CUDAFu" in shown[2]
    assert shown[3].startswith("vectorize") and "Binary" in shown[3]
    # A lone kernel: namespaces cut from the front, never its name.
    assert shown[4] == "…pow_tensor_scalar_kernel_impl"
    assert short_kernel_name(_POW) == "at::native::pow_tensor_scalar_kernel_impl"
