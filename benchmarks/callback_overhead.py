"""What `lightspeed.integrations.transformers.LightspeedCallback` costs a Hugging Face
`Trainer` step, outside its active window and inside it.

    PYTHONPATH=src .venv/bin/python benchmarks/callback_overhead.py --rounds 5

A tiny BERT (2 layers, hidden 64, sequence 64, batch 8) trains on the CPU for
`--steps` optimizer steps, with and without the callback (wait 1, warm-up 1, active 3),
the two taking turns within each round (which goes first alternates), each run in this
one process with a fresh model. A callback of its own takes the time at every
`on_step_end`, so a step's time is the time between two of them. Outside the window:
the median step of those after the run has finished (steps 10 to the end), with the
callback over without; inside: the median of the three recorded steps over the same
steps without. One run of each first, unmeasured: a process's first runs pay for its
start. The median of the rounds' ratios is reported, with each round's. Two runs' steps
differ by more than 1 % from noise alone, so the hooks' cost outside the window is also
timed directly: 100,000 calls of them on a callback whose run has finished.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from lightspeed.integrations.transformers import LightspeedCallback

SEQUENCE, BATCH = 64, 8


class _Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return {
            "input_ids": torch.randint(0, 512, (SEQUENCE,), generator=g),
            "labels": torch.tensor(i % 2),
        }


class _StepClock(TrainerCallback):  # type: ignore[misc]
    """The time at the end of every optimizer step."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ends.append(time.perf_counter())


def step_times(steps: int, with_callback: bool, folder: Path) -> list[float]:
    """Each optimizer step's seconds (from the second step on) of one run."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=SEQUENCE,
        num_labels=2,
    )
    clock = _StepClock()
    callbacks: list[Any] = [clock]
    if with_callback:
        callbacks.insert(0, LightspeedCallback(folder / "ls", wait=1, warmup=1, active=3))
    args = TrainingArguments(
        output_dir=str(folder / "trainer"),
        per_device_train_batch_size=BATCH,
        max_steps=steps,
        logging_steps=10**6,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=BertForSequenceClassification(config),
        args=args,
        train_dataset=_Tokens(steps * BATCH),
        callbacks=callbacks,
    )
    trainer.train()
    ends = clock.ends
    return [b - a for a, b in itertools.pairwise(ends)]


def hook_seconds(folder: Path, calls: int = 100_000) -> float:
    """Seconds the callback's per-step hooks take once its run has finished: what every
    step after the window pays, timed directly (a difference of two runs' steps is lost
    in their noise)."""
    callback = LightspeedCallback(folder / "ls", wait=0, warmup=0, active=1)
    args = TrainingArguments(output_dir=str(folder / "trainer"), report_to=[], use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    callback.on_step_begin(args, state, control)
    callback.on_step_end(args, state, control)  # the one active step: the run finishes
    assert callback.run is not None and callback.run.finished
    started = time.perf_counter()
    for _ in range(calls):
        callback.on_step_begin(args, state, control)
        callback.on_step_end(args, state, control)
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    outside, inside, steps = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for warm in (False, True):  # the first runs of a process pay for its start
            step_times(args.steps, warm, Path(tmp) / f"warm-{warm}")
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            times = {w: step_times(args.steps, w, Path(tmp) / f"{r}-{w}") for w in order}
            # times[k] is step k + 2 (1-based) over its predecessor's end; the recorded
            # steps are 3 to 5, so times[1:4]; the run finishes at the end of step 5.
            base, with_cb = times[False], times[True]
            steps.append(statistics.median(base[8:]))
            outside.append(statistics.median(with_cb[8:]) / statistics.median(base[8:]))
            inside.append(statistics.median(with_cb[1:4]) / statistics.median(base[1:4]))
            print(
                f"round {r + 1}: step {statistics.median(base[8:]) * 1e3:.2f} ms without;"
                f" outside the window {outside[-1]:.3f}, inside {inside[-1]:.3f}",
                flush=True,
            )
    hooks = hook_seconds(Path(tempfile.mkdtemp()))
    print(
        f"the callback's hooks outside the window: {hooks * 1e6:.2f} µs a step,"
        f" {hooks / statistics.median(steps):.2e} of the step without it"
    )
    print(
        f"median over {args.rounds} rounds: outside the window {statistics.median(outside):.3f}"
        f" (min {min(outside):.3f}, max {max(outside):.3f}); inside the window"
        f" {statistics.median(inside):.3f} (min {min(inside):.3f}, max {max(inside):.3f})"
    )


if __name__ == "__main__":
    main()
