"""`hf:MODEL_TYPE[?field=value&…]`: a Hugging Face architecture as a Workload, offline.

The model is built by `transformers` from its default configuration for `MODEL_TYPE`
(`AutoConfig.for_model`), with random weights: nothing is downloaded. Query fields
override the configuration (`hf:llama?num_hidden_layers=4&hidden_size=512`); `seq_len`
and `batch_size` are the workload's own. The head and the batch follow the
architecture: an encoder-decoder (T5) trains as a sequence-to-sequence LM, an encoder
with a masked-LM head (BERT) as a masked LM (15 % of positions masked), anything else
with a causal-LM head (GPT-2, Llama) as a causal LM, each on seeded random token ids,
and the loss is the model's own (`outputs.loss`).

The configuration's parameters are counted on the meta device before anything is
allocated: training state that cannot fit this machine's memory (the default `llama`
is 6.7 B parameters) is refused in one line that suggests smaller overrides.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

import torch

from lightspeed.errors import ConfigError, UnknownNameError, did_you_mean
from lightspeed.units import count, size
from lightspeed.workload import Workload

PREFIX = "hf:"
DEFAULT_SEQ_LEN = 128
DEFAULT_BATCH = 4
MASKED_FRACTION = 0.15
# fp32 weights, gradients and AdamW's two moments: bytes of training state a parameter.
TRAINING_BYTES_PER_PARAMETER = 16
_OWN_FIELDS = ("seq_len", "batch_size")


def is_hf_target(target: str) -> bool:
    """Whether `target` names a Hugging Face architecture (`hf:…`)."""
    return target.startswith(PREFIX)


def hf_workload(target: str, memory_bytes: int | None = None, allocates: bool = True) -> Workload:
    """The Workload of `hf:MODEL_TYPE?overrides`; refused before allocating when its
    training state exceeds `memory_bytes` (default: this machine's memory), unless it
    will not be allocated (`allocates=False`: a step run on fake tensors)."""
    transformers = _transformers()
    model_type, _, query = target.removeprefix(PREFIX).partition("?")
    fields = {key: _value(text) for key, text in parse_qsl(query, keep_blank_values=True)}
    config = _config(transformers, model_type, fields)
    task, build = _head(transformers, model_type, config)
    with torch.device("meta"):
        parameters = build(config).num_parameters()
    if allocates:
        _check_fits(target, parameters, memory_bytes)
    seq_len = int(fields.get("seq_len", _default_seq_len(config)))
    return Workload(
        name=target,
        model=lambda: build(config),
        batch=_batch_maker(task, config, seq_len),
        loss=_model_loss,
        batch_size=int(fields.get("batch_size", DEFAULT_BATCH)),
        tokens_per_sample=seq_len,
    )


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise ConfigError(
            "hf: targets need Hugging Face transformers: pip install 'lightspeed[hf]'."
        ) from exc
    return transformers


def _value(text: str) -> int | float | bool | str:
    """A query value as the configuration field wants it: int, float, bool or text."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _config(transformers: Any, model_type: str, fields: dict[str, Any]) -> Any:
    known = list(transformers.CONFIG_MAPPING.keys())
    if model_type not in known:
        raise UnknownNameError(
            f"hf:{model_type}: transformers knows no model type {model_type!r}."
            + did_you_mean(model_type, known)
        )
    defaults = transformers.AutoConfig.for_model(model_type).to_dict()
    overrides = {k: v for k, v in fields.items() if k not in _OWN_FIELDS}
    for key in overrides:
        if key not in defaults:
            raise ConfigError(
                f"hf:{model_type}: its configuration has no field {key!r}."
                + did_you_mean(key, defaults)
            )
    # Through the constructor, so fields derived from others (a head size from the width
    # and the heads) follow the overrides.
    return transformers.AutoConfig.for_model(model_type, **overrides)


def _head(transformers: Any, model_type: str, config: Any) -> tuple[str, Callable[[Any], Any]]:
    """The task this architecture trains as ("seq2seq", "masked" or "causal") and the
    `from_config` of its Auto class."""
    names = transformers.models.auto.modeling_auto
    seq2seq = names.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    if config.is_encoder_decoder and model_type in seq2seq:
        return "seq2seq", transformers.AutoModelForSeq2SeqLM.from_config
    if model_type in names.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "masked", transformers.AutoModelForMaskedLM.from_config
    if model_type in names.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal", transformers.AutoModelForCausalLM.from_config
    raise ConfigError(
        f"hf:{model_type}: no language-model head for this architecture in transformers"
        " (causal, masked or sequence-to-sequence); name a model type that has one."
    )


def _default_seq_len(config: Any) -> int:
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return min(DEFAULT_SEQ_LEN, limit) if limit else DEFAULT_SEQ_LEN


def machine_memory_bytes() -> int | None:
    """This machine's physical memory in bytes, where the OS says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _check_fits(target: str, parameters: int, memory_bytes: int | None) -> None:
    memory = memory_bytes if memory_bytes is not None else machine_memory_bytes()
    needed = parameters * TRAINING_BYTES_PER_PARAMETER
    if memory is not None and needed > memory:
        model_type = target.removeprefix(PREFIX).partition("?")[0]
        raise ConfigError(
            f"{target} has {count(parameters)} parameters: training them needs about"
            f" {size(needed)} (fp32 weights, gradients and AdamW state), more than"
            f" this machine's {size(memory)}; shrink it, e.g."
            f" hf:{model_type}?num_hidden_layers=2&hidden_size=256."
        )


def _batch_maker(task: str, config: Any, seq_len: int) -> Callable[[int], dict[str, torch.Tensor]]:
    vocab = int(config.vocab_size)

    def batch(n: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, (n, seq_len), generator=generator)
        if task == "seq2seq":
            # Decoder inputs given, not derived from the labels: a default configuration
            # may name no decoder start token.
            decoder = torch.randint(0, vocab, (n, seq_len + 1), generator=generator)
            return {
                "input_ids": ids,
                "decoder_input_ids": decoder[:, :-1].contiguous(),
                "labels": decoder[:, 1:].contiguous(),
            }
        if task == "masked":
            # Score a fixed 15 % of positions; the others are ignored (-100), as in BERT.
            every = round(1 / MASKED_FRACTION)
            labels = torch.full_like(ids, -100)
            labels[:, ::every] = ids[:, ::every]
            return {"input_ids": ids, "labels": labels}
        return {"input_ids": ids, "labels": ids.clone()}  # the model shifts them

    return batch


def _model_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The loss the model computes from its labels."""
    loss: torch.Tensor = model(**batch).loss
    return loss
