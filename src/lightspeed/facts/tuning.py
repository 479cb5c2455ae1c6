"""What `lightspeed tune` found: each optimization predicted, checked and measured."""

from __future__ import annotations

import dataclasses
import enum

from lightspeed.facts.profile import Profile


class Verdict(str, enum.Enum):
    """What became of a candidate: kept, or why not."""

    KEPT = "kept"  # the one chosen
    FASTER = "faster"  # equivalent and faster, but another was faster still
    SLOWER = "slower"  # equivalent, not faster than the plain step by enough
    OVER_BUDGET = "over budget"  # its measured peak exceeds the memory budget
    FAILED_CHECK = "failed check"  # it does not compute what the plain step computes
    SKIPPED = "skipped"  # not applicable to this workload, so never run
    ERROR = "error"  # applying, checking or measuring it failed


class CandidateKind(str, enum.Enum):
    """Which optimization a candidate is, whatever its name adds (a dtype, a job count).
    `--only` names all but the combination, which is tried when its parts each pass."""

    AMP = "amp"  # mixed precision: autocast (and fp16's loss scaler)
    CHECKPOINT = "checkpoint"  # activation checkpointing of the planner's modules
    GIST = "gist"  # Gist's encodings of ReLU and max-pool outputs
    FUSE = "fuse"  # K jobs of the step fused into one
    LOADER = "loader"  # the DataLoader's options, tuned apart from the step
    AMP_CHECKPOINT = "amp+checkpoint"  # mixed precision and checkpointing together

    @property
    def parts(self) -> frozenset[CandidateKind]:
        """The single optimizations this kind applies: the combination's two, else itself."""
        if self is CandidateKind.AMP_CHECKPOINT:
            return frozenset((CandidateKind.AMP, CandidateKind.CHECKPOINT))
        return frozenset((self,))


def kind_named(name: str) -> CandidateKind:
    """The kind of a candidate known by its name alone ("amp-bf16", "fuse4",
    "amp-bf16+checkpoint"): a tune JSON document names its candidates but does not
    record their kinds, nor does a `Tuning` pickled before `Candidate.kind` existed.
    Code that makes a candidate sets its kind; only readers of such records ask this."""
    if "+" in name:
        return CandidateKind.AMP_CHECKPOINT
    for kind in (CandidateKind.AMP, CandidateKind.FUSE):
        if name.startswith(kind.value):
            return kind
    return CandidateKind(name)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Equivalence:
    """The outcome of one equivalence check: `check` names what was compared, `passed`
    whether `error` (the largest difference found: relative for gradients, in loss
    units for a loss curve) is within `tolerance`, and `worst` where that difference is
    (a parameter name, or a step)."""

    check: str
    passed: bool
    error: float
    tolerance: float
    worst: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Candidate:
    """One optimization tried: `name` ("amp-bf16", "checkpoint", "gist", "fuse4"), `kind`
    (which optimization it is), `transform` (how it was applied, as `lightspeed.optimize`
    takes it), the step time in seconds and peak memory in bytes predicted before it ran
    and measured after, its equivalence check, and `verdict`. `reason` says why, for
    failed check, skipped and error.
    `arguments`: what the transform took (the dtype, then module names). `profile`: the
    measured profile (None when it did not run). `suggestions`: what else would help it
    that lightspeed cannot apply itself (layer sizes to pad for tensor cores)."""

    name: str
    kind: CandidateKind
    transform: str = ""
    arguments: tuple[str, ...] = ()
    predicted_step_s: float | None = None
    predicted_peak_bytes: int | None = None
    measured_step_s: float | None = None
    measured_peak_bytes: int | None = None
    equivalence: Equivalence | None = None
    verdict: Verdict = Verdict.SKIPPED
    reason: str = ""
    profile: Profile | None = None
    suggestions: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlannedCheckpoint:
    """One option the checkpoint planner weighed: the `modules` it recomputes (as
    `optimize.checkpoint` takes them; `ops:NAME` op by op), the step's peak and the
    activations it keeps (bytes, on fake tensors), the seconds its recompute adds, and
    whether it is the one `chosen`."""

    modules: tuple[str, ...]
    peak_bytes: int
    activations_bytes: int
    recompute_s: float
    chosen: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Tuning:
    """A tuning run: the plain step's profile (`baseline`), the peak-memory budget in
    bytes it had to meet (None: none), every candidate in the order tried, and the one
    kept (None: none beat the plain step, or none fit)."""

    baseline: Profile
    memory_budget_bytes: int | None
    candidates: tuple[Candidate, ...]
    chosen: Candidate | None
    # The loader's options tuned (None: not tried, the workload has no loader, or the
    # tuning failed, for the reason in `loading_error`).
    loading: LoaderTuning | None = None
    loading_error: str = ""
    # Every option the checkpoint planner weighed for the checkpoint candidate (empty:
    # the planner did not run: modules were named, or the candidate was not tried).
    checkpoint_plans: tuple[PlannedCheckpoint, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    """The DataLoader options a loader is built with (torch.utils.data.DataLoader's
    keywords of the same names; `prefetch_factor` only with workers)."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None

    def kwargs(self) -> dict[str, int | bool | None]:
        """These options as DataLoader keyword arguments."""
        found: dict[str, int | bool | None] = {
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
        }
        if self.num_workers > 0:
            found["persistent_workers"] = self.persistent_workers
            found["prefetch_factor"] = self.prefetch_factor
        return found

    @property
    def label(self) -> str:
        """These options in a few words: "4 workers, prefetch 2, persistent, pinned"."""
        if self.num_workers == 0:
            words = ["in the step's process"]
        else:
            words = [f"{self.num_workers} worker{'s' if self.num_workers > 1 else ''}"]
            if self.prefetch_factor is not None:
                words.append(f"prefetch {self.prefetch_factor}")
            if self.persistent_workers:
                words.append("persistent")
        if self.pin_memory:
            words.append("pinned")
        return ", ".join(words)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoaderRun:
    """A training loop measured with its loader built with `options`: over `steps`
    steps after the first batch, the mean time per step waiting for the next batch
    (`wait_s`), in the step itself (`compute_s`) and in both (`loop_s`), in seconds;
    `first_batch_s`: the wait for the first batch (workers starting); `samples_per_s`:
    the loop's throughput; `predicted_loop_s`: the loop's time per step predicted from
    the loader without workers (None for that one); `threads`: the step's own CPU
    threads (torch.set_num_threads) during the run, which workers share the cores with."""

    options: LoaderOptions
    threads: int
    steps: int
    first_batch_s: float
    wait_s: float
    compute_s: float
    loop_s: float
    samples_per_s: float
    predicted_loop_s: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoaderTuning:
    """The loader's options tuned against the measured wait for data: every setting
    measured (`runs`, the loader without workers first), the one kept (`chosen`, an
    index into `runs`: the fastest loop), the loop's bound and findings' kinds as
    `observe()` diagnoses them with the first setting (`bound_before`) and the kept
    one (`bound_after`), and the CPU cores the workers and the step share."""

    runs: tuple[LoaderRun, ...]
    chosen: int
    bound_before: str
    bound_after: str
    findings_before: tuple[str, ...] = ()
    findings_after: tuple[str, ...] = ()
    cpu_cores: int = 1
    note: str = ""

    @property
    def kept(self) -> LoaderRun:
        """The run of the kept setting."""
        return self.runs[self.chosen]

    @property
    def wait_removed(self) -> float | None:
        """The share of the first setting's wait for data the kept one removes (None
        when the first did not wait)."""
        before = self.runs[0].wait_s
        return None if before <= 0 else 1 - self.kept.wait_s / before
