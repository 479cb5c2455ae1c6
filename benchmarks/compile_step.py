"""torch.compile (Inductor) on tiny suite workloads: compile time, step time plain vs compiled.

    PYTHONPATH=src .venv/bin/python benchmarks/compile_step.py --rounds 7
    PYTHONPATH=src .venv/bin/python benchmarks/compile_step.py --models mlp-tiny --rounds 1

Per workload (default mlp-tiny, gpt2-tiny, resnet18-tiny; --models), fp32 on the CPU,
1 thread (--threads): the plain workload and `optimize.compile.compiled(w, mode=--mode)`
are each built with `measure.step.prepare` right after `torch.manual_seed(0)`, so both
start from the same weights and batch.

- compile s: the wall time of the compiled workload's first step minus its steady step
  time (the median below). The first step traces the forward, compiles the forward and
  backward graphs and runs them once; the rest of it is one ordinary step. Inductor's
  on-disk caches point at a fresh temporary directory, so each run compiles cold
  (--warm-cache keeps the user's cache, and shows what a second run pays).
- loss: each takes 5 steps; the losses of step 1 (no update yet: the forward alone) and
  of step 5 (after 4 AdamW updates) are compared, compiled against plain; "match" when
  |compiled / plain − 1| ≤ 1e-4 at step 5. A model with active dropout cannot match
  (Inductor draws its own random numbers); it is flagged.
- step ms: --rounds interleaved rounds, alternating which runs first; in each, the median
  of --steps steps of each, every step timed alone and synchronised. The figures are the
  medians over rounds; the speed-up is the median over rounds of plain / compiled, with
  its lowest and highest round.
- graphs, breaks: the FX graphs Dynamo compiled and the graph breaks it took (Dynamo's
  counters), for the compiled model's steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lightspeed.errors import LightspeedError
from lightspeed.measure.device import cpu_model_name
from lightspeed.measure.step import PreparedStep, StepSettings, prepare
from lightspeed.optimize.compile import COMPILE_MODES, compiled
from lightspeed.suite import get

SCHEMA_VERSION = 1
DEFAULT_MODELS = ("mlp-tiny", "gpt2-tiny", "resnet18-tiny")
LOSS_STEPS = 5
LOSS_RTOL = 1e-4


@dataclasses.dataclass(frozen=True, kw_only=True)
class Result:
    """One workload's figures; times in seconds, ratios plain / compiled."""

    workload: str
    compiled_name: str
    first_compiled_step_s: float
    compile_s: float
    plain_step_s: float
    compiled_step_s: float
    speedup: float
    speedup_low: float
    speedup_high: float
    loss_step1_rel_diff: float
    loss_step5_rel_diff: float
    loss_matches: bool
    dropout: bool
    graphs: int
    graph_breaks: int
    graph_break_reasons: list[str]


def timed_step(prepared: PreparedStep) -> float:
    """Seconds of one synchronised step."""
    start = time.perf_counter()
    prepared.step()
    prepared.sync()
    return time.perf_counter() - start


def has_dropout(model: nn.Module) -> bool:
    """Whether a dropout module of `model` drops anything in training."""
    return any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules())


def rel_diff(compiled_loss: torch.Tensor, plain_loss: torch.Tensor) -> float:
    plain = plain_loss.item()
    return abs(compiled_loss.item() / plain - 1) if plain else abs(compiled_loss.item())


def measure(name: str, mode: str, rounds: int, steps: int) -> Result:
    """Compile, check and time the suite workload `name` (see the module's docstring)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    plain = prepare(get(name), StepSettings())
    torch.manual_seed(0)
    fast = prepare(compiled(get(name), mode=mode), StepSettings())

    first_s = timed_step(fast)  # traces and compiles
    first_losses = (plain.step(), fast.last_loss)
    assert first_losses[1] is not None
    step1 = rel_diff(first_losses[1], first_losses[0])
    for _ in range(LOSS_STEPS - 1):
        plain_loss, fast_loss = plain.step(), fast.step()
    step5 = rel_diff(fast_loss, plain_loss)

    medians: dict[str, list[float]] = {"plain": [], "compiled": []}
    for r in range(rounds):
        order = [("plain", plain), ("compiled", fast)]
        for label, prepared in order if r % 2 == 0 else reversed(order):
            medians[label].append(statistics.median(timed_step(prepared) for _ in range(steps)))
    ratios = [p / c for p, c in zip(medians["plain"], medians["compiled"], strict=True)]
    compiled_step_s = statistics.median(medians["compiled"])
    breaks = counters["graph_break"]
    return Result(
        workload=name,
        compiled_name=fast.workload.name,
        first_compiled_step_s=first_s,
        compile_s=first_s - compiled_step_s,
        plain_step_s=statistics.median(medians["plain"]),
        compiled_step_s=compiled_step_s,
        speedup=statistics.median(ratios),
        speedup_low=min(ratios),
        speedup_high=max(ratios),
        loss_step1_rel_diff=step1,
        loss_step5_rel_diff=step5,
        loss_matches=step5 <= LOSS_RTOL,
        dropout=has_dropout(plain.model),
        graphs=int(counters["stats"]["unique_graphs"]),
        graph_breaks=sum(breaks.values()),
        graph_break_reasons=sorted(breaks),
    )


def row(r: Result) -> str:
    match = "yes" if r.loss_matches else ("no (dropout)" if r.dropout else "no")
    return (
        f"{r.workload:16s}{r.compile_s:>10.1f}{r.plain_step_s * 1e3:>10.2f}"
        f"{r.compiled_step_s * 1e3:>10.2f}{r.speedup:>8.2f}×"
        f" [{r.speedup_low:.2f}–{r.speedup_high:.2f}]"
        f"{r.loss_step1_rel_diff:>10.1e}{r.loss_step5_rel_diff:>10.1e}  {match:13s}"
        f"{r.graphs:>6d}{r.graph_breaks:>7d}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument("--steps", type=int, default=20, help="timed steps of each, per round")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--mode", choices=COMPILE_MODES, default="default")
    parser.add_argument(
        "--warm-cache", action="store_true", help="use Inductor's usual on-disk caches"
    )
    parser.add_argument("--out", type=Path, help="write every workload's figures as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="inductor-cache-") as cache:
        if not args.warm_cache:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        run(args)


def run(args: Any) -> None:
    print(f"{cpu_model_name()}, torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    cold = "warm caches" if args.warm_cache else "cold caches"
    print(f"mode {args.mode}, {cold}, {args.rounds} rounds of {args.steps} steps, fp32")
    print("compile s = first compiled step − steady compiled step")
    print(
        f"{'workload':16s}{'compile s':>10s}{'plain ms':>10s}{'comp. ms':>10s}"
        f"{'speed-up [range]':>21s}{'Δloss@1':>10s}{'Δloss@5':>10s}  {'match':13s}"
        "graphs breaks"
    )
    results: list[Result] = []
    for name in args.models:
        try:
            result = measure(name, args.mode, args.rounds, args.steps)
        except (LightspeedError, RuntimeError) as exc:
            print(f"{name:16s}failed: {type(exc).__name__}: {exc}"[:300], flush=True)
            continue
        results.append(result)
        print(row(result), flush=True)
        for reason in result.graph_break_reasons:
            print(f"{'':16s}graph break: {reason}"[:200])
    if args.out:
        document = {
            "schema_version": SCHEMA_VERSION,
            "cpu": cpu_model_name(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "mode": args.mode,
            "warm_cache": args.warm_cache,
            "rounds": args.rounds,
            "steps": args.steps,
            "results": [dataclasses.asdict(r) for r in results],
        }
        args.out.write_text(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
