"""The suite's model families: exact sizes against published references, and every
registered workload builds, makes deterministic batches and (when tiny) trains a step.

Full-size models are built on the meta device: shapes and parameter counts without
allocating or running anything, so the file stays fast on a 2-core CPU.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from lightspeed import suite
from lightspeed.errors import ConfigError
from lightspeed.suite.gpt2 import GPT, GPTConfig
from lightspeed.suite.resnet import resnet18, resnet50
from lightspeed.workload import Workload

NAMES = suite.names()
TRAINED = [n for n in NAMES if n.endswith("-tiny") or n == "mlp"]
FULL_SIZE = [n for n in NAMES if n not in TRAINED and n != "mlp-tiny"]


def _on_meta(workload: Workload) -> torch.nn.Module:
    with torch.device("meta"):
        return workload.model()


def _num_params(model: torch.nn.Module) -> int:
    # parameters() yields a tied weight once, which is how the references count it.
    return sum(p.numel() for p in model.parameters())


def _tensors(batch: Any) -> list[torch.Tensor]:
    return list(batch) if isinstance(batch, (tuple, list)) else [batch]


def test_the_suite_registers_every_family() -> None:
    expected = {
        "mlp",
        "mlp-tiny",
        "resnet18",
        "resnet18-tiny",
        "resnet50",
        "resnet50-tiny",
        "gpt2-small",
        "gpt2-tiny",
        "transformer-encoder",
        "transformer-encoder-tiny",
        "dcgan",
        "dcgan-tiny",
        "a3c",
        "a3c-tiny",
        "inception-v3",
        "inception-v3-tiny",
        "mobilenetv3-large",
        "mobilenetv3-large-tiny",
        "transformer-base",
        "transformer-base-tiny",
        "lstm-seq2seq",
        "lstm-seq2seq-tiny",
        "bert-base",
        "bert-base-tiny",
        "deepspeech2",
        "deepspeech2-tiny",
        "ncf",
        "ncf-tiny",
        "pointnet",
        "pointnet-tiny",
        "ssdlite",
        "ssdlite-tiny",
    }
    assert expected <= set(NAMES)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        # torchvision ResNet18_Weights.IMAGENET1K_V1.meta["num_params"]
        ("resnet18", 11_689_512),
        # torchvision ResNet50_Weights.IMAGENET1K_V1.meta["num_params"]
        ("resnet50", 25_557_032),
        # nanoGPT transformer_sizing.ipynb, GPT-2 small with bias=False, vocab 50257:
        # 50257*768 (wte) + 1024*768 (wpe) + 12 * (12*768**2 + 2*768) + 768 = 124,337,664
        ("gpt2-small", 124_337_664),
    ],
)
def test_parameter_counts_match_the_references(name: str, params: int) -> None:
    assert _num_params(_on_meta(suite.get(name))) == params


@pytest.mark.parametrize(
    ("build", "gflops"),
    [
        # torchvision ResNet18_Weights metadata: 1.814 GMACs, 2 FLOPs per MAC
        (resnet18, 3.628),
        # torchvision ResNet50_Weights metadata: 4.089 GMACs, 2 FLOPs per MAC
        (resnet50, 8.178),
    ],
)
def test_resnet_forward_flops_match_torchvision(build: Any, gflops: float) -> None:
    with torch.device("meta"):
        model = build()
    image = torch.empty(1, 3, 224, 224, device="meta")
    with FlopCounterMode(display=False) as counter:
        model(image)
    assert counter.get_total_flops() / 1e9 == pytest.approx(gflops, rel=0.01)


def test_gpt2_has_no_biases_and_ties_the_lm_head() -> None:
    with torch.device("meta"):
        model = GPT(GPTConfig())
    assert [n for n, _ in model.named_parameters() if n.endswith("bias")] == []
    assert model.lm_head.weight is model.token_embedding.weight


def test_gpt_config_rejects_heads_that_do_not_divide_width() -> None:
    with pytest.raises(ConfigError, match="multiple of heads"):
        GPTConfig(d_model=100, heads=12)


@pytest.mark.parametrize(
    ("name", "logits"),
    [
        ("resnet18", (2, 1000)),
        ("resnet50", (2, 1000)),
        ("gpt2-small", (2, 1024, 50257)),
        ("transformer-encoder", (2, 2)),
    ],
)
def test_full_size_models_map_a_batch_to_logits(name: str, logits: tuple[int, ...]) -> None:
    workload = suite.get(name)
    inputs, _ = workload.batch(2)
    assert tuple(_on_meta(workload)(inputs.to("meta")).shape) == logits


@pytest.mark.parametrize("name", FULL_SIZE)
def test_full_size_workloads_build_and_give_a_scalar_loss(name: str) -> None:
    workload = suite.get(name)
    batch = [t.to("meta") for t in _tensors(workload.batch(2))]
    loss = workload.loss(_on_meta(workload), batch)
    assert loss.shape == ()


@pytest.mark.parametrize("name", TRAINED)
def test_one_training_step_gives_a_finite_loss_and_moves_every_parameter(name: str) -> None:
    torch.manual_seed(0)
    workload = suite.get(name)
    model = workload.model()
    optimizer = workload.optimizer(model.parameters())
    before = [p.detach().clone() for p in model.parameters()]

    optimizer.zero_grad()
    loss = workload.loss(model, workload.batch(workload.batch_size))
    loss.backward()
    optimizer.step()

    assert loss.shape == ()
    assert torch.isfinite(loss)
    unchanged = [
        n
        for (n, p), old in zip(model.named_parameters(), before, strict=True)
        if torch.equal(p, old)
    ]
    assert unchanged == []


@pytest.mark.parametrize("name", NAMES)
def test_batches_are_deterministic_and_honour_batch_size(name: str) -> None:
    workload = suite.get(name)
    first, second = _tensors(workload.batch(3)), _tensors(workload.batch(3))
    assert len(first) == len(second)
    for a, b in zip(first, second, strict=True):
        assert a.device.type == "cpu"
        assert a.shape[0] == 3
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", [n for n in NAMES if suite.get(n).tokens_per_sample])
def test_tokens_per_sample_is_the_sequence_length(name: str) -> None:
    workload = suite.get(name)
    inputs, _ = workload.batch(1)
    assert inputs.shape == (1, workload.tokens_per_sample)


def _matmul_macs(model: torch.nn.Module, *inputs: torch.Tensor) -> int:
    """MACs of the forward's matmul-class ops (convolutions, linear, attention), as
    lightspeed counts them, on the meta device."""
    from lightspeed.measure.capture import capture_forward

    return sum(op.macs or 0 for op in capture_forward(model, *inputs))


def test_mlp_forward_macs_match_its_layers() -> None:
    model = _on_meta(suite.get("mlp"))
    # 512·1024 + 1024·1024 + 1024·1024 + 1024·10 = 2,631,680 MACs per sample
    assert _matmul_macs(model, torch.empty(3, 512, device="meta")) == 3 * 2_631_680


def test_transformer_encoder_forward_macs_match_its_layers() -> None:
    model = _on_meta(suite.get("transformer-encoder"))
    # Per layer at T = 256, d = 512: QKV and output projections 4·T·d² = 268,435,456;
    # QKᵀ and AV 2·T²·d = 67,108,864; the 4x MLP 2·T·d·4d = 536,870,912;
    # 6 layers: 6·872,415,232 = 5,234,491,392; the head on the pooled sequence 512·2.
    per_sample = 6 * (4 * 256 * 512**2 + 2 * 256**2 * 512 + 2 * 256 * 512 * 2048) + 512 * 2
    assert per_sample == 5_234_492_416
    ids = torch.zeros(2, 256, dtype=torch.long, device="meta")
    assert _matmul_macs(model, ids) == 2 * per_sample


def test_ssdlite_forward_macs_match_torchvision() -> None:
    model = _on_meta(suite.get("ssdlite")).eval()  # BatchNorm of 1x1 maps at batch 1
    macs = _matmul_macs(model, torch.empty(1, 3, 320, 320, device="meta"))
    # torchvision SSDLite320_MobileNet_V3_Large_Weights.COCO_V1.meta["_ops"]: 0.583 GMACs
    assert abs(macs / 1e9 - 0.583) < 0.0005
