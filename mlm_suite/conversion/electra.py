"""ELECTRA folders: the generator (``ElectraForMaskedLM``), the discriminator (``ElectraForPreTraining``, whose
encoder is converted and whose replaced-token-detection head is left out with a printed line), the bare encoder and
the fine-tuning heads (sequence classification, token classification, question answering).

The encoder is BERT's, names and all (under ``electra.``), with embeddings of ``embedding_size`` projected to
``hidden_size`` (``embeddings_project``) when the two differ. The generator's head (dense to ``embedding_size``,
gelu, LayerNorm, a decoder tied to the word embeddings) is mlm_suite's MLM head at ``embedding_size``; the
classification head (dropout, dense, gelu, dropout, out_proj on the first token) becomes the pooler (gelu, with
``pooler_dropout``) and the classifier. The way back (``export-native``) gives the bare encoder ``ElectraModel``:
the discriminator's head is not there to give back.
"""

from __future__ import annotations

import torch

from mlm_suite.model import (
    MlmSuiteConfig,
    MlmSuiteForMaskedLM,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
)

from mlm_suite.conversion.bert import BERT_CONFIG_FIELDS, check_encoder_config, convert_bert_encoder, native_bert_encoder
from mlm_suite.conversion.core import Family, inverted, native_config_fields, native_fields, native_names
from mlm_suite.conversion.roberta import CLASSIFICATION_HEAD, gelu_head_fields

_PROJECTION = {
    "embeddings_project.weight": "embeddings.project.weight",
    "embeddings_project.bias": "embeddings.project.bias",
}
_LM_HEAD = {
    "generator_predictions.dense.weight": "lm_head.dense.weight",
    "generator_predictions.dense.bias": "lm_head.dense.bias",
    "generator_predictions.LayerNorm.weight": "lm_head.norm.weight",
    "generator_predictions.LayerNorm.bias": "lm_head.norm.bias",
    "generator_lm_head.weight": "lm_head.decoder.weight",
    "generator_lm_head.bias": "lm_head.decoder.bias",
}
_RENAMES = {**_PROJECTION, **_LM_HEAD, **CLASSIFICATION_HEAD}


def config_from_electra(native: dict) -> MlmSuiteConfig:
    """An mlm_suite config equivalent to an ELECTRA ``config.json`` dictionary (labels included)."""
    check_encoder_config(native, "ELECTRA")
    fields = native_fields(native, {name: name for name in BERT_CONFIG_FIELDS})
    embedding_size = native.get("embedding_size")
    dropout = native.get("classifier_dropout")
    return MlmSuiteConfig(
        **fields,
        embedding_size=None if embedding_size == native.get("hidden_size") else embedding_size,
        classifier_activation="gelu",
        pooler_dropout=native["hidden_dropout_prob"] if dropout is None else dropout,
    )


def convert_electra_state_dict(state: dict[str, torch.Tensor], config: MlmSuiteConfig) -> dict[str, torch.Tensor]:
    """Rename ELECTRA weights to mlm_suite's; names with no counterpart (the discriminator's head) are kept as they
    are."""
    state = {name.removeprefix("electra."): tensor for name, tensor in state.items()}
    converted = convert_bert_encoder(state, config.num_hidden_layers, "ELECTRA")
    return {_RENAMES.get(name, name): tensor for name, tensor in converted.items()}


def native_electra_config(config: MlmSuiteConfig) -> dict:
    """ELECTRA's ``config.json`` fields for an mlm_suite config."""
    fields = native_config_fields(config, {name: name for name in BERT_CONFIG_FIELDS})
    # ELECTRA always adds a token type: with none (0) it holds one, and the way back names the difference.
    return {**fields, "embedding_size": config.embedding_width, "type_vocab_size": max(config.type_vocab_size, 1)}


def native_electra_state_dict(
    weights: dict[str, torch.Tensor], config: MlmSuiteConfig, model_class: type
) -> dict[str, torch.Tensor]:
    """The way back of :func:`convert_electra_state_dict`, for the class ``model_class`` converts from."""
    encoder = native_bert_encoder(weights, config.num_hidden_layers)
    encoder = {inverted(_PROJECTION).get(name, name): tensor for name, tensor in encoder.items()}
    return native_names(encoder, model_class, "electra", _LM_HEAD, CLASSIFICATION_HEAD)


ELECTRA = Family(
    name="ELECTRA",
    class_prefix="Electra",
    model_types=("electra",),
    architectures={
        "ElectraModel": MlmSuiteModel,
        "ElectraForPreTraining": MlmSuiteModel,
        "ElectraForMaskedLM": MlmSuiteForMaskedLM,
        "ElectraForSequenceClassification": MlmSuiteForSequenceClassification,
        "ElectraForTokenClassification": MlmSuiteForTokenClassification,
        "ElectraForQuestionAnswering": MlmSuiteForQuestionAnswering,
    },
    no_counterpart={
        "ElectraForMultipleChoice": "mlm_suite has no multiple-choice head",
        "ElectraForCausalLM": "it is a left-to-right language model and mlm_suite's encoder is bidirectional",
    },
    config=config_from_electra,
    rename=convert_electra_state_dict,
    native_config=native_electra_config,
    native_rename=native_electra_state_dict,
    head_fields=gelu_head_fields("ELECTRA", "generator head"),
    dropped={
        "discriminator_predictions.": "the discriminator's replaced-token-detection head has no mlm_suite counterpart "
        "(its encoder is converted)"
    },
)

__all__ = [
    "ELECTRA",
    "config_from_electra",
    "convert_electra_state_dict",
    "native_electra_config",
    "native_electra_state_dict",
]
