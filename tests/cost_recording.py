"""Recording every aten op of a piece of code with its lightspeed cost, for the tests of
FLOP and byte formulas."""

from __future__ import annotations

from typing import Any, NamedTuple

from torch._ops import OpOverload, OpOverloadPacket
from torch.utils._python_dispatch import TorchDispatchMode

from lightspeed.measure.costs.op_cost import OpCost, op_cost


class Call(NamedTuple):
    """One recorded op call and its cost."""

    func: OpOverload
    cost: OpCost
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class CostRecorder(TorchDispatchMode):
    """Runs every aten op as usual and records each call with its OpCost."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []

    def __torch_dispatch__(
        self,
        func: OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.calls.append(Call(func, op_cost(func, args, kwargs, out), args, kwargs))
        return out

    def of(self, packet: OpOverloadPacket) -> list[OpCost]:
        """The costs of every call of `packet`, in call order."""
        return [call.cost for call in self.calls if call.func.overloadpacket is packet]

    def total(self) -> OpCost:
        return sum((call.cost for call in self.calls), OpCost.zero())


def recorded(fn: Any) -> CostRecorder:
    recorder = CostRecorder()
    with recorder:
        fn()
    return recorder
