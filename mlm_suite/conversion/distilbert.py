"""DistilBERT folders: the bare encoder and its masked-LM, sequence-classification, token-classification and
question-answering heads.

DistilBERT is BERT's post-norm encoder with learned positions, no token types (``type_vocab_size=0``), no pooler,
no dropout on the attention output (``attention_output_dropout=0.0``) and LayerNorms at eps 1e-12. Its sequence
head (``pre_classifier``, ReLU, dropout, ``classifier`` on the first token) becomes the pooler (ReLU) and the
classifier, its dropout ``seq_classif_dropout``; its question-answering head drops out the token states first
(``qa_dropout``). Fixed sinusoidal positions are refused: mlm_suite's table is learned. The way back
(``export-native``) reverses the names.
"""

from __future__ import annotations

import re

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

from mlm_suite.conversion.core import (
    LABEL_FIELDS,
    Family,
    fuse_qkv,
    inverted,
    native_config_fields,
    native_fields,
    native_layers,
    native_names,
    rename_layer,
)

# mlm_suite's field → DistilBERT's.
_CONFIG_FIELDS = {
    "vocab_size": "vocab_size",
    "hidden_size": "dim",
    "num_hidden_layers": "n_layers",
    "num_attention_heads": "n_heads",
    "intermediate_size": "hidden_dim",
    "hidden_act": "activation",
    "hidden_dropout_prob": "dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "max_position_embeddings": "max_position_embeddings",
    "initializer_range": "initializer_range",
    "pad_token_id": "pad_token_id",
    "qa_dropout": "qa_dropout",
    "tie_word_embeddings": "tie_word_embeddings",
    **{name: name for name in LABEL_FIELDS},
}
# DistilBERT module (after "transformer.layer.<n>.") → mlm_suite module (after "layers.<n>.").
_LAYER_MODULES = {
    "attention.out_lin": "attention.out",
    "sa_layer_norm": "attention_norm",
    "ffn.lin1": "ffn.up",
    "ffn.lin2": "ffn.down",
    "output_layer_norm": "ffn_norm",
}
_EMBEDDINGS = {
    "embeddings.LayerNorm.weight": "embeddings.norm.weight",
    "embeddings.LayerNorm.bias": "embeddings.norm.bias",
}
_LM_HEAD = {
    "vocab_transform.weight": "lm_head.dense.weight",
    "vocab_transform.bias": "lm_head.dense.bias",
    "vocab_layer_norm.weight": "lm_head.norm.weight",
    "vocab_layer_norm.bias": "lm_head.norm.bias",
    "vocab_projector.weight": "lm_head.decoder.weight",
    "vocab_projector.bias": "lm_head.decoder.bias",
}
_CLASSIFICATION_HEAD = {
    "pre_classifier.weight": "pooler.dense.weight",  # the sequence head's dense + ReLU is mlm_suite's pooler
    "pre_classifier.bias": "pooler.dense.bias",
}
_RENAMES = {**_EMBEDDINGS, **_LM_HEAD, **_CLASSIFICATION_HEAD}


def config_from_distilbert(native: dict) -> MlmSuiteConfig:
    """An mlm_suite config equivalent to a DistilBERT ``config.json`` dictionary (labels included)."""
    if native.get("sinusoidal_pos_embds"):
        raise UsageError(
            "sinusoidal_pos_embds=True: DistilBERT keeps those positions fixed while training, and mlm_suite's "
            "position table is learned"
        )
    return MlmSuiteConfig(
        **native_fields(native, _CONFIG_FIELDS),
        type_vocab_size=0,
        layer_norm_eps=1e-12,
        attention_output_dropout=0.0,
        classifier_activation="relu",
    )


def distilbert_head_fields(native: dict, model_class: type) -> dict:
    """The sequence head drops out at ``seq_classif_dropout``, the token head at ``dropout`` (mlm_suite's
    ``classifier_dropout`` serves both, so it follows the head converted); the other heads keep
    ``seq_classif_dropout`` as it is, for the way back."""
    if native.get("seq_classif_dropout") is None:
        return {}
    if model_class is MlmSuiteForSequenceClassification:
        return {"classifier_dropout": native["seq_classif_dropout"]}
    return {"seq_classif_dropout": native["seq_classif_dropout"]}


def convert_distilbert_state_dict(state: dict[str, torch.Tensor], config: MlmSuiteConfig) -> dict[str, torch.Tensor]:
    """Rename DistilBERT weights to mlm_suite's; names with no counterpart are kept as they are."""
    state = {name.removeprefix("distilbert."): tensor for name, tensor in state.items()}
    converted: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name == "embeddings.position_ids":
            continue  # a buffer, which mlm_suite computes
        if name.startswith("transformer.layer."):
            if re.search(r"\.attention\.[qkv]_lin\.(weight|bias)$", name):
                continue  # fused below
            converted[rename_layer(name, r"transformer\.layer\.(\d+)\.(.*)", "layers.{}.", _LAYER_MODULES)] = tensor
        else:
            converted[_RENAMES.get(name, name)] = tensor
    fuse_qkv(state, converted, config.num_hidden_layers, _qkv, "DistilBERT")
    return converted


def _qkv(layer: int) -> list[str]:
    """The names of DistilBERT's query, key and value projections in ``layer``."""
    return [f"transformer.layer.{layer}.attention.{projection}" for projection in ("q_lin", "k_lin", "v_lin")]


def native_distilbert_config(config: MlmSuiteConfig) -> dict:
    """DistilBERT's ``config.json`` fields for an mlm_suite config (its sequence head drops out at
    ``seq_classif_dropout``, mlm_suite's at ``classifier_dropout``; a converted head of another kind kept the value)."""
    dropout = config.hidden_dropout_prob if config.classifier_dropout is None else config.classifier_dropout
    dropout = getattr(config, "seq_classif_dropout", dropout)
    return {**native_config_fields(config, _CONFIG_FIELDS), "seq_classif_dropout": dropout}


def native_distilbert_state_dict(
    weights: dict[str, torch.Tensor], config: MlmSuiteConfig, model_class: type
) -> dict[str, torch.Tensor]:
    """The way back of :func:`convert_distilbert_state_dict`, for the class ``model_class`` converts from."""
    weights = {inverted(_EMBEDDINGS).get(name, name): tensor for name, tensor in weights.items()}
    encoder = native_layers(weights, config.num_hidden_layers, "transformer.layer.{}.", inverted(_LAYER_MODULES), _qkv)
    return native_names(encoder, model_class, "distilbert", _LM_HEAD, _CLASSIFICATION_HEAD)


DISTILBERT = Family(
    name="DistilBERT",
    class_prefix="DistilBert",
    model_types=("distilbert",),
    architectures={
        "DistilBertModel": MlmSuiteModel,
        "DistilBertForMaskedLM": MlmSuiteForMaskedLM,
        "DistilBertForSequenceClassification": MlmSuiteForSequenceClassification,
        "DistilBertForTokenClassification": MlmSuiteForTokenClassification,
        "DistilBertForQuestionAnswering": MlmSuiteForQuestionAnswering,
    },
    no_counterpart={"DistilBertForMultipleChoice": "mlm_suite has no multiple-choice head"},
    config=config_from_distilbert,
    rename=convert_distilbert_state_dict,
    native_config=native_distilbert_config,
    native_rename=native_distilbert_state_dict,
    head_fields=distilbert_head_fields,
)

__all__ = [
    "DISTILBERT",
    "config_from_distilbert",
    "convert_distilbert_state_dict",
    "distilbert_head_fields",
    "native_distilbert_config",
    "native_distilbert_state_dict",
]
