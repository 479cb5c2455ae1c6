"""Op-level recomputation (Echo, `checkpoint(workload, "ops")`) against whole blocks and
against PyTorch's own: the min-cut rematerialization partitioner of `torch.compile` and its
`activation_memory_budget`.

    PYTHONPATH=src .venv/bin/python benchmarks/recompute_vs_compile.py [--time]
    PYTHONPATH=src python3 benchmarks/recompute_vs_compile.py --device cuda --no-table \
        --interleave --budgets 0.8,0.6,0.5     # on a GPU: times and allocator peaks

For each model (the suite's transformer encoder and GPT-2 small, and its LSTM
encoder-decoder, at the sizes below), one training step's:

- **kept**: bytes held from the forward for the backward. Eager: the activations
  `measure.memory` labels (what autograd saves, and what op-level checkpointing keeps
  in its own store), from one step on fake tensors. Compiled: the tensors the partitioner
  passes from the forward graph to the backward graph (the backward graph's inputs that
  are neither tangents nor the forward's own inputs, parameters and batch), from their
  recorded shapes.
- **recomputed**: FLOPs of the step's matrix products and attention (`ProductFlops`:
  lightspeed's counts, which include the CPU's flash attention that torch's counter
  lacks) less the plain eager step's. Compiled, the graphs AOTAutograd makes are run as
  they are (no Inductor code), so what is counted is what the partitioner chose.
- **peak** (eager only): the step's peak from the same fake-tensor run.

Compiled variants: the min-cut partitioner as Inductor calls it, with the default
budget (1.0) and each `activation_memory_budget` of `BUDGETS`; and lightspeed's op-level policy
under the same partitioner. With `--time`, each variant's step is also timed for real
(eager, and compiled by Inductor with its compile time apart), the variants taking turns
over `--rounds` rounds. With `--interleave`, the compiled budgets and the op-level policy
take turns, each compiled apart (`distinct`), with what each one's forward **saved for the
backward** as it ran (`saved_bytes`); on a GPU each variant's **held after the
forward** is what the allocator gained over the forward (the tensors kept for the
backward, and the loss), and its **step peak** `torch.cuda.max_memory_allocated` from the
forward's start on, less what was allocated then (the variants' models and optimizers
stay resident side by side; the last step's gradients are freed by then).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import math
import platform
import statistics
import time
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lightspeed.facts.device import Device
from lightspeed.facts.records import Phase
from lightspeed.hardware.catalog import catalog_hardware
from lightspeed.measure.costs.op_cost import op_cost
from lightspeed.measure.device import synchronizer
from lightspeed.measure.shape_only import profile_shape_only
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.optimize.checkpointing import checkpoint, recomputed_products
from lightspeed.predict.whatif import checkpoint_modules
from lightspeed.suite import get
from lightspeed.workload import Workload
from lightspeed.workload.tensor_walk import tensors_in

# Each model: its batch, and its whole-module and op-level plans as `checkpoint` takes them.
MODELS: dict[str, tuple[int, str | list[str], str | list[str]]] = {
    "transformer-encoder": (8, "auto", "ops"),
    "gpt2-small": (1, "auto", "ops"),
    "lstm-seq2seq": (32, ["encoder", "decoder"], ["ops:encoder", "ops:decoder"]),
    "transformer-encoder-tiny": (4, "auto", "ops"),
}
BUDGETS = (1.0, 0.95, 0.9, 0.8, 0.6, 0.5, 0.3, 0.1)
MB = 2**20
# The budgets `--time` times compiled: the least memory with nothing recomputed, and the
# budget that recomputes the attention (transformer encoder).
TIMED_BUDGETS = (0.8, 0.6)


class ProductFlops(TorchDispatchMode):
    """The FLOPs of the matrix products and attention dispatched under it, as lightspeed
    counts them (`measure.costs.op_cost`): torch's counter and the formulas it lacks.
    torch 2.13's own counter has none for the CPU's flash attention
    (`_scaled_dot_product_flash_attention_for_cpu`), which a partitioner may recompute."""

    # A partitioned graph runs a recomputed random op (attention with dropout) inside
    # run_and_save_rng_state or run_with_rng_state (graphsafe_run_with_rng_state on a
    # GPU): the op inside is counted.
    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name == "run_and_save_rng_state":
            self._count(args[0], args[1:], kwargs, out[1])
        elif name == "run_with_rng_state":
            self._count(args[1], args[2:], kwargs, out)
        elif name == "graphsafe_run_with_rng_state":  # on a GPU
            rest = {key: value for key, value in kwargs.items() if key != "rng_state"}
            self._count(args[0], args[1:], rest, out)
        else:
            self._count(func, args, kwargs, out)
        return out

    def _count(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        if getattr(func, "namespace", None) == "aten":  # not prim::device and the like
            cost = op_cost(func, args, kwargs, out)
            if cost.macs is not None:  # matmul-class: products and attention
                self.flops += cost.flops

    def get_total_flops(self) -> int:
        return self.flops


def workload_of(name: str, batch: int) -> Workload:
    return get(name).with_batch_size(batch)


def eager_figures(workload: Workload, settings: StepSettings) -> tuple[int, int, float]:
    """(kept bytes, peak bytes) of one step on fake tensors, and the FLOPs of one real
    step (after a first)."""
    shapes = profile_shape_only(workload, catalog_hardware("h100-sxm"), settings)
    assert shapes.memory is not None
    torch.manual_seed(0)
    prepared = prepare(workload, settings)
    prepared.step()
    with ProductFlops() as counter:
        prepared.step()
    flops = float(counter.get_total_flops())
    return shapes.memory.activations_bytes, shapes.memory.peak_bytes, flops


@contextlib.contextmanager
def memory_budget(budget: float) -> Iterator[None]:
    from torch._functorch import config

    before = config.activation_memory_budget
    config.activation_memory_budget = budget
    try:
        yield
    finally:
        config.activation_memory_budget = before


# A tensor the forward graph passes to the backward graph: its node's name with the
# digits left out (what made it: mm, view, getitem…), shape, dtype.
SavedKind = tuple[str, tuple[int, ...], str]


def partitioned_backend(
    kept: list[int], flops: list[int], saved_by_kind: dict[SavedKind, int] | None = None
) -> Any:
    """An AOTAutograd backend that partitions as Inductor does and runs the graphs as
    they are, adding each backward graph's saved bytes to `kept` (and by kind to
    `saved_by_kind`) and each graph's FLOPs to `flops` (counted as it is compiled, on its
    fake inputs: a counter around the compiled step would make torch.compile run it
    eagerly)."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    def counted(gm: torch.fx.GraphModule, inputs: Any) -> Callable[..., Any]:
        # On the compile-time (fake) inputs: the graph as it will run, once.
        fake = torch._guards.detect_fake_mode(inputs)
        with fake or contextlib.nullcontext(), ProductFlops() as counter:
            gm(*inputs)
        flops.append(counter.get_total_flops())
        return make_boxed_func(gm.forward)

    def forward(gm: torch.fx.GraphModule, inputs: Any) -> Callable[..., Any]:
        return counted(gm, inputs)

    def backward(gm: torch.fx.GraphModule, inputs: Any) -> Callable[..., Any]:
        saved = 0
        for node in gm.graph.nodes:
            value = node.meta.get("val")
            # The forward's own inputs (parameters, the batch) are not activations.
            forward_input = node.name.startswith(("tangents", "primals"))
            if node.op == "placeholder" and not forward_input and isinstance(value, torch.Tensor):
                shape = concrete(value.shape)
                size = math.prod(shape) * value.element_size()
                saved += size
                if saved_by_kind is not None:
                    kind = "".join(c for c in node.name if not c.isdigit()).rstrip("_")
                    key = (kind, shape, str(value.dtype).removeprefix("torch."))
                    saved_by_kind[key] = saved_by_kind.get(key, 0) + size
        kept.append(saved)
        return counted(gm, inputs)

    return aot_autograd(
        fw_compiler=forward,
        bw_compiler=backward,
        partition_fn=functools.partial(min_cut_rematerialization_partition, compiler="inductor"),
    )


def concrete(shape: torch.Size) -> tuple[int, ...]:
    """A shape in ints: a symbolic size (a recomputed random op's saved RNG state, whose
    length the partitioner leaves symbolic) at the value it was traced with."""
    return tuple(d.node.hint if isinstance(d, torch.SymInt) else int(d) for d in shape)


def compiled_loss(prepared: Any, backend: Any, reset: bool = True, tag: str = "") -> None:
    """`prepared`'s loss (its model's forward and the loss on it) under torch.compile
    (`reset`: everything compiled before forgotten first). A `tag` compiles it apart
    from every other tag's (`distinct`)."""
    if reset:
        torch._dynamo.reset()
    loss = prepared.workload.loss
    if tag:
        loss = distinct(loss, tag)
    loss = torch.compile(loss, backend=backend)
    prepared.workload = dataclasses.replace(prepared.workload, loss=loss)


def found_eagerly(prepared: PreparedStep) -> None:
    """One eager step of a model with blocks that recompute products too (`ops+K`): each
    finds its products on fake tensors, which torch.compile would not trace (a graph
    break at every block)."""
    if any(recomputed_products(m) for m in prepared.model.modules()):
        prepared.step()


def distinct(fn: Callable[..., Any], tag: str) -> Callable[..., Any]:
    """`fn` called through a function with a code object of its own. torch.compile
    caches what it compiled by code object, guarded on the arguments' shapes, not on the
    module passed: two variants of one workload (one loss function, other memory
    budgets) would otherwise both run the first one's compiled graphs."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    code = call.__code__.replace(co_name=f"loss_{tag}")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


def compiled_figures(
    workload: Workload,
    budget: float,
    settings: StepSettings,
    saved_by_kind: dict[SavedKind, int] | None = None,
) -> tuple[int, float] | None:
    """(kept bytes, FLOPs) of one step of `workload` with its loss compiled with the
    min-cut partitioner at `budget`, its graphs run as they are; None where torch.compile
    breaks the graph (what runs between graphs is in neither figure)."""
    kept: list[int] = []
    flops: list[int] = []
    torch.manual_seed(0)
    prepared = prepare(workload, settings)
    found_eagerly(prepared)
    with memory_budget(budget):
        compiled_loss(prepared, partitioned_backend(kept, flops, saved_by_kind))
        torch._dynamo.utils.counters.clear()
        prepared.step()  # compiles: each graph's saved bytes and FLOPs, once
    if torch._dynamo.utils.counters["graph_break"]:
        return None
    return sum(kept), float(sum(flops))


def saved_difference(
    base: Workload, ops: str | list[str], budget: float, settings: StepSettings
) -> None:
    """Print what the partitioner at `budget` and the op-level policy (both compiled)
    pass from forward to backward where they differ, by kind of tensor."""
    partitioner: dict[SavedKind, int] = {}
    policy: dict[SavedKind, int] = {}
    compiled_figures(base, budget, settings, partitioner)
    compiled_figures(checkpoint(base, ops), 1.0, settings, policy)
    print(f"\n| saved tensor (kind, shape, dtype) | min-cut, budget {budget} | op by op |")
    print("|---|---|---|")
    kinds = sorted(
        set(partitioner) | set(policy), key=lambda k: -abs(partitioner.get(k, 0) - policy.get(k, 0))
    )
    for kind in kinds:
        a, b = partitioner.get(kind, 0), policy.get(kind, 0)
        if a != b:
            name, shape, dtype = kind
            print(f"| {name}, {shape}, {dtype} | {a / MB:.2f} MiB | {b / MB:.2f} MiB |")


def interleaved(
    variants: dict[str, tuple[Workload, float]], rounds: int, settings: StepSettings
) -> dict[str, tuple[float, int, tuple[int, int] | None]]:
    """Each variant (a workload, compiled by Inductor at a memory budget) compiled, then
    stepped in turns over `rounds` rounds: each one's median seconds a step, its
    `saved_bytes`, and on a GPU its `allocator_figures`."""
    prepared = {}
    sync = synchronizer(settings.device)
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False, cache_size_limit=64):
        torch._dynamo.reset()
        for label, (workload, budget) in variants.items():
            torch.manual_seed(0)
            prepared[label] = prepare(workload, settings)
            found_eagerly(prepared[label])
            with memory_budget(budget):  # read as the step compiles
                compiled_loss(prepared[label], "inductor", reset=False, tag=str(len(prepared)))
                prepared[label].step()
            prepared[label].step()
        saved = {label: saved_bytes(step) for label, step in prepared.items()}
        memory: dict[str, tuple[int, int] | None] = dict.fromkeys(variants)
        if settings.device is Device.CUDA:
            memory.update({label: allocator_figures(step) for label, step in prepared.items()})
        times: dict[str, list[float]] = {label: [] for label in variants}
        for _ in range(rounds):
            for label, step in prepared.items():
                sync()
                start = time.perf_counter()
                step.step()
                sync()
                times[label].append(time.perf_counter() - start)
    return {
        label: (statistics.median(t), saved[label], memory[label]) for label, t in times.items()
    }


def saved_bytes(prepared: PreparedStep) -> int:
    """Bytes the forward of one step saves for the backward, as it runs (compiled or
    not): the distinct storages autograd's saved-tensor hooks see packed, less the
    parameters' and the batch's."""
    inputs = [*prepared.model.parameters(), *tensors_in(prepared.batch)]
    own = {t.untyped_storage().data_ptr() for t in inputs}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in own:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    @contextlib.contextmanager
    def around(phase: Phase) -> Iterator[None]:
        if phase is not Phase.FORWARD:
            yield
            return
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield

    prepared.step(around)
    return sum(storages.values())


def allocator_figures(prepared: PreparedStep) -> tuple[int, int]:
    """(held after the forward, peak) of one step on a GPU, in bytes above what the
    allocator held as the forward began (the gradients freed by then): the first is what
    the forward keeps for the backward (and the loss), the second the step's peak from
    there (the gradients made by the backward included)."""
    marks: list[int] = []

    @contextlib.contextmanager
    def around(phase: Phase) -> Iterator[None]:
        if phase is Phase.FORWARD:
            torch.cuda.synchronize()
            marks.append(torch.cuda.memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        yield
        if phase is Phase.FORWARD:
            torch.cuda.synchronize()
            marks.append(torch.cuda.memory_allocated())

    prepared.step(around)
    torch.cuda.synchronize()
    start, after_forward = marks
    return after_forward - start, torch.cuda.max_memory_allocated() - start


def step_s(
    workload: Workload, compiled: bool, rounds: int, settings: StepSettings
) -> tuple[float, float]:
    """(median seconds a step over `rounds` steps after two, compile seconds)."""
    torch.manual_seed(0)
    prepared = prepare(workload, settings)
    sync = synchronizer(settings.device)
    compile_s = 0.0
    if compiled:
        compiled_loss(prepared, "inductor")
        start = time.perf_counter()
        prepared.step()
        sync()
        compile_s = time.perf_counter() - start
    prepared.step()
    times = []
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        prepared.step()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), compile_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="transformer-encoder,gpt2-small,lstm-seq2seq")
    parser.add_argument("--time", action="store_true", help="also time the steps for real")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="also time the compiled budgets of --budgets and the op-level policy in"
        " turns, round after round",
    )
    parser.add_argument(
        "--budgets",
        default=",".join(map(str, TIMED_BUDGETS)),
        help="the budgets --interleave times (comma-separated)",
    )
    parser.add_argument(
        "--saved",
        type=float,
        metavar="BUDGET",
        help="also list where the partitioner at BUDGET and the op-level policy save"
        " different tensors",
    )
    parser.add_argument(
        "--ops",
        nargs="*",
        default=[],
        metavar="PLAN",
        help="op-level plans with products recomputed too, as --checkpoint takes them"
        " ('ops+2', 'ops+2:encoder.layers.[01],ops+1:encoder.layers.[2-5]'): each in the"
        " table and, with --interleave, timed in turns with the budgets",
    )
    parser.add_argument(
        "--table-budgets",
        default=",".join(map(str, BUDGETS)),
        help="the budgets the table gives (comma-separated)",
    )
    parser.add_argument("--device", default="cpu", choices=[d.value for d in Device])
    parser.add_argument(
        "--no-table",
        action="store_true",
        help="skip the kept/recomputed table (the partitions, run without Inductor)",
    )
    args = parser.parse_args()
    settings = StepSettings(device=Device(args.device))
    where = platform.processor() or platform.machine()
    if settings.device is Device.CUDA:
        where = torch.cuda.get_device_name()
    print(f"{where}, torch {torch.__version__}")
    for name in args.models.split(","):
        batch, whole, ops = MODELS[name]
        base = workload_of(name, batch)
        print(f"\n### {name}, batch {base.batch_size}\n")
        if not args.no_table:
            budgets = tuple(float(b) for b in args.table_budgets.split(","))
            table(base, whole, ops, settings, args.saved, args.ops, budgets)
        if args.interleave:
            variants = {f"budget {b}": (base, float(b)) for b in args.budgets.split(",")}
            variants["op-level policy"] = (checkpoint(base, ops), 1.0)
            for text in args.ops:
                variants[f"op-level policy: {text}"] = (
                    checkpoint(base, checkpoint_modules(text)),
                    1.0,
                )
            found = interleaved(variants, args.rounds, settings)
            print(
                f"\n| compiled by Inductor, in turns ({args.rounds} rounds) | step"
                " | saved for the backward | held after the forward | step peak |"
            )
            print("|---|---|---|---|---|")
            for label, (seconds, saved, held) in found.items():
                texts = [f"{b / MB:.1f} MiB" for b in (saved, *(held or ()))]
                texts += ["—"] * (3 - len(texts))
                print(f"| {label} | {seconds * 1e3:.2f} ms | {' | '.join(texts)} |", flush=True)
        if args.time:
            print("\n| variant | step | compile |")
            print("|---|---|---|")
            variants_timed = {
                "eager, plain": (base, False, 1.0),
                "eager, op by op": (checkpoint(base, ops), False, 1.0),
                "compiled (Inductor)": (base, True, 1.0),
                **{
                    f"compiled (Inductor), budget {budget}": (base, True, budget)
                    for budget in TIMED_BUDGETS
                },
                "compiled (Inductor), op by op": (checkpoint(base, ops), True, 1.0),
            }
            for label, (workload, compiled, budget) in variants_timed.items():
                with memory_budget(budget):  # read as the step compiles
                    s, c = step_s(workload, compiled, args.rounds, settings)
                print(f"| {label} | {s * 1e3:.1f} ms | {c:.1f} s |", flush=True)


def table(
    base: Workload,
    whole: str | list[str],
    ops: str | list[str],
    settings: StepSettings,
    saved: float | None,
    deeper: Sequence[str] = (),
    budgets: tuple[float, ...] = BUDGETS,
) -> None:
    """Print each variant's kept bytes, recomputed FLOPs and (eager) peak, and with
    `saved` where the partitioner at that budget and the op-level policy differ.
    `deeper`: op-level plans with products recomputed too (`ops+K`), as `--checkpoint`
    writes them, each given eager and compiled."""
    print("| variant | kept | recomputed | peak (eager) |")
    print("|---|---|---|---|")
    plain_kept, plain_peak, plain_flops = eager_figures(base, settings)
    rows: list[tuple[str, int, float, int | None]] = [("eager, plain", plain_kept, 0.0, plain_peak)]
    eager = [(f"eager, whole: {whole}", whole), (f"eager, op by op: {ops}", ops)]
    eager += [(f"eager, op by op: {text}", checkpoint_modules(text)) for text in deeper]
    for label, modules in eager:
        kept, peak, flops = eager_figures(checkpoint(base, modules), settings)
        rows.append((label, kept, flops - plain_flops, peak))
    compiled = [(f"compiled, min-cut, budget {budget}", base, budget) for budget in budgets]
    compiled.append(("compiled, min-cut, op by op", checkpoint(base, ops), 1.0))
    compiled += [
        (f"compiled, min-cut, op by op: {text}", checkpoint(base, checkpoint_modules(text)), 1.0)
        for text in deeper
    ]
    broken = False
    for label, workload, budget in compiled:
        found = compiled_figures(workload, budget, settings)
        if found is None:
            broken = True
            break
        rows.append((label, found[0], found[1] - plain_flops, None))
    for label, kept, recomputed, row_peak in rows:
        peak_text = f"{row_peak / MB:.1f} MiB" if row_peak is not None else "—"
        print(
            f"| {label} | {kept / MB:.1f} MiB | {recomputed / 1e9:.3f} GFLOP | {peak_text} |",
            flush=True,
        )
    if broken:
        print("| compiled | torch.compile breaks the graph: not comparable | | |")
    elif saved is not None:
        saved_difference(base, ops, saved, settings)


if __name__ == "__main__":
    main()
