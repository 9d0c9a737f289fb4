"""Training, evaluating, predicting and saving in the fine-tuning jobs (``finetune_ner``, ``finetune_cls``,
``finetune_pair``, ``finetune_retrieval``), as transformers' ``run_*.py`` scripts do it inline.

:class:`FinetuneTrainingArguments` holds the ``TrainingArguments`` defaults these jobs share (and what early stopping
needs); :func:`run_trainer` trains, evaluates and predicts as the flags ask, :func:`early_stopping` watches the
validation score, and :func:`save_everything` writes the model, tokenizer and metrics through
:class:`~mlm_suite.training.trainer.JobTrainer`, which writes no pickle (``training_args.json``). The model a job
starts from is :mod:`mlm_suite.jobs.common.model_loading`'s concern. The model card's hyper-parameter table is
:func:`card_training_summary`. See docs/finetuning.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from transformers import Trainer, TrainerCallback, TrainingArguments

from mlm_suite.cards import initialisation, training_summary
from mlm_suite.jobs.common.arguments import (
    JobTrainingArguments,
    check_at_least,
    check_non_negative,
    derived_training_arguments,
    flatten_batches_field,
)
from mlm_suite.jobs.common.model_loading import ModelArguments
from mlm_suite.training.checkpoint_format import training_arguments_as_json
from mlm_suite.training.controls import early_stopping_arguments, early_stopping_callback


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
    (``--save_strategy steps`` brings them back) and logging every 10 steps. Training batches are flattened on
    a GPU (``--flatten_batches``); evaluation batches stay padded. With ``--early_stopping_patience``, an evaluation
    every epoch unless ``--eval_strategy`` says otherwise, and the checkpoints and best model early stopping needs
    (:func:`~mlm_suite.training.controls.early_stopping_arguments`; the score it watches is the job's:
    :func:`early_stopping`).
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
    flatten_batches: bool | None = flatten_batches_field()

    def __post_init__(self) -> None:
        check_at_least("early_stopping_patience", self.early_stopping_patience, 1)
        check_non_negative("early_stopping_threshold", self.early_stopping_threshold)
        super().__post_init__()
        if self.flatten_batches is None:
            self.flatten_batches = self.device.type == "cuda"
        if self.early_stopping_patience is not None:
            if self.eval_strategy == "no":
                self.eval_strategy = "epoch"
            for name, value in early_stopping_arguments(self.eval_strategy, self.eval_steps).items():
                setattr(self, name, value)


# --------------------------------------------------------------------------------------------
# Training, evaluating, predicting and saving
# --------------------------------------------------------------------------------------------
def run_trainer(
    trainer: Trainer, datasets: Mapping[str, Any], args: TrainingArguments, prefix: str = "", *,
    checkpoint: str | None = None,
) -> dict[str, dict[str, float]]:
    """Train, evaluate and predict as the flags of ``args`` ask; return metrics per split name (``prefix`` + split).

    Training continues from ``checkpoint``, which the job resolved when it started
    (:func:`~mlm_suite.jobs.common.checkpoints.resume_checkpoint`, :func:`~mlm_suite.jobs.common.checkpoints.stage_checkpoint`).
    """
    metrics: dict[str, dict[str, float]] = {}
    if args.do_train:
        result = trainer.train(resume_from_checkpoint=checkpoint)
        metrics[f"{prefix}train"] = {f"{prefix}{k}": v for k, v in result.metrics.items()}
        metrics[f"{prefix}train"][f"{prefix}train_samples"] = len(datasets["train"])
    if args.do_eval and "validation" in datasets:
        metrics[f"{prefix}eval"] = trainer.evaluate(metric_key_prefix=f"{prefix}eval")
    if args.do_predict and "test" in datasets:
        metrics[f"{prefix}test"] = trainer.predict(datasets["test"], metric_key_prefix=f"{prefix}test").metrics
    return metrics


def trains_flattened(model: Any, args: FinetuneTrainingArguments) -> bool:
    """Whether the training batches are flattened: ``--flatten_batches``, for mlm_suite models (others read
    padded batches only) and heads without a CRF (which scores whole padded sequences)."""
    from mlm_suite.model import MlmSuiteConfig

    config = model.config
    mlm_suite_model = config.model_type == MlmSuiteConfig.model_type
    return bool(args.flatten_batches) and mlm_suite_model and not getattr(config, "use_crf", False)


def early_stopping(
    args: FinetuneTrainingArguments, metric: str
) -> tuple[FinetuneTrainingArguments, list[TrainerCallback]]:
    """The arguments and callbacks of a Trainer that stops early on the validation ``metric`` (higher is better):
    with ``--early_stopping_patience``, a copy of ``args`` that names the metric and the callback; otherwise ``args``
    and no callback."""
    if args.early_stopping_patience is None:
        return args, []
    args = derived_training_arguments(args, metric_for_best_model=metric, greater_is_better=True)
    return args, early_stopping_callback(args, args.early_stopping_patience, args.early_stopping_threshold)


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
    """A copy of ``args`` writing to ``output_dir`` (for a second model trained in the same run), without the job's
    ``--resume_from_checkpoint``: that run continues from the last checkpoint in ``output_dir``
    (:func:`~mlm_suite.jobs.common.checkpoints.stage_checkpoint`)."""
    return dataclasses.replace(args, output_dir=output_dir, resume_from_checkpoint=None)


__all__ = [
    "FinetuneTrainingArguments",
    "card_training_summary",
    "early_stopping",
    "replace_output_dir",
    "run_trainer",
    "save_everything",
    "save_metrics",
    "trains_flattened",
]
