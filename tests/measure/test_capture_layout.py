"""The memory format an op's first image-shaped input was in, as the capture records it."""

from __future__ import annotations

import torch
from torch import nn

from lightspeed.measure.capture import channels_last
from lightspeed.workload import Workload


def test_channels_last_tells_the_layout_of_the_first_4d_or_5d_input() -> None:
    x = torch.randn(2, 3, 4, 4)
    assert channels_last((torch.randn(5), x)) is False  # the 1-D tensor is skipped
    assert channels_last(([x.to(memory_format=torch.channels_last)], {})) is True
    video = torch.randn(2, 3, 2, 4, 4).to(memory_format=torch.channels_last_3d)
    assert channels_last((video,)) is True
    # One pixel: both layouts at once, so the layout does not matter.
    assert channels_last((torch.randn(2, 3, 1, 1),)) is None
    assert channels_last((x.transpose(2, 3),)) is None  # neither layout
    # An expanded gradient (of a sum) says nothing; the next image-shaped input does.
    assert channels_last((torch.ones(()).expand(2, 3, 4, 4), x)) is False
    assert channels_last((torch.randn(3, 3), 1.0)) is None


def test_the_capture_records_the_layout_of_each_convolution() -> None:
    from lightspeed.measure.capture import capture_step
    from lightspeed.measure.step import StepSettings, prepare

    def workload(memory_format: torch.memory_format) -> Workload:
        return Workload(
            name="conv",
            model=lambda: nn.Conv2d(3, 4, 3).to(memory_format=memory_format),
            batch=lambda n: torch.randn(n, 3, 6, 6).to(memory_format=memory_format),
            loss=lambda model, batch: model(batch).sum(),
            batch_size=2,
        )

    for fmt, expected in ((torch.contiguous_format, False), (torch.channels_last, True)):
        ops = capture_step(prepare(workload(fmt), StepSettings()))
        layouts = {o.channels_last for o in ops if o.name.startswith("aten::convolution")}
        assert layouts == {expected}, fmt
