"""Hand-built facts and small helpers the tests share: import them from here, never
from a test module or from conftest."""

from __future__ import annotations

from collections.abc import Callable

import torch
from hypothesis import settings

from lightspeed.document import Document, Fields, Section, Table
from lightspeed.dtypes import Precision
from lightspeed.facts.hardware import Calibration, DeviceKind, Hardware

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
