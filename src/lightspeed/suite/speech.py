"""`deepspeech2` and `deepspeech2-tiny`: Deep Speech 2 trained with CTC on synthetic speech.

The model is Deep Speech 2 (Amodei et al. 2016, "Deep Speech 2: End-to-End Speech
Recognition in English and Mandarin"): the paper's two layers of 2-D convolution over
time and frequency (Table 3: 32 channels, 41x11 stride 2x2 then 21x11 stride 2x1, each
with batch norm and the clipped ReLU min(max(x, 0), 20)), bidirectional GRU layers whose
two directions are summed, sequence-wise batch norm (statistics over batch and time),
a linear layer to 29 characters (CTC blank, apostrophe, space and 26 letters) and the
CTC loss. The paper compares many depths and widths of the recurrent stack rather than
fixing one; the sizes here are those of the MLPerf reference implementation
(mlcommons/training, `speech_recognition/pytorch`: `params.py` and `model.py`):
5 bidirectional GRU layers of 800 units with biases, convolutions without padding,
batch norm on the input of every GRU layer but the first and before the bias-free
output layer. That is 38,115,968 parameters; neither source publishes a count.

One departure from the paper: it normalises W·x, the GRU's input projection, inside the
recurrence; a fused GRU kernel (cuDNN's, as torch.nn.GRU uses) takes x, so the batch
norm sits on x, as in the MLPerf reference and deepspeech.pytorch.

The data imitate LibriSpeech read speech at 16 kHz: spectrograms of 20 ms windows every
10 ms (161 frequency bins, 100 frames per second) of utterances cut to a fixed length,
with transcripts of 15 characters per second (about 2.7 words per second).
`deepspeech2` uses 5 s utterances (500 frames, 235 GRU steps, 75 characters) in
batches of 16; `deepspeech2-tiny` keeps the front end's kernels but has 8 channels and
two GRU layers of 64 units on 1 s utterances in batches of 4.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.suite import register
from lightspeed.workload import Workload

BLANK = 0  # the CTC blank's index; characters are 1..characters-1


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeepSpeech2Config:
    """The shape of a Deep Speech 2: spectrogram size, convolution and GRU widths.

    `frequency_bins` and `frames` give the spectrogram [frequency_bins, frames] of one
    utterance; `characters` counts the output symbols, CTC blank included;
    `transcript_length` is the characters per utterance.
    """

    frequency_bins: int = 161
    frames: int = 500
    conv_channels: int = 32
    gru_layers: int = 5
    gru_hidden: int = 800
    characters: int = 29
    transcript_length: int = 75

    def conv_output(self) -> tuple[int, int]:
        """(frequency bins, time steps) left after the two unpadded convolutions."""
        frequency = _conv_length(_conv_length(self.frequency_bins, 41, 2), 21, 2)
        time = _conv_length(_conv_length(self.frames, 11, 2), 11, 1)
        return frequency, time


def _conv_length(size: int, kernel: int, stride: int) -> int:
    # An unpadded convolution's output length: floor((W - K) / S) + 1.
    return (size - kernel) // stride + 1


class SequenceBatchNorm(nn.Module):
    """Batch norm over batch and time together: [T, N, C] -> [T, N, C]."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t, n, c = x.shape
        return self.norm(x.reshape(t * n, c)).view(t, n, c)


class BidirectionalGRU(nn.Module):
    """Optional sequence-wise batch norm, then a bidirectional GRU whose two directions
    are summed: [T, N, input_size] -> [T, N, hidden]."""

    def __init__(self, input_size: int, hidden: int, batch_norm: bool) -> None:
        super().__init__()
        self.norm = SequenceBatchNorm(input_size) if batch_norm else nn.Identity()
        self.gru = nn.GRU(input_size, hidden, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.gru(self.norm(x))  # [T, N, 2 * hidden]: forward then backward direction
        t, n, _ = y.shape
        return y.view(t, n, 2, -1).sum(dim=2)


class DeepSpeech2(nn.Module):
    """Spectrograms [N, 1, frequency_bins, frames] -> character logits [T, N, characters],
    T the time steps left after the convolutions (CTC's layout: time first)."""

    def __init__(self, config: DeepSpeech2Config) -> None:
        super().__init__()
        channels = config.conv_channels
        self.conv = nn.Sequential(
            nn.Conv2d(1, channels, kernel_size=(41, 11), stride=(2, 2)),
            nn.BatchNorm2d(channels),
            nn.Hardtanh(0, 20, inplace=True),  # the paper's clipped ReLU
            nn.Conv2d(channels, channels, kernel_size=(21, 11), stride=(2, 1)),
            nn.BatchNorm2d(channels),
            nn.Hardtanh(0, 20, inplace=True),
        )
        frequency, _ = config.conv_output()
        hidden = config.gru_hidden
        self.rnns = nn.Sequential(
            *(
                BidirectionalGRU(channels * frequency if i == 0 else hidden, hidden, i > 0)
                for i in range(config.gru_layers)
            )
        )
        self.output_norm = SequenceBatchNorm(hidden)
        self.fc = nn.Linear(hidden, config.characters, bias=False)

    def forward(self, spectrogram: torch.Tensor) -> torch.Tensor:
        x = self.conv(spectrogram)  # [N, C, F', T]
        n, c, f, t = x.shape
        # Channels and frequencies become the features of each time step: [T, N, C * F'].
        x = x.view(n, c * f, t).permute(2, 0, 1)
        return self.fc(self.output_norm(self.rnns(x)))


def speech_batch(batch_size: int, config: DeepSpeech2Config) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded synthetic log-spectrograms [batch_size, 1, frequency_bins, frames] and
    transcripts [batch_size, transcript_length] of character ids in 1..characters-1."""
    generator = torch.Generator().manual_seed(0)
    shape = (batch_size, 1, config.frequency_bins, config.frames)
    spectrogram = torch.randn(shape, generator=generator)
    transcript_shape = (batch_size, config.transcript_length)
    transcripts = torch.randint(1, config.characters, transcript_shape, generator=generator)
    return spectrogram, transcripts


def ctc_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """CTC loss in nats per target character, averaged over the batch.

    Every utterance has the same length and every transcript too, so the lengths are
    Python ints: the CTC kernel then needs no lengths tensor (and runs on the meta device).
    """
    spectrogram, transcripts = batch
    log_probs = model(spectrogram).log_softmax(dim=-1)  # [T, N, characters]
    steps, n, _ = log_probs.shape
    input_lengths = (steps,) * n
    target_lengths = (transcripts.shape[1],) * n
    # Tuples of lengths, as nn.CTCLoss documents them ("tuple or tensor").
    return F.ctc_loss(log_probs, transcripts, input_lengths, target_lengths, blank=BLANK)


def _deepspeech2_workload(name: str, config: DeepSpeech2Config, batch_size: int) -> Workload:
    return Workload(
        name=name,
        model=lambda: DeepSpeech2(config),
        batch=lambda n: speech_batch(n, config),
        loss=ctc_loss,
        batch_size=batch_size,
    )


@register(
    "deepspeech2",
    "Deep Speech 2 (38 M), 5 bi-GRU x 800, 5 s synthetic spectrograms, CTC, batch 16",
)
def deepspeech2() -> Workload:
    """Deep Speech 2 at the MLPerf reference's sizes: 38,115,968 parameters."""
    return _deepspeech2_workload("deepspeech2", DeepSpeech2Config(), batch_size=16)


@register(
    "deepspeech2-tiny",
    "Deep Speech 2 shape, 2 bi-GRU x 64, 1 s synthetic spectrograms, CTC, batch 4",
)
def deepspeech2_tiny() -> Workload:
    """8 conv channels, 2 bidirectional GRU layers of 64 units, 100 frames: 0.16 M parameters."""
    config = DeepSpeech2Config(
        frames=100, conv_channels=8, gru_layers=2, gru_hidden=64, transcript_length=15
    )
    return _deepspeech2_workload("deepspeech2-tiny", config, batch_size=4)
