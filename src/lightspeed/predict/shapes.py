"""Predictions that run the changed step on fake tensors (`measure.shape_only`).

At another batch size every op's FLOPs and bytes come from its own shapes at that batch,
and the memory categories are those the step would hold: no global linear fit. The same
run gives the largest batch that fits a device's memory.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from lightspeed.errors import WorkloadError
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.profile import Profile
from lightspeed.measure.shape_only import fake_step, profile_shape_only
from lightspeed.measure.step import StepSettings
from lightspeed.predict.scan import RnnShape
from lightspeed.workload import Workload


def settings_of(profile: Profile) -> StepSettings:
    """The device and precision `profile`'s step ran in."""
    return StepSettings(device=profile.workload.device, dtype=profile.workload.dtype)


# What a prediction assumes when a GPU's step is decomposed here, on a machine without one.
DECOMPOSED_ON_CPU = (
    "the step's shapes are the CPU's decomposition of it (this machine has no CUDA GPU):"
    " attention and convolution ops may differ from the GPU's, and with them their"
    " workspaces"
)


def shape_settings(profile: Profile) -> StepSettings:
    """Where `profile`'s step is decomposed on fake tensors here: its own device and
    precision, or the CPU in its precision for a CUDA step on a machine without a GPU
    (`DECOMPOSED_ON_CPU` says so): a saved GPU profile is predicted anywhere."""
    settings = settings_of(profile)
    if settings.device is Device.CUDA and not torch.cuda.is_available():
        return dataclasses.replace(settings, device=Device.CPU)
    return settings


# Shape-only runs the largest-batch search may take after its first two.
_SEARCH_STEPS = 12
# The search stops once the largest batch is known to within this share of it.
_SEARCH_TOLERANCE = 0.01


def largest_batch(workload: Workload, hardware: Hardware, settings: StepSettings) -> int | None:
    """The most samples a step of `workload` can take with its peak memory within
    `hardware.memory_bytes`, to within 1 %, from shape-only runs (0: not even one sample;
    None: the hardware's memory is not known, the peak does not grow with the batch, or
    the step's shapes depend on its batch's values).

    The peak at the workload's batch and at twice it give a line; where the line through
    the last two batches tried meets the memory is tried next (the peak is nearly linear
    in the batch, so this lands close at once), kept inside the batches known to fit and
    not to fit, halving that interval when the line points outside it.
    """
    limit = hardware.memory_bytes
    if not limit:
        return None

    def peak(batch_size: int) -> int:
        shapes = profile_shape_only(
            workload.with_batch_size(batch_size), hardware, settings, real_batch=False
        )
        assert shapes.memory is not None
        return shapes.memory.peak_bytes

    base = workload.batch_size
    try:
        tried = [(base, peak(base)), (2 * base, peak(2 * base))]
    except WorkloadError:
        return None
    if tried[1][1] <= tried[0][1]:
        return None
    fits = max((b for b, p in tried if p <= limit), default=0)
    too_big = min((b for b, p in tried if p > limit), default=None)
    for _ in range(_SEARCH_STEPS):
        if too_big is not None and too_big - fits <= max(1, int(fits * _SEARCH_TOLERANCE)):
            break
        (b1, p1), (b2, p2) = tried[-2:]
        guess = round(b2 + (limit - p2) * (b2 - b1) / (p2 - p1)) if p2 != p1 else b2 + 1
        if guess <= fits or (too_big is not None and guess >= too_big):
            guess = (fits + too_big) // 2 if too_big is not None else 2 * max(fits, 1)
        at = peak(guess)
        tried.append((guess, at))
        if at <= limit:
            fits = max(fits, guess)
        else:
            too_big = guess if too_big is None else min(too_big, guess)
    return fits


def rnn_shapes(workload: Workload, settings: StepSettings) -> list[RnnShape]:
    """Each `nn.RNN` of `workload`'s model as its step runs it (time steps, batch, sizes),
    from one step on fake tensors: nothing is computed. The step runs on the CPU
    whatever `settings.device`: the shapes are the same on a GPU, where cuDNN's fused
    recurrence has no fake backward (it asks for the flat weight buffer that fake
    parameters lack)."""
    found: dict[str, RnnShape] = {}
    with fake_step(workload, dataclasses.replace(settings, device=Device.CPU)) as prepared:
        hooks = []
        for name, module in prepared.model.named_modules():
            if isinstance(module, torch.nn.RNN):
                hooks.append(module.register_forward_pre_hook(_recording(found, name, module)))
        try:
            prepared.step()
        finally:
            for hook in hooks:
                hook.remove()
    return list(found.values())


def _recording(found: dict[str, RnnShape], name: str, rnn: torch.nn.RNN) -> Any:
    def record(_: torch.nn.Module, args: tuple[Any, ...]) -> None:
        x = args[0]
        if not isinstance(x, torch.Tensor):  # a packed sequence: `scan_backward` refuses it
            return
        steps = x.shape[1 if rnn.batch_first and x.dim() == 3 else 0]
        batch = 1 if x.dim() == 2 else x.shape[0 if rnn.batch_first else 1]
        found[name] = RnnShape(name, int(steps), int(batch), rnn.input_size, rnn.hidden_size)

    return record
