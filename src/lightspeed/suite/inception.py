"""`inception-v3` and `inception-v3-tiny`: Inception-v3 on synthetic images.

The architecture is Inception-v3 from Szegedy et al. 2016, "Rethinking the Inception
Architecture for Computer Vision" (Table 1 and Figures 5-8), with the layer widths of
the released ImageNet model, written here in plain torch. Every convolution is a unit of
conv (no bias), BatchNorm and ReLU. A 299x299 image goes through a stem of plain convs to
a 35x35x192 grid, three blocks of Figure 5 (35x35x288), a grid reduction (17x17x768),
four blocks of Figure 6 with factorised 7x7 convs, a grid reduction (8x8x1280), two
blocks of Figure 7 (8x8x2048), global average pooling and a linear classifier. The
auxiliary classifier of Figure 8 sits on the 17x17 grid; in training its cross-entropy
is added to the main one with weight 0.4 (as TF-slim's `train_image_classifier.py`
does), and both use label smoothing 0.1 (Section 7).
With 1000 classes the model has 27,161,264 parameters, auxiliary head included, as
torchvision's weight metadata states.

The `-tiny` variant keeps the stem, one block of each kind (Figures 5, 6 and 7, both grid
reductions), the auxiliary head and the 299x299 images, but divides every width by 8,
with 10 classes and batch 4, so that one training step takes under a tenth of a second
on a quiet 2-core CPU.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.errors import ConfigError
from lightspeed.suite import register
from lightspeed.suite.resnet import image_batch
from lightspeed.workload import Workload

AUX_LOSS_WEIGHT = 0.4  # TF-slim's train_image_classifier.py
LABEL_SMOOTHING = 0.1  # Section 7 of the paper


@dataclasses.dataclass(frozen=True, kw_only=True)
class InceptionConfig:
    """The shape of an Inception-v3: block counts and widths, in channels.

    `pool_features[i]` is the pool-branch width of the i-th 35x35 block and
    `channels_7x7[i]` the inner width of the i-th 17x17 block, so their lengths are those
    blocks' counts. Every width but `classes` is divided by `width_divisor`. `aux` adds
    the auxiliary classifier, which runs in training mode only.
    """

    classes: int = 1000
    pool_features: tuple[int, ...] = (32, 64, 64)
    channels_7x7: tuple[int, ...] = (128, 160, 160, 192)
    blocks_8x8: int = 2
    width_divisor: int = 1
    aux: bool = True

    def __post_init__(self) -> None:
        # Every branch output is a multiple of 32, so a divisor of 32 keeps the
        # concatenated widths exact (inner widths such as 48 may round down).
        widths = (32, *self.pool_features, *self.channels_7x7)
        if self.width_divisor < 1 or any(w % self.width_divisor for w in widths):
            raise ConfigError(
                f"InceptionConfig: width_divisor {self.width_divisor} must divide every"
                f" width of the model ({', '.join(map(str, sorted(set(widths))))})."
            )

    def width(self, channels: int) -> int:
        """`channels` of the full-size model scaled by `width_divisor`."""
        return channels // self.width_divisor


def conv_unit(
    cin: int,
    cout: int,
    kernel: int | tuple[int, int],
    stride: int = 1,
    padding: int | tuple[int, int] = 0,
) -> nn.Sequential:
    """Conv (no bias: BatchNorm shifts) + BatchNorm + ReLU: [N, cin, H, W] -> [N, cout, H', W']."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=False),
        nn.BatchNorm2d(cout, eps=0.001),  # the eps of the released TensorFlow model
        nn.ReLU(inplace=True),
    )


def _pool_branch(cin: int, cout: int) -> nn.Sequential:
    # 3x3/1 average pool that keeps the grid, then a 1x1 projection.
    return nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1), conv_unit(cin, cout, 1))


class Concat(nn.Module):
    """Runs parallel branches on one input and concatenates their outputs on channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], dim=1)


def block_35(cin: int, pool_features: int, c: InceptionConfig) -> Concat:
    """Figure 5 (the 5x5 conv as two 3x3): [N, cin, 35, 35] -> [N, w(224) + pool, 35, 35]."""
    w = c.width
    return Concat(
        conv_unit(cin, w(64), 1),
        # The released model keeps one 5x5 branch beside the two-3x3 one.
        nn.Sequential(conv_unit(cin, w(48), 1), conv_unit(w(48), w(64), 5, padding=2)),
        nn.Sequential(
            conv_unit(cin, w(64), 1),
            conv_unit(w(64), w(96), 3, padding=1),
            conv_unit(w(96), w(96), 3, padding=1),
        ),
        _pool_branch(cin, pool_features),
    )


def reduction_35_to_17(cin: int, c: InceptionConfig) -> Concat:
    """Figure 10 grid reduction: [N, cin, 35, 35] -> [N, w(480) + cin, 17, 17]."""
    w = c.width
    return Concat(
        conv_unit(cin, w(384), 3, stride=2),
        nn.Sequential(
            conv_unit(cin, w(64), 1),
            conv_unit(w(64), w(96), 3, padding=1),
            conv_unit(w(96), w(96), 3, stride=2),
        ),
        nn.MaxPool2d(3, stride=2),
    )


def _row(cin: int, cout: int) -> nn.Sequential:
    # 1x7 conv, padded to keep the grid.
    return conv_unit(cin, cout, (1, 7), padding=(0, 3))


def _col(cin: int, cout: int) -> nn.Sequential:
    # 7x1 conv, padded to keep the grid.
    return conv_unit(cin, cout, (7, 1), padding=(3, 0))


def block_17(cin: int, mid: int, c: InceptionConfig) -> Concat:
    """Figure 6 with n = 7 (7x7 as 1x7 then 7x1): [N, cin, 17, 17] -> [N, w(768), 17, 17]."""
    w = c.width
    return Concat(
        conv_unit(cin, w(192), 1),
        nn.Sequential(conv_unit(cin, mid, 1), _row(mid, mid), _col(mid, w(192))),
        nn.Sequential(
            conv_unit(cin, mid, 1),
            _col(mid, mid),
            _row(mid, mid),
            _col(mid, mid),
            _row(mid, w(192)),
        ),
        _pool_branch(cin, w(192)),
    )


def reduction_17_to_8(cin: int, c: InceptionConfig) -> Concat:
    """Grid reduction with a factorised 7x7: [N, cin, 17, 17] -> [N, w(512) + cin, 8, 8]."""
    w = c.width
    return Concat(
        nn.Sequential(conv_unit(cin, w(192), 1), conv_unit(w(192), w(320), 3, stride=2)),
        nn.Sequential(
            conv_unit(cin, w(192), 1),
            _row(w(192), w(192)),
            _col(w(192), w(192)),
            conv_unit(w(192), w(192), 3, stride=2),
        ),
        nn.MaxPool2d(3, stride=2),
    )


class Split(nn.Module):
    """Figure 7's fan-out: a shared stem, then a 1x3 and a 3x1 conv, concatenated.

    [N, cin, 8, 8] -> [N, 2 * cout, 8, 8].
    """

    def __init__(self, stem: nn.Module, mid: int, cout: int) -> None:
        super().__init__()
        self.stem = stem
        self.row = conv_unit(mid, cout, (1, 3), padding=(0, 1))
        self.col = conv_unit(mid, cout, (3, 1), padding=(1, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        return torch.cat([self.row(x), self.col(x)], dim=1)


def block_8(cin: int, c: InceptionConfig) -> Concat:
    """Figure 7, expanded filter banks: [N, cin, 8, 8] -> [N, w(2048), 8, 8]."""
    w = c.width
    double_stem = nn.Sequential(conv_unit(cin, w(448), 1), conv_unit(w(448), w(384), 3, padding=1))
    return Concat(
        conv_unit(cin, w(320), 1),
        Split(conv_unit(cin, w(384), 1), w(384), w(384)),
        Split(double_stem, w(384), w(384)),
        _pool_branch(cin, w(192)),
    )


class AuxHead(nn.Module):
    """Figure 8's auxiliary classifier on the 17x17 grid: [N, cin, 17, 17] -> [N, classes].

    Its 5x5 conv covers the whole pooled 5x5 map: a fully connected layer with BatchNorm.
    """

    def __init__(self, cin: int, c: InceptionConfig) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.AvgPool2d(5, stride=3),  # 17x17 -> 5x5
            conv_unit(cin, c.width(128), 1),
            conv_unit(c.width(128), c.width(768), 5),  # -> 1x1
        )
        self.fc = nn.Linear(c.width(768), c.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.body(x), 1))


class Inception3(nn.Module):
    """Images [N, 3, 299, 299] -> logits [N, classes], or (logits, aux logits) in training."""

    def __init__(self, config: InceptionConfig) -> None:
        super().__init__()
        w = config.width
        # The released model's stem, unpadded but for one conv; grid side
        # 299 -> 149 -> 147 -> 147 -> 73 -> 73 -> 71 -> 35.
        self.stem = nn.Sequential(
            conv_unit(3, w(32), 3, stride=2),
            conv_unit(w(32), w(32), 3),
            conv_unit(w(32), w(64), 3, padding=1),
            nn.MaxPool2d(3, stride=2),
            conv_unit(w(64), w(80), 1),
            conv_unit(w(80), w(192), 3),
            nn.MaxPool2d(3, stride=2),
        )
        blocks: list[nn.Module] = []
        cin = w(192)
        for pool in config.pool_features:
            blocks.append(block_35(cin, w(pool), config))
            cin = w(224) + w(pool)
        blocks.append(reduction_35_to_17(cin, config))
        cin += w(480)
        for mid in config.channels_7x7:
            blocks.append(block_17(cin, w(mid), config))
            cin = w(768)
        self.blocks_35_17 = nn.Sequential(*blocks)
        self.aux = AuxHead(cin, config) if config.aux else None
        blocks = [reduction_17_to_8(cin, config)]
        cin += w(512)
        for _ in range(config.blocks_8x8):
            blocks.append(block_8(cin, config))
            cin = w(2048)
        self.blocks_8 = nn.Sequential(*blocks)
        self.dropout = nn.Dropout(0.5)
        self.fc = nn.Linear(cin, config.classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x = self.blocks_35_17(self.stem(x))  # [N, 768, 17, 17]
        aux = self.aux(x) if self.aux is not None and self.training else None
        x = self.blocks_8(x)  # [N, 2048, 8, 8]
        logits = self.fc(self.dropout(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)))
        return logits if aux is None else (logits, aux)


def inception_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Label-smoothed cross-entropy of the logits, plus 0.4 x that of the aux logits if any."""
    x, y = batch
    out = model(x)
    logits, aux = out if isinstance(out, tuple) else (out, None)
    loss = F.cross_entropy(logits, y, label_smoothing=LABEL_SMOOTHING)
    if aux is not None:
        loss = loss + AUX_LOSS_WEIGHT * F.cross_entropy(aux, y, label_smoothing=LABEL_SMOOTHING)
    return loss


def _inception_workload(
    name: str, config: InceptionConfig, image_size: int, batch_size: int
) -> Workload:
    return Workload(
        name=name,
        model=lambda: Inception3(config),
        batch=lambda n: image_batch(n, image_size, config.classes),
        loss=inception_loss,
        batch_size=batch_size,
    )


@register(
    "inception-v3", "Inception-v3 with aux head, 299x299 synthetic images, 1000 classes, batch 32"
)
def inception_v3() -> Workload:
    """Inception-v3: 27.2 M parameters; its convs and classifier do 11.43 GFLOPs forward
    per image (5.713 GMACs, aux head excluded)."""
    return _inception_workload("inception-v3", InceptionConfig(), 299, batch_size=32)


@register(
    "inception-v3-tiny",
    "Inception-v3, one block per kind at 1/8 width, 299x299 images, 10 classes, batch 4",
)
def inception_v3_tiny() -> Workload:
    """Inception-v3 with one block of each kind at 1/8 width on 299x299 images: 0.19 M
    parameters."""
    config = InceptionConfig(
        classes=10, pool_features=(32,), channels_7x7=(128,), blocks_8x8=1, width_divisor=8
    )
    return _inception_workload("inception-v3-tiny", config, 299, batch_size=4)
