"""Hand-built facts and small helpers the tests share: import them from here, never
from a test module or from conftest."""

from __future__ import annotations

import os
import select
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import settings
from torch import nn

from lightspeed.document import Document, Fields, Section, Table
from lightspeed.dtypes import Precision
from lightspeed.facts.device import Device
from lightspeed.facts.hardware import Calibration, DeviceKind, Hardware
from lightspeed.facts.profile import Profile
from lightspeed.facts.records import OpRecord, Phase
from lightspeed.facts.timing import Measurement, WorkloadInfo
from lightspeed.workload import Workload

# Ceilings of a made-up CPU: round numbers so tests can check arithmetic on them.
FAKE_CPU = Hardware(
    id="local",
    name="test CPU",
    kind=DeviceKind.CPU,
    peak_flops_per_s={Precision.FP32: 100e9, Precision.FP64: 50e9, Precision.BF16: 200e9},
    memory_bandwidth_bytes_per_s=20e9,
    memory_bytes=8 * 2**30,
    sources={"*": "test fixture"},
    calibration=Calibration(
        method="fixture",
        library="none",
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        measured_at="2026-01-01T00:00:00+00:00",
        best_matmul_size={Precision.FP32: 1024},
    ),
)


# Hypothesis examples a property test runs by default: in CI (Hypothesis's own default),
# and in a local run.
CI_EXAMPLES = 100
DEV_EXAMPLES = 10

# What the `run_cli` fixture returns: `lightspeed ARGS…` run in-process → (exit status,
# stdout, stderr).
RunCli = Callable[..., tuple[int, str, str]]


def examples(n: int) -> int:
    """A property test's number of examples: its full count `n` under the "ci" Hypothesis
    profile (CI, or HYPOTHESIS_PROFILE=ci), at most the "dev" profile's few otherwise
    (see conftest)."""
    return n if settings.default.max_examples >= CI_EXAMPLES else min(n, DEV_EXAMPLES)


def printed_labels(doc: Document) -> set[str]:
    """Every label a document shows: section and table titles, field labels, column
    headers."""
    found: set[str] = set()

    def walk(block: object) -> None:
        if isinstance(block, Section):
            found.add(block.title or "")
            for child in block.blocks:
                walk(child)
        elif isinstance(block, Fields):
            found.update([block.title or "", *(label for label, _ in block.rows)])
        elif isinstance(block, Table):
            found.update([block.title, *(c.header for c in block.columns)])

    for section in doc.sections:
        walk(section)
    return found - {""}


def op(
    index: int, flops: int, bytes_: int, time_s: float | None, macs: int | None = None
) -> OpRecord:
    """A forward op on [4, 4] fp32 tensors: a matrix product when it has `macs`, else an
    add."""
    return OpRecord(
        index=index,
        name="aten::mm" if macs else "aten::add",
        module="layer",
        phase=Phase.FORWARD,
        input_shapes=((4, 4),),
        input_dtypes=("float32",),
        output_shapes=((4, 4),),
        output_dtypes=("float32",),
        flops=flops,
        macs=macs,
        bytes_read=bytes_,
        bytes_written=0,
        time_s=time_s,
    )


def hand_built_profile(ops: tuple[OpRecord, ...], outside_s: float, step_s: float) -> Profile:
    """A profile of `ops` on the made-up CPU: `outside_s` seconds outside them, a step
    timed at `step_s` and 10 % more."""
    return Profile(
        workload=WorkloadInfo(
            name="hand-built",
            batch_size=8,
            device=Device.CPU,
            precision=Precision.FP32,
            parameter_count=100,
            tokens_per_sample=None,
        ),
        hardware=FAKE_CPU,
        timing=Measurement(times_s=(step_s, step_s * 1.1), steps_per_replicate=1, warmup_steps=1),
        ops=ops,
        profiled_step_s=sum(o.time_s or 0.0 for o in ops) + outside_s,
        unattributed_s=outside_s,
    )


HAND_BUILT = hand_built_profile(
    (
        # compute-bound: SoL max(2e9 / 100e9, 1e6 / 20e9) = 20 ms, measured 40 ms (50 %)
        op(0, 2_000_000_000, 1_000_000, 0.040, macs=1_000_000_000),
        # memory-bound: SoL max(1e6 / 100e9, 2e8 / 20e9) = 10 ms, measured 20 ms
        op(1, 1_000_000, 200_000_000, 0.020),
        # overhead-bound: 10 µs (< 20 µs) at 400 / 20e9 = 20 ns of SoL (0.2 %)
        op(2, 100, 400, 10e-6),
        op(3, 0, 0, 5e-6),  # no work: a view
        op(4, 1_000, 1_000, None),  # untimed
    ),
    outside_s=0.005,
    step_s=0.070,
)


class ConvBlock(nn.Module):
    """x + dropout(relu(bn(conv(x)))): [B, C, H, W] -> [B, C, H, W]."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(F.relu(self.bn(self.conv(x))))


class ConvNet(nn.Module):
    """Images [B, 3, 8, 8] -> logits [B, 10]; four ConvBlocks in a Sequential (called as
    one) or a ModuleList (looped over here)."""

    def __init__(self, stack: str) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        blocks = [ConvBlock(8) for _ in range(4)]
        self.blocks = nn.Sequential(*blocks) if stack == "sequential" else nn.ModuleList(blocks)
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        if isinstance(self.blocks, nn.Sequential):
            x = self.blocks(x)
        else:
            for block in self.blocks:
                x = block(x)
        return self.head(x.mean(dim=(2, 3)))


def convnet_workload(stack: str) -> Workload:
    """`ConvNet` on seeded [B, 3, 8, 8] images and 10-class labels, cross-entropy."""

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(n, 3, 8, 8, generator=generator)
        return x, torch.randint(0, 10, (n,), generator=generator)

    def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)

    return Workload(name=f"convnet-{stack}", model=lambda: ConvNet(stack), batch=batch, loss=loss)


class VGGStyle(nn.Module):
    """VGG-style CNN: [B, 3, 32, 32] images → 10 logits; three blocks of two 3×3
    convolutions with ReLUs, then a 2×2 max-pool; a linear head after a ReLU."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for width in (16, 32, 32):
            layers += [
                nn.Conv2d(channels, width, 3, padding=1),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, padding=1),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            channels = width
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def vgg_workload() -> Workload:
    """`VGGStyle` on seeded [8, 3, 32, 32] images and 10-class labels, cross-entropy."""

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        return torch.randn(n, 3, 32, 32, generator=generator), torch.randint(
            0, 10, (n,), generator=generator
        )

    def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x), y)

    return Workload(name="vgg-style", model=VGGStyle, batch=batch, loss=loss, batch_size=8)


class _Tagger(nn.Module):
    """An Elman RNN over a sequence, then a linear head on every step."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.RNN(6, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0])


def rnn_tagger_workload() -> Workload:
    """A tiny sequence tagger with one `nn.RNN` (20 steps, batch 2, 8 units)."""

    def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(n, 20, 6), torch.randint(0, 3, (n, 20))

    def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return nn.functional.cross_entropy(model(batch[0]).flatten(0, 1), batch[1].flatten())

    return Workload(name="rnn-tagger", model=_Tagger, batch=batch, loss=loss, batch_size=2)


def run_in_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run `args` with stdout and stderr on a pseudo-terminal; (status, all output)."""
    pty = pytest.importorskip("pty")
    pid, fd = pty.fork()
    if pid == 0:  # the child: its stdio is the terminal
        os.execvpe(args[0], args, env)
    out = b""
    while True:
        ready, _, _ = select.select([fd], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        out += data
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")
