"""`resnet18`, `resnet50` and their `-tiny` variants: ResNets on synthetic images.

The architecture is torchvision's ResNet v1.5 (He et al. 2015, "Deep Residual Learning
for Image Recognition", with the stride of each downsampling bottleneck on its 3x3
conv, as in NVIDIA's "ResNet v1.5"), written here in plain torch so that torchvision
is not needed. With 1000 classes resnet18 has 11,689,512 parameters and resnet50
25,557,032, as torchvision's weight metadata states.

The `-tiny` variants keep the depth, blocks and stem but divide every width by 4
(base width 16 instead of 64), use 32x32 images, 10 classes and batch 8, so that
one training step takes tens of milliseconds on a 2-core CPU.
"""

from __future__ import annotations

import torch
from torch import nn

from lightspeed.suite import register
from lightspeed.suite.mlp import classification_loss
from lightspeed.workload import Workload


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> list[nn.Module]:
    # No conv bias: the BatchNorm right after it has its own shift.
    conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
    return [conv, nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    """Two 3x3 convs plus the shortcut (resnet18/34): [N, cin, H, W] -> [N, width, H/s, W/s]."""

    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *_conv_bn(cin, width, 3, stride), nn.ReLU(inplace=True), *_conv_bn(width, width, 3)
        )
        self.shortcut = _shortcut(cin, width * self.expansion, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided: v1.5), 1x1 expand by 4, plus the shortcut (resnet50+).

    [N, cin, H, W] -> [N, 4 * width, H/s, W/s].
    """

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(
            *_conv_bn(cin, width, 1),
            nn.ReLU(inplace=True),
            *_conv_bn(width, width, 3, stride),
            nn.ReLU(inplace=True),
            *_conv_bn(width, cout, 1),
        )
        self.shortcut = _shortcut(cin, cout, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def _shortcut(cin: int, cout: int, stride: int) -> nn.Module:
    # A projection (1x1 conv + BN) only where the shape changes, else identity.
    if stride == 1 and cin == cout:
        return nn.Identity()
    return nn.Sequential(*_conv_bn(cin, cout, 1, stride))


class ResNet(nn.Module):
    """Stem, four stages of residual blocks, global average pool, linear classifier.

    Input [N, 3, H, W] images, output [N, classes] logits. Stage i has `blocks[i]` blocks
    of width `base_width * 2**i`; stages 2-4 halve the resolution in their first block.
    """

    def __init__(
        self,
        block: type[BasicBlock | Bottleneck],
        blocks: tuple[int, int, int, int],
        classes: int = 1000,
        base_width: int = 64,
    ) -> None:
        super().__init__()
        # Stem: 7x7/2 conv then 3x3/2 max-pool, [N, 3, H, W] -> [N, base, H/4, W/4].
        self.stem = nn.Sequential(
            *_conv_bn(3, base_width, 7, stride=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        stages: list[nn.Module] = []
        cin = base_width
        for i, count in enumerate(blocks):
            width = base_width * 2**i
            for j in range(count):
                stride = 2 if (i > 0 and j == 0) else 1
                stages.append(block(cin, width, stride))
                cin = width * block.expansion
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                # He init for ReLU nets, fan-out mode as torchvision does.
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(self.stem(x))  # [N, C, H/32, W/32]
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def resnet18(classes: int = 1000, base_width: int = 64) -> ResNet:
    """ResNet-18: basic blocks [2, 2, 2, 2]; 11,689,512 parameters at 1000 classes."""
    return ResNet(BasicBlock, (2, 2, 2, 2), classes, base_width)


def resnet50(classes: int = 1000, base_width: int = 64) -> ResNet:
    """ResNet-50: bottleneck blocks [3, 4, 6, 3]; 25,557,032 parameters at 1000 classes."""
    return ResNet(Bottleneck, (3, 4, 6, 3), classes, base_width)


def image_batch(
    batch_size: int, image_size: int, classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded synthetic images [batch_size, 3, image_size, image_size] and labels [batch_size]."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
    y = torch.randint(0, classes, (batch_size,), generator=generator)
    return x, y


def _resnet_workload(
    name: str, depth: int, image_size: int, classes: int, base_width: int, batch_size: int
) -> Workload:
    build = resnet18 if depth == 18 else resnet50
    return Workload(
        name=name,
        model=lambda: build(classes, base_width),
        batch=lambda n: image_batch(n, image_size, classes),
        loss=classification_loss,
        batch_size=batch_size,
    )


@register("resnet18", "ResNet-18, 224x224 synthetic images, 1000 classes, batch 32")
def resnet18_workload() -> Workload:
    """torchvision-equivalent ResNet-18: 11.7 M parameters, 3.63 GFLOPs forward per image."""
    return _resnet_workload("resnet18", 18, 224, 1000, 64, batch_size=32)


@register("resnet50", "ResNet-50 (v1.5), 224x224 synthetic images, 1000 classes, batch 32")
def resnet50_workload() -> Workload:
    """torchvision-equivalent ResNet-50: 25.6 M parameters, 8.18 GFLOPs forward per image."""
    return _resnet_workload("resnet50", 50, 224, 1000, 64, batch_size=32)


@register("resnet18-tiny", "ResNet-18 at 1/4 width, 32x32 images, 10 classes, batch 8")
def resnet18_tiny() -> Workload:
    """ResNet-18 with base width 16 on 32x32 images: 0.70 M parameters."""
    return _resnet_workload("resnet18-tiny", 18, 32, 10, 16, batch_size=8)


@register("resnet50-tiny", "ResNet-50 (v1.5) at 1/4 width, 32x32 images, 10 classes, batch 8")
def resnet50_tiny() -> Workload:
    """ResNet-50 with base width 16 on 32x32 images: 1.5 M parameters."""
    return _resnet_workload("resnet50-tiny", 50, 32, 10, 16, batch_size=8)
