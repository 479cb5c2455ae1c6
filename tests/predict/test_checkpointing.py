"""The checkpoint planner: options weighed on fake tensors, the cheapest that fits."""

from __future__ import annotations

import pytest

from factories import FAKE_CPU
from lightspeed.errors import ConfigError
from lightspeed.predict.checkpointing import plan_checkpoint
from lightspeed.workflows.profile import profile
from optimize.test_checkpoint import convnet_workload


@pytest.fixture(scope="module")
def measured() -> object:
    return profile(convnet_workload("sequential"), hardware=FAKE_CPU, budget_s=0.1, steps=1)


def test_the_plan_is_the_cheapest_option_that_fits(measured: object) -> None:
    workload = convnet_workload("sequential")
    loose = plan_checkpoint(measured, workload, 2**40)  # type: ignore[arg-type]
    assert loose.chosen == loose.plain and loose.chosen.recompute_s == 0
    # 4 blocks: nothing, the first of two 2-block segments, full coverings by 4, 3, 2, 1.
    specs = [o.modules for o in loose.options]
    assert specs[:2] == [(), ("blocks.0:2",)]
    assert ("blocks.0:2", "blocks.2:4") in specs and ("blocks.0:4",) in specs
    assert len(specs) == 6
    assert loose.sqrt_n is not None and loose.sqrt_n.modules == ("auto",)
    assert loose.sqrt_n.activations_bytes < loose.plain.activations_bytes
    lowest = min(o.peak_bytes for o in loose.options)
    tight = plan_checkpoint(measured, workload, lowest)  # type: ignore[arg-type]
    assert tight.chosen.peak_bytes <= lowest
    fitting = [o for o in tight.options if o.peak_bytes <= lowest]
    assert tight.chosen.recompute_s == min(o.recompute_s for o in fitting)
    assert all(o.recompute_s > 0 for o in tight.options if o.modules)


def test_a_budget_below_every_option_says_the_lowest(measured: object) -> None:
    with pytest.raises(ConfigError, match="no plan fits 1 KiB of peak: the lowest is") as raised:
        plan_checkpoint(measured, convnet_workload("sequential"), 1024)  # type: ignore[arg-type]
    assert "\n" not in str(raised.value)


def test_a_budget_of_activations_takes_the_cheapest_option_under_it(measured: object) -> None:
    workload = convnet_workload("sequential")
    half = plan_checkpoint(measured, workload, 2**40).plain.activations_bytes // 2  # type: ignore[arg-type]
    choice = plan_checkpoint(measured, workload, half, "activations")  # type: ignore[arg-type]
    assert choice.bounds == "activations" and choice.chosen.activations_bytes <= half
    fitting = [o for o in choice.options if o.activations_bytes <= half]
    assert choice.chosen.recompute_s == min(o.recompute_s for o in fitting)
    with pytest.raises(ConfigError, match="bounds the peak or the activations"):
        plan_checkpoint(measured, workload, half, "weights")  # type: ignore[arg-type]
