"""Shared pieces of the fine-tuning jobs (``finetune_ner``, ``finetune_classification``, ``finetune_pair``).

* the default model: the real all-MiniLM-L6-v2 weights converted once into an mlm_suite folder;
* data: CoNLL column files, JSON lines, CSV, Hub datasets, fixed-seed 80/10/10 splits;
* labels: ``id2label``/``label2id`` for the config, checked against a fine-tuned checkpoint's;
* training arguments with the jobs' defaults, saving (model, tokenizer, metrics, model card).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from transformers import PretrainedConfig, Trainer, TrainerCallback, TrainingArguments

from mlm_suite import resources
from mlm_suite.freezing import freeze_encoder
from mlm_suite.model.modeling_mlm_suite import has_placeholder_labels
from mlm_suite.model_card import markdown_table, write_model_card
from mlm_suite.training import early_stopping_callback


# --------------------------------------------------------------------------------------------
# Default model
# --------------------------------------------------------------------------------------------
def resolve_model_path(model_name_or_path: str | None, training_args: TrainingArguments) -> str:
    """``model_name_or_path``, or the converted MiniLM folder when it is not given."""
    if model_name_or_path:
        return model_name_or_path
    with training_args.main_process_first(desc="converting all-MiniLM-L6-v2 to mlm_suite"):
        return str(resources.converted_minilm_dir())


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------
@dataclass
class FinetuneTrainingArguments(TrainingArguments):
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
class ModelArguments:
    """Which checkpoint to fine-tune and how much of it to train."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Model folder (mlm_suite or HF BERT). Default: all-MiniLM-L6-v2 converted to mlm_suite."},
    )
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


def parse_arguments(dataclass_types: Sequence[type], argv: Sequence[str] | None) -> tuple:
    """Parse ``argv`` (a list of flags, or a single ``.json`` file of them) into the dataclasses."""
    from transformers import HfArgumentParser

    parser = HfArgumentParser(dataclass_types)
    argv = list(argv) if argv is not None else None
    if argv is not None and len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(json_file=argv[0])
    return parser.parse_args_into_dataclasses(args=argv)


# --------------------------------------------------------------------------------------------
# Reading data
# --------------------------------------------------------------------------------------------
def read_conll(path: str | Path) -> list[tuple[list[str], list[str]]]:
    """Sentences of a CoNLL column file as ``(tokens, tags)``.

    One token per line with the token in the first column and the tag in the last one (columns
    in between, e.g. POS and chunk tags, are ignored); a blank line ends a sentence. Lines
    starting with ``-DOCSTART-`` (document separators) are skipped.

    Raises:
        ValueError: a non-blank line with fewer than two columns (naming file and line).
    """
    sentences: list[tuple[list[str], list[str]]] = []
    tokens: list[str] = []
    tags: list[str] = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            columns = line.split()
            if not columns:
                if tokens:
                    sentences.append((tokens, tags))
                    tokens, tags = [], []
                continue
            if columns[0] == "-DOCSTART-":
                continue
            if len(columns) < 2:
                raise ValueError(
                    f"{path}, line {line_number}: expected 'token ... tag' (at least two columns), got {line.strip()!r}"
                )
            tokens.append(columns[0])
            tags.append(columns[-1])
    if tokens:
        sentences.append((tokens, tags))
    return sentences


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines (``.json``/``.jsonl``) or CSV/TSV file as dictionaries."""
    path = Path(path)
    if path.suffix in (".json", ".jsonl"):
        records = []
        with open(path, encoding="utf-8") as handle:
            for line_number, line in enumerate(handle, start=1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as error:
                        raise ValueError(f"{path}, line {line_number}: not a JSON object ({error})") from None
        return records
    if path.suffix in (".csv", ".tsv"):
        with open(path, encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle, delimiter="\t" if path.suffix == ".tsv" else ","))
    raise ValueError(f"{path}: unsupported file type {path.suffix!r}; use .json/.jsonl (JSON lines), .csv or .tsv")


def column(records: Sequence[Mapping[str, Any]], name: str, source: str) -> list[Any]:
    """The values of column ``name``; a missing column raises naming the columns there are."""
    if records and name not in records[0]:
        raise ValueError(f"{source} has no column {name!r}; its columns are {sorted(records[0])}")
    for index, record in enumerate(records):
        if name not in record:
            raise ValueError(f"{source}, row {index}: no column {name!r}")
    return [record[name] for record in records]


def load_hub_splits(dataset_name: str, dataset_config_name: str | None) -> dict[str, Any]:
    """Train/validation/test splits of a Hub dataset (needs network access to the Hub)."""
    from datasets import load_dataset

    raw = load_dataset(dataset_name, dataset_config_name)
    return {split: raw[split] for split in ("train", "validation", "test") if split in raw}


def class_label_names(dataset: Any, column_name: str) -> list[str] | None:
    """Names of a Hub dataset's ``ClassLabel`` column (or of a sequence of them), else None."""
    feature = dataset.features[column_name]
    feature = getattr(feature, "feature", feature)  # Sequence(ClassLabel) for token tags
    return list(feature.names) if hasattr(feature, "names") else None


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
    """Train, evaluate and predict as the flags ask; return metrics per split name (``prefix`` + split)."""
    metrics: dict[str, dict[str, float]] = {}
    if args.do_train:
        result = trainer.train()
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
    base_model: str,
    auto_class: str,
    labels: str,
    data: str,
    training: str,
    metrics: str,
) -> Path | None:
    """Write the model card ``README.md`` (main process only)."""
    if not trainer.is_world_process_zero():
        return None
    output_dir = trainer.args.output_dir
    return write_model_card(
        output_dir,
        "finetuned",
        model_name=output_dir,
        pipeline_tag=pipeline_tag,
        task_description=task_description,
        base_model=base_model,
        auto_class=auto_class,
        labels=labels,
        data=data,
        training=training,
        metrics=metrics,
    )


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
    """A copy of ``args`` writing to ``output_dir`` (for a second model trained in the same run)."""
    return dataclasses.replace(args, output_dir=output_dir)


__all__ = [
    "FinetuneTrainingArguments",
    "ModelArguments",
    "apply_freezing",
    "class_label_names",
    "classification_metrics",
    "column",
    "first_n",
    "freeze_encoder",
    "infer_task_type",
    "label_maps",
    "label_table",
    "load_hub_splits",
    "parse_arguments",
    "read_conll",
    "read_records",
    "regression_metrics",
    "replace_output_dir",
    "resolve_label_list",
    "resolve_model_path",
    "run_trainer",
    "save_everything",
    "save_metrics",
    "split_80_10_10",
    "training_summary",
    "write_card",
]
