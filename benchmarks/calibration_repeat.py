"""Does the calibrated matmul ceiling hold up? Calibrate, then run each precision's best
GEMM again and report what fraction of the stored ceiling it reaches.

    .venv/bin/python benchmarks/calibration_repeat.py [--device cpu|cuda] [--rounds 3]

A ceiling that a rerun of the very same GEMM cannot approach (< 85 %) would make every
efficiency lightspeed reports against it look worse than it is.
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch

from lightspeed.facts.device import Device
from lightspeed.hardware.cache import save_calibration
from lightspeed.hardware.calibrate import calibrate, matmul_rate
from lightspeed.measure.device import device_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=3, help="reruns per precision")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per rerun")
    args = parser.parse_args()
    device = Device.parse(args.device)
    hw = calibrate(device)
    save_calibration(device, hw)
    assert hw.calibration is not None
    print(
        f"machine: {device_name(device)}, {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}, {platform.python_version()}; "
        f"calibration took {hw.calibration.duration_s:.1f} s"
    )
    print(f"{'precision':<10}{'n':>6}{'ceiling GFLOP/s':>18}{'rerun GFLOP/s':>16}{'fraction':>10}")
    for precision, ceiling in hw.peak_flops_per_s.items():
        n = hw.calibration.best_matmul_size[precision]
        # A rerun's typical rate: 2·n³ over the median call time of each round.
        reruns = [
            2 * n**3 / matmul_rate(n, precision, device, args.budget)[1] for _ in range(args.rounds)
        ]
        rerun = statistics.median(reruns)
        print(
            f"{precision.value:<10}{n:>6}{ceiling / 1e9:>18.1f}{rerun / 1e9:>16.1f}"
            f"{rerun / ceiling:>10.1%}"
        )
    cal = hw.calibration
    rates = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in cal.memory_kernel_bytes_per_s.items())
    print(f"memory GB/s: {rates} ({(cal.stream_array_bytes or 0) / 2**20:.0f} MiB arrays)")


if __name__ == "__main__":
    main()
