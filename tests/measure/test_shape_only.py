"""Shape-only analysis: on fake tensors, the same ops, FLOPs, bytes and memory as a step
that runs, with nothing executed; clear errors where shapes alone cannot tell."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from factories import FAKE_CPU
from lightspeed import Workload
from lightspeed.analysis.profile_analysis import analyse
from lightspeed.dtypes import StepDtype
from lightspeed.errors import WorkloadError
from lightspeed.facts.records import OpRecord, Phase
from lightspeed.measure.capture import capturing, without_mode_artifacts
from lightspeed.measure.memory import measure_memory
from lightspeed.measure.shape_only import profile_shape_only
from lightspeed.measure.step import StepSettings, _already_on, prepare
from lightspeed.predict.speed_of_light import at_speed_of_light
from lightspeed.report.profile_report import profile_document
from lightspeed.suite import get, names
from lightspeed.workload.torch_internals import adopt_fake_tensors

# A model whose shapes depend on computed values: shapes alone cannot tell them.
NEEDS_DATA = {"deepspeech2-tiny"}  # the CTC loss reads its targets inside the operator


def _facts(op: OpRecord) -> tuple[object, ...]:
    return (
        op.name,
        op.module,
        op.phase,
        op.input_shapes,
        op.input_dtypes,
        op.output_shapes,
        op.output_dtypes,
        op.flops,
        op.macs,
        op.bytes_read,
        op.bytes_written,
    )


def _executed(workload: Workload) -> tuple[list[OpRecord], object]:
    prepared = prepare(workload, StepSettings())
    prepared.step()  # the optimizer's state, as the shape-only step makes it
    with capturing(prepared) as capture:
        memory = measure_memory(prepared, capture.entering)
    return without_mode_artifacts(capture.records), memory


@pytest.mark.parametrize(
    "name", [n for n in names() if n.endswith("-tiny") and n not in NEEDS_DATA]
)
def test_shape_only_equals_the_executed_step(name: str) -> None:
    workload = get(name)
    ops, memory = _executed(workload)
    shapes = profile_shape_only(workload, FAKE_CPU)
    assert shapes.timing is None and all(op.time_s is None for op in shapes.ops)
    assert [_facts(op) for op in shapes.ops] == [_facts(op) for op in ops]
    assert shapes.memory is not None
    assert shapes.memory.categories() == memory.categories()  # type: ignore[attr-defined]
    assert shapes.memory.peak_bytes == memory.peak_bytes  # type: ignore[attr-defined]
    assert shapes.workload.parameter_count == prepare(workload, StepSettings()).parameter_count


def test_a_fake_batch_gives_the_same_analysis() -> None:
    workload = get("gpt2-tiny")
    real = profile_shape_only(workload, FAKE_CPU)
    fake = profile_shape_only(workload, FAKE_CPU, real_batch=False)
    assert [_facts(op) for op in fake.ops] == [_facts(op) for op in real.ops]
    assert fake.memory == real.memory


def test_nothing_is_allocated_for_a_large_model() -> None:
    # 64 layers of 4096² fp32 weights: 4.3 GB of parameters, 17 GB with AdamW and grads.
    def model() -> nn.Module:
        return nn.Sequential(*[nn.Linear(4096, 4096, bias=False) for _ in range(64)])

    def loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
        return m(b).square().mean()

    workload = Workload(
        name="wide", model=model, batch=lambda n: torch.ones(n, 4096), loss=loss, batch_size=2
    )
    shapes = profile_shape_only(workload, FAKE_CPU)
    assert shapes.memory is not None
    assert shapes.memory.parameters_bytes == 64 * 4096 * 4096 * 4
    assert shapes.memory.optimizer_state_bytes >= 2 * shapes.memory.parameters_bytes
    forward = [op for op in shapes.ops if op.phase is Phase.FORWARD and op.name == "aten::mm"]
    assert [op.flops for op in forward] == [2 * 2 * 4096 * 4096] * 64


def test_values_computed_in_the_step_stop_it_with_one_line() -> None:
    def loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
        out = m(b)
        return out[torch.nonzero(out > 0, as_tuple=True)].sum()

    workload = Workload(
        name="masked",
        model=lambda: nn.Linear(4, 4),
        batch=lambda n: torch.randn(n, 4),
        loss=loss,
        batch_size=3,
    )
    with pytest.raises(WorkloadError, match=r"depends on.*without --shape-only") as raised:
        profile_shape_only(workload, FAKE_CPU)
    assert "\n" not in str(raised.value)


def test_an_op_reading_values_inside_says_so() -> None:
    with pytest.raises(WorkloadError, match=r"deepspeech2-tiny.*shapes alone"):
        profile_shape_only(get("deepspeech2-tiny"), FAKE_CPU)


def test_the_llama_7b_forward_matrix_products_match_the_analytic_count() -> None:
    """Forward matmul FLOPs = 2·(parameters − embedding)·tokens + QKᵀ and AV (4·T²·d a
    layer, the whole square: the CPU's flash kernel is counted unmasked)."""
    workload = get("llama-7b")
    shapes = profile_shape_only(workload, FAKE_CPU)
    parameters = shapes.workload.parameter_count
    assert parameters == 6_738_415_616
    tokens, d, layers, vocab = 2048, 4096, 32, 32000
    expected = 2 * (parameters - vocab * d) * tokens + layers * 4 * tokens**2 * d
    counted = sum(
        op.flops for op in shapes.ops if op.phase is Phase.FORWARD and op.macs is not None
    )
    assert abs(counted / expected - 1) < 1e-3


@pytest.mark.parametrize("name", ["gpt2-tiny", "transformer-encoder-tiny"])
def test_an_autocast_step_on_fake_tensors_equals_the_executed_one(name: str) -> None:
    # Under bf16 autocast a layer norm takes bf16 input and fp32 weights, and the CPU
    # kernel keeps its mean and rstd in fp32 where the fake kernel says bf16.
    from lightspeed.optimize.precision import autocast

    workload = autocast(get(name), "bf16")
    ops, memory = _executed(workload)
    shapes = profile_shape_only(workload, FAKE_CPU)
    norms = [op for op in shapes.ops if op.name == "aten::native_layer_norm"]
    assert norms and all(op.output_dtypes[1:] == ("float32", "float32") for op in norms)
    assert [_facts(op) for op in shapes.ops] == [_facts(op) for op in ops]
    assert shapes.memory is not None
    assert shapes.memory.categories() == memory.categories()  # type: ignore[attr-defined]


def test_a_layer_norm_of_a_batch_too_large_here_allocates_nothing() -> None:
    import resource

    # [40000, 128, 128] fp32 is 2.6 GB a layer norm input: a real kernel on zeros of
    # that shape would show in the peak resident memory.
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    shapes = profile_shape_only(get("gpt2-tiny").with_batch_size(40_000), FAKE_CPU)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert shapes.memory is not None and shapes.memory.peak_bytes > 20 * 2**30
    assert after - before < 2**30


def test_a_model_making_fp32_tensors_runs_in_bf16_on_fake_tensors() -> None:
    class Explicit(nn.Module):
        """Makes its weight and buffer in fp32 whatever the default dtype."""

        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(8, 8, dtype=torch.float32))
            self.register_buffer("shift", torch.zeros(8, dtype=torch.float32))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.weight + self.shift

    workload = Workload(
        name="explicit",
        model=Explicit,
        batch=lambda n: torch.ones(n, 8),
        loss=lambda m, b: m(b).square().mean(),
        batch_size=2,
    )
    shapes = profile_shape_only(workload, FAKE_CPU, StepSettings(dtype=StepDtype.BF16_PURE))
    (product,) = [op for op in shapes.ops if op.phase is Phase.FORWARD and op.macs]
    assert product.input_dtypes == ("bfloat16", "bfloat16")


def test_a_shape_only_report_warns_of_no_timing() -> None:
    shapes = at_speed_of_light(profile_shape_only(get("mlp-tiny"), FAKE_CPU))
    assert shapes.timing is not None and shapes.timing.warnings  # one "replicate"
    assert profile_document(analyse(shapes)).warnings == ()


def test_fake_parameters_are_made_on_the_steps_device() -> None:
    # On a GPU the step's device is not the one a model is built on; a module of fake
    # parameters cannot be moved afterwards (the swap is refused), so they are made
    # there from the start. The meta device stands in for CUDA on this CPU.
    mode = FakeTensorMode()
    moved_later = nn.Linear(2, 3)
    adopt_fake_tensors(moved_later, mode, torch.float32)
    with mode, pytest.raises(RuntimeError, match="swap"):
        moved_later.to("meta")
    made_there = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    adopt_fake_tensors(made_there, mode, torch.float32, torch.device("meta"))
    tensors = [*made_there.parameters(), *made_there.buffers()]
    assert all(isinstance(t, FakeTensor) and t.device.type == "meta" for t in tensors)
    assert _already_on(made_there, torch.device("meta"), torch.float32)
