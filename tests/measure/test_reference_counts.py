"""Published counts, reproduced from shapes alone on the meta device."""

from __future__ import annotations

import pytest
import torch

from lightspeed.facts.records import OpRecord
from lightspeed.measure.capture import capture_forward
from lightspeed.suite import get


def forward_ops(name: str) -> list[OpRecord]:
    workload = get(name)
    with torch.device("meta"):
        model = workload.model()
    x = workload.batch(1)[0].to("meta")
    return capture_forward(model, x)


def matmul_flops(ops: list[OpRecord]) -> int:
    return sum(o.flops for o in ops if o.macs is not None)


def test_gpt2_small_forward_flops_match_nanogpt() -> None:
    # nanoGPT transformer_sizing.ipynb: 291.65 GFLOPs per 1024-token sequence, matmuls only
    # (2 FLOPs/MAC), attention QKᵀ and AV counted in full (no causal discount); of which
    # the LM head is 2·1024·768·50257 = 79.05 GFLOPs.
    ops = forward_ops("gpt2-small")
    assert matmul_flops(ops) == pytest.approx(291.65e9, rel=5e-3)
    head = sum(o.flops for o in ops if o.module == "lm_head" and o.macs is not None)
    assert head == 2 * 1024 * 768 * 50257


def test_resnet50_forward_flops_match_torchvision() -> None:
    # torchvision ResNet50_Weights metadata: 4.089 GMACs per 224×224 image ≈ 8.18 GFLOPs
    # for convolutions and the final linear layer.
    ops = forward_ops("resnet50")
    assert matmul_flops(ops) == pytest.approx(8.18e9, rel=1e-2)
    fc = [o for o in ops if o.module == "fc" and o.macs is not None]
    assert sum(o.macs or 0 for o in fc) == 2048 * 1000  # 2048 features → 1000 classes
