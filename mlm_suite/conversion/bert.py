"""BERT folders: the bare encoder or a ``BertFor*`` head that mlm_suite has a counterpart for (masked LM,
next-sentence prediction, pretraining, sequence classification, token classification, extractive QA), with or
without the ``bert.`` prefix. BERT's separate query/key/value projections are concatenated into mlm_suite's fused
QKV projection; everything else keeps its place. The encoder's names are shared by RoBERTa and ELECTRA, which
reuse :func:`convert_bert_encoder`, and :func:`native_bert_encoder` its way back (``export-native``).
"""

from __future__ import annotations

import re

import torch

from mlm_suite.errors import UsageError
from mlm_suite.model import (
    MlmSuiteConfig,
    MlmSuiteForMaskedLM,
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForPreTraining,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
)

from mlm_suite.conversion.core import (
    LABEL_FIELDS,
    Family,
    fuse_qkv,
    inverted,
    legacy_layernorm_name,
    native_config_fields,
    native_fields,
    native_layers,
    native_names,
    rename_layer,
)

#: BERT's hyper-parameters, which mlm_suite names alike.
BERT_CONFIG_FIELDS = (
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
    "classifier_dropout",
    *LABEL_FIELDS,
    "tie_word_embeddings",
)

# BERT module (after the "encoder.layer.<n>." part) → mlm_suite module (after "layers.<n>.").
_LAYER_MODULES = {
    "attention.output.dense": "attention.out",
    "attention.output.LayerNorm": "attention_norm",
    "intermediate.dense": "ffn.up",
    "output.dense": "ffn.down",
    "output.LayerNorm": "ffn_norm",
}
_HEAD_RENAMES = {
    "cls.predictions.transform.dense.weight": "lm_head.dense.weight",
    "cls.predictions.transform.dense.bias": "lm_head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "lm_head.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "lm_head.norm.bias",
    "cls.predictions.bias": "lm_head.decoder.bias",
    "cls.predictions.decoder.weight": "lm_head.decoder.weight",
    "cls.seq_relationship.weight": "nsp_head.weight",
    "cls.seq_relationship.bias": "nsp_head.bias",
    "classifier.weight": "classifier.weight",
    "classifier.bias": "classifier.bias",
    "qa_outputs.weight": "qa_outputs.weight",
    "qa_outputs.bias": "qa_outputs.bias",
}


def check_encoder_config(native: dict, family: str) -> None:
    """Refuse the BERT-encoder variants mlm_suite has no counterpart for (relative positions, decoders)."""
    position_type = native.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise UsageError(f"position_embedding_type={position_type!r} {family} checkpoints cannot be converted")
    if native.get("is_decoder") or native.get("add_cross_attention"):
        raise UsageError(f"decoder {family} checkpoints (is_decoder / add_cross_attention) cannot be converted")


def config_from_bert(bert_config: dict) -> MlmSuiteConfig:
    """An mlm_suite config equivalent to a BERT ``config.json`` dictionary (labels and ``problem_type`` included)."""
    check_encoder_config(bert_config, "BERT")
    return MlmSuiteConfig(**native_fields(bert_config, {name: name for name in BERT_CONFIG_FIELDS}))


def convert_bert_encoder(
    state: dict[str, torch.Tensor], num_layers: int, family: str = "BERT"
) -> dict[str, torch.Tensor]:
    """The BERT-named weights of ``state`` (prefix removed) under mlm_suite's names: the embeddings, the layers
    (query/key/value fused) and the pooler; any other name is kept as it is, for the caller to rename."""
    state = {legacy_layernorm_name(name): tensor for name, tensor in state.items()}
    converted: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name.startswith("embeddings."):
            if name.endswith(("position_ids", "token_type_ids")):
                continue  # buffers, which mlm_suite computes
            converted[name.replace("embeddings.LayerNorm.", "embeddings.norm.")] = tensor
        elif name.startswith("encoder.layer."):
            if re.search(r"\.attention\.self\.(query|key|value)\.(weight|bias)$", name):
                continue  # fused below
            converted[rename_layer(name, r"encoder\.layer\.(\d+)\.(.*)", "layers.{}.", _LAYER_MODULES)] = tensor
        else:
            converted[name] = tensor
    fuse_qkv(state, converted, num_layers, _qkv, family)
    return converted


def _qkv(layer: int) -> list[str]:
    """The names of BERT's query, key and value projections in ``layer``."""
    return [f"encoder.layer.{layer}.attention.self.{projection}" for projection in ("query", "key", "value")]


def native_bert_encoder(weights: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """The way back of :func:`convert_bert_encoder`: mlm_suite's encoder weights (unprefixed) under BERT's names,
    the fused QKV projections split; any other name is kept as it is, for the caller to rename."""
    weights = {name.replace("embeddings.norm.", "embeddings.LayerNorm."): tensor for name, tensor in weights.items()}
    return native_layers(weights, num_layers, "encoder.layer.{}.", inverted(_LAYER_MODULES), _qkv)


def convert_bert_state_dict(state: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Rename BERT weights to mlm_suite's names (encoder weights unprefixed, heads under their own names).

    Names with no counterpart are kept as they are, so that loading them reports them.
    """
    state = {legacy_layernorm_name(name).removeprefix("bert."): tensor for name, tensor in state.items()}
    converted: dict[str, torch.Tensor] = {}
    for name, tensor in convert_bert_encoder(state, num_layers).items():
        if name == "cls.predictions.decoder.bias":
            converted["lm_head.decoder.bias"] = tensor  # what the forward pass adds; the same as cls.predictions.bias unless untied
        elif name == "cls.predictions.bias":
            converted.setdefault(_HEAD_RENAMES[name], tensor)
        elif name in _HEAD_RENAMES:
            converted[_HEAD_RENAMES[name]] = tensor
        else:
            converted[name] = tensor
    return converted


def native_bert_config(config: MlmSuiteConfig) -> dict:
    """BERT's ``config.json`` fields for an mlm_suite config."""
    fields = native_config_fields(config, {name: name for name in BERT_CONFIG_FIELDS})
    # BERT always adds a token type: with none (0) it holds one, and the way back names the difference.
    return {**fields, "type_vocab_size": max(config.type_vocab_size, 1)}


def native_bert_state_dict(
    weights: dict[str, torch.Tensor], config: MlmSuiteConfig, model_class: type
) -> dict[str, torch.Tensor]:
    """The way back of :func:`convert_bert_state_dict`, for the ``BertFor*`` class ``model_class`` converts from."""
    native = native_names(native_bert_encoder(weights, config.num_hidden_layers), model_class, "bert", _HEAD_RENAMES)
    if "cls.predictions.bias" in native:
        native["cls.predictions.decoder.bias"] = native["cls.predictions.bias"]  # one tensor under two names
    return native


BERT = Family(
    name="BERT",
    class_prefix="Bert",
    model_types=("bert",),
    architectures={
        "BertModel": MlmSuiteModel,
        "BertForMaskedLM": MlmSuiteForMaskedLM,
        "BertForNextSentencePrediction": MlmSuiteForNextSentencePrediction,
        "BertForPreTraining": MlmSuiteForPreTraining,
        "BertForSequenceClassification": MlmSuiteForSequenceClassification,
        "BertForTokenClassification": MlmSuiteForTokenClassification,
        "BertForQuestionAnswering": MlmSuiteForQuestionAnswering,
    },
    no_counterpart={
        "BertForMultipleChoice": "mlm_suite has no multiple-choice head",
        "BertLMHeadModel": "it is a left-to-right language model and mlm_suite's encoder is bidirectional",
    },
    config=config_from_bert,
    rename=lambda state, config: convert_bert_state_dict(state, config.num_hidden_layers),
    native_config=native_bert_config,
    native_rename=native_bert_state_dict,
)

__all__ = [
    "BERT",
    "BERT_CONFIG_FIELDS",
    "check_encoder_config",
    "config_from_bert",
    "convert_bert_encoder",
    "convert_bert_state_dict",
    "native_bert_config",
    "native_bert_encoder",
    "native_bert_state_dict",
]
