"""`ssdlite` and `ssdlite-tiny`: an SSDLite detector on synthetic images and boxes.

The detector is SSD (Liu et al. 2016, "SSD: Single Shot MultiBox Detector") in its
SSDLite form (Sandler et al. 2018, "MobileNetV2", Section 6.3: every head conv
replaced by a depthwise-separable one) on a MobileNetV3-Large backbone (Howard et al.
2019, Section 6.3), laid out as torchvision's `ssdlite320_mobilenet_v3_large` and
written here in plain torch, with the backbone blocks of `mobilenet.py`:

- the backbone with the "reduced tail" of MobileNetV3 Table 6 (the last three blocks
  and the last conv at half width), cut inside the last stride-2 block: the first
  feature map is that block's 1x1 expansion (672 channels, stride 16: 20x20 at 320x320),
  the second the backbone's last conv (480 channels, stride 32: 10x10);
- four extra blocks (1x1 conv to half width, 3x3/2 depthwise, 1x1 conv, each with
  BatchNorm and ReLU6) give 512, 256, 256 and 128 channels at 5x5, 3x3, 2x2 and 1x1;
- per feature map, a box head and a class head, each a 3x3 depthwise conv with
  BatchNorm and ReLU6 and a 1x1 conv with bias to 6 default boxes x (4 offsets or 91
  classes, background included: COCO's 91 ids).

Six default boxes per cell (SSD Section 2.2, torchvision's `DefaultBoxGenerator`):
scales from 0.2 to 0.95 across the maps, aspect ratios 1, 1 at the next scale's
geometric mean, 2, 1/2, 3 and 1/3; 6 x (400 + 100 + 25 + 9 + 4 + 1) = 3,234 boxes at
320x320. With 91 classes the model has 3,440,060 parameters, as torchvision's weight
metadata states.

The training step matches each synthetic ground-truth box to its best default box and
every default box with IoU >= 0.5 (SSD Section 2.2), encodes offsets with variances
(0.1, 0.2), and takes smooth L1 on the matched boxes' offsets plus cross-entropy with
hard negative mining at 3 negatives per positive, both divided by the number of
positives (SSD Section 2.2, Eq. 1). Every op has a shape fixed by the batch's shape
(masks, `torch.where`, sorts, no boolean indexing), so the step also runs on the meta
device. Non-maximum suppression only runs at inference and is not part of a training
step, so there is none here.

The `-tiny` variant keeps every kind of layer (a narrower six-block backbone cut the
same way, the four extra blocks, both heads on six maps) on 128x128 images with
5 classes and batch 4, so that one training step takes well under a second on a
2-core CPU.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.suite import register
from lightspeed.suite.mobilenet import LARGE, Bneck, InvertedResidual, conv_bn
from lightspeed.workload import Workload

# MobileNetV3-Large (mobilenet.LARGE) with the reduced tail of Table 6: the last
# stride-2 block ends at half its width and the two after it are half as wide.
LARGE_REDUCED = (
    *LARGE[:-3],
    dataclasses.replace(LARGE[-3], out=LARGE[-3].out // 2),
    *(dataclasses.replace(b, expand=b.expand // 2, out=b.out // 2) for b in LARGE[-2:]),
)

# Both activations, both kernel sizes, with and without SE and residual; the last
# stride-2 block (the cut) has an expansion. 128x128 -> 8x8 (cut) -> 4x4.
TINY = (
    Bneck(3, 16, 16, se=False, hswish=False, stride=2),
    Bneck(3, 48, 24, se=False, hswish=False, stride=2),
    Bneck(5, 72, 24, se=True, hswish=False, stride=1),
    Bneck(3, 96, 32, se=False, hswish=True, stride=2),
    Bneck(5, 96, 32, se=True, hswish=True, stride=1),
    Bneck(5, 128, 48, se=True, hswish=True, stride=2),
)

VARIANCES = (0.1, 0.2)  # centre and size offsets are divided by these (SSD's code)
IOU_THRESHOLD = 0.5
NEGATIVES_PER_POSITIVE = 3
BOXES_PER_CELL = 6  # aspect ratios 1, 1 (scale s'), 2, 1/2, 3, 1/3


def _extra_block(cin: int, cout: int) -> nn.Sequential:
    """[N, cin, H, W] -> [N, cout, ceil(H/2), ceil(W/2)]: 1x1, 3x3/2 depthwise, 1x1."""
    mid = cout // 2
    return nn.Sequential(
        conv_bn(cin, mid, 1, act=nn.ReLU6),
        conv_bn(mid, mid, 3, stride=2, groups=mid, act=nn.ReLU6),
        conv_bn(mid, cout, 1, act=nn.ReLU6),
    )


def _head(cin: int, cout: int) -> nn.Sequential:
    """[N, cin, H, W] -> [N, cout, H, W]: 3x3 depthwise + BN + ReLU6, then 1x1 with bias."""
    return nn.Sequential(conv_bn(cin, cin, 3, groups=cin, act=nn.ReLU6), nn.Conv2d(cin, cout, 1))


class SSDLite(nn.Module):
    """Images [N, 3, S, S] -> box offsets [N, A, 4], class logits [N, A, classes] and
    default boxes [A, 4] (centre x, centre y, width, height, in units of the image side).

    A = 6 x the cells of the six feature maps; the backbone is `blocks` after a stride-2
    stem, cut at the expansion of its last stride-2 block.
    """

    def __init__(
        self,
        blocks: tuple[Bneck, ...] = LARGE_REDUCED,
        classes: int = 91,
        stem: int = 16,
        extras: tuple[int, int, int, int] = (512, 256, 256, 128),
    ) -> None:
        super().__init__()
        self.classes = classes
        cut = max(i for i, b in enumerate(blocks) if b.stride == 2)
        layers: list[nn.Module] = [conv_bn(3, stem, 3, stride=2, act=nn.Hardswish)]
        cin = stem
        for spec in blocks:
            layers.append(InvertedResidual(cin, spec))
            cin = spec.out
        last_conv = 6 * cin  # torchvision: the last conv widens the last block by 6
        layers.append(conv_bn(cin, last_conv, 1, act=nn.Hardswish))
        split = layers[cut + 1]  # +1: the stem comes first
        if not isinstance(split, InvertedResidual) or split.residual:
            raise ValueError("the last stride-2 block must be a bneck without a residual")
        # Stride 16: up to the cut block's expansion; stride 32: its depthwise onwards.
        self.stride16 = nn.Sequential(*layers[: cut + 1], split.body[0])
        self.stride32 = nn.Sequential(*list(split.body)[1:], *layers[cut + 2 :])
        widths = [blocks[cut].expand, last_conv, *extras]
        self.extras = nn.ModuleList(_extra_block(a, b) for a, b in itertools.pairwise(widths[1:]))
        self.box_heads = nn.ModuleList(_head(c, BOXES_PER_CELL * 4) for c in widths)
        self.class_heads = nn.ModuleList(_head(c, BOXES_PER_CELL * classes) for c in widths)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out")

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        maps = [self.stride16(images)]
        maps.append(self.stride32(maps[0]))
        for block in self.extras:
            maps.append(block(maps[-1]))
        n = images.shape[0]
        # [N, 6*k, H, W] -> [N, H*W*6, k]: cells row-major, the 6 boxes of a cell together.
        offsets = [
            h(m).permute(0, 2, 3, 1).reshape(n, -1, 4)
            for h, m in zip(self.box_heads, maps, strict=True)
        ]
        logits = [
            h(m).permute(0, 2, 3, 1).reshape(n, -1, self.classes)
            for h, m in zip(self.class_heads, maps, strict=True)
        ]
        sizes = [(m.shape[-2], m.shape[-1]) for m in maps]
        return torch.cat(offsets, 1), torch.cat(logits, 1), default_boxes(sizes, images.device)


def default_boxes(sizes: list[tuple[int, int]], device: torch.device) -> torch.Tensor:
    """Default boxes [sum(6*H*W), 4] as (cx, cy, w, h) in units of the image side.

    Map k of m has scale s_k = 0.2 + 0.75 k / (m - 1) (SSD Eq. 4 with s_min 0.2, s_max
    0.95, as torchvision), s_m = 1; its boxes are s_k x s_k, s'_k x s'_k with
    s'_k = sqrt(s_k s_{k+1}), and s_k sqrt(a) x s_k / sqrt(a) for a in 2, 1/2, 3, 1/3,
    centred on the cells and clipped to [0, 1] in size.
    """
    m = len(sizes)
    scales = [0.2 + 0.75 * k / (m - 1) for k in range(m)] + [1.0]
    boxes = []
    for k, (h, w) in enumerate(sizes):
        s, s_next = scales[k], scales[k + 1]
        wh = [(s, s), (math.sqrt(s * s_next),) * 2]
        for ratio in (2.0, 3.0):
            r = math.sqrt(ratio)
            wh += [(s * r, s / r), (s / r, s * r)]
        wh_k = torch.tensor(wh, device=device).clamp(0.0, 1.0)  # [6, 2]
        cy, cx = torch.meshgrid(
            (torch.arange(h, device=device) + 0.5) / h,
            (torch.arange(w, device=device) + 0.5) / w,
            indexing="ij",
        )
        centres = torch.stack([cx, cy], -1).reshape(-1, 1, 2).expand(-1, len(wh), 2)
        boxes.append(torch.cat([centres, wh_k.expand_as(centres)], -1).reshape(-1, 4))
    return torch.cat(boxes)


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of boxes a [..., P, 4] and b [..., Q, 4], both (x1, y1, x2, y2): [..., P, Q]."""
    top_left = torch.maximum(a[..., :, None, :2], b[..., None, :, :2])
    bottom_right = torch.minimum(a[..., :, None, 2:], b[..., None, :, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2]).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).prod(-1)
    return inter / (area_a[..., :, None] + area_b[..., None, :] - inter)


def match(anchors: torch.Tensor, truth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Match default boxes [A, 4] (cx, cy, w, h) to ground truth [N, K, 4] (x1, y1, x2, y2).

    An anchor is positive when its IoU with some box is >= 0.5 (it takes that box with
    the highest IoU), or when it is a box's best anchor (it takes that box, the later box
    on a tie, as torchvision's `SSDMatcher`). Returns (positive [N, A] bool, matched box
    index [N, A] in [0, K)), both of shapes fixed by the inputs'.
    """
    corners = torch.cat(
        [anchors[:, :2] - anchors[:, 2:] / 2, anchors[:, :2] + anchors[:, 2:] / 2], 1
    )
    iou = box_iou(truth, corners)  # [N, K, A]
    best_iou, index = iou.max(1)  # per anchor: [N, A]
    best_anchor = iou.argmax(2)  # per box: [N, K]
    k = truth.shape[1]
    # forced[n, j, a]: anchor a is box j's best; dense, instead of scattering into index.
    forced = best_anchor[:, :, None] == torch.arange(anchors.shape[0], device=truth.device)
    box_ids = torch.arange(1, k + 1, device=truth.device)[None, :, None]
    forced_id = (forced * box_ids).amax(1)  # [N, A], 0 where no box forces the anchor
    index = torch.where(forced_id > 0, forced_id - 1, index)
    return (best_iou >= IOU_THRESHOLD) | (forced_id > 0), index


def encode(anchors: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """Offsets [..., A, 4] of boxes [..., A, 4] (x1, y1, x2, y2) from anchors [A, 4]
    (cx, cy, w, h): ((cx - acx) / aw / 0.1, (cy - acy) / ah / 0.1, log(w / aw) / 0.2,
    log(h / ah) / 0.2), SSD's encoding with its variances."""
    centre = (boxes[..., :2] + boxes[..., 2:]) / 2
    size = boxes[..., 2:] - boxes[..., :2]
    centre_offset = (centre - anchors[:, :2]) / anchors[:, 2:] / VARIANCES[0]
    size_offset = torch.log(size / anchors[:, 2:]) / VARIANCES[1]
    return torch.cat([centre_offset, size_offset], -1)


def hard_negatives(class_loss: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """The negatives [N, A] bool to train on: per image, the 3 x (its positives) anchors
    that are not positive and have the highest class loss [N, A] (SSD Section 2.2).

    A rank mask from two sorts, so that shapes do not depend on the data."""
    negative_loss = class_loss.detach().masked_fill(positive, -math.inf)
    order = negative_loss.argsort(1, descending=True)
    rank = order.argsort(1)  # rank[n, a]: position of anchor a in descending loss order
    quota = NEGATIVES_PER_POSITIVE * positive.sum(1, keepdim=True)
    return (rank < quota) & ~positive


def ssd_loss(
    model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """SSD's multibox loss on (images [N, 3, S, S], boxes [N, K, 4] (x1, y1, x2, y2) in
    [0, 1], labels [N, K] in [1, classes)): (smooth L1 on the positives' offsets +
    cross-entropy on positives and hard negatives) / number of positives, a scalar."""
    images, boxes, labels = batch
    offsets, logits, anchors = model(images)
    positive, index = match(anchors, boxes)
    matched = torch.gather(boxes, 1, index[..., None].expand(-1, -1, 4))  # [N, A, 4]
    target_class = torch.where(positive, torch.gather(labels, 1, index), 0)  # 0: background
    box_loss = F.smooth_l1_loss(offsets, encode(anchors, matched), reduction="none").sum(-1)
    class_loss = F.cross_entropy(logits.transpose(1, 2), target_class, reduction="none")
    trained = positive | hard_negatives(class_loss, positive)
    total = (box_loss * positive).sum() + (class_loss * trained).sum()
    return total / positive.sum().clamp(min=1)


def detection_batch(
    batch_size: int, image_size: int, classes: int, boxes: int = 4
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded synthetic images [batch_size, 3, image_size, image_size], ground-truth boxes
    [batch_size, boxes, 4] (x1, y1, x2, y2 in units of the image side, sides 0.1 to 0.9,
    as SSD's default boxes span 0.2 to 0.95)
    and their labels [batch_size, boxes] in [1, classes) (0 is the background)."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
    size = 0.1 + 0.8 * torch.rand(batch_size, boxes, 2, generator=generator)
    corner = (1 - size) * torch.rand(batch_size, boxes, 2, generator=generator)
    labels = torch.randint(1, classes, (batch_size, boxes), generator=generator)
    return images, torch.cat([corner, corner + size], -1), labels


@register(
    "ssdlite",
    "SSDLite on MobileNetV3-Large, 320x320 synthetic images, 4 boxes each, 91 classes, batch 32",
)
def ssdlite() -> Workload:
    """torchvision-equivalent ssdlite320_mobilenet_v3_large: 3.44 M parameters. Batch 32 is
    the SSD paper's (Section 3); torchvision's recipe uses 24 per GPU on 8 GPUs."""
    return Workload(
        name="ssdlite",
        model=lambda: SSDLite(LARGE_REDUCED, classes=91),
        batch=lambda n: detection_batch(n, 320, 91),
        loss=ssd_loss,
        batch_size=32,
    )


@register(
    "ssdlite-tiny",
    "SSDLite, 6 narrow MobileNetV3 blocks, 128x128 images, 4 boxes each, 5 classes, batch 4",
)
def ssdlite_tiny() -> Workload:
    """Six narrow MobileNetV3 blocks, extras (128, 64, 64, 32), on 128x128 images:
    164,548 parameters, 6 x (64 + 16 + 4 + 1 + 1 + 1) = 522 default boxes."""
    return Workload(
        name="ssdlite-tiny",
        model=lambda: SSDLite(TINY, classes=5, extras=(128, 64, 64, 32)),
        batch=lambda n: detection_batch(n, 128, 5),
        loss=ssd_loss,
        batch_size=4,
    )
