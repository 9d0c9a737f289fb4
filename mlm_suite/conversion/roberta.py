"""RoBERTa and XLM-RoBERTa folders: the bare encoder and its masked-LM, sequence-classification,
token-classification and question-answering heads.

The encoder is BERT's, names and all (under ``roberta.``), with one token type and positions that count the real
tokens from ``pad_token_id + 1`` on. mlm_suite's positions start at 0 (in the padded layout and in the
padding-free and flattened ones alike) and read the table from row ``position_offset = pad_token_id + 1`` on: the
rows before, which RoBERTa never reads, are kept as they are, so that the way back (``export-native``) gives the
same table, and ``positions_count="real_tokens"`` counts the real tokens as RoBERTa does. The classification head
(dropout, dense, tanh, dropout, out_proj on the first token) becomes the pooler (with ``pooler_dropout``) and the
classifier. A folder converted before ``position_offset`` existed (its table without those rows) gets them back
as zeros.
"""

from __future__ import annotations

import torch

from mlm_suite.errors import UsageError
from mlm_suite.model import (
    MlmSuiteConfig,
    MlmSuiteForMaskedLM,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
)

from mlm_suite.conversion.bert import BERT_CONFIG_FIELDS, check_encoder_config, convert_bert_encoder, native_bert_encoder
from mlm_suite.conversion.core import Family, native_config_fields, native_fields, native_names

_CONFIG_FIELDS = {name: name for name in (*BERT_CONFIG_FIELDS, "bos_token_id", "eos_token_id")}
_LM_HEAD = {
    "lm_head.dense.weight": "lm_head.dense.weight",
    "lm_head.dense.bias": "lm_head.dense.bias",
    "lm_head.layer_norm.weight": "lm_head.norm.weight",
    "lm_head.layer_norm.bias": "lm_head.norm.bias",
    "lm_head.decoder.weight": "lm_head.decoder.weight",
    "lm_head.bias": "lm_head.decoder.bias",
}
# RobertaClassificationHead (and ELECTRA's, the same layout with gelu): its dense + activation is mlm_suite's pooler.
CLASSIFICATION_HEAD = {
    "classifier.dense.weight": "pooler.dense.weight",
    "classifier.dense.bias": "pooler.dense.bias",
    "classifier.out_proj.weight": "classifier.weight",
    "classifier.out_proj.bias": "classifier.bias",
}
_HEAD_RENAMES = {**_LM_HEAD, **CLASSIFICATION_HEAD}


def config_from_roberta(native: dict) -> MlmSuiteConfig:
    """An mlm_suite config equivalent to a RoBERTa or XLM-R ``config.json`` dictionary (labels included)."""
    check_encoder_config(native, "RoBERTa")
    pad = native.get("pad_token_id")
    if pad is None:
        raise UsageError("pad_token_id is null: RoBERTa's positions start after the padding id, so it needs one")
    fields = native_fields(native, _CONFIG_FIELDS)
    positions = native["max_position_embeddings"] - (pad + 1)
    if positions < 1:
        raise UsageError(
            f"max_position_embeddings={native['max_position_embeddings']} leaves no position after pad_token_id={pad}"
        )
    dropout = native.get("classifier_dropout")
    return MlmSuiteConfig(
        **{**fields, "max_position_embeddings": positions},
        position_offset=pad + 1,
        positions_count="real_tokens",
        pooler_dropout=native["hidden_dropout_prob"] if dropout is None else dropout,
    )


def gelu_head_fields(family: str, head: str):
    """``head_fields`` of a family whose MLM head applies gelu whatever ``hidden_act`` says (mlm_suite's applies
    ``hidden_act``): a masked-LM conversion with another ``hidden_act`` is refused."""

    def fields(native: dict, model_class: type) -> dict:
        activation = native.get("hidden_act", "gelu")
        if model_class is MlmSuiteForMaskedLM and activation != "gelu":
            raise UsageError(
                f"hidden_act={activation!r}: {family}'s {head} applies gelu whatever hidden_act says, and "
                "mlm_suite's applies hidden_act"
            )
        return {}

    return fields


def convert_roberta_state_dict(state: dict[str, torch.Tensor], config: MlmSuiteConfig) -> dict[str, torch.Tensor]:
    """Rename RoBERTa (or XLM-R) weights to mlm_suite's; names with no counterpart are kept as they are."""
    state = {name.removeprefix("roberta."): tensor for name, tensor in state.items()}
    if "pooler.dense.weight" in state and "classifier.dense.weight" in state:
        raise UsageError("the weights hold both a pooler and classifier.dense, which mlm_suite's one pooler cannot both be")
    converted: dict[str, torch.Tensor] = {}
    for name, tensor in convert_bert_encoder(state, config.num_hidden_layers, "RoBERTa").items():
        if name == "lm_head.decoder.bias":
            converted[name] = tensor  # what the forward pass adds; lm_head.bias is the same tensor unless untied
        elif name == "lm_head.bias":
            converted.setdefault(_HEAD_RENAMES[name], tensor)
        elif name in _HEAD_RENAMES:
            converted[_HEAD_RENAMES[name]] = tensor
        else:
            converted[name] = tensor
    return converted


def native_roberta_config(config: MlmSuiteConfig) -> dict:
    """RoBERTa's (or XLM-R's) ``config.json`` fields for an mlm_suite config: the position table holds the
    ``pad_token_id + 1`` rows before the first position again."""
    fields = native_config_fields(config, _CONFIG_FIELDS)
    if config.pad_token_id is not None:  # without one the way back names pad_token_id
        fields["max_position_embeddings"] = config.max_position_embeddings + config.pad_token_id + 1
        if config.position_offset not in (0, config.pad_token_id + 1):  # (0: converted before the rows were kept)
            raise UsageError(
                f"position_offset={config.position_offset}: RoBERTa's positions start at pad_token_id + 1 = "
                f"{config.pad_token_id + 1}"
            )
    # RoBERTa always adds a token type: with none (0) it holds one, and the way back names the difference.
    return {**fields, "type_vocab_size": max(config.type_vocab_size, 1)}


def native_roberta_state_dict(
    weights: dict[str, torch.Tensor], config: MlmSuiteConfig, model_class: type
) -> dict[str, torch.Tensor]:
    """The way back of :func:`convert_roberta_state_dict`, for the class ``model_class`` converts from; the rows
    RoBERTa never reads come back as they were kept, or as zeros from a folder converted before they were."""
    encoder = native_bert_encoder(weights, config.num_hidden_layers)
    positions = encoder.get("embeddings.position_embeddings.weight")
    if positions is not None and config.position_offset == 0:
        unread = positions.new_zeros(config.pad_token_id + 1, positions.shape[1])
        encoder["embeddings.position_embeddings.weight"] = torch.cat([unread, positions])
    native = native_names(encoder, model_class, "roberta", _LM_HEAD, CLASSIFICATION_HEAD)
    if "lm_head.bias" in native:
        native["lm_head.decoder.bias"] = native["lm_head.bias"]  # one tensor under two names
    return native


def _roberta_family(name: str, class_prefix: str, model_type: str, tried_by_export: bool = True) -> Family:
    return Family(
        name=name,
        class_prefix=class_prefix,
        model_types=(model_type,),
        architectures={
            f"{class_prefix}Model": MlmSuiteModel,
            f"{class_prefix}ForMaskedLM": MlmSuiteForMaskedLM,
            f"{class_prefix}ForSequenceClassification": MlmSuiteForSequenceClassification,
            f"{class_prefix}ForTokenClassification": MlmSuiteForTokenClassification,
            f"{class_prefix}ForQuestionAnswering": MlmSuiteForQuestionAnswering,
        },
        no_counterpart={
            f"{class_prefix}ForMultipleChoice": "mlm_suite has no multiple-choice head",
            f"{class_prefix}ForCausalLM": "it is a left-to-right language model and mlm_suite's encoder is bidirectional",
        },
        config=config_from_roberta,
        rename=convert_roberta_state_dict,
        native_config=native_roberta_config,
        native_rename=native_roberta_state_dict,
        head_fields=gelu_head_fields(name, "MLM head"),
        tried_by_export=tried_by_export,
    )


ROBERTA = _roberta_family("RoBERTa", "Roberta", "roberta")
# XLM-RoBERTa's classes compute what RoBERTa's do: export-native writes one only for a folder that names it.
XLM_ROBERTA = _roberta_family("XLM-RoBERTa", "XLMRoberta", "xlm-roberta", tried_by_export=False)

__all__ = [
    "CLASSIFICATION_HEAD",
    "ROBERTA",
    "XLM_ROBERTA",
    "config_from_roberta",
    "convert_roberta_state_dict",
    "gelu_head_fields",
    "native_roberta_config",
    "native_roberta_state_dict",
]
