"""The cost model: what one aten op call costs in FLOPs and bytes moved.

`op_cost.op_cost` is what the op capture calls for every op; `flop_registry` holds
lightspeed's own FLOP formulas, registered on import by the `flops_*` modules (one per
family of ops torch.utils.flop_counter does not count), and `bytes_moved` the bytes an
op reads and writes.
"""
