"""`mobilenetv3-large` and `mobilenetv3-large-tiny`: MobileNetV3 on synthetic images.

The architecture is MobileNetV3-Large from Howard et al. 2019, "Searching for
MobileNetV3" (Table 1), written here in plain torch: a 3x3/2 conv stem, fifteen
inverted-residual bottlenecks (1x1 expansion, depthwise kxk conv, optional
squeeze-and-excitation, linear 1x1 projection, a residual where the shape allows), a
1x1 conv to 960 channels, global average pooling and two fully connected layers
without BatchNorm. Activations are ReLU in the early layers and hard-swish,
x·ReLU6(x + 3)/6, in the later ones; the excitation gate is hard-sigmoid,
ReLU6(x + 3)/6. The squeeze width is a quarter of the expansion width (Section 5.3),
rounded to a multiple of 8 as in the released models. With 1000 classes on 224x224
images the model has 5,483,032 parameters, as torchvision's weight metadata states.

The `-tiny` variant keeps every kind of layer (both activations, both kernel sizes,
blocks with and without expansion, excitation and residual) in five narrow blocks, on
64x64 images with 10 classes and batch 8, so that one training step takes tens of
milliseconds on a 2-core CPU.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.suite import register
from lightspeed.suite.mlp import classification_loss
from lightspeed.suite.resnet import image_batch
from lightspeed.workload import Workload


@dataclasses.dataclass(frozen=True)
class Bneck:
    """One row of Table 1: kernel side, expansion and output widths in channels,
    squeeze-and-excitation, hard-swish (else ReLU) and stride."""

    kernel: int
    expand: int
    out: int
    se: bool
    hswish: bool
    stride: int


# Table 1, MobileNetV3-Large: 224x224 -> 112 (stem) -> 112, 56, 28, 14, 7.
LARGE = (
    Bneck(3, 16, 16, se=False, hswish=False, stride=1),
    Bneck(3, 64, 24, se=False, hswish=False, stride=2),
    Bneck(3, 72, 24, se=False, hswish=False, stride=1),
    Bneck(5, 72, 40, se=True, hswish=False, stride=2),
    Bneck(5, 120, 40, se=True, hswish=False, stride=1),
    Bneck(5, 120, 40, se=True, hswish=False, stride=1),
    Bneck(3, 240, 80, se=False, hswish=True, stride=2),
    Bneck(3, 200, 80, se=False, hswish=True, stride=1),
    Bneck(3, 184, 80, se=False, hswish=True, stride=1),
    Bneck(3, 184, 80, se=False, hswish=True, stride=1),
    Bneck(3, 480, 112, se=True, hswish=True, stride=1),
    Bneck(3, 672, 112, se=True, hswish=True, stride=1),
    Bneck(5, 672, 160, se=True, hswish=True, stride=2),
    Bneck(5, 960, 160, se=True, hswish=True, stride=1),
    Bneck(5, 960, 160, se=True, hswish=True, stride=1),
)

# Every kind of block of LARGE in five: without expansion; ReLU, 3x3 and 5x5, with SE
# and a residual; hard-swish, 3x3 and 5x5, with SE and a residual. 64x64 -> 4x4.
TINY = (
    Bneck(3, 16, 16, se=False, hswish=False, stride=2),
    Bneck(3, 48, 24, se=False, hswish=False, stride=2),
    Bneck(5, 72, 24, se=True, hswish=False, stride=1),
    Bneck(3, 96, 40, se=False, hswish=True, stride=2),
    Bneck(5, 120, 40, se=True, hswish=True, stride=1),
)


def round_to_8(channels: float) -> int:
    """`channels` rounded to the nearest multiple of 8, at least 8 and at least 90% of it."""
    rounded = max(8, int(channels + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * channels else rounded


def conv_bn(
    cin: int,
    cout: int,
    kernel: int,
    stride: int = 1,
    groups: int = 1,
    act: type[nn.Module] | None = None,
) -> nn.Sequential:
    """Conv (no bias: BatchNorm shifts) + BatchNorm + optional activation, padded to keep
    the grid at stride 1: [N, cin, H, W] -> [N, cout, H/stride, W/stride]."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=0.001),
    ]
    if act is not None:
        layers.append(act(inplace=True))
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    """Channel gate from global context: [N, C, H, W] -> [N, C, H, W], scaled per channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        squeeze = round_to_8(channels / 4)
        # 1x1 convs with bias on the pooled [N, C, 1, 1] map: fully connected layers.
        self.reduce = nn.Conv2d(channels, squeeze, 1)
        self.expand = nn.Conv2d(squeeze, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = F.adaptive_avg_pool2d(x, 1)  # [N, C, 1, 1]
        gate = F.hardsigmoid(self.expand(F.relu(self.reduce(gate))))
        return x * gate


class InvertedResidual(nn.Module):
    """A bneck of Table 1: [N, cin, H, W] -> [N, spec.out, H/stride, W/stride]."""

    def __init__(self, cin: int, spec: Bneck) -> None:
        super().__init__()
        act = nn.Hardswish if spec.hswish else nn.ReLU
        layers: list[nn.Module] = []
        if spec.expand != cin:  # the first block has nothing to expand
            layers.append(conv_bn(cin, spec.expand, 1, act=act))
        # Depthwise: one kxk filter per channel (groups = channels).
        layers.append(conv_bn(spec.expand, spec.expand, spec.kernel, spec.stride, spec.expand, act))
        if spec.se:
            layers.append(SqueezeExcite(spec.expand))
        # Linear bottleneck: no activation after the projection.
        layers.append(conv_bn(spec.expand, spec.out, 1))
        self.body = nn.Sequential(*layers)
        self.residual = spec.stride == 1 and cin == spec.out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV3(nn.Module):
    """Images [N, 3, H, W] -> logits [N, classes]; H and W are divided by 2 per stride 2."""

    def __init__(
        self,
        blocks: tuple[Bneck, ...] = LARGE,
        classes: int = 1000,
        stem: int = 16,
        last_conv: int = 960,
        head: int = 1280,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [conv_bn(3, stem, 3, stride=2, act=nn.Hardswish)]
        cin = stem
        for spec in blocks:
            layers.append(InvertedResidual(cin, spec))
            cin = spec.out
        layers.append(conv_bn(cin, last_conv, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        # Table 1's last two "conv2d 1x1, NBN" on the pooled 1x1 map are linear layers.
        self.classifier = nn.Sequential(
            nn.Linear(last_conv, head),
            nn.Hardswish(inplace=True),
            nn.Dropout(0.2),  # Section 6.1's "dropout of 0.8" is a keep probability
            nn.Linear(head, classes),
        )
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)  # [N, last_conv, H/32, W/32]
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


@register(
    "mobilenetv3-large", "MobileNetV3-Large, 224x224 synthetic images, 1000 classes, batch 32"
)
def mobilenetv3_large() -> Workload:
    """MobileNetV3-Large: 5.48 M parameters; its convs and classifier do 0.434 GFLOPs
    forward per image (0.217 GMACs)."""
    return Workload(
        name="mobilenetv3-large",
        model=lambda: MobileNetV3(LARGE, classes=1000),
        batch=lambda n: image_batch(n, 224, 1000),
        loss=classification_loss,
        batch_size=32,
    )


@register(
    "mobilenetv3-large-tiny",
    "MobileNetV3-Large, 5 narrow blocks, 64x64 images, 10 classes, batch 8",
)
def mobilenetv3_large_tiny() -> Workload:
    """Five MobileNetV3 blocks covering every kind, head 256, on 64x64 images: 0.12 M
    parameters."""
    return Workload(
        name="mobilenetv3-large-tiny",
        model=lambda: MobileNetV3(TINY, classes=10, stem=16, last_conv=240, head=256),
        batch=lambda n: image_batch(n, 64, 10),
        loss=classification_loss,
        batch_size=8,
    )
