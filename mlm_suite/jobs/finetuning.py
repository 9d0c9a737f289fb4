"""Shared pieces of the fine-tuning jobs (``finetune_ner``, ``finetune_classification``, ``finetune_pair``).

* the default model: the real all-MiniLM-L6-v2 weights converted once into an mlm_suite folder;
* flags: transformers' example-script names (``run_glue.py``, ``run_ner.py``), the Hub ones (``--config_name
  --cache_dir --model_revision --token --trust_remote_code``) included (:mod:`mlm_suite.jobs.arguments`);
* data: CoNLL column files, JSON lines, CSV, Hub datasets (any split as validation/test:
  ``--validation_split_name``, ``--test_split_name``), fixed-seed 80/10/10 splits;
* labels: ``id2label``/``label2id`` for the config, checked against a fine-tuned checkpoint's;
* training arguments with the jobs' defaults, saving (model, tokenizer, metrics, model card) and
  ``--push_to_hub`` once the folder is complete (:func:`write_card`), all through
  :class:`mlm_suite.training.trainer.JobTrainer`, which writes no pickle (``training_args.json``).
"""

from __future__ import annotations

import atexit
import csv
import dataclasses
import json
import os
import random
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from transformers import AutoConfig, PretrainedConfig, Trainer, TrainerCallback, TrainingArguments

from mlm_suite.data import resources
from mlm_suite.convert import convert_bert_checkpoint
from mlm_suite.errors import UsageError
from mlm_suite.jobs.arguments import HubArguments, JobArgumentParser, hub_split_names, pretrained_kwargs
from mlm_suite.jobs.checkpoints import JobTrainingArguments, resume_checkpoint, stage_checkpoint
from mlm_suite.training.freezing import freeze_encoder
from mlm_suite.model import MlmSuiteConfig
from mlm_suite.model.modeling_mlm_suite import has_placeholder_labels
from mlm_suite.training.cards import (
    CardDataset,
    CardScore,
    base_model_fields,
    markdown_table,
    model_card_data,
    usage_fields,
    write_model_card,
)
from mlm_suite.training.trainer import JobTrainer, training_arguments_as_json
from mlm_suite.training.controls import early_stopping_callback


# --------------------------------------------------------------------------------------------
# Default model
# --------------------------------------------------------------------------------------------
def resolve_model_path(model_name_or_path: str | None, training_args: TrainingArguments) -> str:
    """``model_name_or_path``, or the converted MiniLM folder when it is not given."""
    if model_name_or_path:
        return model_name_or_path
    with training_args.main_process_first(desc="converting all-MiniLM-L6-v2 to mlm_suite"):
        return str(resources.converted_minilm_dir())


def load_model(model_class: Any, path: str, config: Any, model_args: ModelArguments) -> Any:
    """``model_class`` (a model or ``AutoModelFor*`` class) with ``path``'s weights and ``config``'s labels, or,
    with ``--init random``, the same architecture newly initialised (call ``set_seed`` first). The Hub flags
    (``--cache_dir --model_revision --token --trust_remote_code``) go to ``from_pretrained``."""
    if model_args.init == "random":
        if not hasattr(model_class, "from_config"):
            return model_class(config)
        remote = {"trust_remote_code": True} if getattr(model_args, "trust_remote_code", False) else {}
        return model_class.from_config(config, **remote)
    return model_class.from_pretrained(
        path, config=config, ignore_mismatched_sizes=model_args.ignore_mismatched_sizes, **pretrained_kwargs(model_args)
    )


def load_config(model_path: str, model_args: ModelArguments) -> PretrainedConfig:
    """The config of ``--config_name`` (else of the model), loaded with the Hub flags."""
    return AutoConfig.from_pretrained(model_args.config_name or model_path, **pretrained_kwargs(model_args))


def load_tokenizer(model_path: str, model_args: ModelArguments) -> Any:
    """The tokenizer of ``--tokenizer_name`` (else of the model), loaded with the Hub flags."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_path, **pretrained_kwargs(model_args))


def mlm_suite_checkpoint(model_name_or_path: str, **pretrained: Any) -> str:
    """An mlm_suite folder holding ``model_name_or_path``: the folder itself, or a BERT folder converted.

    A BERT checkpoint (``BertModel``, ``BertForMaskedLM``, ``BertForPreTraining``) is converted with
    :func:`~mlm_suite.convert.convert_bert_checkpoint` into a temporary folder, removed when the process exits.
    ``pretrained`` (the Hub flags, :meth:`~mlm_suite.jobs.arguments.HubArguments.pretrained_kwargs`) go to
    ``AutoConfig.from_pretrained``.
    """
    config = AutoConfig.from_pretrained(model_name_or_path, **pretrained)
    if isinstance(config, MlmSuiteConfig):
        return model_name_or_path
    if config.model_type != "bert":
        raise ValueError(
            f"--model_name_or_path {model_name_or_path} holds a {config.model_type!r} model; this job takes "
            "mlm_suite or BERT checkpoints"
        )
    folder = tempfile.mkdtemp(prefix="mlm_suite-converted-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    print(f"converting the BERT checkpoint {model_name_or_path} to mlm_suite (in {folder}, removed at exit)", file=sys.stderr)
    return str(convert_bert_checkpoint(model_name_or_path, folder))


def initialisation(model_path: str, model_args: ModelArguments) -> dict[str, str]:
    """What the card says of the starting weights (an empty dict for the usual pretrained start)."""
    if model_args.init == "pretrained":
        return {}
    return {"initialisation": f"random (the architecture and tokenizer of `{Path(model_path).name}`, not its weights)"}


RANDOM_START = {"base_model_metadata": "", "base_model_text": "randomly initialised weights (no pretraining)"}


def card_base_model(model_path: str, model_args: ModelArguments) -> str | None:
    """The checkpoint a card names as its base model: none for a random initialisation."""
    return model_path if model_args.init == "pretrained" else None


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------
@dataclass
class FinetuneTrainingArguments(JobTrainingArguments):
    """``TrainingArguments`` with defaults suited to these jobs.

    Differences from the Trainer's defaults: train, evaluate and (when there is a test split)
    predict unless told otherwise (``--do_train False`` ...), batch size 32, a linear warmup over
    the first 10 % of the steps (post-norm encoders can collapse to a constant prediction when
    fine-tuned at full learning rate from the first step), no intermediate checkpoints
    (``--save_strategy steps`` brings them back) and logging every 10 steps.
    Each job subclasses it to set its own ``output_dir``, epochs and learning rate.
    """

    do_train: bool = field(default=True, metadata={"help": "Run training."})
    do_eval: bool = field(default=True, metadata={"help": "Evaluate on the validation split."})
    do_predict: bool = field(default=True, metadata={"help": "Evaluate on the test split when there is one."})
    per_device_train_batch_size: int = field(default=32, metadata={"help": "Batch size per device for training."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Batch size per device for evaluation."})
    warmup_steps: float = field(default=0.1, metadata={"help": "Warmup steps; below 1, a fraction of all steps."})
    save_strategy: str = field(default="no", metadata={"help": "Checkpoint strategy: no, steps, epoch, best."})
    logging_steps: float = field(default=10, metadata={"help": "Log every X update steps."})
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "Stop after this many evaluations without a better validation score (the job's main metric) "
            "and keep the best model. Evaluates every epoch unless --eval_strategy says otherwise."
        },
    )
    early_stopping_threshold: float = field(
        default=0.0, metadata={"help": "Smallest gain of the validation score that counts as an improvement."}
    )


@dataclass
class ModelArguments(HubArguments):
    """Which checkpoint to fine-tune and how much of it to train (and the Hub flags of :class:`HubArguments`)."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Model folder (mlm_suite or HF BERT). Default: all-MiniLM-L6-v2 converted to mlm_suite."},
    )
    config_name: str | None = field(default=None, metadata={"help": "Config folder or Hub id, if not the model's."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer folder, if not the model's."})
    train_last_k_layers: int | None = field(
        default=None,
        metadata={
            "help": "Freeze the encoder except its last k layers (0 = train the head only). "
            "Default (or -1): train everything."
        },
    )
    ignore_mismatched_sizes: bool = field(
        default=False,
        metadata={"help": "Allow a fine-tuned checkpoint whose labels differ from the data's: train a new head."},
    )
    classifier_pooling: str | None = field(
        default=None,
        metadata={"help": "Sequence and pair heads of mlm_suite models: cls or mean. Default: the checkpoint's."},
    )
    init: Literal["pretrained", "random"] = field(
        default="pretrained",
        metadata={
            "help": "pretrained: start from the checkpoint's weights. random: the checkpoint's architecture and "
            "tokenizer with newly initialised weights (seeded by --seed), the baseline that shows what pretraining brought."
        },
    )


def argument_parser(dataclass_types: Sequence[type], **kwargs: Any) -> Any:
    """An ``HfArgumentParser`` named after the command that runs the job.

    Its ``prog`` is :func:`~mlm_suite.jobs.distributed.command_prog` (``mlm-suite finetune-ner``,
    ``python -m mlm_suite.jobs.finetune_ner``, or the script's name). On a bad flag it prints a
    one-line usage and the error instead of the hundred-odd flags of ``TrainingArguments``
    (``--help`` still lists them all). Flags renamed to transformers' names keep their old names
    (:class:`~mlm_suite.jobs.arguments.JobArgumentParser`).
    """
    from mlm_suite.jobs.distributed import command_prog

    parser = JobArgumentParser(dataclass_types, prog=command_prog(), **kwargs)
    parser.format_usage = lambda: f"usage: {parser.prog} [options]  ({parser.prog} --help lists them)\n"
    return parser


def parse_flags(parser: Any, argv: Sequence[str] | None) -> tuple:
    """``parser.parse_args_into_dataclasses(argv)``; an unknown flag is an argparse error (exit status 2).

    ``TrainingArguments`` get the data-loading defaults of their device (:func:`feed_the_device`).
    """
    *parsed, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if remaining:
        parser.error(f"unrecognized arguments: {' '.join(remaining)}")
    for arguments in parsed:
        if isinstance(arguments, TrainingArguments):
            feed_the_device(arguments, sys.argv[1:] if argv is None else argv)
    return tuple(parsed)


def flag_given(name: str, argv: Sequence[str]) -> bool:
    """Whether ``--name`` (or ``--name=value``) is among the command-line flags ``argv``."""
    return any(item.split("=")[0] == f"--{name}" for item in argv)


def flags_given(parser: Any, argv: list[str], names: list[str]) -> set[str]:
    """Which of the options ``names`` the command line ``argv`` sets, however it spells them.

    Unlike :func:`flag_given` this asks the parser itself, so ``--name value``,
    ``--name=value`` and the prefixes argparse accepts (``--learning_r 1e-3``) all count: a value given always wins
    over a mode's default. Call it after a successful parse (``--help`` and bad values have exited by then).
    """
    unset = object()
    saved = {name: parser.get_default(name) for name in names}
    parser.set_defaults(**dict.fromkeys(names, unset))
    try:
        namespace, _ = parser.parse_known_args(argv)
    finally:
        parser.set_defaults(**saved)
    return {name for name in names if getattr(namespace, name, unset) is not unset}


def gpu_loader_workers() -> int:
    """Data-loader workers per process on a GPU: up to 4, half of this node's cores shared by its processes."""
    processes_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return max(1, min(4, (os.cpu_count() or 2) // (2 * processes_here)))


def feed_the_device(training_args: TrainingArguments, argv: Sequence[str]) -> None:
    """On a GPU, let the host run ahead of the device (flags given explicitly win).

    * Batches are collated in worker processes while the device computes. On CPU the main process collates
      (``dataloader_num_workers`` 0, the Trainer's default): workers would take cores from the step, which on CPU
      is the bottleneck. Seeded masks are a function of each example's index and the epoch, so they do not depend
      on the number of workers; the loader keeps pinned memory (the Trainer's default) for asynchronous copies.
    * Batches are copied to the device without blocking (``accelerator_config.non_blocking``, from the pinned
      memory the loader gives): a blocking copy waits for every step queued before it, so the host could not
      prepare step k + 1 while the device computes step k.
    * ``logging_nan_inf_filter`` is off: the Trainer's filter reads every step's loss on the host
      (``torch.isnan(loss) or ...``), a synchronisation with the same effect. A NaN loss then shows in the
      logged loss instead of being replaced by the running mean.
    """
    if training_args.device.type != "cuda":
        return
    if not flag_given("dataloader_num_workers", argv):
        training_args.dataloader_num_workers = gpu_loader_workers()
    if not flag_given("accelerator_config", argv):
        training_args.accelerator_config.non_blocking = True
    if not flag_given("logging_nan_inf_filter", argv):
        training_args.logging_nan_inf_filter = False


def parse_arguments(dataclass_types: Sequence[type], argv: Sequence[str] | None) -> tuple:
    """Parse ``argv`` (a list of flags, or a single ``.json`` file of them) into the dataclasses."""
    parser = argument_parser(dataclass_types)
    argv = list(argv) if argv is not None else None
    if argv is not None and len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(json_file=argv[0])
    return parse_flags(parser, argv)


# Flag checks by flag name, for any job's arguments (dataclasses or argparse namespaces); None is never checked.
_AT_LEAST = {
    **dict.fromkeys(
        ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps", "batch_size",
         "max_seq_length", "max_train_samples", "max_eval_samples", "max_predict_samples", "max_lemmas", "n_pairs",
         "early_stopping_patience", "mini_batch_size", "preprocessing_num_workers"),
        1,
    ),
    # pairs come in positive/negative twos; anisotropy compares pairs of sentences
    **dict.fromkeys(("coherence_train_pairs", "coherence_eval_pairs", "num_sentences"), 2),
    "train_last_k_layers": -1,
}
_POSITIVE = ("intermediate_num_train_epochs", "adam_epsilon", "temperature")
_NON_NEGATIVE = ("learning_rate", "weight_decay", "early_stopping_threshold")  # lr 0: a run that changes nothing
# name -> (low, high, whether high itself is allowed); low is always allowed except for test_fraction
_UNIT_INTERVAL = {
    "label_smoothing_factor": (0.0, 1.0, False),
    "adam_beta1": (0.0, 1.0, False),
    "adam_beta2": (0.0, 1.0, False),
    "nsp_probability": (0.0, 1.0, True),
    "test_fraction": (0.0, 1.0, False),
}
_INPUT_FILES = ("train_file", "validation_file", "test_file", "intermediate_train_file", "corpus_file", "queries_file",
                "test_corpus_file", "test_queries_file")
# A folder or a Hub id; a value written as a path ("/...", "./...", "~/...", "a/b/c") must exist.
_MODEL_SOURCES = ("model_name_or_path", "config_name", "tokenizer_name")


def validate_flags(*arguments: Any) -> None:
    """Check the flag values that need neither data nor model, before a job reads or writes anything.

    Works on every job's argument objects (``HfArgumentParser`` dataclasses, ``argparse``
    namespaces) by flag name: batch sizes, sample limits and ``--max_seq_length`` at least 1,
    a learning rate not below 0, a positive number of epochs (unless ``--max_steps`` decides),
    probabilities within [0, 1), input files and model folders that exist. Values that need the model (``--max_seq_length``
    against its positions) are :func:`check_max_seq_length`'s.

    Raises:
        UsageError: naming the first offending flag and its value.
    """
    names = (*_AT_LEAST, *_POSITIVE, *_NON_NEGATIVE, *_UNIT_INTERVAL, *_INPUT_FILES, *_MODEL_SOURCES,
             "num_train_epochs", "max_steps")
    for args in arguments:
        values = {name: getattr(args, name, None) for name in names}

        def given(name: str) -> bool:
            return values[name] is not None

        for name, low in _AT_LEAST.items():
            if given(name) and values[name] < low:
                raise UsageError(f"--{name} must be at least {low}, got {values[name]}")
        for name in _POSITIVE:
            if given(name) and not values[name] > 0:
                raise UsageError(f"--{name} must be positive, got {values[name]}")
        if given("num_train_epochs") and (values["max_steps"] or -1) <= 0 and not values["num_train_epochs"] > 0:
            raise UsageError(f"--num_train_epochs must be positive (or give --max_steps), got {values['num_train_epochs']}")
        for name in _NON_NEGATIVE:
            if given(name) and values[name] < 0:
                raise UsageError(f"--{name} must not be negative, got {values[name]}")
        for name, (low, high, high_allowed) in _UNIT_INTERVAL.items():
            if not given(name):
                continue
            value = values[name]
            low_ok = value > low if name == "test_fraction" else value >= low
            if not (low_ok and (value <= high if high_allowed else value < high)):
                interval = ("(" if name == "test_fraction" else "[") + f"{low:g}, {high:g}" + ("]" if high_allowed else ")")
                raise UsageError(f"--{name} must lie in {interval}, got {value}")
        for name in _INPUT_FILES:
            if given(name):
                path = Path(values[name])
                if not path.exists():
                    raise UsageError(f"--{name} {path}: no such file")
                if not path.is_file():
                    raise UsageError(f"--{name} {path} is not a file")
        for name in _MODEL_SOURCES:
            value = values[name]
            if isinstance(value, str) and value and not Path(value).expanduser().exists():
                if value.startswith(("/", ".", "~")) or value.count("/") > 1 or "\\" in value:
                    raise UsageError(f"--{name} {value}: no such folder (nor a Hub id: those read 'name' or 'owner/name')")


def check_max_seq_length(
    max_seq_length: int, config: PretrainedConfig, model_path: str, tokenizer: Any = None, pair: bool = False
) -> None:
    """``--max_seq_length`` against the model (and its tokenizer), before anything is trained or written.

    A model with a table of learned positions (``max_position_embeddings``; every BERT, and
    mlm_suite models with ``position_embedding_type="absolute"``) cannot take longer inputs; rotary
    positions have no such limit. With a tokenizer, a row must hold its special tokens and one more.

    Raises:
        UsageError: naming the flag, the limit and the model.
    """
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and getattr(config, "position_embedding_type", "absolute") != "rotary" and max_seq_length > limit:
        raise UsageError(
            f"--max_seq_length {max_seq_length} exceeds the {limit} positions the model {model_path} has "
            f"(max_position_embeddings); pass --max_seq_length {limit} or less"
        )
    if tokenizer is not None:
        needed = tokenizer.num_special_tokens_to_add(pair=pair) + 1
        if max_seq_length < needed:
            raise UsageError(
                f"--max_seq_length {max_seq_length} leaves no room for text: a row holds {needed - 1} special "
                f"tokens; pass --max_seq_length {needed} or more"
            )


# --------------------------------------------------------------------------------------------
# Reading data
# --------------------------------------------------------------------------------------------
def read_conll(
    path: str | Path, with_lines: bool = False
) -> list[tuple[list[str], list[str]]] | tuple[list[tuple[list[str], list[str]]], list[list[int]]]:
    """Sentences of a CoNLL column file as ``(tokens, tags)``.

    One token per line with the token in the first column and the tag in the last one (columns
    in between, e.g. POS and chunk tags, are ignored); a blank line ends a sentence. Lines
    starting with ``-DOCSTART-`` (document separators) are skipped.

    With ``with_lines``, returns ``(sentences, lines)`` where ``lines[i][j]`` is the 1-based line
    number of token ``j`` of sentence ``i``, for error messages that point into the file
    (:func:`mlm_suite.data.tagging.line_locator`).

    Raises:
        ValueError: a non-blank line with fewer than two columns, as ``"<path> line <n>: ..."``.
    """
    sentences: list[tuple[list[str], list[str]]] = []
    lines: list[list[int]] = []
    tokens: list[str] = []
    tags: list[str] = []
    numbers: list[int] = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            columns = line.split()
            if not columns:
                if tokens:
                    sentences.append((tokens, tags))
                    lines.append(numbers)
                    tokens, tags, numbers = [], [], []
                continue
            if columns[0] == "-DOCSTART-":
                continue
            if len(columns) < 2:
                raise ValueError(
                    f"{path} line {line_number}: expected 'token ... tag' (at least two columns), got {line.strip()!r}"
                )
            tokens.append(columns[0])
            tags.append(columns[-1])
            numbers.append(line_number)
    if tokens:
        sentences.append((tokens, tags))
        lines.append(numbers)
    return (sentences, lines) if with_lines else sentences


def read_json_lines(path: str | Path) -> list[tuple[int, Any]]:
    """The JSON values of a JSON-lines file with their 1-based line numbers (blank lines skipped)."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    records.append((line_number, json.loads(line)))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path} line {line_number}: not a JSON object ({error})") from None
    return records


def read_numbered_records(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """Rows of a JSON-lines (``.json``/``.jsonl``) or CSV/TSV file as dictionaries, with the line each starts on."""
    path = Path(path)
    if path.suffix in (".json", ".jsonl"):
        records = read_json_lines(path)
        for line, record in records:
            if not isinstance(record, dict):
                raise UsageError(f"{path} line {line}: expected a JSON object, got {type(record).__name__}")
        return records
    if path.suffix in (".csv", ".tsv"):
        with open(path, encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle, delimiter="\t" if path.suffix == ".tsv" else ",")
            return [(reader.line_num, record) for record in reader]
    raise UsageError(f"{path}: unsupported file type {path.suffix!r}; use .json/.jsonl (JSON lines), .csv or .tsv")


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines (``.json``/``.jsonl``) or CSV/TSV file as dictionaries."""
    return [record for _, record in read_numbered_records(path)]


def column(records: Sequence[Mapping[str, Any]], name: str, source: str) -> list[Any]:
    """The values of column ``name``; a missing column raises naming the columns there are."""
    if records and name not in records[0]:
        raise ValueError(f"{source} has no column {name!r}; its columns are {sorted(records[0])}")
    for index, record in enumerate(records):
        if name not in record:
            raise ValueError(f"{source}, row {index}: no column {name!r}")
    return [record[name] for record in records]


def load_hub_splits(
    dataset_name: str,
    dataset_config_name: str | None,
    *,
    validation_split_name: str = "validation",
    test_split_name: str | None = "test",
    require_train: bool = False,
    **load_kwargs: Any,
) -> dict[str, Any]:
    """Train/validation/test splits of a Hub dataset (needs network access to the Hub), or of a
    ``DatasetDict`` saved on disk (``save_to_disk``; ``dataset_name`` is then its folder), keyed by role.

    The validation and test roles are played by the splits ``validation_split_name`` and ``test_split_name``
    (``--validation_split_name validation_matched`` for MNLI; ``test_split_name`` None: no test role), checked by
    :func:`~mlm_suite.jobs.arguments.hub_split_names`. ``load_kwargs`` go to ``load_dataset`` (``cache_dir``,
    ``token``). The splits stay ``datasets.Dataset`` objects (Arrow), as loaded.

    Raises:
        UsageError: a split name the dataset lacks (naming the splits it has); no train split with ``require_train``.
    """
    from datasets import load_dataset, load_from_disk

    if (Path(dataset_name).expanduser() / "dataset_dict.json").is_file():
        if dataset_config_name:
            raise UsageError(f"--dataset_config_name is for Hub datasets; {dataset_name} is a saved dataset folder")
        raw = load_from_disk(str(Path(dataset_name).expanduser()))
    else:
        raw = load_dataset(dataset_name, dataset_config_name, **load_kwargs)
    names = hub_split_names(raw, dataset_name, validation_split_name, test_split_name)
    if require_train and "train" not in names:
        raise UsageError(f"{dataset_name} has no train split (splits: {list(raw)})")
    return {role: raw[name] for role, name in names.items()}


def class_label_names(dataset: Any, column_name: str) -> list[str] | None:
    """Names of a Hub dataset's ``ClassLabel`` column (or of a sequence of them), else None."""
    feature = dataset.features[column_name]
    feature = getattr(feature, "feature", feature)  # Sequence(ClassLabel) for token tags
    return list(feature.names) if hasattr(feature, "names") else None


#: The value ``datasets`` stores for a hidden label in a ``ClassLabel`` column (GLUE's test splits).
HIDDEN_LABEL = -1


def is_missing_label(value: Any) -> bool:
    """Whether a label read from a file is absent: null/None, or an empty (blank) string such as a CSV's empty cell."""
    return value is None or (isinstance(value, str) and not value.strip())


def split_is_labelled(labels: Sequence[Any], source: str, missing: Any = is_missing_label) -> bool:
    """True when every row of a split has a label, False when none has (an unlabelled split, to predict only).

    ``missing(label)`` says whether a row's label is absent (default :func:`is_missing_label`). An empty split
    counts as labelled.

    Raises:
        UsageError: some rows have labels and others not, naming ``source`` (the split), the count and the value.
    """
    absent = [label for label in labels if missing(label)]
    if not absent:
        return True
    if len(absent) == len(labels):
        return False
    raise UsageError(
        f"{source}: {len(absent)} of {len(labels)} rows have no label (label {absent[0]!r}) and the others have "
        "labels; label every row of a split, or none (an unlabelled split is predicted, not scored)"
    )


def hub_split_labels(raw: Mapping[str, Any], column_name: str, dataset_name: str) -> dict[str, list[Any] | None]:
    """The labels of each split of a Hub dataset, or None for a split without labels (to predict, not score).

    A ``ClassLabel`` column gives class names; -1 (:data:`HIDDEN_LABEL`, how ``datasets`` stores a hidden
    label) or None is no label and is never mapped to a name. Another column gives its values, None being no
    label; a split other than ``train`` whose values are all -1 when ``train`` has no -1 (GLUE's STS-B test
    split, a float column) is unlabelled too, whereas -1 among other values is a real label there.

    Raises:
        UsageError: a split with labels on some rows only (:func:`split_is_labelled`), or a class id out of range.
    """
    found: dict[str, list[Any] | None] = {}
    train_has_minus_one = (
        "train" in raw and class_label_names(raw["train"], column_name) is None
        and HIDDEN_LABEL in list(raw["train"][column_name])
    )
    for split, dataset in raw.items():
        source = f"{dataset_name}[{split}] (column {column_name!r})"
        values = list(dataset[column_name])
        names = class_label_names(dataset, column_name)
        if names is None:
            all_hidden = (split != "train" and bool(values) and not train_has_minus_one
                          and all(value == HIDDEN_LABEL for value in values))
            found[split] = values if split_is_labelled(values, source) and not all_hidden else None
            continue
        if not split_is_labelled(values, source, lambda value: value is None or value == HIDDEN_LABEL):
            found[split] = None
            continue
        for row, value in enumerate(values):
            if not 0 <= value < len(names):
                raise UsageError(f"{source}, row {row}: class id {value} outside the {len(names)} classes {names}")
        found[split] = [names[value] for value in values]
    return found


def hub_tag_sequences(dataset: Any, column_name: str, source: str) -> list[list[Any]]:
    """The tag sequences of a Hub split: names for a ``Sequence(ClassLabel)`` column, else the values.

    Raises:
        UsageError: a hidden tag (-1 or None: the token-classification jobs cannot predict an unlabelled
            split; leave it out) or a class id out of range. No tag is ever mapped from -1.
    """
    names = class_label_names(dataset, column_name)
    sequences = []
    hidden = 0
    for tags in dataset[column_name]:
        hidden += sum(tag is None or (names is not None and tag == HIDDEN_LABEL) for tag in tags)
        sequences.append(list(tags))
    if hidden:
        raise UsageError(
            f"{source}: {hidden} tags are hidden (-1 or None) in column {column_name!r}; token-classification "
            "splits must be tagged throughout (leave an unlabelled split out)"
        )
    if names is None:
        return sequences
    for row, tags in enumerate(sequences):
        for tag in tags:
            if not 0 <= tag < len(names):
                raise UsageError(f"{source}, row {row}: tag id {tag} outside the {len(names)} tags {names}")
    return [[names[tag] for tag in tags] for tags in sequences]


def split_80_10_10(items: Sequence[Any], seed: int) -> tuple[list[Any], list[Any], list[Any]]:
    """Shuffle with ``random.Random(seed)`` and cut into 80 % train, 10 % validation, 10 % test."""
    shuffled = list(items)
    random.Random(seed).shuffle(shuffled)
    train_end = int(round(0.8 * len(shuffled)))
    validation_end = train_end + int(round(0.1 * len(shuffled)))
    return shuffled[:train_end], shuffled[train_end:validation_end], shuffled[validation_end:]


def first_n(items: list[Any], limit: int | None) -> list[Any]:
    """The first ``limit`` items (all when ``limit`` is None): ``--max_*_samples``."""
    return items if limit is None else items[:limit]


# --------------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------------
def resolve_label_list(
    checkpoint_config: PretrainedConfig,
    data_labels: Sequence[str],
    model_path: str,
    ignore_mismatched_sizes: bool,
) -> list[str]:
    """The label order of the model to train.

    A checkpoint that was fine-tuned already (its config names real labels) keeps its label
    order when it knows every label of the data, so its classification head is reused. If the
    data has labels it lacks, that is an error unless ``ignore_mismatched_sizes`` asks for a
    new head over the data's labels.
    """
    if has_placeholder_labels(checkpoint_config):
        return list(data_labels)
    model_labels = [checkpoint_config.id2label[i] for i in sorted(checkpoint_config.id2label, key=int)]
    missing = sorted(set(data_labels) - set(model_labels))
    if not missing:
        return model_labels
    if ignore_mismatched_sizes:
        return list(data_labels)
    raise ValueError(
        f"{model_path} was fine-tuned with the labels {model_labels}, which lack {missing} found in the data. "
        "Pass --ignore_mismatched_sizes to replace its classification head with one for the data's labels "
        f"{list(data_labels)}."
    )


def label_maps(labels: Sequence[str]) -> tuple[dict[int, str], dict[str, int]]:
    """``id2label`` and ``label2id`` for a label list (ids in list order)."""
    return dict(enumerate(labels)), {label: index for index, label in enumerate(labels)}


def apply_freezing(model: Any, train_last_k_layers: int | None) -> str:
    """Freeze per ``--train_last_k_layers``; return a line describing what trains."""
    counts = freeze_encoder(model, train_last_k_layers)
    total = counts["trainable"] + counts["frozen"]
    if train_last_k_layers is None or train_last_k_layers == -1:
        what = "all layers"
    else:
        what = f"the head and the last {train_last_k_layers} encoder layer(s)"
    return f"{what} ({counts['trainable'] / 1e6:.2f} M of {total / 1e6:.2f} M parameters trainable)"


# --------------------------------------------------------------------------------------------
# Metrics of sequence / pair tasks
# --------------------------------------------------------------------------------------------
def classification_metrics(eval_pred: Any) -> dict[str, float]:
    """Accuracy and macro-averaged F1 over the classes present in gold or predictions."""
    logits = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
    predictions = np.asarray(logits).argmax(axis=-1)
    gold = np.asarray(eval_pred.label_ids)
    f1s = []
    for label in np.union1d(gold, predictions):
        tp = np.sum((predictions == label) & (gold == label))
        denominator = np.sum(predictions == label) + np.sum(gold == label)
        f1s.append(2 * tp / denominator)
    return {"accuracy": float(np.mean(predictions == gold)), "f1": float(np.mean(f1s)), "n_examples": int(gold.size)}


def regression_metrics(eval_pred: Any) -> dict[str, float]:
    """Pearson and Spearman correlation and mean squared error."""
    import pandas as pd

    scores = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
    predicted = pd.Series(np.asarray(scores, dtype=np.float64).reshape(-1))
    gold = pd.Series(np.asarray(eval_pred.label_ids, dtype=np.float64).reshape(-1))
    return {
        "pearson": float(predicted.corr(gold, method="pearson")),
        "spearman": float(predicted.corr(gold, method="spearman")),
        "mse": float(((predicted - gold) ** 2).mean()),
        "n_examples": int(gold.size),
    }


def infer_task_type(labels: Sequence[Any], requested: str) -> str:
    """``classification`` or ``regression``: as requested, else inferred from the label values.

    Floats (JSON numbers with a fraction or exponent, CSV cells like ``"2.5"``) mean regression;
    integers and any other strings mean classes.
    """
    if requested != "auto":
        return requested
    for label in labels:
        if isinstance(label, float):
            return "regression"
        if isinstance(label, str):
            try:
                float(label)
            except ValueError:
                return "classification"
            if not re.fullmatch(r"[+-]?\d+", label.strip()):
                return "regression"
    return "classification"


# --------------------------------------------------------------------------------------------
# Training and saving
# --------------------------------------------------------------------------------------------
def run_trainer(trainer: Trainer, datasets: Mapping[str, Any], args: TrainingArguments, prefix: str = "") -> dict[str, dict[str, float]]:
    """Train, evaluate and predict as the flags ask; return metrics per split name (``prefix`` + split).

    Training continues from ``args.resume_from_checkpoint``, which the job resolved when it started
    (:func:`~mlm_suite.jobs.checkpoints.resume_checkpoint`, :func:`~mlm_suite.jobs.checkpoints.stage_checkpoint`).
    """
    metrics: dict[str, dict[str, float]] = {}
    if args.do_train:
        result = trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
        metrics[f"{prefix}train"] = {f"{prefix}{k}": v for k, v in result.metrics.items()}
        metrics[f"{prefix}train"][f"{prefix}train_samples"] = len(datasets["train"])
    if args.do_eval and "validation" in datasets:
        metrics[f"{prefix}eval"] = trainer.evaluate(metric_key_prefix=f"{prefix}eval")
    if args.do_predict and "test" in datasets:
        metrics[f"{prefix}test"] = trainer.predict(datasets["test"], metric_key_prefix=f"{prefix}test").metrics
    return metrics


def early_stopping(args: FinetuneTrainingArguments, metric: str) -> list[TrainerCallback]:
    """The early-stopping callback on the validation ``metric`` (higher is better) when asked for, else ``[]``."""
    if args.early_stopping_patience is not None and args.eval_strategy == "no":
        args.eval_strategy = "epoch"
    return early_stopping_callback(args, args.early_stopping_patience, args.early_stopping_threshold, metric, True)


def save_everything(trainer: Trainer, metrics: Mapping[str, Mapping[str, float]]) -> None:
    """Save model (safetensors + auto_map), tokenizer and metrics into ``args.output_dir``.

    ``metrics`` maps a split name (``train``, ``eval``, ``test``, ``hf_eval`` ...) to its
    metrics; each becomes ``<split>_results.json`` and is merged into ``all_results.json``,
    exactly as the HF example scripts do with ``trainer.save_metrics``.
    """
    with training_arguments_as_json():  # a stock Trainer would pickle its arguments (training_args.bin)
        trainer.save_model()
    save_metrics(trainer, metrics)


def save_metrics(trainer: Trainer, metrics: Mapping[str, Mapping[str, float]]) -> None:
    """Print and write ``<split>_results.json`` per split, merging each into ``all_results.json``."""
    for split, values in metrics.items():
        trainer.log_metrics(split, dict(values))
        trainer.save_metrics(split, dict(values))


def write_card(
    trainer: Trainer,
    *,
    pipeline_tag: str,
    task_description: str,
    base_model: str | None,
    auto_class: str,
    labels: str,
    data: str,
    training: str,
    metrics: str,
    extra_fields: Mapping[str, object] | None = None,
    dataset: CardDataset | None = None,
    scores: Sequence[CardScore] = (),
) -> Path | None:
    """Write the model card ``README.md``, then, with ``--push_to_hub``, upload the output folder.

    Call it on every process, last (``push_to_hub`` saves the model again on all of them and
    uploads what the folder holds). ``base_model`` is the fine-tuned checkpoint, a folder or a Hub
    id (None for a random initialisation); the card's ``base_model`` metadata is a Hub id or absent (:func:`base_model_fields`), and its
    usage snippet loads the pushed repository, else ``--hub_model_id``, else the output folder.
    ``extra_fields`` fill the placeholders of a job's own template (``JobTrainer.card_template``).
    ``dataset`` (the data trained on and scored) and ``scores`` (the headline results) go into the card's metadata
    with the licence, task and base model (:func:`~mlm_suite.training.cards.model_card_data`).
    Returns the card's path on the main process, else None.
    """
    metadata: dict[str, Any] = dict(pipeline_tag=pipeline_tag, base_model=base_model, dataset=dataset, scores=scores)
    fields: dict[str, object] = dict(
        pipeline_tag=pipeline_tag,
        task_description=task_description,
        auto_class=auto_class,
        labels=labels,
        data=data,
        training=training,
        metrics=metrics,
        **(base_model_fields(base_model) if base_model else RANDOM_START),
        **(extra_fields or {}),
    )
    output_dir = trainer.args.output_dir
    if isinstance(trainer, JobTrainer):
        trainer.model_card_fields = fields
        trainer.model_card_metadata = metadata
        trainer.publish()
    else:
        if trainer.args.push_to_hub:
            raise TypeError("--push_to_hub needs a JobTrainer: a stock Trainer uploads its own card, not this one")
        if trainer.is_world_process_zero():
            name = Path(output_dir).name
            write_model_card(output_dir, "finetuned", model_card_data("finetuned", model_name=name, **metadata),
                             model_name=name, **fields, **usage_fields(trainer))
    return Path(output_dir) / "README.md" if trainer.is_world_process_zero() else None


def training_summary(args: TrainingArguments, **extra: object) -> str:
    """Markdown table of the hyper-parameters that decide a fine-tuning run."""
    rows: dict[str, object] = {
        "epochs": args.num_train_epochs if args.max_steps <= 0 else f"max_steps={args.max_steps}",
        "learning rate": args.learning_rate,
        "schedule": f"{_plain(args.lr_scheduler_type)}, warmup {args.warmup_steps}",
        "optimizer": _plain(args.optim),
        "weight decay": args.weight_decay,
        "batch size (per device)": args.per_device_train_batch_size,
        "seed": args.seed,
    }
    rows.update(extra)
    return markdown_table(rows, ("hyper-parameter", "value"))


def _plain(value: object) -> str:
    """An enum's value (``SchedulerType.LINEAR`` → ``linear``), anything else as text."""
    return str(getattr(value, "value", value))


def label_table(id2label: Mapping[int, str]) -> str:
    return markdown_table({str(i): id2label[i] for i in sorted(id2label)}, ("id", "label"))


def replace_output_dir(args: TrainingArguments, output_dir: str) -> TrainingArguments:
    """A copy of ``args`` writing to ``output_dir`` (for a second model trained in the same run), continuing from
    the last checkpoint there (:func:`~mlm_suite.jobs.checkpoints.stage_checkpoint`) rather than from the job's."""
    stage = dataclasses.replace(args, output_dir=output_dir)
    stage.resume_from_checkpoint = stage_checkpoint(stage)
    return stage


__all__ = [
    "FinetuneTrainingArguments",
    "HIDDEN_LABEL",
    "JobTrainer",
    "ModelArguments",
    "apply_freezing",
    "argument_parser",
    "check_max_seq_length",
    "class_label_names",
    "classification_metrics",
    "column",
    "feed_the_device",
    "first_n",
    "flag_given",
    "flags_given",
    "freeze_encoder",
    "hub_split_labels",
    "hub_tag_sequences",
    "infer_task_type",
    "is_missing_label",
    "label_maps",
    "label_table",
    "load_config",
    "load_hub_splits",
    "load_tokenizer",
    "mlm_suite_checkpoint",
    "parse_arguments",
    "parse_flags",
    "read_conll",
    "read_json_lines",
    "read_numbered_records",
    "read_records",
    "regression_metrics",
    "replace_output_dir",
    "resolve_label_list",
    "resolve_model_path",
    "resume_checkpoint",
    "run_trainer",
    "save_everything",
    "save_metrics",
    "split_80_10_10",
    "split_is_labelled",
    "stage_checkpoint",
    "training_summary",
    "validate_flags",
    "write_card",
]
