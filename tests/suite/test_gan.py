"""DCGAN: sizes and FLOPs by arithmetic, and its own step equal to the textbook two-optimizer
loop, with both updates attributed to their phases."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from lightspeed import suite
from lightspeed.facts.records import OPTIMIZER_MODULE, Phase
from lightspeed.measure.capture import capture_forward, capture_step
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.suite.gan import GAN, NOISE, gan_batch


def _params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_parameter_counts_at_the_papers_64x64_size() -> None:
    with torch.device("meta"):
        gan = GAN(64, 64)
    # Generator, transposed convs without bias (Cin·Cout·4·4) and BatchNorm (2·C):
    # 100·512·16 + 512·256·16 + 256·128·16 + 128·64·16 + 64·3·16
    #   = 819,200 + 2,097,152 + 524,288 + 131,072 + 3,072 = 3,574,784
    # + BatchNorm 2·(512 + 256 + 128 + 64) = 1,920 -> 3,576,704
    assert _params(gan.generator) == 3_576_704
    # Discriminator: 3·64·16 + 64·128·16 + 128·256·16 + 256·512·16 + 512·1·16
    #   = 3,072 + 131,072 + 524,288 + 2,097,152 + 8,192 = 2,763,776
    # + BatchNorm 2·(128 + 256 + 512) = 1,792 -> 2,765,568
    assert _params(gan.discriminator) == 2_765_568


def test_forward_convolution_flops_match_the_arithmetic() -> None:
    with torch.device("meta"):
        gan = GAN(64, 64)
    batch = 2
    noise = torch.empty(batch, NOISE, 1, 1, device="meta")
    images = torch.empty(batch, 3, 64, 64, device="meta")

    def conv_flops(module: nn.Module, x: torch.Tensor) -> int:
        ops = capture_forward(module, x)
        return sum(o.flops for o in ops if o.name == "aten::convolution")

    # Generator MACs per image, a transposed conv costing Cin·Cout·k²·(input pixels):
    # 100·512·16·1 + 512·256·16·16 + 256·128·16·64 + 128·64·16·256 + 64·3·16·1024
    #   = 819,200 + 3·33,554,432 + 3,145,728 = 104,628,224
    assert conv_flops(gan.generator, noise) == 2 * batch * 104_628_224
    # Discriminator MACs per image, a conv costing Cin·Cout·k²·(output pixels):
    # 3·64·16·1024 + 64·128·16·256 + 128·256·16·64 + 256·512·16·16 + 512·1·16·1
    #   = 3,145,728 + 3·33,554,432 + 8,192 = 103,817,216
    assert conv_flops(gan.discriminator, images) == 2 * batch * 103_817_216


def _reference_step(
    gan: GAN,
    batch: tuple[torch.Tensor, torch.Tensor],
    opt_d: torch.optim.Optimizer,
    opt_g: torch.optim.Optimizer,
) -> None:
    """The PyTorch DCGAN example's loop: two optimizers, D then G."""
    real, noise = batch
    opt_d.zero_grad()
    fake = gan.generator(noise)
    real_logits = gan.discriminator(real)
    fake_logits = gan.discriminator(fake.detach())
    loss_d = F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits))
    loss_d = loss_d + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))
    loss_d.backward()
    opt_d.step()
    opt_g.zero_grad()
    logits = gan.discriminator(fake)
    F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits)).backward()
    opt_g.step()


def test_its_step_with_one_adam_is_the_two_optimizer_loop() -> None:
    workload = suite.get("dcgan-tiny")
    torch.manual_seed(0)
    prepared = prepare(workload, StepSettings())
    reference = copy.deepcopy(prepared.model)
    initial = copy.deepcopy(prepared.model)
    assert isinstance(reference, GAN)
    settings = {"lr": 2e-4, "betas": (0.5, 0.999)}
    opt_d = torch.optim.Adam(reference.discriminator.parameters(), **settings)
    opt_g = torch.optim.Adam(reference.generator.parameters(), **settings)
    batch = gan_batch(workload.batch_size, 32)
    for _ in range(3):
        prepared.step()
        _reference_step(reference, batch, opt_d, opt_g)
    ours = dict(prepared.model.named_parameters())
    for name, param in reference.named_parameters():
        torch.testing.assert_close(ours[name], param, rtol=1e-5, atol=1e-7, msg=name)
    # And both networks trained: every parameter moved.
    still = [n for n, p in initial.named_parameters() if torch.equal(ours[n], p)]
    assert still == []


def test_both_updates_are_attributed_to_their_phases() -> None:
    prepared = prepare(suite.get("dcgan-tiny"), StepSettings())
    prepared.step()
    ops = capture_step(prepared)
    by_phase = {phase: [o for o in ops if o.phase is phase] for phase in Phase}
    # Forward: G once (its images serve both updates), D three times (real, fake for
    # D's update, fake for G's): 5 transposed convs and 3 × 5 convs.
    forward_convs = [o.module for o in by_phase[Phase.FORWARD] if o.name == "aten::convolution"]
    assert sum(m.startswith("generator") for m in forward_convs) == 4
    assert sum(m.startswith("discriminator") for m in forward_convs) == 3 * 4
    # Backward: D's update reaches D's weights; G's update reaches G's weights through
    # a D that takes none (its convolutions' backward computes input gradients only).
    backward = [o for o in by_phase[Phase.BACKWARD] if o.name == "aten::convolution_backward"]
    assert {o.module.split(".")[0] for o in backward} == {"generator", "discriminator"}
    # Two optimizer steps, each over one network's parameters only.
    assert {o.module for o in by_phase[Phase.OPTIMIZER]} == {OPTIMIZER_MODULE}
    assert torch.isfinite(prepared.last_loss).all()
