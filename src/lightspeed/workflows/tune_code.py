"""`plan_code(tuning)`: the candidate `tune` kept, written as Python that a training
script runs on its own model and around its own loss, for `lightspeed tune --emit`."""

from __future__ import annotations

from lightspeed.dtypes import TORCH_DTYPE_NAMES, Precision
from lightspeed.facts.tuning import Candidate, CandidateKind, LoaderTuning, Tuning
from lightspeed.rules import speedup

__all__ = ["plan_code"]


def plan_code(tuning: Tuning) -> str:
    """The kept candidate as Python a training script can run on its own model (named
    `model`) and around its own loss: plain PyTorch where PyTorch has it (autocast, its
    loss scaler, checkpoint of whole modules), lightspeed's own modules where it does not
    (segments of blocks, Gist's encodings). A comment when nothing was kept."""
    base = tuning.baseline
    head = f"# lightspeed tune {base.workload.name}"
    chosen = tuning.chosen
    loading = _loader_code(tuning.loading) if tuning.loading is not None else []
    if chosen is None and not tuning.candidates:
        lines = [f"{head}: the data loader's options."]
    elif chosen is None:
        lines = [f"{head}: no candidate was equivalent and faster (or fit the budget)."]
    else:
        faster = speedup(base.step_time_s, chosen.measured_step_s)
        speed = f", {faster:.2f}× the plain step's speed" if faster is not None else ""
        lines = [f"{head}: kept {chosen.name}{speed}.", *_code(chosen)]
    if loading:
        lines += ["", *loading]
    return "\n".join(lines) + "\n"


def _loader_code(loading: LoaderTuning) -> list[str]:
    """The kept DataLoader options as code (nothing when the first setting was kept)."""
    if loading.chosen == 0:
        return []
    kept = loading.kept
    options = ", ".join(f"{k}={v!r}" for k, v in kept.options.kwargs().items())
    removed = loading.wait_removed
    threads = kept.threads != loading.runs[0].threads
    lines = [
        *(["import torch"] if threads else []),
        "from torch.utils.data import DataLoader",
        "",
        "# The DataLoader options that waited least for data"
        + (f" ({removed:.0%} of the wait removed, measured)." if removed is not None else "."),
        f"loader = DataLoader(dataset, batch_size=batch_size, {options})",
    ]
    if threads:
        lines += [
            "# The step's own threads, leaving the workers cores of their own.",
            f"torch.set_num_threads({kept.threads})",
        ]
    return lines


def _code(chosen: Candidate) -> list[str]:
    """The lines that apply `chosen` (each part of a combination, checkpointing first)."""
    if chosen.kind is CandidateKind.FUSE:
        (jobs,) = chosen.arguments
        return [
            "import lightspeed",
            "",
            f"# {jobs} jobs of the step (a sweep's trials) as one: each job's"
            " hyper-parameters in hparams.",
            f"fused = lightspeed.fuse(workload, {jobs}, hparams=[{{}}] * {jobs})",
        ]
    parts = chosen.kind.parts
    amp = CandidateKind.AMP in parts
    # Mixed precision's arguments begin with its dtype; the modules follow.
    modules = list(chosen.arguments[1:] if amp else chosen.arguments)
    lines: list[str] = []
    if CandidateKind.CHECKPOINT in parts:
        lines += _checkpoint_code(modules)
    if CandidateKind.GIST in parts:
        lines += [
            "from lightspeed.optimize.encodings import gist_model",
            "",
            "# ReLU and max-pool modules that keep a bit (a byte) an element for backward.",
            f"gist_model(model, lambda name: name in {set(modules)!r})",
        ]
    if amp:
        lines += _amp_code(TORCH_DTYPE_NAMES[Precision(chosen.arguments[0])])
    return lines


def _amp_code(dtype: str) -> list[str]:
    lines = [
        "import torch",
        "",
        "# The forward and the loss under autocast; backward and the optimizer outside it.",
        f"with torch.autocast(device_type='cpu', dtype=torch.{dtype}):  # or 'cuda'",
        "    loss = loss_fn(model(inputs), targets)",
    ]
    if dtype == "float16":
        lines += [
            "# fp16: a dynamic loss scaler (growth 2, back-off 0.5, interval 2000).",
            "scaler = torch.amp.GradScaler()  # once, before the loop",
            "scaler.scale(loss).backward()",
            "scaler.step(optimizer)",
            "scaler.update()",
        ]
    return lines


def _checkpoint_code(modules: list[str]) -> list[str]:
    if any(":" in m for m in modules):
        return [
            "from lightspeed.optimize.checkpointing import checkpoint_model",
            "",
            "# Segments of consecutive blocks (STACK.I:J), each recomputed as one in backward.",
            f"checkpoint_model(model, {modules!r})",
        ]
    return [
        "import torch.utils.checkpoint",
        "",
        "# Each module's forward recomputed in backward instead of keeping its activations.",
        f"for name in {modules!r}:",
        "    module = model.get_submodule(name)",
        "    module.forward = lambda *args, _forward=module.forward, **kwargs: (",
        "        torch.utils.checkpoint.checkpoint(",
        "            _forward, *args, use_reentrant=False, **kwargs",
        "        )",
        "    )",
    ]
