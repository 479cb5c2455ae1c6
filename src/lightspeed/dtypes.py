"""Numeric precisions: the keys of hardware peaks and the `--dtype` of a workload."""

from __future__ import annotations

import enum

from lightspeed.errors import UnknownNameError, parse_choice


class Precision(str, enum.Enum):
    """A math precision a device has a peak FLOP/s for.

    `tf32` is fp32 storage computed on tensor cores with a 10-bit mantissa; `fp8` is
    either of the e4m3 / e5m2 formats; `int8` counts integer operations as FLOPs.
    """

    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"

    @classmethod
    def parse(cls, name: str, flag: str = "--dtype") -> Precision:
        """The precision called `name` (case-insensitive), or an error naming `flag`."""
        return parse_choice(cls, name, flag, "precision")


# The precisions a whole training step can run in (`--dtype`): parameters, activations
# and the batch's floating tensors are cast to it.
STEP_PRECISIONS = (Precision.FP32, Precision.BF16, Precision.FP16)

# torch attribute names, so that reading traces and catalogs never imports torch.
TORCH_DTYPE_NAMES = {
    Precision.FP64: "float64",
    Precision.FP32: "float32",
    Precision.TF32: "float32",
    Precision.BF16: "bfloat16",
    Precision.FP16: "float16",
    Precision.FP8: "float8_e4m3fn",
    Precision.INT8: "int8",
}


# The precision of a tensor by its torch dtype name (float32 is fp32, not tf32).
_PRECISION_OF_DTYPE = {
    name: p for p, name in TORCH_DTYPE_NAMES.items() if p is not Precision.TF32
} | {"float8_e5m2": Precision.FP8}


def precision_of_dtype(name: str) -> Precision | None:
    """The precision of a tensor whose torch dtype is called `name` ("bfloat16"), or None."""
    return _PRECISION_OF_DTYPE.get(name)


def step_precision(name: str) -> Precision:
    """Parse a `--dtype` for a training step: one of fp32, bf16, fp16."""
    precision = Precision.parse(name)
    if precision not in STEP_PRECISIONS:
        allowed = ", ".join(p.value for p in STEP_PRECISIONS)
        raise UnknownNameError(
            f"--dtype {name!r} cannot run a training step; choose one of {allowed}."
        )
    return precision
