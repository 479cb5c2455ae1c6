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
    # 4 blocks: nothing, the first of two 2-block segments, full coverings by 4, 3, 2, 1.
    specs = [o.modules for o in loose.options]
    assert specs[:2] == [(), ("blocks.0:2",)]
    assert ("blocks.0:2", "blocks.2:4") in specs and ("blocks.0:4",) in specs
    assert len(specs) == 6
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
