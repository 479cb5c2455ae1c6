"""Findings that name a change to a kind of layer where the profile shows it: convolutions
in NCHW (channels_last), convolutions on cuDNN's heuristic algorithms (cudnn.benchmark),
and recurrent layers run step by step or in fused kernels far below their speed of light.

Each finding gives its evidence (the ops, their share of the step, their fraction of
speed of light) and an estimated gain: the time the ops would save if they reached
`rules.REACHABLE_FRACTION_OF_SOL` of their speed of light, a stated, conservative target.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from lightspeed import units
from lightspeed.analysis.step_roofline import OpAnalysis
from lightspeed.facts.device import Device
from lightspeed.facts.profile import Profile
from lightspeed.facts.records import Phase
from lightspeed.rules import (
    LAYER_SHARE,
    REACHABLE_FRACTION_OF_SOL,
    RECURRENT_MIN_STEPS,
    RECURRENT_SMALL_BATCH,
    Finding,
    FindingKind,
    max_speedup,
)

CONVOLUTIONS = frozenset(
    "aten::" + name
    for base in ("convolution", "_convolution", "mkldnn_convolution", "cudnn_convolution")
    for name in (base, base + "_backward")
)
# Fused recurrent kernels, by library: oneDNN's LSTM on the CPU, cuDNN's and MIOpen's RNNs.
FUSED_RNNS = {
    "aten::mkldnn_rnn_layer": "oneDNN",
    "aten::mkldnn_rnn_layer_backward": "oneDNN",
    "aten::_cudnn_rnn": "cuDNN",
    "aten::_cudnn_rnn_backward": "cuDNN",
    "aten::miopen_rnn": "MIOpen",
    "aten::miopen_rnn_backward": "MIOpen",
}
_PRODUCTS = frozenset({"aten::mm", "aten::addmm", "aten::matmul", "aten::linear"})
# One per timestep of a cell loop: the gate activations (in place in PyTorch's own CPU
# GRU and LSTM cells), or the fused pointwise cell.
_TANH = frozenset(
    {"aten::tanh", "aten::tanh_", "aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_gru_cell"}
)
_GATES = _TANH | {"aten::sigmoid", "aten::sigmoid_"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class OpGroup:
    """Ops of one kind of layer, summed: measured and speed-of-light seconds, and the
    seconds they would save at `REACHABLE_FRACTION_OF_SOL` of their speed of light."""

    ops: tuple[OpAnalysis, ...]
    time_s: float
    sol_time_s: float
    saving_s: float

    @property
    def fraction_of_sol(self) -> float:
        """Their speed-of-light time over their measured time."""
        return self.sol_time_s / self.time_s if self.time_s else 0.0


def group(ops: Iterable[OpAnalysis]) -> OpGroup:
    """The measured ops of `ops`, summed."""
    timed = tuple(a for a in ops if a.time_s)
    saving = sum(
        max(0.0, (a.time_s or 0.0) - a.sol_time_s / REACHABLE_FRACTION_OF_SOL) for a in timed
    )
    return OpGroup(
        ops=timed,
        time_s=sum(a.time_s or 0.0 for a in timed),
        sol_time_s=sum(a.sol_time_s for a in timed),
        saving_s=saving,
    )


def _far_below(g: OpGroup, step_s: float) -> bool:
    return g.time_s >= LAYER_SHARE * step_s and g.fraction_of_sol < REACHABLE_FRACTION_OF_SOL


def _pct(x: float) -> str:
    # Two significant digits below 10%, where "0%" would hide how far below they are.
    return f"{100 * x:.2g}%" if x < 0.1 else f"{100 * x:.0f}%"


def _names(g: OpGroup) -> str:
    counts = Counter(a.op.name for a in g.ops)
    return ", ".join(f"{n} ×{c}" for n, c in counts.most_common())


def _gain(g: OpGroup, step_s: float) -> str:
    return (
        f"; if they reached {_pct(REACHABLE_FRACTION_OF_SOL)} of their speed of light the"
        f" step would save about {units.seconds(g.saving_s)}"
        f" ({max_speedup(g.saving_s / step_s):.2f}× faster)"
    )


def _evidence(g: OpGroup, step_s: float) -> dict[str, float | int | str]:
    return {
        "ops": _names(g),
        "time_s": g.time_s,
        "step_s": step_s,
        "share_of_step": g.time_s / step_s,
        "fraction_of_sol": g.fraction_of_sol,
        "assumed_fraction_of_sol": REACHABLE_FRACTION_OF_SOL,
        "estimated_saving_s": g.saving_s,
        # At best the ops would run at their speed of light.
        "max_speedup": max_speedup(max(0.0, g.time_s - g.sol_time_s) / step_s),
    }


def convolution_findings(
    profile: Profile, analyses: Sequence[OpAnalysis], step_s: float
) -> list[Finding]:
    """Convolutions in NCHW taking a share of the step far below their speed of light
    (channels_last), and on CUDA convolutions run with cudnn.benchmark off."""
    findings = []
    nchw = group(a for a in analyses if a.op.name in CONVOLUTIONS and a.op.channels_last is False)
    if _far_below(nchw, step_s):
        share = nchw.time_s / step_s
        findings.append(
            Finding(
                kind=FindingKind.MEMORY_FORMAT,
                message=(
                    f"convolutions in NCHW memory format ({_names(nchw)}) take {_pct(share)}"
                    f" of the step at {_pct(nchw.fraction_of_sol)} of their speed of light:"
                    " convolution kernels prefer channels-last; convert the model and its"
                    " inputs, model.to(memory_format=torch.channels_last) and"
                    " x.to(memory_format=torch.channels_last)" + _gain(nchw, step_s)
                ),
                evidence=_evidence(nchw, step_s),
            )
        )
    # cudnn.benchmark only exists on CUDA; a CPU profile records None.
    if profile.workload.device is Device.CUDA and profile.cudnn_benchmark is False:
        convs = group(a for a in analyses if a.op.name in CONVOLUTIONS)
        if _far_below(convs, step_s):
            findings.append(
                Finding(
                    kind=FindingKind.CUDNN_BENCHMARK,
                    message=(
                        f"convolutions ({_names(convs)}) take {_pct(convs.time_s / step_s)} of"
                        f" the step at {_pct(convs.fraction_of_sol)} of their speed of light,"
                        " with torch.backends.cudnn.benchmark off: cuDNN picks their"
                        " algorithms by heuristics; set torch.backends.cudnn.benchmark = True"
                        " so it times them once per input shape (when shapes repeat from step"
                        " to step)" + _gain(convs, step_s)
                    ),
                    evidence=_evidence(convs, step_s),
                )
            )
    return findings


def recurrent_findings(
    profile: Profile, analyses: Sequence[OpAnalysis], step_s: float
) -> list[Finding]:
    """Recurrent layers run as per-timestep loops, and fused RNN kernels far below their
    speed of light."""
    findings = [f for f in (_fused_rnns(profile, analyses, step_s),) if f is not None]
    loops = cell_loops(analyses)
    if loops:
        g = group(a for a in analyses if a.op.module in loops and a.op.phase is not Phase.OPTIMIZER)
        if _far_below(g, step_s):
            findings.append(_cell_loop_finding(profile, g, loops, step_s))
    return findings


def cell_loops(analyses: Sequence[OpAnalysis]) -> dict[str, int]:
    """Modules whose forward runs a recurrence one timestep at a time, with the number of
    timesteps (matrix products and gate activations, `RECURRENT_MIN_STEPS` or more each,
    a tanh or a fused cell among them: an LSTMCell or GRUCell in a loop)."""
    products: defaultdict[str, int] = defaultdict(int)
    gates: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for a in analyses:
        if a.op.phase is not Phase.FORWARD:
            continue
        if a.op.name in _PRODUCTS:
            products[a.op.module] += 1
        elif a.op.name in _GATES:
            gates[a.op.module][a.op.name] += 1
    # A tanh (or a fused cell) tells a recurrent cell from sigmoid gating alone.
    return {
        module: n
        for module, n in products.items()
        if n >= RECURRENT_MIN_STEPS
        and sum(gates[module].values()) >= RECURRENT_MIN_STEPS
        and any(gates[module][name] for name in _TANH)
    }


def _cell_loop_finding(
    profile: Profile, g: OpGroup, loops: dict[str, int], step_s: float
) -> Finding:
    where = ", ".join(m or "the model root" for m in loops)
    if profile.workload.device is Device.CPU:
        fused = (
            "run the recurrence as one nn.LSTM call over the whole sequence (oneDNN's fused"
            " kernel on the CPU; PyTorch has no fused GRU there), or torch.compile the loop"
            " so its gate ops fuse"
        )
    else:
        fused = (
            "run the recurrence as one nn.LSTM or nn.GRU call over the whole sequence, which"
            " uses cuDNN's fused RNN kernel on a GPU, rather than a loop over cells"
        )
    evidence = _evidence(g, step_s) | {"modules": where, "matrix_products": max(loops.values())}
    return Finding(
        kind=FindingKind.RECURRENT_LAYERS,
        message=(
            f"recurrent layers in {where} run one timestep at a time"
            f" ({max(loops.values())} matrix products and their gates per module's forward),"
            f" {_pct(g.time_s / step_s)} of the step at {_pct(g.fraction_of_sol)} of their"
            f" speed of light: {fused}" + _gain(g, step_s)
        ),
        evidence=evidence,
    )


def _fused_rnns(profile: Profile, analyses: Sequence[OpAnalysis], step_s: float) -> Finding | None:
    g = group(a for a in analyses if a.op.name in FUSED_RNNS)
    if not _far_below(g, step_s):
        return None
    library = FUSED_RNNS[max(g.ops, key=lambda a: a.time_s or 0.0).op.name]
    backward = group(a for a in g.ops if a.op.phase is Phase.BACKWARD)
    slowest = (
        f" (backward: {_pct(backward.fraction_of_sol)})"
        if backward.ops and backward.time_s < g.time_s
        else ""
    )
    evidence = _evidence(g, step_s)
    if backward.ops:
        evidence["backward_fraction_of_sol"] = backward.fraction_of_sol
    shape = rnn_shape(g)
    advice = []
    if shape is not None:
        timesteps, batch, hidden = shape
        evidence |= {"timesteps": timesteps, "batch": batch, "hidden": hidden}
        what = (
            f"; each of their {timesteps} timesteps multiplies {batch} rows by"
            f" {hidden}-wide weights"
        )
        if batch < RECURRENT_SMALL_BATCH:
            advice.append(
                f"a larger batch ({RECURRENT_SMALL_BATCH} or more rows per timestep; now {batch})"
            )
    else:
        what = ""
    advice.append("fewer, longer sequences (concatenate short ones) so each call does more")
    return Finding(
        kind=FindingKind.RECURRENT_LAYERS,
        message=(
            f"{library}'s fused RNN kernels ({_names(g)}) take {_pct(g.time_s / step_s)} of"
            f" the step at {_pct(g.fraction_of_sol)} of their speed of light{slowest}{what}:"
            f" {'; '.join(advice)}" + _gain(g, step_s)
        ),
        evidence=evidence,
    )


def rnn_shape(g: OpGroup) -> tuple[int, int, int] | None:
    """(timesteps, batch, hidden size) of the costliest forward fused RNN op in `g`, from
    its input (timesteps × batch × features, oneDNN's and cuDNN's default layout) and its
    first hidden-state tensor (batch × hidden, or layers × batch × hidden); None when
    the shapes were not recorded."""
    forward = [a for a in g.ops if a.op.phase is Phase.FORWARD]
    if not forward:
        return None
    shapes = max(forward, key=lambda a: a.time_s or 0.0).op.input_shapes
    if not shapes or len(shapes[0]) != 3:
        return None
    steps, batch = shapes[0][0], shapes[0][1]
    # The hidden state: the first later tensor whose batch dimension matches.
    for s in shapes[1:]:
        if len(s) in (2, 3) and s[-2] == batch:
            return steps, batch, s[-1]
    return None
