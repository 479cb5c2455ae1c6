"""`hf:MODEL_TYPE?overrides`: Hugging Face architectures built offline from their default
configurations, sized by the query, refused before allocating when too big to train."""

from __future__ import annotations

import resource
import sys

import pytest
import torch

import lightspeed
from factories import FAKE_CPU, RunCli
from lightspeed.analysis.profile_analysis import analyse
from lightspeed.errors import ConfigError, UnknownNameError
from lightspeed.facts.hardware import Hardware
from lightspeed.measure.step import StepSettings, prepare
from lightspeed.workflows.profile import profile_shapes
from lightspeed.workload.hf import hf_workload

transformers = pytest.importorskip("transformers")

SMALL = {
    "llama": "num_hidden_layers=2&hidden_size=64&intermediate_size=128&num_attention_heads=4"
    "&num_key_value_heads=2&vocab_size=1000&seq_len=32",
    "bert": "num_hidden_layers=2&hidden_size=64&intermediate_size=128&num_attention_heads=4"
    "&vocab_size=1000&seq_len=32",
    "gpt2": "n_layer=2&n_embd=64&n_head=4&vocab_size=1000&seq_len=32",
    "t5": "num_layers=2&num_decoder_layers=2&d_model=64&d_ff=128&num_heads=4&d_kv=16"
    "&vocab_size=1000&seq_len=32",
}
HEADS = {
    "llama": "AutoModelForCausalLM",
    "bert": "AutoModelForMaskedLM",
    "gpt2": "AutoModelForCausalLM",
    "t5": "AutoModelForSeq2SeqLM",
}
GIB = 2**30


def _their_count(model_type: str, **fields: int) -> int:
    """transformers' own count of the same configuration and head, on the meta device."""
    config = transformers.AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):
        model = getattr(transformers, HEADS[model_type]).from_config(config)
    return int(model.num_parameters())


def _fields(query: str) -> dict[str, int]:
    pairs = (item.split("=") for item in query.split("&"))
    return {k: int(v) for k, v in pairs if k != "seq_len"}


@pytest.mark.parametrize("model_type", sorted(SMALL))
def test_a_small_configuration_profiles_with_every_flop_known(
    model_type: str, calibrated_cpu: Hardware
) -> None:
    target = f"hf:{model_type}?{SMALL[model_type]}"
    profile = lightspeed.profile(target, steps=1, budget_s=0.02, hardware=calibrated_cpu)
    assert profile.workload.parameter_count == _their_count(
        model_type, **_fields(SMALL[model_type])
    )
    assert profile.workload.tokens_per_sample == 32
    totals = analyse(profile).totals
    assert totals.unknown_flops_ops == () and totals.flops > 0


def test_gpt2_at_its_default_size_has_transformers_own_count() -> None:
    workload = hf_workload("hf:gpt2")
    with torch.device("meta"):
        model = workload.model()
    # GPT-2 small with biases, its LM head tied to the token embedding: 124,439,808.
    assert sum(p.numel() for p in model.parameters()) == 124_439_808


def test_the_default_llama_is_refused_before_anything_is_allocated() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError) as caught:
        hf_workload("hf:llama", memory_bytes=24 * GIB)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    message = str(caught.value)
    assert "hf:llama has 6.74 G parameters" in message, message
    assert "hf:llama?num_hidden_layers=2&hidden_size=256" in message
    assert "\n" not in message
    assert grown_kib < 1024**2  # far less than a GiB: the weights were never made


def test_the_refusal_is_one_line_on_the_command_line(
    run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightspeed.workload import hf as hf_target

    monkeypatch.setattr(hf_target, "machine_memory_bytes", lambda: 24 * GIB)
    code, _, err = run_cli("profile", "hf:llama")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "shrink it" in err


def test_each_architecture_trains_with_its_own_head_and_batch() -> None:
    names = transformers.models.auto.modeling_auto
    mappings = {
        "AutoModelForCausalLM": names.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        "AutoModelForMaskedLM": names.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        "AutoModelForSeq2SeqLM": names.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    }
    for model_type, head in HEADS.items():
        workload = hf_workload(f"hf:{model_type}?{SMALL[model_type]}")
        prepared = prepare(workload, StepSettings())
        assert type(prepared.model).__name__ == mappings[head][model_type]
        batch = workload.batch(2)
        assert batch["input_ids"].shape == (2, 32)
        if model_type == "bert":  # 15 % of positions scored, the rest ignored
            scored = (batch["labels"] != -100).float().mean().item()
            assert 0.1 < scored < 0.2
        assert torch.isfinite(prepared.step())


@pytest.mark.parametrize(
    ("target", "error", "message"),
    [
        ("hf:lama", UnknownNameError, "Did you mean .*'llama'"),
        ("hf:gpt2?n_layers=2", ConfigError, "no field 'n_layers'. Did you mean 'n_layer'"),
    ],
)
def test_unknown_names_say_the_closest(target: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        hf_workload(target)


def test_without_transformers_the_error_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ConfigError, match=r"pip install 'lightspeed\[hf\]'"):
        hf_workload("hf:gpt2")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_a_model_too_large_to_train_here_is_still_analysed_from_its_shapes(
    dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightspeed.workload import hf as hf_target

    # 1 MiB of memory: training even the small Llama is refused, its shapes are not.
    monkeypatch.setattr(hf_target, "machine_memory_bytes", lambda: 2**20)
    target = f"hf:llama?{SMALL['llama']}"
    with pytest.raises(ConfigError, match="shrink it"):
        hf_workload(target)
    profile = profile_shapes(target, dtype=dtype, hardware=FAKE_CPU)
    products = [op for op in profile.ops if op.name == "aten::mm"]
    # transformers makes some tensors in fp32 whatever the default dtype (the rotary
    # frequencies): on fake tensors they take the step's precision, as `.to()` would.
    wanted = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[dtype]
    assert products and {d for op in products for d in op.input_dtypes} == {wanted}
