"""A workload's inference call: its own `forward`, or the model on the batch's inputs.

A training batch carries labels beside the inputs. By the conventions the suite and
most training loops follow: a tensor is all inputs; a tuple or list is (inputs,
targets…), its first element the inputs; a dict holds keyword inputs, whose label
entries (`LABEL_KEYS`) are dropped. A workload whose inference is anything else
(several positional inputs, a generation loop, an encoder-decoder's decoder inputs)
gives `Workload.forward`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from lightspeed.facts.records import Phase
from lightspeed.workload.workload import ForwardFn, PhaseHook, Workload

LABEL_KEYS = frozenset({"labels", "label", "targets", "target", "y"})


def inputs_of(batch: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The positional and keyword inputs of a training batch (see the module's
    docstring)."""
    if isinstance(batch, dict):
        return (), {k: v for k, v in batch.items() if k not in LABEL_KEYS}
    if isinstance(batch, (tuple, list)) and not hasattr(batch, "_fields"):
        return (batch[0],), {}
    return (batch,), {}


def _model_on_inputs(model: torch.nn.Module, batch: Any) -> Any:
    args, kwargs = inputs_of(batch)
    return model(*args, **kwargs)


def forward_of(workload: Workload) -> ForwardFn:
    """How `workload` runs one inference call: its `forward`, or the model on the
    batch's inputs."""
    return workload.forward or _model_on_inputs


def inference_step(workload: Workload) -> Workload:
    """`workload` whose step is one inference call (`forward_of`), the model in eval mode
    under `torch.no_grad()`, every op in the forward phase; named `"<name>+inference"`.

    A latency profile's forward measured as a step, so that every measurement and
    what-if made for training steps (each op timed, carried to other hardware, run
    again under autocast) applies to it. No gradient is computed and the optimizer is
    never stepped. The capture sees the forward under `no_grad` rather than
    `inference_mode`, which dispatches composite ops (conv2d, batch_norm) whole where
    no FLOP formula counts them; the kernels that run are the same.
    """
    forward = forward_of(workload)

    def step(model: torch.nn.Module, batch: Any, optimizer: Any, phase: PhaseHook) -> torch.Tensor:
        if model.training:  # set once: eval() walks every module
            model.eval()
        with torch.no_grad(), phase(Phase.FORWARD):
            forward(model, batch)
        return torch.zeros(())

    return dataclasses.replace(
        workload, name=f"{workload.name}+inference", step=step, optimizers=None, loader=None
    )
