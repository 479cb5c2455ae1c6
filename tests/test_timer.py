"""The timer, driven by a fake clock so every statistic is exact."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lightspeed.errors import ConfigError
from lightspeed.facts.timing import Measurement, measurement_from_times
from lightspeed.measure.timer import MAX_SETTLE_ENV, MAX_SETTLE_S, TimerConfig, measure


@pytest.fixture(autouse=True)
def default_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer's own tests run with its default wait for settling (the other tests
    cap it through the environment)."""
    monkeypatch.delenv(MAX_SETTLE_ENV, raising=False)


def test_the_environment_caps_the_wait_for_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    assert TimerConfig().max_settle_s == MAX_SETTLE_S == 15.0
    monkeypatch.setenv(MAX_SETTLE_ENV, "0.5")
    assert TimerConfig().max_settle_s == 0.5
    assert TimerConfig(max_settle_s=3.0).max_settle_s == 3.0  # an explicit value wins
    for wrong in ("soon", "-1", "nan"):
        monkeypatch.setenv(MAX_SETTLE_ENV, wrong)
        with pytest.raises(ConfigError, match=f"{MAX_SETTLE_ENV}='{wrong}' is not a number"):
            TimerConfig()


class FakeClock:
    """A clock that advances only when the timed function runs."""

    def __init__(self, durations: list[float]) -> None:
        self.now = 0.0
        self.durations = list(durations)
        self.calls = 0

    def __call__(self) -> float:
        return self.now

    def work(self) -> None:
        self.now += self.durations[self.calls % len(self.durations)]
        self.calls += 1


def test_measure_keeps_every_replicate_and_blocks_short_calls() -> None:
    clock = FakeClock([1e-3])  # 1 ms per call: blocks of 5 calls reach 5 ms
    syncs: list[float] = []
    m = measure(
        clock.work,
        sync=lambda: syncs.append(clock.now),
        config=TimerConfig(warmup_steps=2, budget_s=0.1, min_replicates=3),
        clock=clock,
    )
    assert m.steps_per_replicate == 5
    # Two warm-up calls, then warm-up blocks of 5 until two windows of 3 agree (a steady
    # 1 ms a call: the first chance, after 4 blocks). The last window of 3 showed the
    # time steady: it counts as the first 3 replicates, not as warm-up.
    assert m.warmup_steps == 2 + 1 * 5 and m.settled is True
    assert m.warmup_s == pytest.approx(7e-3)
    assert all(t == pytest.approx(1e-3) for t in m.times_s)
    # Then 5 ms blocks until the 0.1 s budget is spent, the 3 counted in: 17 more.
    assert m.n == 20
    assert clock.calls == 2 + 4 * 5 + 17 * 5
    # Every block is bracketed by two syncs.
    assert len(syncs) == 2 * (2 + 4 + 17)


def test_the_warm_up_waits_for_the_step_time_to_stop_drifting() -> None:
    # A fresh step: 2 ms a call falling by 0.1 ms a call to 1 ms, then steady.
    clock = FakeClock([2e-3 - 1e-4 * i for i in range(10)] + [1e-3] * 10_000)
    m = measure(
        clock.work,
        sync=lambda: None,
        config=TimerConfig(warmup_steps=1, budget_s=0.05, min_replicates=3),
        clock=clock,
    )
    assert m.settled is True
    assert m.warmup_steps >= 10  # past the drift
    assert all(t == pytest.approx(1e-3) for t in m.times_s)
    assert m.warnings == ()


def test_a_step_time_that_never_settles_is_said() -> None:
    clock = FakeClock([1e-3 * 0.97**i for i in range(300)])  # 3 % faster every call
    m = measure(
        clock.work,
        sync=lambda: None,
        config=TimerConfig(warmup_steps=1, budget_s=0.01, min_replicates=3, max_settle_s=0.02),
        clock=clock,
    )
    assert m.settled is False
    assert m.warmup_s is not None and m.warmup_s >= 0.02
    assert m.warmup_steps > 2 * 3  # it went on past two windows, still falling
    assert any("still drifting after" in w for w in m.warnings)


def test_settling_can_be_turned_off() -> None:
    clock = FakeClock([1e-3])
    m = measure(
        clock.work,
        sync=lambda: None,
        config=TimerConfig(warmup_steps=2, budget_s=0.01, min_replicates=3, max_settle_s=0),
        clock=clock,
    )
    assert m.settled is None and m.warmup_steps == 2


def test_min_replicates_beats_the_budget() -> None:
    clock = FakeClock([1.0])  # each call exceeds the whole budget
    m = measure(
        clock.work,
        sync=lambda: None,
        config=TimerConfig(warmup_steps=1, budget_s=0.5, min_replicates=4),
        clock=clock,
    )
    assert m.n == 4
    assert m.steps_per_replicate == 1


def test_statistics_are_exact() -> None:
    m = measurement_from_times([1.0, 2.0, 3.0, 4.0, 5.0])
    assert m.median_s == 3.0
    assert m.min_s == 1.0 and m.max_s == 5.0
    assert m.iqr_s == pytest.approx(2.0)  # inclusive quartiles: 4.0 − 2.0
    assert m.total_time_s == 15.0


def test_throughput_is_total_over_total_not_mean_of_rates() -> None:
    # Two steps of 1 s and 3 s with 10 samples each: 20 samples in 4 s = 5 samples/s.
    # The mean of per-step rates would be (10 + 3.33) / 2 = 6.67: wrong.
    m = measurement_from_times([1.0, 3.0])
    assert m.per_second(10) == pytest.approx(5.0)


def test_noise_warning_above_ten_percent() -> None:
    steady = measurement_from_times([1.0, 1.01, 0.99, 1.0, 1.02])
    noisy = measurement_from_times([1.0, 1.5, 0.7, 1.2, 0.9])
    assert steady.warnings == ()
    assert any("noisy" in w for w in noisy.warnings)
    assert any("replicates" in w for w in measurement_from_times([1.0, 1.0]).warnings)


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"warmup_steps": -1}, "--warmup"),
        ({"budget_s": 0}, "--budget"),
        ({"min_replicates": 0}, "--min-replicates"),
    ],
)
def test_config_errors_name_the_flag(kwargs: dict[str, float], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        TimerConfig(**kwargs)  # type: ignore[arg-type]


def test_empty_measurement_is_refused() -> None:
    with pytest.raises(ValueError):
        Measurement(times_s=(), steps_per_replicate=1, warmup_steps=0)


@given(st.lists(st.floats(min_value=1e-6, max_value=10.0), min_size=1, max_size=50))
def test_order_statistics(times: list[float]) -> None:
    m = measurement_from_times(times)
    assert m.min_s <= m.median_s <= m.max_s
    assert 0.0 <= m.iqr_s <= m.max_s - m.min_s + 1e-12
    # total/total rounds: allow one part in 1e12 either side
    assert m.min_s * (1 - 1e-12) <= m.mean_s <= m.max_s * (1 + 1e-12)


def test_a_slower_last_window_is_noise_not_drift() -> None:
    from lightspeed.measure.timer import has_settled

    assert has_settled([1.0, 1.0, 1.0, 1.2, 1.3, 1.2], tolerance=0.05)
    assert not has_settled([1.3, 1.2, 1.3, 1.0, 1.0, 1.0], tolerance=0.05)
    assert has_settled([1.04, 1.05, 1.04, 1.0, 1.0, 1.0], tolerance=0.05)
    assert not has_settled([1.0] * 5, tolerance=0.05)  # two windows of three needed


def test_the_kernels_share_and_page_faults_are_measured() -> None:
    import torch

    kept = torch.empty(16 * 2**20)

    def same_buffer() -> None:
        kept.fill_(1.0)

    config = TimerConfig(warmup_steps=2, budget_s=0.2, min_replicates=3, max_settle_s=0)
    same = measure(same_buffer, sync=lambda: None, config=config)
    # A buffer filled again faults no page in (tests/measure/test_allocator.py has one
    # that does, in a process of its own).
    assert same.page_faults_per_call is not None and same.page_faults_per_call < 32
    assert same.kernel_cpu_share is not None and 0 <= same.kernel_cpu_share <= 1


def test_a_step_that_faults_its_memory_in_again_is_warned_about() -> None:
    m = Measurement(
        times_s=(1.0,) * 5,
        steps_per_replicate=1,
        warmup_steps=3,
        page_faults_per_call=137_700,
        kernel_cpu_share=0.2,
    )
    (warning,) = m.warnings
    assert "20% of the CPU time went to the OS kernel, with 137,700 page faults" in warning
    assert "MALLOC_MMAP_MAX_=0" in warning
    quiet = Measurement(
        times_s=(1.0,) * 5,
        steps_per_replicate=1,
        warmup_steps=3,
        page_faults_per_call=137_700,
        kernel_cpu_share=0.02,
    )
    assert quiet.warnings == ()
    kept = dataclasses.replace(m, freed_memory_kept=True)
    (warning,) = kept.warnings
    assert "although freed memory was kept" in warning and "MALLOC" not in warning


def test_a_long_step_is_timed_in_few_steps_beyond_its_warm_up() -> None:
    clock = FakeClock([6.0])  # a 6 s step, steady from the start
    m = measure(clock.work, sync=lambda: None, config=TimerConfig(), clock=clock)
    # 3 warm-up steps and 3 settle blocks; the settle window counts as 3 replicates, so
    # 2 more reach the 5 needed.
    assert m.settled is True and m.n == 5
    assert clock.calls == 3 + 3 + 2
    assert m.warmup_steps == 3 and m.warmup_s == pytest.approx(18.0)
