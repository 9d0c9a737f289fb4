"""ModernBERT folders: the bare encoder and its masked-LM, sequence-classification, token-classification and
question-answering heads.

ModernBERT is a pre-norm encoder with rotary positions and no position or token-type table: embeddings, LayerNorm;
layers whose first has no attention LayerNorm (``first_attention_norm``); full-attention and sliding-window layers
(``layer_types``, ``local_attention``) with a RoPE base each (``rope_theta``, ``local_rope_theta``); a gated MLP
(``ffn_type="geglu"``) with its dropout inside (``ffn_inner_dropout``) and none after it; a final LayerNorm. Every
linear layer and LayerNorm has a bias or none alike (``use_bias``). Its "prediction head" (dense, activation,
LayerNorm) becomes the MLM head's transform, the pooler (``pooler_norm``) of a sequence classifier, and the
transform before the classifier of the token heads (``token_head_transform``); a converted encoder keeps these
options, so the heads a job fine-tunes on it are ModernBERT's.

Left as they are, since they only change speed or what is returned, never a number computed: ``reference_compile``
and ``deterministic_flash_attn``, and ``sparse_prediction`` (mlm_suite's own sparse MLM prediction decides which
logits come back; the loss is the same). ``initializer_cutoff_factor`` shapes only the initialisation of new weights.
"""

from __future__ import annotations

import re

import torch
from transformers import ModernBertConfig

from mlm_suite.errors import UsageError
from mlm_suite.model import (
    MlmSuiteConfig,
    MlmSuiteForMaskedLM,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
)

from mlm_suite.conversion.core import LABEL_FIELDS, Family, native_fields, rename_layer

# mlm_suite's name → ModernBERT's, for the fields that mean the same.
_CONFIG_FIELDS = {
    **{name: name for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                               "intermediate_size", "max_position_embeddings", "initializer_range", "pad_token_id",
                               "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id", "classifier_pooling",
                               "classifier_activation", "classifier_dropout", "local_attention", "tie_word_embeddings",
                               *LABEL_FIELDS)},
    "hidden_act": "hidden_activation",
    "layer_norm_eps": "norm_eps",
    "hidden_dropout_prob": "embedding_dropout",  # mlm_suite's embeddings drop out with hidden_dropout_prob
    "attention_probs_dropout_prob": "attention_dropout",
    "attention_output_dropout": "attention_dropout",  # ModernBERT drops out the attention output with it too
    "ffn_inner_dropout": "mlp_dropout",
    "qa_dropout": "classifier_dropout",
}
_BIASES = ("attention_bias", "mlp_bias", "norm_bias", "classifier_bias")
_CLASSIFIER_ACTIVATIONS = ("tanh", "relu", "gelu")
# ModernBERT name (after "layers.<n>.") → mlm_suite name (after "layers.<n>.").
# ModernBERT's module (after "layers.<n>.") → mlm_suite's.
_LAYER_MODULES = {
    "attn_norm": "attention_norm",
    "attn.Wqkv": "attention.qkv",
    "attn.Wo": "attention.out",
    "mlp_norm": "ffn_norm",
    "mlp.Wi": "ffn.up",
    "mlp.Wo": "ffn.down",
}
# Where each head puts ModernBERT's prediction head ("head.") and its classifier ("classifier.").
_HEAD_PLACES = {
    "ModernBertForMaskedLM": ("lm_head.", None),
    "ModernBertForSequenceClassification": ("pooler.", "classifier."),
    "ModernBertForTokenClassification": ("transform.", "classifier."),
    "ModernBertForQuestionAnswering": ("transform.", "qa_outputs."),
}


def layer_types(native: dict) -> list[str]:
    """Each layer's attention, ``full_attention`` or ``sliding_attention``: ``config.json``'s ``layer_types``, or in
    older folders every ``global_attn_every_n_layers``-th layer full (from the first) and the others sliding.

    ``native`` holds ModernBertConfig's defaults under what the folder sets. Its ``layer_types`` are the folder's
    unless they are the default ones (those of 22 layers) while the folder says ``global_attn_every_n_layers``, or
    do not fit its layers: then the rule applies, as transformers applies it to a config without ``layer_types``.
    """
    layers = native["num_hidden_layers"]
    kinds = native.get("layer_types")
    every = native.get("global_attn_every_n_layers")
    if kinds is not None and len(kinds) == layers and (every is None or kinds != ModernBertConfig().layer_types):
        return list(kinds)
    every = every or 3  # ModernBertConfig's default
    return ["sliding_attention" if index % every else "full_attention" for index in range(layers)]


def rope_thetas(native: dict) -> tuple[float, float]:
    """The RoPE bases of the full-attention and the sliding-window layers: ``rope_parameters`` per layer type
    (transformers 5), or the older ``global_rope_theta`` / ``local_rope_theta``; only the default RoPE type."""
    if native.get("rope_scaling"):
        raise UsageError(f"rope_scaling={native['rope_scaling']!r}: mlm_suite's RoPE has no scaling")
    parameters = native.get("rope_parameters") or {}
    thetas = []
    for kind, old_name in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
        settings = parameters.get(kind) or {}
        rope_type = settings.get("rope_type", "default")
        if rope_type != "default":
            raise UsageError(f"rope_parameters[{kind!r}] has rope_type {rope_type!r}: mlm_suite's RoPE is the default type")
        theta = native.get(old_name, settings.get("rope_theta"))
        if theta is None:
            raise UsageError(f"config.json gives no RoPE base for the {kind} layers (rope_parameters or {old_name})")
        thetas.append(float(theta))
    return thetas[0], thetas[1]


def config_from_modernbert(native: dict) -> MlmSuiteConfig:
    """An mlm_suite config equivalent to a ModernBERT ``config.json`` dictionary (labels included)."""
    biases = {name: native[name] for name in _BIASES}
    if len(set(biases.values())) > 1:
        settings = ", ".join(f"{name}={value}" for name, value in biases.items())
        raise UsageError(f"{settings}: mlm_suite's use_bias gives every linear layer and LayerNorm a bias or none alike")
    activation = native["classifier_activation"]
    if activation not in _CLASSIFIER_ACTIVATIONS:
        raise UsageError(f"classifier_activation={activation!r}: mlm_suite's heads take {', '.join(_CLASSIFIER_ACTIVATIONS)}")
    head_size = native["hidden_size"] // native["num_attention_heads"]
    if native.get("head_dim") not in (None, head_size):
        raise UsageError(f"head_dim={native['head_dim']}: mlm_suite's heads are hidden_size / num_attention_heads wide")
    if native.get("sparse_prediction") and native.get("sparse_pred_ignore_index", -100) != -100:
        raise UsageError(f"sparse_pred_ignore_index={native['sparse_pred_ignore_index']}: mlm_suite ignores the labels -100")
    full_theta, local_theta = rope_thetas(native)
    return MlmSuiteConfig(
        **native_fields(native, _CONFIG_FIELDS),
        architectures=native.get("architectures"),  # tells convert_modernbert_state_dict where the head goes
        type_vocab_size=0,
        norm_position="pre",
        position_embedding_type="rotary",
        rope_theta=full_theta,
        local_rope_theta=None if local_theta == full_theta else local_theta,
        layer_types=layer_types(native),
        ffn_type="geglu",
        use_bias=biases["norm_bias"],
        first_attention_norm=False,
        ffn_output_dropout=0.0,
        pooler_norm=True,
        token_head_transform=True,
    )


def masked_lm_fields(native: dict, model_class: type) -> dict:
    """Refuse a masked-LM head mlm_suite's would compute otherwise: its decoder always has a bias, and its transform
    applies ``hidden_act`` where ModernBERT's applies ``classifier_activation``."""
    if model_class is MlmSuiteForMaskedLM:
        if not native["decoder_bias"]:
            raise UsageError("decoder_bias=False: mlm_suite's MLM decoder has a bias")
        if native["classifier_activation"] != native["hidden_activation"]:
            raise UsageError(
                f"classifier_activation={native['classifier_activation']!r} differs from "
                f"hidden_activation={native['hidden_activation']!r}: ModernBERT's MLM head applies the first, "
                "mlm_suite's the second"
            )
    return {}


def convert_modernbert_state_dict(state: dict[str, torch.Tensor], config: MlmSuiteConfig) -> dict[str, torch.Tensor]:
    """Rename ModernBERT weights to mlm_suite's; names with no counterpart are kept as they are.

    The prediction head (``head.``) goes where ``config.architectures`` says (a masked-LM folder is also known by its
    decoder); with no architecture that places it, it keeps its name.
    """
    state = {name.removeprefix("model."): tensor for name, tensor in state.items()}
    architecture = (config.architectures or [None])[0]
    if any(name.startswith("decoder.") for name in state):
        architecture = "ModernBertForMaskedLM"
    head, classifier = _HEAD_PLACES.get(architecture, (None, None))
    converted: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name == "embeddings.tok_embeddings.weight":
            name = "embeddings.word_embeddings.weight"
        elif re.fullmatch(r"layers\.\d+\..+", name):
            name = rename_layer(name, r"layers\.(\d+)\.(.+)", "layers.{}.", _LAYER_MODULES)
        elif name.startswith("decoder."):
            name = "lm_head." + name
        elif name.startswith("head.") and head is not None:
            name = head + name.removeprefix("head.")
        elif name.startswith("classifier.") and classifier is not None:
            name = classifier + name.removeprefix("classifier.")
        converted[name] = tensor
    return converted


MODERNBERT = Family(
    name="ModernBERT",
    class_prefix="ModernBert",
    model_types=("modernbert",),
    architectures={
        "ModernBertModel": MlmSuiteModel,
        "ModernBertForMaskedLM": MlmSuiteForMaskedLM,
        "ModernBertForSequenceClassification": MlmSuiteForSequenceClassification,
        "ModernBertForTokenClassification": MlmSuiteForTokenClassification,
        "ModernBertForQuestionAnswering": MlmSuiteForQuestionAnswering,
    },
    no_counterpart={"ModernBertForMultipleChoice": "mlm_suite has no multiple-choice head"},
    config=config_from_modernbert,
    rename=convert_modernbert_state_dict,
    head_fields=masked_lm_fields,
)

__all__ = ["MODERNBERT", "config_from_modernbert", "convert_modernbert_state_dict", "layer_types", "rope_thetas"]
