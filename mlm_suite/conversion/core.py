"""What converting any family's folder shares: reading its weights, the description each family module gives
(:class:`Family`), renaming layers and fusing separate query/key/value projections (and, for
:mod:`~mlm_suite.conversion.export_native`, the way back), choosing the mlm_suite class from the heads the weights
hold, loading the renamed weights, and carrying a sentence-transformers folder's pooling.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file

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
    MlmSuitePreTrainedModel,
)

# The heads each mlm_suite class holds, by the first part of their weights' names.
HEADS = {
    MlmSuiteModel: frozenset(),
    MlmSuiteForMaskedLM: frozenset({"lm_head"}),
    MlmSuiteForNextSentencePrediction: frozenset({"nsp_head"}),
    MlmSuiteForPreTraining: frozenset({"lm_head", "nsp_head"}),
    MlmSuiteForSequenceClassification: frozenset({"classifier"}),
    MlmSuiteForTokenClassification: frozenset({"classifier"}),
    MlmSuiteForQuestionAnswering: frozenset({"qa_outputs"}),
}
HEAD_NAMES = frozenset().union(*HEADS.values())
#: The classes whose encoder has no pooler: a source's pooler is left out of them.
WITHOUT_POOLER = (MlmSuiteForMaskedLM, MlmSuiteForTokenClassification, MlmSuiteForQuestionAnswering)
#: The config fields every family names as BERT does and mlm_suite takes as they are.
LABEL_FIELDS = ("problem_type", "id2label", "label2id")
#: The ``config.json`` field naming the family a folder was converted from (its ``model_type``), which
#: ``export-native`` returns it to. A BERT conversion writes none (BERT is the family tried first), so that what it
#: writes, the jobs' default MiniLM start included, stays as it was.
CONVERTED_FROM = "converted_from"

# sentence-transformers pooling flag → mlm_suite's name for it; classifier_pooling takes only cls and mean.
_SENTENCE_POOLING_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass(frozen=True)
class Family:
    """How one family's folders become mlm_suite folders; each family module defines one.

    ``config`` maps the source's ``config.json`` (a dict) onto an mlm_suite config, labels and ``problem_type``
    included, raising :class:`UsageError` for what mlm_suite cannot express; ``head_fields`` gives the fields that
    depend on the mlm_suite class the folder converts to (or refuses it). ``rename`` maps the weights, given that
    config, onto mlm_suite's names (encoder weights unprefixed, heads under their own names), keeping any
    name it has no counterpart for as it is, so that loading names it. ``dropped`` (name prefix → why) are weights
    left out on purpose, each prefix with a printed line.

    The way back (``export-native``), for a family whose classes transformers has: ``native_config`` writes the
    family's ``config.json`` fields for an mlm_suite config, as the family would hold them (what it cannot hold, it
    leaves at what it has: converting the result back shows the difference); ``native_rename`` maps mlm_suite's
    weights (as ``rename`` gives them) onto the names of the family's class that the mlm_suite class given converts
    from. A family without them (one whose code ships with its folders, ``trust_remote_code``) converts in, not out.
    ``tried_by_export``: whether export-native tries the family for a folder that names none (XLM-RoBERTa's classes
    compute what RoBERTa's do: a folder becomes one only when it names it).
    """

    name: str  # as people write it: "RoBERTa"
    class_prefix: str  # of the family's classes: "Roberta"
    model_types: tuple[str, ...]
    architectures: dict[str, type[MlmSuitePreTrainedModel]]
    no_counterpart: dict[str, str]
    config: Callable[[dict], MlmSuiteConfig]
    rename: Callable[[dict[str, torch.Tensor], MlmSuiteConfig], dict[str, torch.Tensor]]
    native_config: Callable[[MlmSuiteConfig], dict] | None = None
    native_rename: Callable[
        [dict[str, torch.Tensor], MlmSuiteConfig, type[MlmSuitePreTrainedModel]], dict[str, torch.Tensor]
    ] | None = None
    head_fields: Callable[[dict, type[MlmSuitePreTrainedModel]], dict] = lambda native, model_class: {}
    dropped: dict[str, str] = field(default_factory=dict)
    tried_by_export: bool = True

    @property
    def exports(self) -> bool:
        """Whether export-native writes folders of this family (it has the way back)."""
        return self.native_config is not None and self.native_rename is not None


def native_fields(native: dict, names: dict[str, str]) -> dict:
    """mlm_suite config fields from the source's ``config.json`` ``native``: ``names`` maps mlm_suite's name to the
    family's; fields the source does not set (or sets to null) are left to mlm_suite's defaults."""
    return {ours: native[theirs] for ours, theirs in names.items() if native.get(theirs) is not None}


def native_config_fields(config: MlmSuiteConfig, names: dict[str, str]) -> dict:
    """The way back of :func:`native_fields`: the family's fields (``names`` maps mlm_suite's name to the family's)
    from the mlm_suite ``config``; fields it leaves unset (or None) are left to the family's defaults."""
    return {theirs: getattr(config, ours) for ours, theirs in names.items() if getattr(config, ours, None) is not None}


def inverted(names: dict[str, str]) -> dict[str, str]:
    """A table of renames the other way round."""
    return {new: old for old, new in names.items()}


def read_state_dict(source: Path) -> dict[str, torch.Tensor]:
    """Read a folder's weights: ``model.safetensors`` (single or sharded) or ``pytorch_model.bin``.

    ``.bin`` files are read with ``weights_only=True``, so no pickled code runs. A missing or
    damaged file is a :class:`~mlm_suite.errors.UsageError` naming it.
    """
    index = source / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(read_json(index).get("weight_map", {}).values()))
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(_read_weights(source / shard))
        return state
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (source / name).exists():
            return _read_weights(source / name)
    raise UsageError(f"no model.safetensors or pytorch_model.bin in {source}")


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    try:
        if path.suffix == ".safetensors":
            return load_file(path)
        return torch.load(path, map_location="cpu", weights_only=True)
    # safetensors and torch raise their own error types for a truncated or corrupt file.
    except Exception as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UsageError(f"{path} cannot be read as weights ({reason}); is the file complete?") from error


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{path} cannot be read as JSON: {error}") from error


def legacy_layernorm_name(name: str) -> str:
    # Checkpoints converted from TF1 name LayerNorm parameters gamma/beta.
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")


def rename_layer(name: str, pattern: str, template: str, modules: dict[str, str]) -> str:
    """A layer's weight renamed: ``name`` matches ``pattern``, whose groups are the layer number and the rest,
    ``<module>.<parameter>``; it becomes ``template`` (formatted with the layer number) followed by
    ``modules[module].<parameter>``. A name whose module ``modules`` lacks stays as it is."""
    layer, rest = re.fullmatch(pattern, name).groups()
    module, _, parameter = rest.rpartition(".")
    return f"{template.format(layer)}{modules[module]}.{parameter}" if module in modules else name


def fuse_qkv(
    state: dict[str, torch.Tensor], converted: dict[str, torch.Tensor], num_layers: int, projections: Callable[[int], list[str]],
    family: str,
) -> None:
    """Concatenate each layer's query, key and value projections (``projections(layer)`` names their weights, less
    ``.weight``/``.bias``) into ``converted``'s ``layers.<n>.attention.qkv``."""
    for layer in range(num_layers):
        for kind in ("weight", "bias"):
            names = [f"{projection}.{kind}" for projection in projections(layer)]
            missing = [name for name in names if name not in state]
            if missing:
                raise UsageError(f"no {missing[0]} among {num_layers} {family} layers")
            converted[f"layers.{layer}.attention.qkv.{kind}"] = torch.cat([state[name] for name in names], dim=0)


def native_layers(
    weights: dict[str, torch.Tensor], num_layers: int, template: str, modules: dict[str, str],
    projections: Callable[[int], list[str]],
) -> dict[str, torch.Tensor]:
    """The way back of the layers' renaming and of :func:`fuse_qkv`: mlm_suite's ``layers.<n>.<module>`` weights
    under ``template.format(n)`` and the family's module name (``modules``: mlm_suite's → the family's), each fused
    QKV projection split into the three ``projections(n)`` names; weights outside the layers keep their names."""
    native = {}
    for name, tensor in weights.items():
        if not name.startswith("layers."):
            native[name] = tensor
        elif ".attention.qkv." not in name:  # split below
            native[rename_layer(name, r"layers\.(\d+)\.(.*)", template, modules)] = tensor
    for layer in range(num_layers):
        for kind in ("weight", "bias"):
            fused = f"layers.{layer}.attention.qkv.{kind}"
            if fused not in weights:
                raise UsageError(f"the weights hold no {fused}: not the {num_layers} layers config.json gives")
            for projection, part in zip(projections(layer), weights[fused].chunk(3, dim=0)):
                native[f"{projection}.{kind}"] = part
    return native


def native_names(
    weights: dict[str, torch.Tensor], model_class: type[MlmSuitePreTrainedModel], prefix: str,
    heads: dict[str, str], classification_head: dict[str, str] | None = None,
) -> dict[str, torch.Tensor]:
    """Weights whose encoder part is under the family's names (unprefixed) and whose heads are under mlm_suite's,
    under the names of the family's class: the heads renamed by ``heads`` (the family's name → mlm_suite's, the
    conversion's table) and, for a sequence classifier, ``classification_head`` (whose dense layer is mlm_suite's
    pooler); the encoder under ``prefix`` (``"bert"``), but in the bare encoder. A head weight neither table names
    keeps its name."""
    renames = dict(heads)
    if classification_head and issubclass(model_class, MlmSuiteForSequenceClassification):
        renames.update(classification_head)
    renames = inverted(renames)
    prefix = "" if model_class is MlmSuiteModel else f"{prefix}."

    def native_name(name: str) -> str:
        if name in renames:
            return renames[name]
        return name if name.split(".")[0] in HEAD_NAMES else prefix + name

    return {native_name(name): tensor for name, tensor in weights.items()}


def target_class(family: Family, architecture: str | None, heads: frozenset[str]) -> type[MlmSuitePreTrainedModel]:
    """The mlm_suite class for the source's ``architecture`` (``config.json``'s, or None) whose weights hold ``heads``.

    The weights decide, since many folders hold more heads than their ``architectures`` names
    (``bert-base-uncased`` names ``BertForMaskedLM`` and holds the NSP head too); the architecture tells a
    sequence classifier from a token classifier (both are ``classifier.*``) and must not name a head the
    weights lack.
    """
    if architecture in family.no_counterpart:
        raise UsageError(f"{architecture} cannot be converted: {family.no_counterpart[architecture]}")
    named = family.architectures.get(architecture)
    if named is not None and not HEADS[named] <= heads:
        missing = sorted(HEADS[named] - heads)
        raise UsageError(f"config.json names {architecture}, but the weights hold no {' or '.join(missing)} head")
    if heads == {"classifier"}:
        if named is None:
            prefix = family.class_prefix
            raise UsageError(
                f"classifier.weight: config.json's architectures ({architecture}) does not say whether it is a "
                f"sequence or a token classifier; set it to {prefix}ForSequenceClassification or "
                f"{prefix}ForTokenClassification"
            )
        return named
    for model_class, class_heads in HEADS.items():
        if class_heads == heads:
            return model_class
    raise UsageError(f"the weights hold the heads {sorted(heads)}, which no one mlm_suite model holds together")


def check_weights_are_the_family_s(
    source: Path, family: Family, native: dict, state: dict[str, torch.Tensor], rename: Callable[[], dict]
) -> dict[str, torch.Tensor]:
    """``rename()`` (the family's renaming of ``source``'s weights ``state``), refused in one line naming the folder
    when the weights are not the family's that ``config.json`` (``native``) gives: its layers are not where the
    family keeps them (another family's weights beside this one's config.json, or weights cut short)."""
    try:
        weights = rename()
        layers = native.get("num_hidden_layers", native.get("n_layers", 1))
        if layers and "layers.0.attention.qkv.weight" not in weights:
            raise UsageError(f"no first {family.name} layer")
    except UsageError as error:
        example = next((name for name in sorted(state) if re.search(r"layers?\.0\.", name)), None)
        named = f"their layers are named like {example}" if example else "they hold no layers"
        raise UsageError(
            f"{source}: config.json is a config of {family.name} (model_type {native.get('model_type')!r}), but the "
            f"weights are not {family.name}'s ({error}; {named}): config.json and the weights must come from one model"
        ) from None
    return weights


def load_converted_weights(
    model: MlmSuitePreTrainedModel, weights: dict[str, torch.Tensor], source: str = "the checkpoint"
) -> None:
    """Load weights renamed by a family's ``rename`` into ``model``, an mlm_suite model of the same heads.

    A weight the model lacks or one it has no counterpart for is a :class:`~mlm_suite.errors.UsageError` naming it;
    an MLM decoder is tied to the word embeddings unless ``config.tie_word_embeddings`` is off.
    """
    if model.base_model is not model:  # a head: the encoder's weights live under "encoder.", the head's beside it
        heads = {name for name, _ in model.named_children()} - {model.base_model_prefix}
        weights = {(name if name.split(".")[0] in heads else f"encoder.{name}"): t for name, t in weights.items()}
    tied = model.config.tie_word_embeddings
    if tied:
        weights = {name: t for name, t in weights.items() if name != "lm_head.decoder.weight"}  # the source ties it too
    expected = model.state_dict()
    for name, tensor in weights.items():
        if name in expected and expected[name].shape != tensor.shape:
            raise UsageError(
                f"{source}'s {name} has shape {tuple(tensor.shape)}, but {type(model).__name__} built from its "
                f"config.json needs {tuple(expected[name].shape)}"
            )
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [name for name in missing if not (tied and name == "lm_head.decoder.weight")]
    if missing or unexpected:
        # A name no rename fits keeps its source name, less the "encoder." prefix added above.
        unexpected = [name.removeprefix("encoder.") if model.base_model is not model else name for name in unexpected]
        raise UsageError(
            f"{source}'s weights do not match {type(model).__name__}: missing {missing}, no counterpart for {unexpected}"
        )
    if hasattr(model, "lm_head"):
        model.tie_weights()


def sentence_transformers_pooling(source: Path) -> tuple[dict, list[str]]:
    """The config fields that make a sentence-transformers folder's pooling mlm_suite's, and notes on what is not carried.

    Its Pooling module (``1_Pooling/config.json``, found through ``modules.json``) gives ``sentence_pooling``
    (``MlmSuiteForSentenceEmbedding``) and ``classifier_pooling`` (the pooler of the sequence heads), a Normalize
    module ``normalize_embeddings``. A folder without ``modules.json`` is a plain encoder: ``({}, [])``.
    """
    modules_file = source / "modules.json"
    if not modules_file.exists():
        return {}, []
    fields: dict = {}
    notes = []
    for module in read_json(modules_file):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind == "Transformer":
            continue
        if kind == "Normalize":
            fields["normalize_embeddings"] = True
        elif kind == "Pooling":
            pooling_file = source / module.get("path", "1_Pooling") / "config.json"
            settings = read_json(pooling_file) if pooling_file.exists() else {}
            modes = [mode for flag, mode in _SENTENCE_POOLING_MODES.items() if settings.get(flag)]
            if len(modes) != 1 or modes[0] not in ("cls", "mean", "max"):
                notes.append(f"sentence-transformers pooling {modes} ({pooling_file}) not carried: mlm_suite pools by cls, mean or max")
                continue
            fields["sentence_pooling"] = modes[0]
            if modes[0] in ("cls", "mean"):
                fields["classifier_pooling"] = modes[0]
            else:
                notes.append(f"classifier_pooling stays 'cls': the sequence heads' pooler takes cls or mean, not {modes[0]!r}")
        else:
            notes.append(f"sentence-transformers module {module.get('path') or kind} ({kind}) dropped: mlm_suite has no counterpart")
    return fields, notes


__all__ = [
    "HEADS",
    "CONVERTED_FROM",
    "HEAD_NAMES",
    "LABEL_FIELDS",
    "WITHOUT_POOLER",
    "Family",
    "check_weights_are_the_family_s",
    "fuse_qkv",
    "inverted",
    "legacy_layernorm_name",
    "load_converted_weights",
    "native_config_fields",
    "native_fields",
    "native_layers",
    "native_names",
    "read_json",
    "read_state_dict",
    "rename_layer",
    "sentence_transformers_pooling",
    "target_class",
]
