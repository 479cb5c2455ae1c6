"""Numeric precisions: the keys of hardware peaks, and how a training step runs in one
(`StepDtype`, the `--dtype` of every command that runs a workload)."""

from __future__ import annotations

import enum

from lightspeed.errors import UnknownNameError, did_you_mean, parse_choice


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


class StepDtype(str, enum.Enum):
    """How a training step runs in a precision (`--dtype`).

    `bf16` and `fp16` are mixed precision, as users train: the parameters, their
    gradients, the optimizer's state and the batch stay fp32, and the forward and loss run
    under `torch.autocast` to the lower precision (fp16 with a loss scaler). `bf16-pure`
    and `fp16-pure` cast the whole model and the batch's floating tensors to it.
    """

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    BF16_PURE = "bf16-pure"
    FP16_PURE = "fp16-pure"

    @classmethod
    def parse(cls, name: str, flag: str = "--dtype") -> StepDtype:
        """The step dtype called `name` (case-insensitive), or an error naming `flag`."""
        try:
            return cls(name.lower())
        except ValueError:
            names = [member.value for member in cls]
            raise UnknownNameError(
                f"{flag} {name!r} cannot run a training step; choose one of"
                f" {', '.join(names)}." + did_you_mean(name, names)
            ) from None

    @classmethod
    def of(cls, precision: Precision, *, mixed: bool) -> StepDtype:
        """The step dtype of math in `precision`, under autocast when `mixed`."""
        for member in cls:
            if member.precision is precision and member.mixed == mixed:
                return member
        how = "autocast" if mixed else "pure"
        raise UnknownNameError(f"a training step cannot run in {precision.value} {how}.")

    @property
    def precision(self) -> Precision:
        """The precision of the step's math: the lower one of a mixed step."""
        return Precision(self.value.removesuffix("-pure"))

    @property
    def mixed(self) -> bool:
        """Whether the step runs under autocast with fp32 parameters and batch."""
        return self in (StepDtype.BF16, StepDtype.FP16)

    @property
    def stored(self) -> Precision:
        """The precision the parameters and the batch's floating tensors are cast to."""
        return Precision.FP32 if self.mixed else self.precision

    @property
    def label(self) -> str:
        """How reports name it: "fp32", "bf16 autocast", "bf16 pure"."""
        if self is StepDtype.FP32:
            return "fp32"
        return f"{self.precision.value} {'autocast' if self.mixed else 'pure'}"


# torch attribute names, so that reading traces and catalogs never imports torch.
# Bytes of one element stored in each precision (TF32 is stored as fp32).
ELEMENT_BYTES = {
    Precision.FP64: 8,
    Precision.FP32: 4,
    Precision.TF32: 4,
    Precision.BF16: 2,
    Precision.FP16: 2,
    Precision.FP8: 1,
    Precision.INT8: 1,
}

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
