"""Length bucketing: every sample once an epoch, batches of neighbours in length, and
less padding than random batches on a long-tailed length distribution."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from factories import examples
from lightspeed.errors import ConfigError
from lightspeed.optimize.bucketing import BucketBatchSampler, padding_waste


def long_tail(n: int, seed: int = 0) -> list[int]:
    """Lengths with a long tail: log-normal around 90 tokens, up to 2048."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.exp(torch.randn(n, generator=g) * 0.9 + 4.5).clamp(8, 2048)
    return [int(x) for x in lengths]


@settings(max_examples=examples(40), deadline=None)
@given(
    n=st.integers(0, 300),
    batch_size=st.integers(1, 17),
    pool=st.integers(1, 8),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
)
def test_every_sample_once_an_epoch_in_batches_of_the_size(
    n: int, batch_size: int, pool: int, drop_last: bool, shuffle: bool
) -> None:
    lengths = long_tail(n)
    sampler = BucketBatchSampler(
        lengths, batch_size, pool=pool, drop_last=drop_last, shuffle=shuffle
    )
    batches = list(sampler)
    seen = [i for b in batches for i in b]
    assert len(batches) == len(sampler)
    assert len(seen) == len(set(seen)) and set(seen) <= set(range(n))
    assert len(seen) == (n - n % batch_size if drop_last else n)
    assert sum(len(b) < batch_size for b in batches) <= (0 if drop_last else 1)
    # Within a batch, lengths come sorted (each batch is a slice of a sorted pool).
    for b in batches:
        assert [lengths[i] for i in b] == sorted(lengths[i] for i in b)


def test_epochs_differ_and_repeat_with_the_seed() -> None:
    lengths = long_tail(1000)
    sampler = BucketBatchSampler(lengths, 32, seed=3)
    first = list(sampler)
    assert list(sampler) == first  # same epoch, same order
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert list(BucketBatchSampler(lengths, 32, seed=3)) == first


def test_bucketing_cuts_the_padding_of_a_long_tail() -> None:
    lengths = long_tail(10_000)
    shuffled = list(BatchSampler(RandomSampler(range(len(lengths))), 32, drop_last=False))
    random_waste = padding_waste(lengths, shuffled)
    bucketed = padding_waste(lengths, BucketBatchSampler(lengths, 32, pool=50))
    assert padding_waste(lengths, BucketBatchSampler(lengths, 32, pool=1)) > 2.0
    assert random_waste > 4.0 and bucketed < 1.3  # 5.0 and 1.22 for this seed
    # Sorting everything is the floor any pool size approaches.
    whole = padding_waste(lengths, BucketBatchSampler(lengths, 32, pool=len(lengths)))
    assert 1.0 <= whole <= bucketed


def test_padding_waste_counts_padded_tokens_exactly() -> None:
    assert padding_waste([1, 2, 3, 10], [[0, 3], [1, 2]]) == pytest.approx((20 + 6) / 16)
    assert padding_waste([5, 5], [[0, 1]]) == 1.0
    with pytest.raises(ConfigError, match="hold no tokens"):
        padding_waste([0, 0], [[0, 1]])


def test_it_drives_a_dataloader_and_refuses_bad_settings() -> None:
    lengths = long_tail(100)
    loader = DataLoader(list(range(100)), batch_sampler=BucketBatchSampler(lengths, 10))
    assert sorted(int(i) for batch in loader for i in batch) == list(range(100))
    with pytest.raises(ConfigError, match="batch_size 0 must be at least 1"):
        BucketBatchSampler(lengths, 0)
    with pytest.raises(ConfigError, match="pool 0 must be at least 1 batch"):
        BucketBatchSampler(lengths, 4, pool=0)
    with pytest.raises(ConfigError, match="one length"):
        BucketBatchSampler([3, -1], 4)
