"""ModernBERT folders: the bare encoder and its masked-LM, sequence-classification, token-classification and
question-answering heads.

ModernBERT is a pre-norm encoder with rotary positions and no position or token-type table: embeddings, LayerNorm;
layers whose first has no attention LayerNorm (``first_attention_norm``); full-attention and sliding-window layers
(``layer_types``, ``local_attention``) with a RoPE base each (``rope_theta``, ``local_rope_theta``); a gated MLP
(``ffn_type="geglu"``) with its dropout inside (``ffn_inner_dropout``) and none after it; a final LayerNorm. Every
linear layer and LayerNorm has a bias or none alike (``use_bias``). Its "prediction head" (dense, activation,
LayerNorm) becomes the MLM head's transform, the pooler (``pooler_norm``) of a sequence classifier, and the
transform before the classifier of the token heads (``token_head_transform``); a converted encoder keeps these
options, so the heads a job fine-tunes on it are ModernBERT's. The way back (``export-native``) reverses the names
and writes these options as ModernBERT's fields.

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

from mlm_suite.conversion.core import LABEL_FIELDS, Family, inverted, native_config_fields, native_fields, rename_layer

# mlm_suite's name → ModernBERT's, for the fields that mean the same, both ways.
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
    "ffn_inner_dropout": "mlp_dropout",
}
# mlm_suite's fields that ModernBERT sets with one of the above, read on the way in; on the way back ModernBERT's
# one rate is the field above's (but a question answerer's classifier dropout, which is its qa_dropout).
_SHARED_FIELDS = {
    "attention_output_dropout": "attention_dropout",  # ModernBERT drops out the attention output with it too
    "qa_dropout": "classifier_dropout",
}
# The special tokens' ids, written back as the config holds them: ModernBERT's defaults are ids of its own tokenizer.
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")
_BIASES = ("attention_bias", "mlp_bias", "norm_bias", "classifier_bias")
_CLASSIFIER_ACTIVATIONS = ("tanh", "relu", "gelu")
# ModernBERT's module (after "layers.<n>.") → mlm_suite's.
_LAYER_MODULES = {
    "attn_norm": "attention_norm",
    "attn.Wqkv": "attention.qkv",
    "attn.Wo": "attention.out",
    "mlp_norm": "ffn_norm",
    "mlp.Wi": "ffn.up",
    "mlp.Wo": "ffn.down",
}
# ModernBERT's classes → mlm_suite's.
_ARCHITECTURES = {
    "ModernBertModel": MlmSuiteModel,
    "ModernBertForMaskedLM": MlmSuiteForMaskedLM,
    "ModernBertForSequenceClassification": MlmSuiteForSequenceClassification,
    "ModernBertForTokenClassification": MlmSuiteForTokenClassification,
    "ModernBertForQuestionAnswering": MlmSuiteForQuestionAnswering,
}
# ModernBERT's heads, the first part of their weights' names (the encoder's are under "model.").
_NATIVE_HEADS = ("head", "decoder", "classifier")
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
        **native_fields(native, {**_CONFIG_FIELDS, **_SHARED_FIELDS}),
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


def _renames(architecture: str | None) -> dict[str, str]:
    """ModernBERT's name prefixes outside the layers → mlm_suite's, for the class ``architecture``: the prediction
    head and the classifier go where it puts them; with no architecture that places them, they keep their names."""
    head, classifier = _HEAD_PLACES.get(architecture, (None, None))
    renames = {"embeddings.tok_embeddings.": "embeddings.word_embeddings.", "decoder.": "lm_head.decoder."}
    if head is not None:
        renames["head."] = head
    if classifier is not None:
        renames["classifier."] = classifier
    return renames


def _renamed(name: str, renames: dict[str, str], layer_modules: dict[str, str]) -> str:
    """``name`` renamed by ``layer_modules`` in a layer, else by the longest prefix of ``renames`` it starts with."""
    if re.fullmatch(r"layers\.\d+\..+", name):
        return rename_layer(name, r"layers\.(\d+)\.(.+)", "layers.{}.", layer_modules)
    prefix = max((prefix for prefix in renames if name.startswith(prefix)), key=len, default=None)
    return name if prefix is None else renames[prefix] + name.removeprefix(prefix)


def convert_modernbert_state_dict(state: dict[str, torch.Tensor], config: MlmSuiteConfig) -> dict[str, torch.Tensor]:
    """Rename ModernBERT weights to mlm_suite's; names with no counterpart are kept as they are.

    The prediction head (``head.``) goes where ``config.architectures`` says (a masked-LM folder is also known by its
    decoder); with no architecture that places it, it keeps its name.
    """
    state = {name.removeprefix("model."): tensor for name, tensor in state.items()}
    architecture = (config.architectures or [None])[0]
    if any(name.startswith("decoder.") for name in state):
        architecture = "ModernBertForMaskedLM"
    renames = _renames(architecture)
    return {_renamed(name, renames, _LAYER_MODULES): tensor for name, tensor in state.items()}


def native_modernbert_config(config: MlmSuiteConfig) -> dict:
    """ModernBERT's ``config.json`` fields for an mlm_suite config: ``use_bias`` for each of its bias switches, every
    layer's attention type, a RoPE base per layer type, the special tokens' ids as the config holds them. Its one
    prediction head's activation and classifier dropout are those of the head ``config.architectures`` names: a
    masked LM's transform applies ``hidden_act``, a question answerer drops out with ``qa_dropout``."""
    fields = native_config_fields(config, _CONFIG_FIELDS)
    head = (config.architectures or [MlmSuiteModel.__name__])[0]
    if head == MlmSuiteForMaskedLM.__name__:
        fields["classifier_activation"] = config.hidden_act
    if head == MlmSuiteForQuestionAnswering.__name__:
        fields["classifier_dropout"] = config.qa_dropout
    elif config.classifier_dropout is None:  # mlm_suite's heads then drop out with hidden_dropout_prob
        fields["classifier_dropout"] = config.hidden_dropout_prob
    local_theta = config.rope_theta if config.local_rope_theta is None else config.local_rope_theta
    return {
        **fields,
        **{name: getattr(config, name, None) for name in _TOKEN_IDS},
        **dict.fromkeys(_BIASES, config.use_bias),
        "layer_types": config.layer_types or ["full_attention"] * config.num_hidden_layers,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": config.rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
        },
    }


def native_modernbert_state_dict(
    weights: dict[str, torch.Tensor], config: MlmSuiteConfig, model_class: type
) -> dict[str, torch.Tensor]:
    """The way back of :func:`convert_modernbert_state_dict`, for the ``ModernBertFor*`` class ``model_class``
    converts from; the encoder's weights under ``model.``, but in the bare encoder."""
    architecture = next(name for name, ours in _ARCHITECTURES.items() if issubclass(model_class, ours))
    renames, layer_modules = inverted(_renames(architecture)), inverted(_LAYER_MODULES)
    prefix = "" if model_class is MlmSuiteModel else "model."
    native = {}
    for name, tensor in weights.items():
        name = _renamed(name, renames, layer_modules)
        native[name if name.split(".")[0] in _NATIVE_HEADS else prefix + name] = tensor
    return native


MODERNBERT = Family(
    name="ModernBERT",
    class_prefix="ModernBert",
    model_types=("modernbert",),
    architectures=_ARCHITECTURES,
    no_counterpart={"ModernBertForMultipleChoice": "mlm_suite has no multiple-choice head"},
    config=config_from_modernbert,
    rename=convert_modernbert_state_dict,
    head_fields=masked_lm_fields,
    native_config=native_modernbert_config,
    native_rename=native_modernbert_state_dict,
)

__all__ = [
    "MODERNBERT",
    "config_from_modernbert",
    "convert_modernbert_state_dict",
    "layer_types",
    "native_modernbert_config",
    "native_modernbert_state_dict",
    "rope_thetas",
]
