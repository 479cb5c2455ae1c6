"""What the Gist encodings (`optimize.encodings`) would save, predicted on fake tensors.

An encoding saves memory only where nothing else keeps the tensor it encodes, which a
model's structure decides op by op. Rather than reason about it, the step is run on fake
tensors (`measure.shape_only`: exact memory, nothing executed) as it is, with every
candidate encoded, and with every candidate but one encoded: what that one adds to the
saving. Encodings work in pairs — a ReLU's output feeding a max-pool is freed only when
both are encoded — so a candidate is judged with the others encoded, not alone; one that
adds nothing, or costs its mask (a ReLU feeding a convolution, which keeps its input for
its own backward), cannot help there.
"""

from __future__ import annotations

import dataclasses

from torch import nn

from lightspeed.facts.hardware import Hardware
from lightspeed.measure.shape_only import profile_shape_only
from lightspeed.measure.step import StepSettings
from lightspeed.optimize.encodings import candidates, gist_model
from lightspeed.workload import Workload


@dataclasses.dataclass(frozen=True)
class GistSavings:
    """Activation bytes of one training step kept for backward: `activations_bytes` as
    the workload is, `encoded_bytes` with every candidate encoded, and `by_module`, the
    bytes each candidate adds to the saving, the others encoded (0 or less: it cannot
    help there; less: its encoding costs more than it frees)."""

    activations_bytes: int
    encoded_bytes: int
    by_module: dict[str, int]

    @property
    def saved_bytes(self) -> int:
        """Activation bytes saved with every candidate encoded."""
        return self.activations_bytes - self.encoded_bytes

    @property
    def saved_fraction(self) -> float:
        """`saved_bytes` over `activations_bytes` (0 with no activations)."""
        return self.saved_bytes / self.activations_bytes if self.activations_bytes else 0.0

    @property
    def helpful(self) -> tuple[str, ...]:
        """The candidates that add to the saving, in module order."""
        return tuple(name for name, saved in self.by_module.items() if saved > 0)


def gist_savings(
    workload: Workload, hardware: Hardware, settings: StepSettings | None = None
) -> GistSavings:
    """`GistSavings` of `workload`'s step, each figure from a run on fake tensors."""
    built = workload.model()
    names = candidates(built) if isinstance(built, nn.Module) else []

    def activations(selected: frozenset[str]) -> int:
        def model() -> nn.Module:
            made = workload.model()
            if isinstance(made, nn.Module) and selected:
                gist_model(made, lambda name: name in selected)
            return made

        changed = dataclasses.replace(workload, model=model)
        memory = profile_shape_only(changed, hardware, settings).memory
        assert memory is not None
        return memory.activations_bytes

    every = frozenset(names)
    encoded = activations(every)
    return GistSavings(
        activations_bytes=activations(frozenset()),
        encoded_bytes=encoded,
        by_module={name: activations(every - {name}) - encoded for name in names},
    )
