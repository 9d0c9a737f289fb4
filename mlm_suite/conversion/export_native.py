"""``export_native_checkpoint``: an mlm_suite folder becomes the folder of the transformers class that computes
what it computes (``BertForMaskedLM``, ``RobertaForSequenceClassification``, ``DistilBertModel``,
``ModernBertForTokenClassification``, ...), which loads without ``trust_remote_code``; an mlm_suite folder that no
such class computes is refused in one line naming the options with no counterpart. See
docs/models.md#exporting-to-transformers-classes.

A family's class computes what the folder does when converting the exported folder back would give the same
mlm_suite configuration: the check runs the family's own conversion (``Family.config``, ``Family.head_fields``) on
the ``config.json`` its ``native_config`` writes, so the two directions cannot disagree; each option is compared by
the value it acts with (no ``layer_types`` is every layer full, a window or RoPE base no layer uses is none). Options
the class does not read (the pooler's in a class without one, the CRF's tagging scheme, those of sentence
embeddings) are not compared; dropout rates and the losses' settings change training, not the outputs, and one the
class has no place for is left out with a printed line.
"""

from __future__ import annotations

import inspect
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from transformers import CONFIG_MAPPING

import mlm_suite.model as model_code
from mlm_suite.errors import UsageError
from mlm_suite.model import (
    MlmSuiteConfig,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
    MlmSuiteModel,
    MlmSuitePreTrainedModel,
)
from mlm_suite.model_files import (
    TOKENIZER_VOCABULARY_FILES,
    check_model_folder,
    check_tokenizer_files,
    read_json_object,
    staged_model_folder,
)

from mlm_suite.conversion.checkpoint import TOKENIZER_FILES
from mlm_suite.conversion.families import EXPORTED, FAMILIES, TRIED_BY_EXPORT
from mlm_suite.conversion.core import CONVERTED_FROM, Family, read_state_dict


_OPTIONS = [name for name in inspect.signature(MlmSuiteConfig.__init__).parameters if name not in ("self", "kwargs")]
# Options no exported class reads: those of sentence embeddings (a class no family has), the tagging scheme (use_crf
# is compared), sparse prediction, which changes no logit, and the position table's unread rows (a RoBERTa converted
# before they were kept has none, and gets them back as zeros).
_UNREAD = {
    "sentence_pooling", "normalize_embeddings", "contrastive_temperature", "learn_temperature", "contrastive_symmetric",
    "tagging_scheme", "sparse_prediction", "position_offset",
}  # fmt: skip
_POOLER = {"classifier_pooling", "classifier_activation", "pooler_dropout"}
# Options that change training, not the outputs: one the class has no place for is left out with a printed line.
_TRAINING = frozenset({
    "hidden_dropout_prob", "attention_probs_dropout_prob", "attention_output_dropout", "classifier_dropout",
    "pooler_dropout", "qa_dropout", "ffn_inner_dropout", "ffn_output_dropout", "class_weights", "label_smoothing",
})  # fmt: skip
# The dropouts that default to hidden_dropout_prob.
_DROPOUTS_OF_HIDDEN = ("attention_output_dropout", "classifier_dropout", "ffn_output_dropout")


@dataclass
class _Export:
    """What exporting to one family gives: the class, its config and weights, or what it cannot express."""

    family: Family
    class_name: str | None = None
    config: transformers.PreTrainedConfig | None = None
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.class_name or self.family.name


def _read_options(model_class: type[MlmSuitePreTrainedModel], pooled: bool) -> list[str]:
    """The mlm_suite options a model of ``model_class`` reads (``pooled``: it has a pooler)."""
    unread = set(_UNREAD) | (set() if pooled else _POOLER)
    if not issubclass(model_class, (MlmSuiteForSequenceClassification, MlmSuiteForTokenClassification)):
        unread |= {"classifier_dropout", "class_weights", "label_smoothing"}
    if not issubclass(model_class, MlmSuiteForQuestionAnswering):
        unread.add("qa_dropout")
    return [name for name in _OPTIONS if name not in unread]


def _effective(config: MlmSuiteConfig, name: str):
    """The value an option acts with: the dropouts that default to ``hidden_dropout_prob`` take it; ``layer_types``
    names every layer's attention; the window and each RoPE base count only where a layer uses them."""
    value = getattr(config, name)
    kinds = config.layer_types or ["full_attention"] * config.num_hidden_layers
    rotary, sliding = config.position_embedding_type == "rotary", "sliding_attention" in kinds
    if name in _DROPOUTS_OF_HIDDEN and value is None:
        return config.hidden_dropout_prob
    if name == "layer_types":
        return kinds
    if name == "local_attention":
        return value if sliding else None
    if name == "rope_theta":
        return value if rotary and "full_attention" in kinds else None
    if name == "local_rope_theta":
        return (config.rope_theta if value is None else value) if rotary and sliding else None
    return value


def _export(
    family: Family, config: MlmSuiteConfig, model_class: type[MlmSuitePreTrainedModel], weights: dict[str, torch.Tensor]
) -> _Export:
    """Exporting to ``family``: its class for ``model_class`` and what it computes otherwise than ``config``."""
    export = _Export(family)
    classes = (name for name, ours in family.architectures.items() if issubclass(model_class, ours))
    export.class_name = next(classes, None)  # the first: ElectraModel, not ElectraForPreTraining
    if export.class_name is None:
        export.refused.append(model_class.__name__)
        return export
    pooled = "pooler.dense.weight" in weights
    export.config = CONFIG_MAPPING[family.model_types[0]](**family.native_config(config))
    if issubclass(model_class, MlmSuiteForQuestionAnswering):
        export.config.num_labels = 2  # the width of the native QA head (start, end), which mlm_suite's always has
    native = export.config.to_dict()
    try:
        back = family.config(native)
        back.update(family.head_fields(native, family.architectures[export.class_name]))
    except UsageError as error:  # what the family's conversion refuses (RoBERTa's MLM head with hidden_act='relu')
        export.refused.append(str(error))
        return export
    for name in _read_options(model_class, pooled):
        ours, theirs = _effective(config, name), _effective(back, name)
        if ours != theirs and name in _TRAINING:
            export.left_out.append(f"{name}={ours!r} left out ({export.class_name} has {theirs!r})")
        elif ours != theirs:
            export.refused.append(f"{name}={ours!r} (it has {theirs!r})")
    if export.refused:
        return export

    export.weights = family.native_rename(weights, config, model_class)
    with torch.device("meta"):  # the names and shapes alone
        model = _native_model(export, model_class, pooled)
        expected = {name: tensor.shape for name, tensor in model.state_dict().items()}
    given = export.weights
    unexpected = sorted(set(given) - set(expected))
    if unexpected:  # a pooler ElectraModel has no place for
        export.refused.append(f"the weights {', '.join(unexpected)}")
    missing = sorted(set(expected) - set(given))
    shapes = sorted(name for name in set(expected) & set(given) if given[name].shape != expected[name])
    if missing or shapes:  # a folder whose weights are not the ones its config.json describes
        raise UsageError(
            f"the weights do not fit the {export.class_name} config.json describes: missing {missing}, of another "
            f"shape {shapes}"
        )
    return export


def _native_model(
    export: _Export, model_class: type[MlmSuitePreTrainedModel], pooled: bool
) -> transformers.PreTrainedModel:
    native_class = getattr(transformers, export.class_name)
    # BertModel and RobertaModel hold a pooler unless told otherwise; the others have none
    without_pooler = model_class is MlmSuiteModel and not pooled
    if without_pooler and "add_pooling_layer" in inspect.signature(native_class.__init__).parameters:
        return native_class(export.config, add_pooling_layer=False)
    return native_class(export.config)


def _mlm_suite_weights(source: Path, config: MlmSuiteConfig) -> dict[str, torch.Tensor]:
    """The folder's weights as the conversion names them (encoder unprefixed, heads under their own names), the MLM
    decoder a tied folder saves once given back under its name."""
    weights = {name.removeprefix("encoder."): tensor for name, tensor in read_state_dict(source).items()}
    if "lm_head.decoder.bias" in weights and "lm_head.decoder.weight" not in weights and config.tie_word_embeddings:
        weights["lm_head.decoder.weight"] = weights["embeddings.word_embeddings.weight"]
    return weights


def _chosen_export(
    source: Path, config: MlmSuiteConfig, model_class: type[MlmSuitePreTrainedModel], weights: dict[str, torch.Tensor],
    family: str | None,
) -> _Export:
    """The export to ``family``, else to the family the folder was converted from, else to the first family of
    :data:`~mlm_suite.conversion.families.TRIED_BY_EXPORT` that computes what the folder does; what the family cannot
    express is a UsageError."""
    asked = family or getattr(config, CONVERTED_FROM, None)
    if asked is None:
        exports = []
        for name in TRIED_BY_EXPORT:
            exports.append(_export(FAMILIES[name], config, model_class, weights))
            if not exports[-1].refused:
                return exports[-1]
        closest = min(exports, key=lambda export: len(export.refused))
        raise UsageError(
            f"no transformers class computes what {source} does; the closest, {closest.name}, has no counterpart for "
            + ", ".join(closest.refused)
        )
    why = "asked for" if family else f"config.json's {CONVERTED_FROM}"
    if asked not in EXPORTED:
        what = "has no transformers class to write" if asked in FAMILIES else "is none mlm_suite knows"
        raise UsageError(f"the family {why}, {asked!r}, {what}: export-native writes {', '.join(EXPORTED)}")
    export = _export(FAMILIES[asked], config, model_class, weights)
    if export.refused:
        raise UsageError(
            f"{source} cannot be exported as {export.family.name} ({why}): {export.name} has no counterpart for "
            + ", ".join(export.refused)
        )
    return export


def export_native_checkpoint(src_dir: str | Path, dst_dir: str | Path, family: str | None = None) -> Path:
    """Write the mlm_suite folder ``src_dir`` as the folder ``dst_dir`` of the transformers class that computes the
    same outputs; return ``dst_dir``.

    The family is ``family`` (one of :data:`~mlm_suite.conversion.families.EXPORTED`), else the one ``config.json``'s
    ``converted_from`` names, else the first of :data:`~mlm_suite.conversion.families.TRIED_BY_EXPORT` whose class
    computes what the folder does; the class is that
    family's for the folder's head (``MlmSuiteForMaskedLM`` → ``BertForMaskedLM``, a pair classifier →
    ``*ForSequenceClassification``).
    RoBERTa's position table keeps the ``pad_token_id + 1`` rows before its first position (``position_offset``).
    Tokenizer files are copied. A :class:`~mlm_suite.errors.UsageError` in one line names what has no counterpart
    (rotary positions, pre-norm layers or a gated feed-forward but in ModernBERT, token types in it, a CRF, sentence
    embeddings, ...) before ``dst_dir`` is created; a dropout rate or loss setting the class has no place for is left
    out with a line on stderr.
    """
    source, destination = Path(src_dir), Path(dst_dir)
    check_model_folder(source)
    fields = read_json_object(source / "config.json")
    if fields.get("model_type") != MlmSuiteConfig.model_type:
        raise UsageError(
            f"{source} holds a {fields.get('model_type')!r} model, not an mlm_suite one: export-native writes "
            "mlm_suite folders as transformers' own classes"
        )
    try:
        config = MlmSuiteConfig.from_dict(fields)
    except ValueError as error:
        raise UsageError(f"{source / 'config.json'}: {error}") from None
    architecture = (config.architectures or ["MlmSuiteModel"])[0]
    model_class = getattr(model_code, architecture, None)
    if not (isinstance(model_class, type) and issubclass(model_class, MlmSuitePreTrainedModel)):
        raise UsageError(f"{source} holds a {architecture}, not an mlm_suite model")
    if not any(issubclass(model_class, ours) for each in FAMILIES.values() for ours in each.architectures.values()):
        names = ", ".join(dict.fromkeys(each.name for each in FAMILIES.values()))
        raise UsageError(f"{source} holds an {architecture}: {names} have no such class")
    weights = _mlm_suite_weights(source, config)

    export = _chosen_export(source, config, model_class, weights, family)
    if any((source / name).exists() for name in TOKENIZER_VOCABULARY_FILES):
        check_tokenizer_files(source)  # copied as they are: a damaged one is refused before anything is written

    model = _native_model(export, model_class, "pooler.dense.weight" in weights)
    model.load_state_dict(export.weights, strict=True)
    model.to(weights["embeddings.word_embeddings.weight"].dtype)
    with staged_model_folder(destination) as staging:
        model.save_pretrained(staging)
        for filename in TOKENIZER_FILES:
            if (source / filename).exists():
                shutil.copy(source / filename, staging / filename)
    for note in export.left_out:
        print(f"mlm_suite: exporting {source}: {note}: it changes training, not the outputs", file=sys.stderr)
    return destination


__all__ = ["export_native_checkpoint"]
