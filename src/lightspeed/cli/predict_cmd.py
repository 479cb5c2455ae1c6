"""`lightspeed predict TARGET|PROFILE.json [--batch-size …] [--dtype …] [--checkpoint …]
[--hardware ID] [--scan-backward] [--fuse K] [--dp N]`: a training step predicted with
changes, from a measured profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from lightspeed.cli.common import (
    BudgetOption,
    DeviceOption,
    HtmlOption,
    JsonOption,
    PngOption,
    ThreadsOption,
    WideOption,
    autocast_precision,
    report,
    use_threads,
)


def predict_command(
    source: str = typer.Argument(
        ...,
        metavar="TARGET|PROFILE.json",
        help="A profile saved with --json, or a workload to profile here first (a suite"
        " name, file.py:NAME or hf:MODEL_TYPE).",
        show_default=False,
    ),
    batch_sizes: str | None = typer.Option(
        None,
        "--batch-size",
        metavar="N[,N…]",
        help="Samples per step to predict; several, comma-separated, give a table.",
    ),
    dtype: str | None = typer.Option(
        None,
        "--dtype",
        metavar="DTYPE",
        help="Predict the fp32 step in mixed precision: under autocast to bf16 or fp16, as"
        " --dtype runs it in `lightspeed profile` and `time`.",
    ),
    checkpoint: str | None = typer.Option(
        None,
        "--checkpoint",
        metavar="auto|ops[+K][:MODULES]|MODULES",
        help="Predict activation checkpointing: 'auto' (the √N segment plan), 'ops' (every"
        " block of those stacks recomputed op by op: products, convolutions and attention"
        " kept, the cheap ops between them recomputed; 'ops:MODULES' for named modules;"
        " 'ops+K' with each block's K kinds of product that keep the most bytes per FLOP"
        " recomputed too), or module names or patterns, comma-separated (blocks.*).",
    ),
    hardware: str | None = typer.Option(
        None,
        "--hardware",
        metavar="ID",
        help="The hardware to predict the step on: a catalog id (see `lightspeed hw list`)"
        " or 'local' (this machine, calibrated).",
    ),
    scan_backward: bool = typer.Option(
        False,
        "--scan-backward",
        help="Predict each nn.RNN's backward as a parallel scan (BPPSA,"
        " lightspeed.optimize.scan_backward): its levels, its extra work and its time on"
        " the (target) hardware.",
    ),
    fuse: int | None = typer.Option(
        None,
        "--fuse",
        metavar="K",
        help="Predict K jobs of the step (a sweep's trials) fused into one step: the"
        " speed-up over running them one after another, and the largest K that fits.",
    ),
    processes: int | None = typer.Option(
        None,
        "--dp",
        metavar="N",
        help="Predict N-way data parallelism (DDP): N processes at the step's batch each,"
        " gradients all-reduced over --link.",
    ),
    trace: bool = typer.Option(
        False,
        "--trace",
        help="SOURCE is a torch.profiler trace of GPU steps, or a folder of one run's rank"
        " traces: predict --hardware, --dtype (autocast), --cuda-graphs, --fused-optimizer,"
        " --dp N --link ID or --comm-speedup from it by replaying its dependency graph.",
    ),
    cuda_graphs: bool = typer.Option(
        False,
        "--cuda-graphs",
        help="With --trace: each step's device work captured as one CUDA graph.",
    ),
    fused_optimizer: bool = typer.Option(
        False,
        "--fused-optimizer",
        help="With --trace: each optimizer step's update as one fused AdamW pass.",
    ),
    comm_speedup: float | None = typer.Option(
        None,
        "--comm-speedup",
        metavar="X",
        help="With --trace: communication (NCCL's kernels) X times faster.",
    ),
    link_id: str = typer.Option(
        "measured",
        "--link",
        metavar="ID",
        help="The link between processes for --dp: a catalog id (`lightspeed hw list"
        " --links`) or 'measured' (between processes on this machine, measured now;"
        " not with --trace).",
    ),
    device: str = DeviceOption,
    budget: float = BudgetOption,
    threads: int | None = ThreadsOption,
    json_path: Path | None = JsonOption,
    html_path: Path | None = HtmlOption,
    png_path: Path | None = PngOption,
    wide: bool = WideOption,
) -> None:
    """Predict a training step with changes — batch size, autocast precision,
    checkpointing, other hardware, K jobs fused, data parallelism — from a measured
    profile, with the largest batch that fits the memory."""
    from lightspeed.analysis.profile_analysis import analyse
    from lightspeed.facts.device import Device
    from lightspeed.hardware.resolve import resolve_hardware
    from lightspeed.predict.whatif import predict
    from lightspeed.report.profile_json import load_profile
    from lightspeed.report.profile_report import profile_document, with_batch_sizes
    from lightspeed.workflows.profile import profile as profile_step
    from lightspeed.workload.targets import load_target

    use_threads(threads)
    if trace or cuda_graphs or fused_optimizer or comm_speedup is not None:
        what = {
            "cuda_graphs": cuda_graphs,
            "fused_optimizer": fused_optimizer,
            "comm_speedup": comm_speedup,
            "data_parallel": None if processes is None else _trace_link(processes, link_id),
        }
        _from_trace(source, trace, hardware, dtype, what, json_path, html_path, wide)
        return
    sizes = _batch_sizes(batch_sizes)
    autocast_to = None if dtype is None else autocast_precision(dtype)
    workload = None
    if source.endswith(".json") or Path(source).is_file():
        measured = load_profile(source)
    else:
        workload = load_target(source)
        measured = profile_step(workload, device=device, budget_s=budget)
    target = None if hardware is None else resolve_hardware(hardware, Device.parse(device))
    changes: dict[str, Any] = {
        "dtype": autocast_to,
        "checkpoint": checkpoint,
        "hardware": target,
        "scan_backward": scan_backward,
        "fuse": fuse,
    }
    if processes is not None:
        changes.update(_data_parallel(processes, link_id, Device.parse(device), threads))
    # Fused jobs report the largest K that fits instead; the search runs the workload's
    # shapes, so a profile whose workload cannot be loaded here (measured elsewhere) is
    # predicted without it.
    if workload is None and fuse is None:
        workload = _reloaded(measured)
    search = fuse is None and workload is not None
    predictions = [
        predict(
            measured,
            workload=workload,
            batch_size=size,
            fits=search and i == len(sizes) - 1,
            **changes,
        )
        for i, size in enumerate(sizes)
    ]
    doc = profile_document(analyse(predictions[-1]))
    if len(predictions) > 1:
        doc = with_batch_sizes(doc, predictions)
    report(doc, json_path, wide=wide, html_path=html_path, png_path=png_path)


def _from_trace(
    source: str,
    trace: bool,
    hardware: str | None,
    dtype: str | None,
    changes: dict[str, Any],
    json_path: Path | None,
    html_path: Path | None,
    wide: bool,
) -> None:
    """`predict --trace`: the trace's steps predicted with the changes given."""
    from lightspeed.dtypes import Precision
    from lightspeed.errors import ConfigError
    from lightspeed.facts.device import Device
    from lightspeed.hardware.resolve import resolve_hardware
    from lightspeed.report.trace_whatif_report import trace_prediction_document
    from lightspeed.trace.whatif import predict_trace_files

    if not trace:
        raise ConfigError(
            "--cuda-graphs, --fused-optimizer and --comm-speedup are predicted from a trace:"
            " add --trace."
        )
    if hardware == "local":
        raise ConfigError(
            "--hardware local: from a trace, name a catalog GPU (`lightspeed hw list`)."
        )
    target = None if hardware is None else resolve_hardware(hardware, Device.CUDA)
    autocast_to = None if dtype is None else autocast_precision(dtype)
    if dtype is not None and autocast_to is None:
        raise ConfigError(f"--dtype {dtype}: no change from a trace; give bf16 or fp16.")
    precision = None if autocast_to is None else Precision(autocast_to)
    # A folder of rank traces is one run: its ranks are read by a pool of processes and
    # replayed together.
    predicted = predict_trace_files([Path(source)], hardware=target, precision=precision, **changes)
    report(trace_prediction_document(predicted), json_path, wide=wide, html_path=html_path)


def _reloaded(measured: Any) -> Any:
    """The workload `measured` (a Profile) profiled, loaded again; None where it does not
    load here (a `predict` that needs it says why)."""
    from lightspeed.errors import LightspeedError
    from lightspeed.predict.whatif import workload_of

    try:
        return workload_of(measured)
    except LightspeedError:
        return None


def _trace_link(processes: int, link_id: str) -> tuple[int, Any]:
    """`--dp N --link ID` with --trace: N and a catalog link (none is measured here)."""
    from lightspeed.errors import ConfigError
    from lightspeed.hardware.links import catalog_link

    if link_id == "measured":
        raise ConfigError(
            "--dp with --trace: name the link between the GPUs with --link ID"
            " (`lightspeed hw list --links`: nvlink4, pcie5, ib-ndr, …)."
        )
    return processes, catalog_link(link_id)


def _data_parallel(
    processes: int, link_id: str, device: Any, threads: int | None
) -> dict[str, Any]:
    """The keywords of `predict` for `--dp N --link ID`: the link (measured here, or
    from the catalog) and, on a CPU, how much slower N processes compute side by side."""
    from lightspeed.errors import ConfigError
    from lightspeed.hardware.links import catalog_link
    from lightspeed.measure.distributed.link_bench import measure_corun, measure_link

    if processes < 1:
        raise ConfigError(f"--dp {processes} must be at least 1.")
    if link_id == "measured":
        link = measure_link(max(processes, 2), device=device, threads=threads).link
    else:
        link = catalog_link(link_id)
    corun = measure_corun(processes, device=device, threads=threads)
    return {"data_parallel": processes, "link": link, "corun": corun}


def _batch_sizes(text: str | None) -> list[int | None]:
    """The batch sizes `--batch-size` lists (none: [None], the profile's own)."""
    from lightspeed.errors import ConfigError

    if text is None:
        return [None]
    sizes = []
    for part in text.split(","):
        try:
            sizes.append(int(part))
        except ValueError:
            raise ConfigError(
                f"--batch-size {text!r}: give whole numbers, comma-separated (8,16,32)."
            ) from None
    if min(sizes) < 1:
        raise ConfigError(f"--batch-size {text!r}: every batch size must be at least 1.")
    return list(dict.fromkeys(sizes))
