"""Convert Hugging Face BERT checkpoints into mlm_suite checkpoints.

A BERT folder — the bare encoder or a ``BertFor*`` head that mlm_suite has a counterpart for (masked LM,
next-sentence prediction, pretraining, sequence classification, token classification, extractive QA), with or
without the ``bert.`` prefix, as safetensors or a torch ``.bin`` — becomes an mlm_suite folder that computes the
same outputs, keeps the labels and ``problem_type``, and names the mlm_suite class in ``architectures``. BERT's
separate query/key/value projections are concatenated into mlm_suite's fused QKV projection. A
sentence-transformers folder's pooling is carried into the config (see :func:`sentence_transformers_pooling`).
Anything that cannot be carried is an error naming it, or, when it is left out on purpose, a printed line.
See docs/models.md#converting-bert-checkpoints.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from mlm_suite.errors import UsageError
from mlm_suite.model_files import check_tokenizer_files, found_files, read_json_object, staged_model_folder
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
    "classifier_dropout",
    "problem_type",
    "id2label",
    "label2id",
    "tie_word_embeddings",
)

# BERT name (after the "bert." prefix is removed) → mlm_suite encoder name.
_LAYER_RENAMES = (
    (r"attention\.output\.dense\.(weight|bias)$", r"attention.out.\1"),
    (r"attention\.output\.LayerNorm\.(weight|bias)$", r"attention_norm.\1"),
    (r"intermediate\.dense\.(weight|bias)$", r"ffn.up.\1"),
    (r"output\.dense\.(weight|bias)$", r"ffn.down.\1"),
    (r"output\.LayerNorm\.(weight|bias)$", r"ffn_norm.\1"),
)
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
# The heads each mlm_suite class holds, by the first part of their weights' names.
_HEADS = {
    MlmSuiteModel: frozenset(),
    MlmSuiteForMaskedLM: frozenset({"lm_head"}),
    MlmSuiteForNextSentencePrediction: frozenset({"nsp_head"}),
    MlmSuiteForPreTraining: frozenset({"lm_head", "nsp_head"}),
    MlmSuiteForSequenceClassification: frozenset({"classifier"}),
    MlmSuiteForTokenClassification: frozenset({"classifier"}),
    MlmSuiteForQuestionAnswering: frozenset({"qa_outputs"}),
}
_HEAD_NAMES = frozenset().union(*_HEADS.values())
_WITHOUT_POOLER = (MlmSuiteForMaskedLM, MlmSuiteForTokenClassification, MlmSuiteForQuestionAnswering)
_ARCHITECTURES = {
    "BertModel": MlmSuiteModel,
    "BertForMaskedLM": MlmSuiteForMaskedLM,
    "BertForNextSentencePrediction": MlmSuiteForNextSentencePrediction,
    "BertForPreTraining": MlmSuiteForPreTraining,
    "BertForSequenceClassification": MlmSuiteForSequenceClassification,
    "BertForTokenClassification": MlmSuiteForTokenClassification,
    "BertForQuestionAnswering": MlmSuiteForQuestionAnswering,
}
_NO_COUNTERPART = {
    "BertForMultipleChoice": "mlm_suite has no multiple-choice head",
    "BertLMHeadModel": "it is a left-to-right language model and mlm_suite's encoder is bidirectional",
}

# sentence-transformers pooling flag → mlm_suite's name for it; classifier_pooling takes only cls and mean.
_SENTENCE_POOLING_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def load_bert_state_dict(source: Path) -> dict[str, torch.Tensor]:
    """Read a folder's weights: ``model.safetensors`` (single or sharded) or ``pytorch_model.bin``.

    ``.bin`` files are read with ``weights_only=True``, so no pickled code runs. A missing or
    damaged file is a :class:`~mlm_suite.errors.UsageError` naming it.
    """
    index = source / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(_read_json(index).get("weight_map", {}).values()))
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


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"{path} cannot be read as JSON: {error}") from error


def config_from_bert(bert_config: dict) -> MlmSuiteConfig:
    """An mlm_suite config equivalent to a BERT ``config.json`` dictionary (labels and ``problem_type`` included)."""
    position_type = bert_config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise UsageError(f"position_embedding_type={position_type!r} BERT checkpoints cannot be converted")
    if bert_config.get("is_decoder") or bert_config.get("add_cross_attention"):
        raise UsageError("decoder BERT checkpoints (is_decoder / add_cross_attention) cannot be converted")
    fields = {name: bert_config[name] for name in _BERT_CONFIG_FIELDS if bert_config.get(name) is not None}
    return MlmSuiteConfig(**fields)


def convert_bert_state_dict(state: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Rename BERT weights to mlm_suite's names (encoder weights unprefixed, heads under their own names).

    Names with no counterpart are kept as they are, so that loading them reports them.
    """
    state = {_legacy_layernorm_name(name): tensor for name, tensor in state.items()}
    state = {name.removeprefix("bert."): tensor for name, tensor in state.items()}
    converted: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name in _HEAD_RENAMES:
            converted[_HEAD_RENAMES[name]] = tensor
        elif name == "cls.predictions.decoder.bias":
            converted.setdefault("lm_head.decoder.bias", tensor)  # the same tensor as cls.predictions.bias
        elif name.startswith("embeddings."):
            if name.endswith(("position_ids", "token_type_ids")):
                continue  # buffers, which mlm_suite computes
            converted[name.replace("embeddings.LayerNorm.", "embeddings.norm.")] = tensor
        elif name.startswith("encoder.layer."):
            if re.search(r"\.attention\.self\.(query|key|value)\.(weight|bias)$", name):
                continue  # fused below
            converted[_layer_name(name)] = tensor
        else:
            converted[name] = tensor
    for layer in range(num_layers):
        prefix = f"encoder.layer.{layer}.attention.self."
        for kind in ("weight", "bias"):
            names = [f"{prefix}{projection}.{kind}" for projection in ("query", "key", "value")]
            missing = [name for name in names if name not in state]
            if missing:
                raise UsageError(f"checkpoint is missing {missing}; it does not hold {num_layers} BERT layers")
            converted[f"layers.{layer}.attention.qkv.{kind}"] = torch.cat([state[name] for name in names], dim=0)
    return converted


def _layer_name(name: str) -> str:
    """``encoder.layer.3.output.dense.weight`` → ``layers.3.ffn.down.weight``; a name no rename fits stays as it is."""
    layer, rest = re.fullmatch(r"encoder\.layer\.(\d+)\.(.*)", name).groups()
    for pattern, replacement in _LAYER_RENAMES:
        if re.match(pattern, rest):
            return f"layers.{layer}.{re.sub(pattern, replacement, rest, count=1)}"
    return name


def _legacy_layernorm_name(name: str) -> str:
    # Checkpoints converted from TF1 name LayerNorm parameters gamma/beta.
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")


def target_class(architecture: str | None, heads: frozenset[str]) -> type[MlmSuitePreTrainedModel]:
    """The mlm_suite class for a BERT ``architecture`` (``config.json``'s, or None) whose weights hold ``heads``.

    The weights decide, since many BERT folders hold more heads than their ``architectures`` names
    (``bert-base-uncased`` names ``BertForMaskedLM`` and holds the NSP head too); the architecture tells a
    sequence classifier from a token classifier (both are ``classifier.*``) and must not name a head the
    weights lack.
    """
    if architecture in _NO_COUNTERPART:
        raise UsageError(f"{architecture} cannot be converted: {_NO_COUNTERPART[architecture]}")
    named = _ARCHITECTURES.get(architecture)
    if named is not None and not _HEADS[named] <= heads:
        missing = sorted(_HEADS[named] - heads)
        raise UsageError(f"config.json names {architecture}, but the weights hold no {' or '.join(missing)} head")
    if heads == {"classifier"}:
        if named is None:
            raise UsageError(
                f"classifier.weight: config.json's architectures ({architecture}) does not say whether it is a "
                "sequence or a token classifier; set it to BertForSequenceClassification or BertForTokenClassification"
            )
        return named
    for model_class, class_heads in _HEADS.items():
        if class_heads == heads:
            return model_class
    raise UsageError(f"the weights hold the heads {sorted(heads)}, which no one mlm_suite model holds together")


def load_bert_weights(model: MlmSuitePreTrainedModel, weights: dict[str, torch.Tensor], source: str = "the checkpoint") -> None:
    """Load weights renamed by :func:`convert_bert_state_dict` into ``model``, an mlm_suite model of the same heads.

    A weight the model lacks or one it has no counterpart for is a :class:`~mlm_suite.errors.UsageError` naming it;
    an MLM decoder is tied to the word embeddings unless ``config.tie_word_embeddings`` is off.
    """
    if model.base_model is not model:  # a head: the encoder's weights live under "encoder."
        weights = {(name if name.split(".")[0] in _HEAD_NAMES else f"encoder.{name}"): t for name, t in weights.items()}
    tied = model.config.tie_word_embeddings
    if tied:
        weights = {name: t for name, t in weights.items() if name != "lm_head.decoder.weight"}  # BERT ties it too
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [name for name in missing if not (tied and name == "lm_head.decoder.weight")]
    if missing or unexpected:
        # A name no rename fits keeps its BERT name, less the "encoder." prefix added above.
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
    module ``normalize_embeddings``. A folder without ``modules.json`` is a plain BERT: ``({}, [])``.
    """
    modules_file = source / "modules.json"
    if not modules_file.exists():
        return {}, []
    fields: dict = {}
    notes = []
    for module in _read_json(modules_file):
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind == "Transformer":
            continue
        if kind == "Normalize":
            fields["normalize_embeddings"] = True
        elif kind == "Pooling":
            pooling_file = source / module.get("path", "1_Pooling") / "config.json"
            settings = _read_json(pooling_file) if pooling_file.exists() else {}
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


def convert_bert_checkpoint(
    src_dir: str | Path, dst_dir: str | Path, classifier_pooling: str | None = None
) -> Path:
    """Convert the HF BERT folder ``src_dir`` into an mlm_suite folder ``dst_dir``; return ``dst_dir``.

    The model class follows the source's heads (:func:`target_class`): MLM + NSP →
    ``MlmSuiteForPreTraining``, MLM → ``MlmSuiteForMaskedLM``, NSP → ``MlmSuiteForNextSentencePrediction``,
    ``BertForSequenceClassification`` / ``BertForTokenClassification`` / ``BertForQuestionAnswering`` → their
    mlm_suite heads with ``id2label``, ``label2id`` and ``problem_type``, none → ``MlmSuiteModel`` (with the
    pooler when present). ``classifier_pooling`` (``cls`` or ``mean``) overrides the pooling of the sequence
    heads, which is otherwise BERT's ``cls``, or the pooling a sentence-transformers folder was trained with.
    Tokenizer files are copied. What is left out on purpose (a pooler the head does not use, a
    sentence-transformers module) is printed on stderr, one line each. Every check runs before ``dst_dir``
    is created. The result loads with ``AutoModel*.from_pretrained(dst, trust_remote_code=True)`` with or
    without mlm_suite installed.
    """
    source, destination = Path(src_dir), Path(dst_dir)
    if not source.is_dir():
        what = "is not a folder" if source.exists() else "does not exist"
        raise UsageError(f"{source} {what}; a BERT checkpoint is a folder holding config.json and its weights")
    config_path = source / "config.json"
    if not config_path.exists():
        raise UsageError(f"{config_path} does not exist; is {source} a BERT checkpoint folder? ({found_files(source)})")
    bert_config = read_json_object(config_path)
    model_type = bert_config.get("model_type")
    architecture = (bert_config.get("architectures") or [None])[0]
    if model_type not in (None, "bert"):
        already = " (already an mlm_suite folder: nothing to convert)" if model_type == "mlm_suite" else ""
        raise UsageError(f"{source} holds a {model_type!r} checkpoint, not a BERT one{already}")
    if model_type is None and architecture is not None and not str(architecture).startswith("Bert"):
        raise UsageError(f"{source} holds a {architecture} checkpoint (config.json's architectures), not a BERT one")
    if classifier_pooling not in (None, "cls", "mean"):
        raise UsageError(f"classifier_pooling must be cls or mean, got {classifier_pooling!r}")
    config = config_from_bert(bert_config)
    pooling, notes = sentence_transformers_pooling(source)
    if classifier_pooling is not None:
        pooling["classifier_pooling"] = classifier_pooling
    config.update(pooling)
    weights = convert_bert_state_dict(load_bert_state_dict(source), config.num_hidden_layers)

    model_class = target_class(architecture, frozenset(name.split(".")[0] for name in weights) & _HEAD_NAMES)
    if model_class is MlmSuiteModel:
        model = MlmSuiteModel(config, add_pooling_layer="pooler.dense.weight" in weights)
    else:
        model = model_class(config)
    if model_class in _WITHOUT_POOLER:
        pooler = sorted(name for name in weights if name.startswith("pooler."))
        if pooler:
            notes.append(f"BERT's pooler ({', '.join(pooler)}) dropped: {model_class.__name__} does not use one")
            weights = {name: t for name, t in weights.items() if not name.startswith("pooler.")}
    load_bert_weights(model, weights, str(source))
    if (source / "tokenizer.json").exists() or (source / "vocab.txt").exists():
        check_tokenizer_files(source)  # copied as they are: a damaged one is refused before anything is written

    with staged_model_folder(destination) as staging:
        model.save_pretrained(staging)
        for filename in TOKENIZER_FILES:
            if (source / filename).exists():
                shutil.copy(source / filename, staging / filename)
    for note in notes:
        print(f"mlm_suite: converting {source}: {note}", file=sys.stderr)
    return destination
