"""The checkpoint planner: options weighed on fake tensors, the cheapest that fits."""

from __future__ import annotations

import pytest

from factories import FAKE_CPU, convnet_workload
from lightspeed.errors import ConfigError
from lightspeed.predict.checkpointing import (
    CheckpointOption,
    CheckpointOptions,
    checkpoint_options,
    choose_checkpoint,
    plan_checkpoint,
)
from lightspeed.workflows.profile import profile


@pytest.fixture(scope="module")
def measured() -> object:
    return profile(convnet_workload("sequential"), hardware=FAKE_CPU, budget_s=0.1, steps=1)


@pytest.fixture(scope="module")
def weighed(measured: object) -> CheckpointOptions:
    """Every option of the convnet's step, weighed once for the tests of the choice."""
    return checkpoint_options(measured, convnet_workload("sequential"))  # type: ignore[arg-type]


def test_the_plan_is_the_cheapest_option_that_fits(
    measured: object, weighed: CheckpointOptions
) -> None:
    workload = convnet_workload("sequential")
    loose = plan_checkpoint(measured, workload, 2**40)  # type: ignore[arg-type]

    # The same options as weighed apart (their recompute times are measured anew).
    def sizes(options: tuple[CheckpointOption, ...]) -> list[tuple[object, ...]]:
        return [(o.modules, o.peak_bytes, o.activations_bytes) for o in options]

    assert sizes(loose.options) == sizes(weighed.options)
    assert loose.chosen == loose.plain and loose.chosen.recompute_s == 0
    # 4 blocks: nothing, the first of two 2-block segments, full coverings by 4, 3, 2, 1;
    # every block op by op with its one kind of product (its convolution) recomputed too
    # in the first two blocks, then in all four; then the first 1, 2, 3 and 4 blocks op
    # by op.
    specs = [o.modules for o in loose.options]
    assert specs[:2] == [(), ("blocks.0:2",)]
    assert ("blocks.0:2", "blocks.2:4") in specs and ("blocks.0:4",) in specs
    assert specs[-6:-4] == [
        ("ops+1:blocks.0", "ops+1:blocks.1", "ops:blocks.2", "ops:blocks.3"),
        tuple(f"ops+1:blocks.{i}" for i in range(4)),
    ]
    assert specs[-4:] == [tuple(f"ops:blocks.{i}" for i in range(k)) for k in range(1, 5)]
    assert len(specs) == 12
    by_spec = {o.modules: o for o in loose.options}
    # The convolutions recomputed too: less kept, more time.
    echo, deeper = by_spec[specs[-1]], by_spec[specs[-5]]
    assert deeper.activations_bytes < echo.activations_bytes
    assert deeper.recompute_s > echo.recompute_s
    assert loose.sqrt_n is not None and loose.sqrt_n.modules == ("auto",)
    assert loose.sqrt_n.activations_bytes < loose.plain.activations_bytes
    lowest = min(o.peak_bytes for o in loose.options)
    tight = choose_checkpoint(weighed, lowest)
    assert tight.chosen.peak_bytes <= lowest
    fitting = [o for o in tight.options if o.peak_bytes <= lowest]
    assert tight.chosen.recompute_s == min(o.recompute_s for o in fitting)
    assert all(o.recompute_s > 0 for o in tight.options if o.modules)


def test_a_budget_below_every_option_says_the_lowest(weighed: CheckpointOptions) -> None:
    with pytest.raises(ConfigError, match="no plan fits 1 KiB of peak: the lowest is") as raised:
        choose_checkpoint(weighed, 1024)
    assert "\n" not in str(raised.value)


def test_a_budget_of_activations_takes_the_cheapest_option_under_it(
    measured: object, weighed: CheckpointOptions
) -> None:
    workload = convnet_workload("sequential")
    half = choose_checkpoint(weighed, 2**40).plain.activations_bytes // 2
    choice = choose_checkpoint(weighed, half, "activations")
    assert choice.bounds == "activations" and choice.chosen.activations_bytes <= half
    fitting = [o for o in choice.options if o.activations_bytes <= half]
    assert choice.chosen.recompute_s == min(o.recompute_s for o in fitting)
    with pytest.raises(ConfigError, match="bounds the peak or the activations"):
        plan_checkpoint(measured, workload, half, "weights")  # type: ignore[arg-type]


def test_op_level_recompute_time_from_a_profile_measured_elsewhere(
    measured: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where checkpoint cannot be timed (the profile is another device's), recomputing
    a block op by op costs its forward's ops that are not kept (convolutions are), with
    their share of the time outside ops."""
    from lightspeed.facts.records import Phase
    from lightspeed.predict import checkpointing as planner

    monkeypatch.setattr(planner, "kernels_here", lambda _: False)
    weighed = checkpoint_options(measured, convnet_workload("sequential"))  # type: ignore[arg-type]
    ops = measured.ops  # type: ignore[attr-defined]
    outside = measured.unattributed_s or 0.0  # type: ignore[attr-defined]

    def cheap_forward_s(block: str) -> float:
        cheap = [
            op
            for op in ops
            if op.phase is Phase.FORWARD
            and op.module.startswith(block)
            and op.name != "aten::convolution"
        ]
        assert cheap
        return sum(op.time_s or 0.0 for op in cheap) + outside * len(cheap) / len(ops)

    assert any(op.name == "aten::convolution" for op in ops)
    first = next(o for o in weighed.options if o.modules == ("ops:blocks.0", "ops:blocks.1"))
    assert first.recompute_s == pytest.approx(
        cheap_forward_s("blocks.0") + cheap_forward_s("blocks.1")
    )
    whole = next(o for o in weighed.options if o.modules == ("blocks.0:2",))
    assert first.recompute_s < whole.recompute_s
    # ops+1: the convolution recomputed too, with its share of the time outside ops.
    conv = [op for op in ops if op.phase is Phase.FORWARD and op.name == "aten::convolution"]
    deeper = next(o for o in weighed.options if o.modules[:1] == ("ops+1:blocks.0",))
    assert deeper.modules[1:] == ("ops+1:blocks.1", "ops:blocks.2", "ops:blocks.3")
    echo = sum(cheap_forward_s(f"blocks.{i}") for i in range(4))
    convs = [op for op in conv if op.module.startswith(("blocks.0", "blocks.1"))]
    assert len(convs) == 2
    assert deeper.recompute_s == pytest.approx(
        echo + sum(op.time_s or 0.0 for op in convs) + outside * 2 / len(ops)
    )


def test_checkpoint_text_names_whole_modules_then_op_level_ones() -> None:
    from lightspeed.predict.whatif import checkpoint_modules

    assert checkpoint_modules("auto") == "auto"
    assert checkpoint_modules("ops") == ["ops"]
    assert checkpoint_modules("ops:h.0,h.1") == ["ops:h.0", "ops:h.1"]
    assert checkpoint_modules("blocks.0:4,ops:blocks.4,blocks.5") == [
        "blocks.0:4",
        "ops:blocks.4",
        "ops:blocks.5",
    ]
    assert checkpoint_modules("ops+2") == ["ops+2"]
    assert checkpoint_modules("h.0,ops+2:h.1,h.2,ops:h.3,h.4") == [
        "h.0",
        "ops+2:h.1",
        "ops+2:h.2",
        "ops:h.3",
        "ops:h.4",
    ]
