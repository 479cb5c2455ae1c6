"""`predict(profile, …)`: the what-if predictions composed, in this order: the changes
the step's shapes show (batch size, autocast precision, checkpointed modules) together,
by one run of the changed step on fake tensors; then other hardware; then K jobs fused
into one; then N-way data parallelism."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lightspeed import units
from lightspeed.dtypes import Precision
from lightspeed.errors import ConfigError, LightspeedError, OutOfMemoryError
from lightspeed.facts.hardware import Hardware
from lightspeed.facts.link import CoRun, Link
from lightspeed.facts.profile import Prediction, Profile
from lightspeed.measure.step import StepSettings
from lightspeed.predict.carry import carry_over, forward_s, op_key
from lightspeed.predict.data_parallel import corun_slowdown, on_data_parallel
from lightspeed.predict.fusion import on_fused
from lightspeed.predict.hardware import on_hardware
from lightspeed.predict.scan import on_scan_backward
from lightspeed.predict.shapes import (
    DECOMPOSED_ON_CPU,
    largest_batch,
    rnn_shapes,
    settings_of,
    shape_settings,
)
from lightspeed.workload import Workload

__all__ = ["checkpoint_modules", "predict"]


def predict(
    profile: Profile,
    *,
    workload: Workload | None = None,
    batch_size: int | None = None,
    dtype: str | None = None,
    checkpoint: str | None = None,
    hardware: Hardware | None = None,
    scan_backward: bool = False,
    fuse: int | None = None,
    data_parallel: int | None = None,
    link: Link | None = None,
    corun: CoRun | None = None,
    fits: bool = False,
    time_kernels: bool = True,
) -> Profile:
    """`profile` as it is predicted to run with the changes given (none: `profile`
    itself).

    `batch_size`: samples per step. `dtype`: "bf16" or "fp16" autocast of an fp32
    step. `checkpoint`: "auto" (the √N segment plan) or comma-separated module names
    or patterns to checkpoint. `hardware`: another device, from the catalog or
    calibrated. These first three re-run the step's shapes, so they need the
    `workload` the profile measured (None: loaded by the profile's workload name), as
    does `scan_backward`: each `nn.RNN`'s backward as a parallel scan
    (`optimize.scan_backward`, predicted by `predict.scan`), on the (target) hardware.
    `fuse`: K jobs of the step fused into one (`optimize.fusion.fuse`).
    `data_parallel`: N processes, each at the (predicted) step's batch, reducing
    gradients over `link`; `corun`: how much slower processes sharing one machine
    compute (None: not at all, a device each).
    `fits`: also find the largest batch size whose step fits the (target) hardware's
    memory. `time_kernels`: on the device the profile was measured on, time the kernels
    a change alters one by one (False: the roofline's rules alone, as for a profile
    measured elsewhere).
    """
    predicted = profile
    changes_made = False
    if batch_size is not None or dtype is not None or checkpoint is not None or fits:
        workload = (workload or workload_of(profile)).with_batch_size(profile.workload.batch_size)
        changed, changes = _changed(workload, batch_size, dtype, checkpoint)
        changes_made = bool(changes)
        if changes:
            carried = _carried(profile, workload, changed, changes, dtype, time_kernels)
            if "dtype" in changes:  # the step it predicts runs under autocast
                info = dataclasses.replace(
                    carried.workload, precision=Precision(changes["dtype"]), mixed=True
                )
                carried = dataclasses.replace(carried, workload=info)
            predicted = _then(predicted, carried)
    if hardware is not None:
        predicted = _then(predicted, on_hardware(predicted, hardware))
    if scan_backward:
        workload = workload or workload_of(profile)
        rnns = rnn_shapes(workload, shape_settings(profile))
        predicted = _then(predicted, on_scan_backward(predicted, rnns))
    if fuse is not None:
        predicted = _then(predicted, on_fused(predicted, fuse))
    if data_parallel is not None:
        if link is None:
            raise ConfigError("a data-parallel prediction needs the link between processes.")
        slowdown = 1.0 if corun is None else corun_slowdown(predicted, corun)
        spread = on_data_parallel(predicted, data_parallel, link, compute_slowdown=slowdown)
        predicted = _then(predicted, spread)
    if fits:
        assert workload is not None
        largest = largest_batch(
            _changed(workload, None, dtype, checkpoint)[0],
            predicted.hardware,
            shape_settings(profile),
        )
        made = predicted.prediction or _identity(profile)
        predicted = dataclasses.replace(
            predicted, prediction=dataclasses.replace(made, largest_batch_size=largest)
        )
    decomposed = (changes_made or fits) and shape_settings(profile) != settings_of(profile)
    if decomposed and predicted.prediction is not None:
        made = predicted.prediction
        predicted = dataclasses.replace(
            predicted,
            prediction=dataclasses.replace(
                made, assumptions=(*made.assumptions, DECOMPOSED_ON_CPU)
            ),
        )
    return predicted


def _changed(
    workload: Workload, batch_size: int | None, dtype: str | None, checkpoint: str | None
) -> tuple[Workload, dict[str, str]]:
    """`workload` with the changes its shapes show, and those changes by name."""
    from lightspeed.optimize.checkpointing import checkpoint as checkpointed
    from lightspeed.optimize.precision import autocast

    changes: dict[str, str] = {}
    if batch_size is not None and batch_size != workload.batch_size:
        if batch_size < 1:
            raise ConfigError(f"--batch-size {batch_size} must be at least 1.")
        workload = workload.with_batch_size(batch_size)
        changes["batch-size"] = str(batch_size)
    if dtype is not None and dtype != "fp32":
        workload = autocast(workload, dtype)
        changes["dtype"] = dtype
    if checkpoint is not None:
        workload = checkpointed(workload, checkpoint_modules(checkpoint))
        changes["checkpoint"] = checkpoint
    return workload, changes


def checkpoint_modules(text: str) -> str | list[str]:
    """What `--checkpoint TEXT` (`predict`'s `checkpoint`) names, as
    `optimize.checkpoint` takes it: "auto" (the √N segment plan), "ops" (every block of
    those stacks recomputed op by op, Echo; "ops+K" with K kinds of product of each
    recomputed too), or comma-separated module names, shell-style patterns or `STACK.I:J`
    segments recomputed whole, then `ops:` (or `ops+K:`) and the modules recomputed op by
    op ("ops:h.0,h.1", "blocks.0:4,ops:blocks.4", "ops+2:h.0,h.1,ops:h.2")."""
    from lightspeed.optimize.checkpoint_plan import op_level_spec, parse_op_level

    if text == "auto":
        return "auto"
    names: list[str] = []
    prefix = ""  # after an op-level name, the "ops:" or "ops+K:" the names that follow take
    for name in text.split(","):
        parsed = parse_op_level(name)
        if parsed is not None and parsed[1] is not None:
            prefix = op_level_spec("", parsed[0])
        names.append(name if parsed is not None or not prefix else f"{prefix}{name}")
    return names


def _carried(
    profile: Profile,
    workload: Workload,
    changed: Workload,
    changes: dict[str, str],
    dtype: str | None,
    time_kernels: bool,
) -> Profile:
    """The changed step's shapes, timed from `profile` (`predict.carry`). On the device
    at hand (`time_kernels`), the matrix products and convolutions the change alters,
    and the ops it adds, are timed one by one there, before and after: such a kernel's
    speed at another size or precision is its own, which a ceiling does not say (a bf16
    GEMM on a CPU without native bf16; small convolutions whose efficiency grows with the
    batch)."""
    from lightspeed.measure.op_bench import time_ops
    from lightspeed.measure.shape_only import profile_shape_only
    from lightspeed.predict.precision import precision_assumptions

    settings = shape_settings(profile)
    shapes = profile_shape_only(changed, profile.hardware, settings)
    kernel_times = None
    if time_kernels and kernels_here(profile):
        measured = {op_key(op) for op in profile.ops}
        new = {op_key(op) for op in shapes.ops} - measured
        names = {name for name, _, _ in new}
        if new:  # every new configuration: an added op takes its own time
            after = time_ops(changed, settings, lambda key: key in new)
            before = time_ops(workload, settings, lambda key: key in measured and key[0] in names)
            kernel_times = (before, after)
    timed = kernel_times is not None
    assumptions = precision_assumptions(profile.hardware, dtype, timed=timed) if dtype else ()
    hooks_s, hooks_rules, hooks_assumptions = (
        _checkpoint_hooks(profile, changed, shapes, settings, time_kernels)
        if "checkpoint" in changes
        else (0.0, (), ())
    )
    return carry_over(
        profile,
        shapes,
        changes,
        (*assumptions, *hooks_assumptions),
        kernel_times,
        added_outside_s=hooks_s,
        added_rules=hooks_rules,
    )


CHECKPOINT_RULE = (
    "checkpoint's own work (its hooks for each region and each tensor saved in one):"
    " every region of one real step timed alone on this device, on its own inputs —"
    " checkpointed, minus plain, minus its recompute"
)


def _checkpoint_hooks(
    profile: Profile,
    changed: Workload,
    shapes: Profile,
    settings: StepSettings,
    time_kernels: bool,
) -> tuple[float, tuple[str, ...], tuple[str, ...]]:
    """Seconds `torch.utils.checkpoint`'s own work adds to the changed step (`shapes`, on
    fake tensors), the rule that says how, and the assumption that states its figure (or
    that it is left out: for a profile measured elsewhere, or a changed step that does
    not fit here)."""
    from lightspeed.measure.checkpoint_cost import checkpoint_costs
    from lightspeed.optimize.checkpointing import SAVED_OP_NAMES
    from lightspeed.optimize.recompute_products import recomputed_products_s

    if not (time_kernels and kernels_here(profile)):
        return 0.0, (), (f"{_HOOKS_LEFT_OUT}: it is timed only where the profile was measured",)
    limit = profile.hardware.memory_bytes
    peak = shapes.memory.peak_bytes if shapes.memory is not None else 0
    if limit is not None and peak > _RUNNABLE_SHARE * limit:
        return (
            0.0,
            (),
            (
                f"{_HOOKS_LEFT_OUT}: the changed step's {units.size(peak)} peak is"
                f" more than {_RUNNABLE_SHARE:.0%} of this device's memory",
            ),
        )
    try:
        costs = checkpoint_costs(changed, settings)
    except OutOfMemoryError as exc:
        return 0.0, (), (f"{_HOOKS_LEFT_OUT}: the changed step does not fit here ({exc})",)
    # An op-level region recomputes only its cheap ops (and, `ops+K`, K kinds of its
    # products), which the changed step's ops count already: its own work is all it
    # adds, less those ops as measured.
    seconds = costs.seconds + sum(
        max(
            costs.added_by_module.get(m, 0.0)
            - costs.by_module.get(m, 0.0)
            - forward_s(profile, m, leaving_out=SAVED_OP_NAMES)
            - recomputed_products_s(profile, m, costs.products.get(m, 0), SAVED_OP_NAMES),
            0.0,
        )
        for m in costs.op_level
    )
    return (
        seconds,
        (CHECKPOINT_RULE,),
        (f"checkpoint's own work: {seconds * 1e3:.2f} ms a step over its {costs.regions} regions",),
    )


# The most of the device's memory the changed step may need for one real step of it to be
# run to time checkpoint's own work.
_RUNNABLE_SHARE = 0.5
_HOOKS_LEFT_OUT = (
    "checkpoint's own work (its hooks for each region and saved tensor) is not counted"
)


def kernels_here(profile: Profile) -> bool:
    """Whether the profile's hardware is this machine's: a calibrated CPU profile, or a
    CUDA profile where CUDA is present."""
    import torch

    from lightspeed.facts.device import Device

    if profile.workload.device is Device.CUDA:
        return torch.cuda.is_available()
    return profile.hardware.calibration is not None


def _then(before: Profile, after: Profile) -> Profile:
    """`after`, predicted from `before`, with one prediction that says how from the
    measured profile both start from."""
    if before.prediction is None or after.prediction is None:
        return after
    return dataclasses.replace(after, prediction=before.prediction.then(after.prediction))


def _identity(profile: Profile) -> Prediction:
    return Prediction(
        changes={},
        source_hardware=profile.hardware.id,
        measured_step_time_s=profile.step_time_s,
        rules=(),
    )


def workload_of(profile: Profile) -> Workload:
    """The workload `profile` measured, loaded again from the TARGET it came from (its
    name for profiles that did not record one)."""
    from lightspeed.workload.targets import load_target

    info = profile.workload
    source = info.target or info.name
    path, colon, _ = source.rpartition(":")
    if colon and not source.startswith("hf:") and path and not Path(path).is_file():
        raise ConfigError(
            f"the profile's workload {info.name!r} was loaded from {path}, which is not there"
            " now (moved or deleted?); give the workload itself (TARGET) instead of its"
            " profile."
        )
    try:
        # What-ifs run its step on fake tensors: a model too large to train here is fine.
        loaded = load_target(source, allocates=False)
    except LightspeedError as exc:
        raise ConfigError(
            "predicting another batch size, precision, checkpointing or a scanned backward"
            f" runs the step's shapes again, and the profile's workload {source!r} cannot be"
            f" loaded ({exc}); give the workload itself (TARGET) instead of its profile."
        ) from exc
    if loaded.name != info.name:
        raise ConfigError(
            f"the profile measured {info.name!r}, and {source} now gives {loaded.name!r}"
            " (a transformed workload, or another one since); give the workload itself"
            " (TARGET) instead of its profile."
        )
    return loaded
