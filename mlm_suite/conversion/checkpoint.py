"""``convert_checkpoint``: a Hugging Face folder of any family of :data:`~mlm_suite.conversion.families.REGISTRY` becomes an mlm_suite folder that
computes the same outputs, keeps the labels and ``problem_type``, names the mlm_suite class in ``architectures`` (and
the family, but BERT, in ``converted_from``) and carries the tokenizer and a sentence-transformers folder's pooling.
Anything that cannot be carried is an error naming it, or, when it is left out on purpose, a printed line. See
docs/models.md#converting-checkpoints.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from transformers import CONFIG_MAPPING, AutoTokenizer

from mlm_suite.errors import UsageError
from mlm_suite.model import MlmSuiteModel
from mlm_suite.model_files import (
    TOKENIZER_SETTINGS_FILES,
    TOKENIZER_VOCABULARY_FILES,
    check_tokenizer_files,
    check_vocabulary,
    found_files,
    read_json_object,
    staged_model_folder,
)

from mlm_suite.conversion.core import (
    CONVERTED_FROM,
    HEAD_NAMES,
    WITHOUT_POOLER,
    Family,
    check_weights_are_the_family_s,
    load_converted_weights,
    read_state_dict,
    sentence_transformers_pooling,
    target_class,
)
from mlm_suite.conversion.families import FAMILIES, REGISTRY

#: The tokenizer's files, copied as they are: WordPiece, byte-level BPE (vocab.json + merges.txt), SentencePiece.
TOKENIZER_FILES = (*TOKENIZER_VOCABULARY_FILES, "merges.txt", *TOKENIZER_SETTINGS_FILES)


def source_family(source: Path, native: dict) -> Family:
    """The family of the folder ``source`` whose ``config.json`` is ``native``, by its ``model_type`` (or, in a
    config without one, by the class its ``architectures`` names; with neither, BERT)."""
    model_type = native.get("model_type")
    architecture = (native.get("architectures") or [None])[0]
    supported = f"it converts {', '.join(sorted(FAMILIES))}"
    if model_type is None and architecture is not None:
        named = [family for family in REGISTRY if str(architecture).startswith(family.class_prefix)]
        if not named:
            raise UsageError(
                f"{source} holds a {architecture} checkpoint (config.json's architectures), which mlm_suite cannot "
                f"convert ({supported})"
            )
        return named[0]
    if model_type is not None and model_type not in FAMILIES:
        already = " (already an mlm_suite folder: nothing to convert)" if model_type == "mlm_suite" else ""
        raise UsageError(f"{source} holds a {model_type!r} checkpoint, which mlm_suite cannot convert ({supported}){already}")
    return FAMILIES[model_type or "bert"]


def convert_checkpoint(src_dir: str | Path, dst_dir: str | Path, classifier_pooling: str | None = None) -> Path:
    """Convert the Hugging Face folder ``src_dir`` (a family of :data:`FAMILIES`) into an mlm_suite folder ``dst_dir``;
    return ``dst_dir``.

    The model class follows the source's heads (:func:`~mlm_suite.conversion.core.target_class`): masked LM (and
    BERT's NSP) → ``MlmSuiteForMaskedLM`` / ``MlmSuiteForPreTraining`` / ``MlmSuiteForNextSentencePrediction``,
    sequence classification / token classification / question answering → their mlm_suite heads with
    ``id2label``, ``label2id`` and ``problem_type``, none → ``MlmSuiteModel`` (with the pooler when present).
    ``config.json``'s ``converted_from`` names the family (BERT's folders are left without it), for ``export-native``.
    ``classifier_pooling`` (``cls`` or ``mean``) overrides the pooling of the sequence heads, which is otherwise the
    first token, or the pooling a sentence-transformers folder was trained with. Tokenizer files are copied. What
    is left out on purpose (a pooler the head does not use, ELECTRA's replaced-token-detection head, a
    sentence-transformers module) is printed on stderr, one line each. Every check runs before ``dst_dir`` is
    created. The result loads with ``AutoModel*.from_pretrained(dst, trust_remote_code=True)`` with or without
    mlm_suite installed.
    """
    source, destination = Path(src_dir), Path(dst_dir)
    if not source.is_dir():
        what = "is not a folder" if source.exists() else "does not exist"
        raise UsageError(f"{source} {what}; a checkpoint is a folder holding config.json and its weights")
    config_path = source / "config.json"
    if not config_path.exists():
        raise UsageError(f"{config_path} does not exist; is {source} a checkpoint folder? ({found_files(source)})")
    native = read_json_object(config_path)
    family = source_family(source, native)
    architecture = (native.get("architectures") or [None])[0]
    if classifier_pooling not in (None, "cls", "mean"):
        raise UsageError(f"classifier_pooling must be cls or mean, got {classifier_pooling!r}")
    # The family's own defaults stand for what its config.json leaves out (RoBERTa's pad_token_id is 1); a family
    # whose code ships with its folders has none in transformers.
    model_type = family.model_types[0]
    native = {**(CONFIG_MAPPING[model_type]().to_dict() if model_type in CONFIG_MAPPING else {}), **native}
    config = family.config(native)
    state = read_state_dict(source)
    weights = check_weights_are_the_family_s(source, family, native, state, lambda: family.rename(state, config))
    notes = []
    for prefix, why in family.dropped.items():
        left_out = sorted(name for name in weights if name.startswith(prefix))
        if left_out:
            notes.append(f"{family.name}'s {prefix.rstrip('.')} ({', '.join(left_out)}) dropped: {why}")
            weights = {name: t for name, t in weights.items() if not name.startswith(prefix)}

    model_class = target_class(family, architecture, frozenset(name.split(".")[0] for name in weights) & HEAD_NAMES)
    pooling, pooling_notes = sentence_transformers_pooling(source)
    if classifier_pooling is not None:
        pooling["classifier_pooling"] = classifier_pooling
    config.update({**family.head_fields(native, model_class), **pooling})
    if family is not REGISTRY[0]:  # BERT's conversions record none: what they write stays as it was
        config.update({CONVERTED_FROM: family.model_types[0]})
    if model_class is MlmSuiteModel:
        model = MlmSuiteModel(config, add_pooling_layer="pooler.dense.weight" in weights)
    else:
        model = model_class(config)
    if model_class in WITHOUT_POOLER:
        pooler = sorted(name for name in weights if name.startswith("pooler."))
        if pooler:
            notes.append(f"{family.name}'s pooler ({', '.join(pooler)}) dropped: {model_class.__name__} does not use one")
            weights = {name: t for name, t in weights.items() if not name.startswith("pooler.")}
    load_converted_weights(model, weights, str(source))
    if any((source / name).exists() for name in TOKENIZER_VOCABULARY_FILES):
        check_tokenizer_files(source)  # copied as they are: a damaged one is refused before anything is written
        check_vocabulary(AutoTokenizer.from_pretrained(source), config, str(source), str(source))

    with staged_model_folder(destination) as staging:
        model.save_pretrained(staging)
        for filename in TOKENIZER_FILES:
            if (source / filename).exists():
                shutil.copy(source / filename, staging / filename)
    for note in pooling_notes + notes:
        print(f"mlm_suite: converting {source}: {note}", file=sys.stderr)
    return destination


__all__ = ["TOKENIZER_FILES", "convert_checkpoint", "source_family"]
