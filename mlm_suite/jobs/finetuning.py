"""The shared run flow of the fine-tuning jobs (``finetune_ner``, ``finetune_cls``, ``finetune_pair``,
``finetune_retrieval``), as transformers' ``run_*.py`` scripts have it inline.

* the model: the default start (the real all-MiniLM-L6-v2 weights converted once into an mlm_suite folder),
  config, tokenizer and weights with the Hub flags (``--config_name --cache_dir --model_revision --token
  --trust_remote_code``), a BERT checkpoint converted (:func:`mlm_suite_checkpoint`), freezing
  (:func:`apply_freezing`);
* the flags every fine-tuning job shares: :class:`ModelArguments` and :class:`FinetuneTrainingArguments` (the
  ``TrainingArguments`` with the jobs' defaults), ``--max_seq_length`` against the model (:func:`check_max_seq_length`);
* training, evaluating and predicting as the flags ask (:func:`run_trainer`, :func:`early_stopping`), and saving
  the model, tokenizer and metrics (:func:`save_everything`), all through
  :class:`mlm_suite.training.trainer.JobTrainer`, which writes no pickle (``training_args.json``).

The rest lives by concern: parsing and checking flags in :mod:`mlm_suite.jobs.arguments`, reading data in
:mod:`mlm_suite.data.readers`, labels in :mod:`mlm_suite.data.labels`, the classification metrics in
:mod:`mlm_suite.evaluation.classification` and the model card in :mod:`mlm_suite.cards` (handed to
``JobTrainer.publish``, which writes it, then pushes with ``--push_to_hub``; :func:`card_training_summary` is its
hyper-parameter table).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from transformers import PretrainedConfig, Trainer, TrainerCallback, TrainingArguments

from mlm_suite.cards import initialisation, training_summary
from mlm_suite.errors import UsageError
from mlm_suite.jobs.arguments import HubArguments, JobTrainingArguments
from mlm_suite.jobs.checkpoints import stage_checkpoint
from mlm_suite.training.controls import early_stopping_callback
from mlm_suite.training.freezing import freeze_encoder
from mlm_suite.training.trainer import training_arguments_as_json


# --------------------------------------------------------------------------------------------
# Flags shared by the fine-tuning jobs
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
# Training, evaluating, predicting and saving
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


def card_training_summary(
    training_args: TrainingArguments, model_path: str, model_args: ModelArguments, rows: Mapping[str, object]
) -> str:
    """The card's hyper-parameter table: the recipe of ``training_args``, the starting weights, then the job's ``rows``."""
    return training_summary(
        num_train_epochs=training_args.num_train_epochs, max_steps=training_args.max_steps,
        learning_rate=training_args.learning_rate, lr_scheduler_type=training_args.lr_scheduler_type,
        warmup_steps=training_args.warmup_steps, optimizer=training_args.optim, weight_decay=training_args.weight_decay,
        batch_size=training_args.per_device_train_batch_size, seed=training_args.seed,
        **initialisation(model_path, model_args.init), **rows,
    )


def replace_output_dir(args: TrainingArguments, output_dir: str) -> TrainingArguments:
    """A copy of ``args`` writing to ``output_dir`` (for a second model trained in the same run), continuing from
    the last checkpoint there (:func:`~mlm_suite.jobs.checkpoints.stage_checkpoint`) rather than from the job's."""
    stage = dataclasses.replace(args, output_dir=output_dir)
    stage.resume_from_checkpoint = stage_checkpoint(stage)
    return stage


__all__ = [
    "FinetuneTrainingArguments",
    "ModelArguments",
    "apply_freezing",
    "card_training_summary",
    "check_max_seq_length",
    "early_stopping",
    "replace_output_dir",
    "run_trainer",
    "save_everything",
    "save_metrics",
]
