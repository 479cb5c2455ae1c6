"""Length bucketing: batches of sequences of similar length, so that padding each batch
to its longest sequence computes fewer padding tokens.

A batch of variable-length sequences is padded to its longest; with lengths drawn from a
long-tailed distribution, a random batch almost always holds one long sequence, and most
of the tokens it computes are padding. Sorting the whole dataset by length removes the
padding but also the randomness of the batches' order and content. The usual middle
road (the "sortish" or bucket sampler of fairseq, AllenNLP and Hugging Face's
`group_by_length`) shuffles, cuts the shuffled order into pools of a few dozen batches,
sorts each pool by length and cuts it into batches, then shuffles the batches: each
batch holds neighbours in length, and every epoch still visits the samples in a new
random order.

`padding_waste(lengths, batches)`: tokens computed (each batch's size × its longest
length) over the real tokens; 1.0 is no padding at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch
from torch.utils.data import Sampler

from lightspeed.errors import ConfigError

__all__ = ["BucketBatchSampler", "padding_waste"]


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of `batch_size` sample indices of similar `lengths` (in tokens), for a
    DataLoader's `batch_sampler=`.

    Each epoch: the indices shuffled (with `shuffle`; seeded by `seed` and the epoch
    `set_epoch` sets, so every process of a data-parallel job draws the same order), cut
    into pools of `pool` batches, each pool sorted by length and cut into batches, and
    the batches shuffled. `pool=1` is random batching; a pool as large as the dataset
    sorts it whole. `drop_last` drops each epoch's one short batch (the last pool's last).

    Equivalence: every sample is seen once an epoch, as with a shuffled DataLoader; what
    changes is which samples share a batch, so a training run sees other batches (the
    same expected gradient, other noise), not the same ones faster.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        *,
        pool: int = 50,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int = 0,
    ) -> None:
        if isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"BucketBatchSampler: batch_size {batch_size} must be at least 1.")
        if pool < 1:
            raise ConfigError(f"BucketBatchSampler: pool {pool} must be at least 1 batch.")
        self.lengths = torch.as_tensor(list(lengths), dtype=torch.int64)
        if self.lengths.dim() != 1 or (self.lengths < 0).any():
            raise ConfigError("BucketBatchSampler: lengths must be one length (≥ 0) a sample.")
        self.batch_size = batch_size
        self.pool = pool
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order `__iter__` draws next (as DistributedSampler's)."""
        self.epoch = epoch

    def __len__(self) -> int:
        n = len(self.lengths)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        n = len(self.lengths)
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)
        span = self.pool * self.batch_size
        batches: list[list[int]] = []
        for start in range(0, n, span):
            chunk = order[start : start + span]
            # Stable, so equal lengths keep the shuffled order.
            chunk = chunk[torch.sort(self.lengths[chunk], stable=True).indices]
            batches += [
                chunk[i : i + self.batch_size].tolist()
                for i in range(0, len(chunk), self.batch_size)
            ]
        # Pools hold whole batches, so only the last batch can be short.
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=generator)]
        yield from batches


def padding_waste(lengths: Sequence[int], batches: Iterable[Sequence[int]]) -> float:
    """Tokens computed when each batch of sample indices is padded to its longest
    sample, over the samples' real tokens (≥ 1; 1.0: no padding)."""
    real = computed = 0
    for batch in batches:
        sizes = [int(lengths[i]) for i in batch]
        if sizes:
            real += sum(sizes)
            computed += len(sizes) * max(sizes)
    if real == 0:
        raise ConfigError("padding_waste: the batches hold no tokens.")
    return computed / real
