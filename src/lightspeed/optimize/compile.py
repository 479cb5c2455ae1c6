"""Graph compilation: `Workload → Workload` whose model is `torch.compile`d (TorchInductor)."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from lightspeed.errors import ConfigError, did_you_mean
from lightspeed.workload import Workload

# The modes torch.compile documents; each is a preset of Inductor options.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compiled(
    workload: Workload,
    *,
    mode: str = "default",
    backend: str = "inductor",
    dynamic: bool | None = None,
) -> Workload:
    """`workload` whose `model()` returns `torch.compile(model, mode=mode,
    backend=backend, dynamic=dynamic)` of the model the workload builds; named
    `"<name>+compile"`, `"<name>+compile-<mode>"` for a mode other than "default", and
    `-<backend>` appended for a backend other than "inductor".

    Source: PyTorch's torch.compile (docs: "torch.compile", "Introduction to
    torch.compile", TorchInductor): TorchDynamo captures the forward's Python into FX
    graphs, AOTAutograd derives the backward graph from them, and Inductor generates
    fused kernels for both (C++/OpenMP on the CPU, Triton on CUDA). Modes:
    "reduce-overhead" adds CUDA graphs (launch overhead), "max-autotune" searches kernel
    configurations (with CUDA graphs), "max-autotune-no-cudagraphs" without them.
    `dynamic`: None compiles for the first shapes seen and recompiles for
    dynamic shapes when they change; True marks shapes dynamic from the start; False
    recompiles for every new shape.

    Only the module is compiled: the loss function, the optimizer and its step run as
    they are (eager), around the compiled forward and backward.

    Preconditions: the first step pays the compilation, tens of seconds to minutes per
    model on a CPU, and any new input shape pays again (recompilation); time a step only
    after the first. Python that Dynamo cannot trace (data-dependent control flow,
    `.item()`, calls into unsupported libraries) makes a graph break: the forward is
    split into several graphs with eager Python between them, which still runs, but
    fuses less. The compiled model is a `torch._dynamo.OptimizedModule` around the
    original: its parameters are the original's, named with a `_orig_mod.` prefix in
    `named_parameters()` and `state_dict()`. A workload with its own `step` still gets
    its model compiled, but only calls of `model(...)` run compiled; a step or loss that
    calls submodules (`model.generator(x)`) reaches the original, uncompiled ones.

    Equivalence: the same math, not bitwise. Inductor fuses pointwise ops into their
    producers, reorders and re-associates floating-point reductions, and may pick other
    matmul and convolution kernels, so the loss and gradients match the eager step's
    within rounding (a few ulps a reduction, accumulated over a step), not bit for bit.
    Parameter shapes and dtypes and the optimizer's state are unchanged.

    Raises ConfigError for a mode other than those in `COMPILE_MODES`, a backend
    torch.compile does not know, or a mode other than "default" with a backend other than
    "inductor" (the modes are presets of Inductor's options).
    """
    if mode not in COMPILE_MODES:
        raise ConfigError(
            f"compiled: mode {mode!r} is not a torch.compile mode; choose one of"
            f" {', '.join(COMPILE_MODES)}." + did_you_mean(mode, COMPILE_MODES)
        )
    _check_backend(backend, mode)

    inner_model = workload.model

    def model() -> nn.Module:
        built = inner_model()
        compiled_model = torch.compile(built, mode=mode, backend=backend, dynamic=dynamic)
        assert isinstance(compiled_model, nn.Module)  # torch.compile(Module) → OptimizedModule
        return compiled_model

    suffix = "+compile" + (f"-{mode}" if mode != "default" else "")
    suffix += f"-{backend}" if backend != "inductor" else ""
    return dataclasses.replace(workload, name=f"{workload.name}{suffix}", model=model)


def _check_backend(backend: str, mode: str) -> None:
    """ConfigError unless `backend` is a torch.compile backend that `mode` applies to."""
    if backend == "inductor":
        return
    try:
        # Compiling is lazy: this only looks the backend up (about a second, once).
        torch.compile(nn.Identity(), backend=backend)
    except RuntimeError as exc:
        raise ConfigError(
            f"compiled: backend {backend!r} is not a torch.compile backend ({exc});"
            " choose inductor, or one torch._dynamo.list_backends() names."
        ) from None
    if mode != "default":
        raise ConfigError(
            f"compiled: mode {mode!r} applies to the inductor backend only; use"
            f" mode='default' with backend {backend!r}."
        )
