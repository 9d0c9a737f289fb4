"""Convert Hugging Face BERT checkpoints into mlm_suite checkpoints.

A BERT folder (``BertModel``, ``BertForMaskedLM`` or ``BertForPreTraining`` weights, with or
without the ``bert.`` prefix, as safetensors or a torch ``.bin``) becomes an mlm_suite folder that
computes the same hidden states and MLM/NSP logits. BERT's separate query/key/value projections
are concatenated into mlm_suite's fused QKV projection.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file

from mlm_suite.model import MlmSuiteConfig, MlmSuiteForMaskedLM, MlmSuiteForPreTraining, MlmSuiteModel

TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)

_BERT_CONFIG_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "initializer_range",
    "pad_token_id",
)

# BERT name (after the "bert." prefix is removed) → mlm_suite encoder name.
_LAYER_RENAMES = (
    (r"attention\.output\.dense\.", "attention.out."),
    (r"attention\.output\.LayerNorm\.", "attention_norm."),
    (r"intermediate\.dense\.", "ffn.up."),
    (r"output\.dense\.", "ffn.down."),
    (r"output\.LayerNorm\.", "ffn_norm."),
)
_HEAD_RENAMES = {
    "cls.predictions.transform.dense.weight": "lm_head.dense.weight",
    "cls.predictions.transform.dense.bias": "lm_head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "lm_head.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "lm_head.norm.bias",
    "cls.predictions.bias": "lm_head.decoder.bias",
    "cls.seq_relationship.weight": "nsp_head.weight",
    "cls.seq_relationship.bias": "nsp_head.bias",
}


def load_bert_state_dict(source: Path) -> dict[str, torch.Tensor]:
    """Read a folder's weights: ``model.safetensors`` (single or sharded) or ``pytorch_model.bin``.

    ``.bin`` files are read with ``weights_only=True``, so no pickled code runs.
    """
    index = source / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(load_file(source / shard))
        return state
    if (source / "model.safetensors").exists():
        return load_file(source / "model.safetensors")
    if (source / "pytorch_model.bin").exists():
        return torch.load(source / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin in {source}")


def config_from_bert(bert_config: dict) -> MlmSuiteConfig:
    """An mlm_suite config equivalent to a BERT ``config.json`` dictionary."""
    position_type = bert_config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(f"position_embedding_type={position_type!r} BERT checkpoints cannot be converted")
    if bert_config.get("is_decoder") or bert_config.get("add_cross_attention"):
        raise ValueError("decoder BERT checkpoints (is_decoder / add_cross_attention) cannot be converted")
    fields = {name: bert_config[name] for name in _BERT_CONFIG_FIELDS if name in bert_config}
    return MlmSuiteConfig(**fields)


def convert_bert_state_dict(state: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Rename BERT weights to mlm_suite's names (encoder weights unprefixed, heads under their own names)."""
    state = {_legacy_layernorm_name(name): tensor for name, tensor in state.items()}
    state = {name.removeprefix("bert."): tensor for name, tensor in state.items()}
    converted: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name in _HEAD_RENAMES:
            converted[_HEAD_RENAMES[name]] = tensor
        elif name.startswith("embeddings."):
            if not name.endswith("position_ids") and not name.endswith("token_type_ids"):
                converted[name.replace("embeddings.LayerNorm.", "embeddings.norm.")] = tensor
        elif name.startswith("pooler."):
            converted[name] = tensor
        elif name.startswith("encoder.layer."):
            if ".attention.self." in name:
                continue  # fused below
            rest = re.sub(r"^encoder\.layer\.(\d+)\.", r"layers.\1.", name)
            for pattern, replacement in _LAYER_RENAMES:
                rest = re.sub(pattern, replacement, rest)
            converted[rest] = tensor
    for layer in range(num_layers):
        prefix = f"encoder.layer.{layer}.attention.self."
        for kind in ("weight", "bias"):
            names = [f"{prefix}{projection}.{kind}" for projection in ("query", "key", "value")]
            missing = [name for name in names if name not in state]
            if missing:
                raise ValueError(f"checkpoint is missing {missing}; it does not hold {num_layers} BERT layers")
            parts = [state[name] for name in names]
            converted[f"layers.{layer}.attention.qkv.{kind}"] = torch.cat(parts, dim=0)
    return converted


def _legacy_layernorm_name(name: str) -> str:
    # Checkpoints converted from TF1 name LayerNorm parameters gamma/beta.
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")


def convert_bert_checkpoint(src_dir: str | Path, dst_dir: str | Path) -> Path:
    """Convert the HF BERT folder ``src_dir`` into an mlm_suite folder ``dst_dir``; return ``dst_dir``.

    The model class follows the source's heads: MLM + NSP → ``MlmSuiteForPreTraining``, MLM →
    ``MlmSuiteForMaskedLM``, none → ``MlmSuiteModel`` (keeping the pooler when present).
    Tokenizer files are copied. The result loads with ``AutoModel*.from_pretrained(dst,
    trust_remote_code=True)`` with or without mlm_suite installed.
    """
    source, destination = Path(src_dir), Path(dst_dir)
    config_path = source / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{config_path} does not exist; is {source} a BERT checkpoint folder?")
    bert_config = json.loads(config_path.read_text())
    if bert_config.get("model_type") not in (None, "bert"):
        raise ValueError(f"{source} holds a {bert_config['model_type']!r} checkpoint, not a BERT one")
    config = config_from_bert(bert_config)
    weights = convert_bert_state_dict(load_bert_state_dict(source), config.num_hidden_layers)

    has_mlm = "lm_head.dense.weight" in weights
    has_nsp = "nsp_head.weight" in weights
    has_pooler = "pooler.dense.weight" in weights
    if has_mlm and has_nsp:
        model = MlmSuiteForPreTraining(config)
    elif has_mlm:
        model = MlmSuiteForMaskedLM(config)
    else:
        model = MlmSuiteModel(config, add_pooling_layer=has_pooler)
    if model.base_model is not model:
        weights = {(name if name.split(".")[0].endswith("head") else f"encoder.{name}"): t for name, t in weights.items()}
        if not has_nsp:
            weights = {name: t for name, t in weights.items() if not name.startswith("encoder.pooler.")}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [name for name in missing if name != "lm_head.decoder.weight"]  # tied to the word embeddings
    if missing or unexpected:
        raise ValueError(f"checkpoint does not match the converted architecture: missing {missing}, unexpected {unexpected}")
    if has_mlm:
        model.tie_weights()

    destination.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(destination)
    for filename in TOKENIZER_FILES:
        if (source / filename).exists():
            shutil.copy(source / filename, destination / filename)
    return destination
