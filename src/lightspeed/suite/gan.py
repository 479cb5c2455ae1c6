"""`dcgan` and `dcgan-tiny`: a DCGAN trained on synthetic images, two updates a step.

The architecture is DCGAN's (Radford, Metz and Chintala 2016, "Unsupervised
Representation Learning with Deep Convolutional Generative Adversarial Networks"), at
the sizes of its 64x64 LSUN-bedrooms and CelebA experiments as the PyTorch DCGAN
example sets them (nz 100, ngf = ndf = 64): the generator maps noise [N, 100, 1, 1]
through strided transposed convolutions, BatchNorm and ReLU to tanh images
[N, 3, 64, 64]; the discriminator mirrors it with strided convolutions, BatchNorm (none
on its first layer) and LeakyReLU 0.2 down to one logit per image. Adam at 2e-4 with
beta1 0.5, as the paper trains it.

One training step is the paper's alternation: a discriminator update (real images
labelled 1, generated ones, detached, labelled 0), then a generator update (the same
generated images labelled 1 through a discriminator that takes no gradient). It is the
workload's own `step`: both updates' ops are attributed to their phases. One Adam over
both networks' parameters does what two Adams with the same settings do, because each
update leaves the other network's gradients None, and Adam steps only parameters that
have one (its state, step count included, is per parameter).

`dcgan-tiny` keeps the structure at 32x32 images with ngf = ndf = 16 and batch 8.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed.facts.records import Phase
from lightspeed.suite import register
from lightspeed.workload import PhaseHook, Workload

NOISE = 100


def _levels(image_size: int) -> int:
    # 4x4 at the narrow end, doubling per level: 64x64 -> 4 levels above 4x4.
    levels = int(math.log2(image_size // 4))
    if image_size < 8 or 4 * 2**levels != image_size:
        raise ValueError(f"DCGAN image size {image_size} must be 4 times a power of two")
    return levels


def generator(image_size: int = 64, width: int = 64) -> nn.Sequential:
    """Noise [N, 100, 1, 1] -> images [N, 3, image_size, image_size] in [-1, 1]."""
    levels = _levels(image_size)
    channels = width * 2 ** (levels - 1)
    layers: list[nn.Module] = [
        nn.ConvTranspose2d(NOISE, channels, 4, 1, 0, bias=False),  # -> 4x4
        nn.BatchNorm2d(channels),
        nn.ReLU(True),
    ]
    for _ in range(levels - 1):
        layers += [
            nn.ConvTranspose2d(channels, channels // 2, 4, 2, 1, bias=False),  # doubles H, W
            nn.BatchNorm2d(channels // 2),
            nn.ReLU(True),
        ]
        channels //= 2
    layers += [nn.ConvTranspose2d(channels, 3, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers)


def discriminator(image_size: int = 64, width: int = 64) -> nn.Sequential:
    """Images [N, 3, image_size, image_size] -> one real/fake logit per image [N]."""
    levels = _levels(image_size)
    layers: list[nn.Module] = [
        nn.Conv2d(3, width, 4, 2, 1, bias=False),  # halves H, W; no BatchNorm here
        nn.LeakyReLU(0.2, True),
    ]
    channels = width
    for _ in range(levels - 1):
        layers += [
            nn.Conv2d(channels, channels * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(channels * 2),
            nn.LeakyReLU(0.2, True),
        ]
        channels *= 2
    layers += [nn.Conv2d(channels, 1, 4, 1, 0, bias=False), nn.Flatten(0)]  # 4x4 -> 1
    return nn.Sequential(*layers)


class GAN(nn.Module):
    """The two networks of one GAN, trained together by `gan_step`."""

    def __init__(self, image_size: int = 64, width: int = 64) -> None:
        super().__init__()
        self.generator = generator(image_size, width)
        self.discriminator = discriminator(image_size, width)
        for module in self.modules():
            # The paper's init: N(0, 0.02) weights; BatchNorm scales N(1, 0.02).
            if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.normal_(module.weight, 0.0, 0.02)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.normal_(module.weight, 1.0, 0.02)
                nn.init.zeros_(module.bias)


def gan_batch(batch_size: int, image_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded "real" images [batch_size, 3, S, S] in [-1, 1] and noise [batch_size, 100, 1, 1]."""
    generator_ = torch.Generator().manual_seed(0)
    real = torch.rand(batch_size, 3, image_size, image_size, generator=generator_) * 2 - 1
    noise = torch.randn(batch_size, NOISE, 1, 1, generator=generator_)
    return real, noise


def _bce(logits: torch.Tensor, label: float) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, label))


def generator_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The generator's loss: its images, judged by the discriminator, labelled real."""
    assert isinstance(model, GAN)
    _, noise = batch
    return _bce(model.discriminator(model.generator(noise)), 1.0)


def generate(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The generator's images [N, 3, S, S] from the batch's noise: what serving a GAN
    runs; the discriminator and the real images only train it."""
    assert isinstance(model, GAN)
    _, noise = batch
    return model.generator(noise)


def gan_step(
    model: nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    phase: PhaseHook,
) -> torch.Tensor:
    """One discriminator update, then one generator update; their summed loss."""
    assert isinstance(model, GAN)
    real, noise = batch
    g, d = model.generator, model.discriminator
    with phase(Phase.OPTIMIZER):
        optimizer.zero_grad(set_to_none=True)
    with phase(Phase.FORWARD):
        fake = g(noise)
        loss_d = _bce(d(real), 1.0) + _bce(d(fake.detach()), 0.0)
    with phase(Phase.BACKWARD):
        loss_d.backward()
    with phase(Phase.OPTIMIZER):
        optimizer.step()  # the generator has no gradients yet: only D moves
        optimizer.zero_grad(set_to_none=True)
    d.requires_grad_(False)  # the generator's update leaves D's weights without gradients
    try:
        with phase(Phase.FORWARD):
            loss_g = _bce(d(fake), 1.0)
        with phase(Phase.BACKWARD):
            loss_g.backward()
    finally:
        d.requires_grad_(True)
    with phase(Phase.OPTIMIZER):
        optimizer.step()  # only G has gradients now
    return (loss_d + loss_g).detach()


def dcgan_optimizer(params: Any) -> torch.optim.Optimizer:
    """Adam at 2e-4, betas (0.5, 0.999): DCGAN's settings."""
    return torch.optim.Adam(params, lr=2e-4, betas=(0.5, 0.999))


def _dcgan(name: str, image_size: int, width: int, batch_size: int) -> Workload:
    return Workload(
        name=name,
        model=lambda: GAN(image_size, width),
        batch=lambda n: gan_batch(n, image_size),
        loss=generator_loss,
        optimizer=dcgan_optimizer,
        batch_size=batch_size,
        step=gan_step,
        # The GAN module holds two networks and has no forward of its own.
        forward=generate,
    )


@register("dcgan", "DCGAN, 64x64 synthetic images, D then G update per step, batch 128")
def dcgan() -> Workload:
    """DCGAN at 64x64 with the paper's batch of 128."""
    return _dcgan("dcgan", 64, 64, 128)


@register("dcgan-tiny", "DCGAN at 1/4 width, 32x32 images, D then G update, batch 8")
def dcgan_tiny() -> Workload:
    """DCGAN at 32x32, widths 16, batch 8: a step in milliseconds on a CPU."""
    return _dcgan("dcgan-tiny", 32, 16, 8)
