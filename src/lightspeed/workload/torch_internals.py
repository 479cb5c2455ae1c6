"""The private PyTorch APIs the cost model and op-level recomputation need, in one place
(below `optimize` and `measure`, which both use it); pinned against torch 2.13.

Everything here reads something torch does not promise to keep: an operator's schema
(`OpOverload._schema`, its `Argument.alias_info` / `is_out`), `OpOverload.is_view`, a
storage's `_cdata` identity, `torch.utils.flop_counter.flop_registry` (not in that
module's `__all__`), `ModuleTracker._known_modules` and `_get_append_fn`, the fake tensors of
`torch._subclasses.fake_tensor` (shapes, dtypes and storages with no data) and
`torch.utils._python_dispatch._disable_current_modes`, and whether a profiler records
(`torch.autograd.profiler._is_profiler_enabled`). When a torch upgrade breaks one
of them, only this module and its tests (`tests/measure/test_costs.py`,
`tests/measure/test_capture.py`, `tests/measure/test_shape_only.py`) need to change.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import torch
from torch._ops import OpOverload, OpOverloadPacket
from torch._subclasses import fake_tensor
from torch.utils import _python_dispatch, flop_counter
from torch.utils import _pytree as pytree
from torch.utils.module_tracker import ModuleTracker

# A formula of torch's flop counter, called the way `FlopCounterMode` calls it.
TorchFlopFormula = Callable[..., int]


def op_name(func: OpOverload) -> str:
    """The aten op's name as a profile records it ("aten::mm"), from its schema."""
    name: str = func._schema.name
    return name


def bind_arguments(
    func: OpOverload, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The op's arguments by their schema names, with schema defaults filled in.

    `add.Tensor(x, y)` binds to `{"self": x, "other": y, "alpha": 1}`, so a formula reads
    arguments by name whichever overload (`.Tensor`, `.out`, in-place) was called.
    """
    bound: dict[str, Any] = {}
    for index, argument in enumerate(func._schema.arguments):
        if index < len(args) and not argument.kwarg_only:
            bound[argument.name] = args[index]
        elif argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
    return bound


@functools.cache  # asked for every op of a step; the answer depends on the op alone
def written_arguments(func: OpOverload) -> Mapping[str, bool]:
    """The arguments the op writes, by name: True for an `out=` argument, False otherwise.

    The schema marks written arguments `Tensor(a!)`; `out=` arguments are the keyword-only
    ones among them (`add.out(..., *, Tensor(a!) out)`), the rest are in-place operands
    (`add_.Tensor(Tensor(a!) self, ...)`, `_foreach_mul_(Tensor(a!)[] self, ...)`).
    """
    return MappingProxyType(
        {
            argument.name: bool(argument.is_out)
            for argument in func._schema.arguments
            if argument.alias_info is not None and argument.alias_info.is_write
        }
    )


def is_view(func: OpOverload) -> bool:
    """Whether the op returns a view of its input without copying (`view`, `t`, `expand`…).

    Composite ops whose schema says "may alias" (`reshape`, `contiguous`) are excluded:
    they copy when they must, and they never reach a dispatch mode anyway (they
    decompose into `view` / `_unsafe_view` / `clone` first).
    """
    composite = func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)
    return bool(func.is_view) and not composite


def storage_identity(tensor: torch.Tensor) -> tuple[int, int] | None:
    """A key naming the tensor's storage and that storage's size in bytes; None if it has none.

    `_cdata` is the address of the C++ StorageImpl: views of one storage share it, and
    unlike `data_ptr()` it stays distinct for meta and fake tensors (whose data pointer is 0).
    Sparse and nested tensors have no single storage.
    """
    try:
        storage = tensor.untyped_storage()
    except (NotImplementedError, RuntimeError):
        return None
    return int(storage._cdata), int(storage.nbytes())


def torch_flop_formula(packet: OpOverloadPacket) -> TorchFlopFormula | None:
    """torch.utils.flop_counter's formula for the op, or None where it has none.

    Call it as `formula(*args, **kwargs, out_val=out)`, the way `FlopCounterMode` does;
    it returns FLOPs counted as 2 per multiply-accumulate.
    """
    registry: dict[Any, TorchFlopFormula] = flop_counter.flop_registry
    return registry.get(packet)


def torch_flop_packets() -> frozenset[OpOverloadPacket]:
    """The aten ops torch.utils.flop_counter counts (its registry's OpOverloadPacket keys)."""
    return frozenset(key for key in flop_counter.flop_registry if isinstance(key, OpOverloadPacket))


class OrderedModuleTracker(ModuleTracker):
    """torch's ModuleTracker that also numbers each entry into a module (`entered`, by
    the tracker's name), forward or backward, so that of several modules active at once
    the innermost is the last entered. `parents` is a set, and in the backward it holds
    modules that were left long before (an encoder layer's dropouts, of both layers,
    while the first layer's backward runs): a rule on the names alone picks among
    siblings of one depth by the set's order, which changes with the interpreter's hash
    seed. Overrides the private `_get_append_fn`."""

    def __init__(self) -> None:
        super().__init__()
        self.entered: dict[str, int] = {}
        self._entries = itertools.count()

    def _get_append_fn(self, name: str, is_bw: bool) -> Callable[..., None]:
        append: Callable[..., None] = super()._get_append_fn(name, is_bw)

        def fn(*args: Any) -> None:
            self.entered[name] = next(self._entries)
            append(*args)

        return fn


def name_modules(tracker: ModuleTracker, model: torch.nn.Module, root_name: str) -> None:
    """Tell `tracker` the full path of every module of `model` under `root_name`.

    ModuleTracker names a module by its path only once its parent's forward has run; a
    step that calls a submodule directly (a GAN's generator) would have it named by its
    class alone, and two such submodules of one class would merge into one name.
    """
    for name, module in model.named_modules():
        tracker._known_modules[module] = f"{root_name}.{name}" if name else root_name


def fake_tensors() -> fake_tensor.FakeTensorMode:
    """A mode (enter it with `with`) under which every tensor made is fake: shapes,
    dtypes, devices and storages (with their sizes) as the real ones would have, no
    memory behind them, no kernel run.

    Real tensors met inside are taken as inputs (`allow_non_fake_inputs`), so a constant
    made before the mode still works.
    """
    return fake_tensor.FakeTensorMode(allow_non_fake_inputs=True)


def is_fake(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is a fake tensor (shapes, dtypes and devices; no storage)."""
    return isinstance(tensor, fake_tensor.FakeTensor)


def adopt_fake_tensors(
    model: torch.nn.Module,
    mode: fake_tensor.FakeTensorMode,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
) -> None:
    """Make every parameter and buffer of `model` a fake tensor of `mode`, its floating
    ones in `dtype` when given (what `model.to(dtype)` would make of them: a fake tensor
    cannot be cast in place once made, and a model may create some in fp32 whatever the
    default dtype, as transformers' models do), and on `device` when given: moving a
    module of fake parameters later swaps them (`torch.utils.swap_tensors`), which the
    mode's own references to them refuse.

    `copy.deepcopy` of a fake tensor (as `nn.TransformerEncoder` clones its layers) gives
    one of a new mode; `mode` would take it for a real input and copy it at every op, so
    an in-place update would land on the copy. Values do not matter on fake tensors:
    each foreign one is replaced by a new one of the same shape, strides and dtype, and
    a tensor shared by several modules stays shared.
    """
    replaced: dict[int, torch.Tensor] = {}

    def own(tensor: torch.Tensor) -> torch.Tensor:
        wanted = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
        where = device if device is not None else tensor.device
        if (
            isinstance(tensor, fake_tensor.FakeTensor)
            and tensor.fake_mode is mode
            and tensor.dtype == wanted
            and tensor.device.type == where.type
            and where.index in (None, tensor.device.index)
        ):
            return tensor
        if id(tensor) not in replaced:
            with mode:
                new = torch.empty_strided(tensor.shape, tensor.stride(), dtype=wanted, device=where)
            if isinstance(tensor, torch.nn.Parameter):
                new = torch.nn.Parameter(new, requires_grad=tensor.requires_grad)
            replaced[id(tensor)] = new
        return replaced[id(tensor)]

    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                module._parameters[name] = own(param)  # type: ignore[assignment]
        for name, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[name] = own(buffer)


def run_real_kernel(
    func: OpOverload,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    mode: fake_tensor.FakeTensorMode,
    values: Mapping[int, torch.Tensor],
) -> Any:
    """Run `func`'s real kernel where `mode`'s fake one cannot say what it returns
    (`real_arguments`, with `values`); the real results come back as fake tensors of
    `mode`."""
    with real_arguments(args, kwargs, values) as (real_args, real_kwargs):
        out = func(*real_args, **real_kwargs)
    return pytree.tree_map(
        lambda value: mode.from_tensor(value) if isinstance(value, torch.Tensor) else value, out
    )


@contextlib.contextmanager
def real_arguments(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], values: Mapping[int, torch.Tensor] = {}
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """An op's arguments made real, with fake tensors set aside until exit: each fake
    tensor becomes its real tensor in `values` (by the fake's `id`), or else a real
    tensor of zeros of its shape, strides and dtype. Every dispatch mode is set aside
    until exit too."""

    def real(value: Any) -> Any:
        if isinstance(value, fake_tensor.FakeTensor):
            if id(value) in values:
                return values[id(value)]
            made = torch.empty_strided(
                value.shape, value.stride(), dtype=value.dtype, device=value.device
            )
            return made.zero_()
        return value

    with without_dispatch_modes():
        yield pytree.tree_map(real, args), pytree.tree_map(real, dict(kwargs))


@contextlib.contextmanager
def without_dispatch_modes() -> Iterator[None]:
    """Every Python dispatch mode set aside until exit, the fake tensors' and the
    observers', so that a real kernel runs, and runs without their cost."""
    with _python_dispatch._disable_current_modes():
        yield


# The errors a fake tensor raises for an op whose result depends on the data.
DATA_DEPENDENT_ERRORS: tuple[type[Exception], ...] = (
    fake_tensor.DynamicOutputShapeException,
    fake_tensor.DataDependentOutputException,
)


def profiler_running() -> bool:
    """Whether a torch.profiler (or autograd profiler) is recording in this process: a
    second one started beside it would stop the first's session when it stops."""
    enabled: bool = torch.autograd.profiler._is_profiler_enabled
    return enabled
