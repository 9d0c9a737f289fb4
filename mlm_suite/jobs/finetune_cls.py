"""Fine-tune a sequence-classification (or regression) model with the HF Trainer.

Flags follow Hugging Face's ``run_glue.py`` / ``run_classification.py``: ``--model_name_or_path
--train_file --validation_file --test_file --text_column_name --label_column_name
--max_seq_length`` and every ``TrainingArguments`` flag. Files are CSV/TSV or JSON lines with a
text column and a label column; labels that are non-integer numbers make it a regression
(``--task_type`` forces either).

Without data flags it fine-tunes the real all-MiniLM-L6-v2 weights (converted to mlm_suite) on
the Pang & Lee sentence-polarity data (4,000 movie-review sentences, negative/positive) split
80/10/10 with a fixed seed::

    mlm-suite finetune-cls --output_dir outputs/sentiment
    python examples/finetune_cls.py --train_file train.csv --validation_file dev.csv
    accelerate launch examples/finetune_cls.py --train_file reviews.jsonl --text_column_name review

``--intermediate_train_file`` adds a first stage of intermediate-task training (Phang et al.,
2018): the model is fine-tuned on that file (same columns and labels) before the task.

Reported: ``eval_accuracy`` and ``eval_f1`` (macro-averaged F1; pearson/spearman/mse for
regression), and ``test_*`` when there is a test split; for classes, a confusion matrix per split
(``confusion_matrix_validation.png``, ``confusion_matrix_test.png``) that the model card shows.

A split without labels (GLUE's test splits, whose hidden labels ``datasets`` stores as -1; in a
file, a label column that is absent, null or empty on every row of the validation or test file)
is predicted, not scored: ``predict_results_<split>.txt`` gets ``index<TAB>prediction`` per row,
as ``run_glue.py`` writes it (the class name, or the score with 3 decimals), and neither
``all_results.json`` nor the card has metrics for it. A split with labels on some rows only is an error.

The machinery (:func:`finetune_sequence_task`) is shared with the sentence-pair job.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mlm_suite.data import resources
from mlm_suite.data.labels import (
    check_labels_listed,
    class_names,
    infer_task_type,
    label_maps,
    resolve_label_list,
    split_is_labelled,
)
from mlm_suite.data.readers import (
    SPLITS,
    Example,
    TextSplit,
    first_n,
    load_intermediate,
    load_labelled_text_splits,
    split_80_10_10,
)
from mlm_suite.errors import UsageError
from mlm_suite.evaluation.classification import (
    classification_metrics,
    regression_metrics,
    write_confusion_matrices,
    write_predictions,
)
from mlm_suite.evaluation.plots import figures_section
from mlm_suite.jobs.arguments import (
    overwrite_cache_field,
    parse_arguments,
    preprocessing_num_workers_field,
    test_split_name_field,
    validate_flags,
    validation_split_name_field,
)
from mlm_suite.jobs.checkpoints import resume_checkpoint, stage_checkpoint
from mlm_suite.jobs.finetuning import (
    FinetuneTrainingArguments,
    ModelArguments,
    apply_freezing,
    card_training_summary,
    check_max_seq_length,
    early_stopping,
    run_trainer,
    save_everything,
)
from mlm_suite.jobs.model_loading import load_config, load_model, load_tokenizer, resolve_model_path
from mlm_suite.cards import CardDataset, FinetunedCard, card_base_model, card_scores, label_table, markdown_table
from mlm_suite.training.trainer import JobTrainer

INTERMEDIATE_DIR = "intermediate"  # under --output_dir: the intermediate stage's checkpoints
#: The headline scores in the card's metadata per task type: metric key → (metric type, name as the card says it).
CARD_SCORES = {
    "classification": {"accuracy": ("accuracy", "accuracy"), "f1": ("f1", "macro F1")},
    "regression": {"pearson": ("pearsonr", "Pearson correlation"), "spearman": ("spearmanr", "Spearman correlation"),
                   "mse": ("mse", "mean squared error")},
}
#: The embedded data of the job (no data flags), as the card's metadata names them.
EMBEDDED_DATA = CardDataset.embedded(
    "pang_lee_sentence_polarity", "Pang & Lee sentence polarity (built in, 80/10/10 split)"
)


@dataclass
class TextDataArguments:
    """Data flags shared by the single-text and the sentence-pair jobs."""

    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub dataset (needs Hub access), or a folder saved with DatasetDict.save_to_disk."}
    )
    dataset_config_name: str | None = field(default=None, metadata={"help": "Hub dataset configuration."})
    train_file: str | None = field(
        default=None, metadata={"help": "CSV/TSV or JSON-lines training file. Alone, it is split 80/10/10."}
    )
    validation_file: str | None = field(default=None, metadata={"help": "CSV/TSV or JSON-lines validation file."})
    test_file: str | None = field(default=None, metadata={"help": "CSV/TSV or JSON-lines test file."})
    label_column_name: str = field(default="label", metadata={"help": "Column holding the label (or score)."})
    task_type: Literal["auto", "classification", "regression"] = field(
        default="auto", metadata={"help": "auto: regression when the labels are non-integer numbers."}
    )
    label_list: list[str] | None = field(
        default=None, metadata={"help": "Class names in id order; other labels are an error."}
    )
    max_seq_length: int = field(default=128, metadata={"help": "Longer inputs are truncated."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N validation examples."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep only the first N test examples."})
    validation_split_name: str = validation_split_name_field()
    test_split_name: str = test_split_name_field()
    preprocessing_num_workers: int | None = preprocessing_num_workers_field()
    overwrite_cache: bool = overwrite_cache_field()
    intermediate_train_file: str | None = field(
        default=None,
        metadata={
            "help": "Labelled file with the task's columns and labels to fine-tune on before the task "
            "(intermediate-task training, Phang et al. 2018)."
        },
    )
    intermediate_num_train_epochs: float = field(default=2.0, metadata={"help": "Epochs of the intermediate stage."})


@dataclass
class ClassificationDataArguments(TextDataArguments):
    text_column_name: str = field(default="text", metadata={"help": "Column holding the text."})


@dataclass
class ClassificationTrainingArguments(FinetuneTrainingArguments):
    output_dir: str | None = field(default="outputs/sentiment", metadata={"help": "Where the model and results go."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Training epochs."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate of AdamW."})


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def pang_lee_splits(seed: int, text_column: str = "text") -> tuple[dict[str, list[Example]], str]:
    """Pang & Lee sentence polarity, labels -1/1 named negative/positive, split 80/10/10."""
    names = {-1: "negative", 1: "positive"}
    examples = [{text_column: text, "label": names[label]} for label, text in resources.pang_lee_sentences()]
    description = "Pang & Lee sentence polarity (4,000 movie-review snippets, negative/positive), split 80/10/10 with a fixed seed"
    return dict(zip(SPLITS, split_80_10_10(examples, seed))), description


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
def finetune_sequence_task(
    model_args: ModelArguments,
    data_args: TextDataArguments,
    training_args: FinetuneTrainingArguments,
    splits: Mapping[str, list[Example] | TextSplit],
    text_columns: Sequence[str],
    data_description: str,
    build_model: Callable[[str, Any, ModelArguments], Any],
    task_description: str,
    pipeline_tag: str = "text-classification",
    intermediate: tuple[list[Example], str] | None = None,
    embedded_data: CardDataset | None = None,
) -> dict[str, float]:
    """Fine-tune, evaluate, save and write the card for a (pair) classification/regression task.

    ``build_model(path, config, model_args)`` builds the model; the config already
    carries the labels. A validation or test split whose labels are all None has no labels: it is
    predicted (``predict_results_<split>.txt``, :func:`~mlm_suite.evaluation.classification.write_predictions`), not scored. ``intermediate`` (examples, description) is trained on first for
    ``data_args.intermediate_num_train_epochs``, with its own optimizer and schedule, and scored
    on the validation split (``intermediate_eval_*``); its checkpoints go to ``<output_dir>/intermediate``. A run
    that resumes the task from a checkpoint skips the intermediate stage (its result is in the checkpoint's weights;
    its scores are then not reported again). ``embedded_data``: what the card's metadata calls the job's embedded
    data, used when no data flag was given. Returns the flat metrics dictionary (what ``all_results.json`` holds).
    """
    from datasets import Dataset
    from transformers import (
        Trainer,
        set_seed,
    )

    from mlm_suite.data.padding import DataCollatorForPadding

    stage_dir = os.path.join(training_args.output_dir, INTERMEDIATE_DIR)
    # Before the Trainer creates the output folder: --resume_from_checkpoint, or the last checkpoint of a stopped run.
    training_args.resume_from_checkpoint = resume_checkpoint(
        training_args, [stage_dir] if intermediate else [], trains=training_args.do_train
    )
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_predict_samples}
    splits = {split: examples.head(limits.get(split)) if isinstance(examples, TextSplit)
              else TextSplit.of(first_n(list(examples), limits.get(split)), text_columns)
              for split, examples in splits.items() if len(examples)}
    unlabelled = [split for split, examples in splits.items()
                  if not split_is_labelled(examples.labels, f"the {split} split")]
    check_unlabelled_splits(unlabelled, training_args)
    all_labels = [label for split, examples in splits.items() if split not in unlabelled for label in examples.labels]
    task_type = infer_task_type(all_labels, data_args.task_type)

    model_path = resolve_model_path(model_args.model_name_or_path, training_args)
    config = load_config(model_path, model_args)
    if model_args.classifier_pooling is not None:
        if config.model_type != "mlm_suite":
            raise ValueError(f"--classifier_pooling needs an mlm_suite model; {model_path} is {config.model_type!r}")
        if model_args.classifier_pooling not in ("cls", "mean"):
            raise ValueError(f"--classifier_pooling must be cls or mean, got {model_args.classifier_pooling!r}")
        config.classifier_pooling = model_args.classifier_pooling
    if task_type == "regression":
        label_list: list[str] = []
        config.update(dict(num_labels=1, id2label={0: "score"}, label2id={"score": 0}, problem_type="regression"))
    else:
        data_labels = list(data_args.label_list) if data_args.label_list else class_names(all_labels)
        check_labels_listed(all_labels, data_labels, "the data")
        label_list = resolve_label_list(config, data_labels, model_path, model_args.ignore_mismatched_sizes)
        if not label_list:
            raise UsageError(f"no split has labels and {model_path} names no classes: there is nothing to learn classes from")
        id2label, label2id = label_maps(label_list)
        config.update(dict(num_labels=len(label_list), id2label=id2label, label2id=label2id,
                           problem_type="single_label_classification"))
        if intermediate is not None:
            check_labels_listed([example["label"] for example in intermediate[0]], label_list, "the intermediate data")

    tokenizer = load_tokenizer(model_path, model_args)
    check_max_seq_length(data_args.max_seq_length, config, model_path, tokenizer, pair=len(text_columns) == 2)
    workers = data_args.preprocessing_num_workers

    def encode(split: TextSplit) -> Dataset:
        # Each row is tokenised alone: the same rows whatever the number of processes.
        encoded = split.texts.map(
            lambda batch: tokenizer(*(batch[name] for name in text_columns), truncation=True,
                                    max_length=data_args.max_seq_length),
            batched=True,
            remove_columns=list(text_columns),
            num_proc=workers if workers and workers > 1 else None,
            load_from_cache_file=False if data_args.overwrite_cache else None,
        )
        if split.labels and split.labels[0] is None:  # a split without labels: predicted only
            return encoded
        labels = [float(label) if task_type == "regression" else config.label2id[str(label)] for label in split.labels]
        return encoded.add_column("labels", labels)

    datasets = {split: encode(examples) for split, examples in splits.items()}
    scored_data = {split: dataset for split, dataset in datasets.items() if split not in unlabelled}
    if training_args.label_names is None:
        # The Trainer finds label columns in forward()'s signature; a head whose forward takes
        # **kwargs (the pair head) would have its labels dropped and never be scored.
        training_args.label_names = ["labels"]
    set_seed(training_args.seed)
    model = build_model(model_path, config, model_args)
    trainable = apply_freezing(model, model_args.train_last_k_layers)

    def make_trainer(args: FinetuneTrainingArguments, train_dataset: Dataset | None) -> Trainer:
        return JobTrainer(
            model=model,
            args=args,
            train_dataset=train_dataset,
            eval_dataset=scored_data.get("validation"),
            processing_class=tokenizer,
            data_collator=DataCollatorForPadding(tokenizer),  # DataCollatorWithPadding's batches, faster
            compute_metrics=regression_metrics if task_type == "regression" else classification_metrics,
            callbacks=early_stopping(args, "pearson" if task_type == "regression" else "accuracy"),
            keep_predictions=True,  # for the confusion matrices
        )

    metrics = {}
    if intermediate is not None and training_args.do_train:
        if training_args.resume_from_checkpoint is None:
            stage_args = copy.copy(training_args)
            stage_args.output_dir = stage_dir  # its checkpoints apart from the task's
            stage_args.resume_from_checkpoint = stage_checkpoint(stage_args)
            stage_args.num_train_epochs = data_args.intermediate_num_train_epochs
            stage_args.do_predict = False
            stage_data = {"train": encode(TextSplit.of(intermediate[0], text_columns)),
                          "validation": scored_data.get("validation")}
            stage = make_trainer(stage_args, stage_data["train"])
            metrics = run_trainer(stage, stage_data, stage_args, "intermediate_")
            with contextlib.suppress(OSError):
                os.rmdir(stage_dir)  # the folder the stage's Trainer created, unless it holds checkpoints
        elif training_args.process_index == 0:
            print(f"the intermediate stage is not run again: {training_args.resume_from_checkpoint} holds its result",
                  file=sys.stderr)
        epochs = data_args.intermediate_num_train_epochs
        data_description += (f"\n\nBefore the task, the model was fine-tuned for {epochs:g} epochs "
                             f"on {len(intermediate[0]):,} examples of intermediate data: {intermediate[1]}.")
    trainer = make_trainer(training_args, scored_data.get("train"))
    metrics |= run_trainer(trainer, scored_data, training_args)
    save_everything(trainer, metrics)
    asked = {"validation": training_args.do_eval, "test": training_args.do_predict}
    predicted = write_predictions(trainer, {split: datasets[split] for split in unlabelled if asked.get(split)},
                                  label_list if task_type == "classification" else None)
    flat = {key: value for values in metrics.values() for key, value in values.items()}

    scored = {key: value for key, value in flat.items()
              if key.startswith(("eval_", "test_", "intermediate_eval_")) and not key.endswith(("runtime", "per_second"))}
    figures = []
    if task_type == "regression":
        labels_text = "Regression: one output, the predicted score (trained with mean squared error)."
        metric_note = "Pearson and Spearman correlation with the gold scores, and mean squared error."
    else:
        labels_text = label_table(config.id2label)
        metric_note = "Accuracy and macro-averaged F1 over the classes."
        figures = write_confusion_matrices(trainer, label_list, scored_splits=metrics)
    unlabelled_note = "".join(
        f"\n\nThe {split} split has no labels: its {len(splits[split]):,} examples "
        f"were only predicted, not scored; the predictions are in `{path.name}`." for split, path in predicted.items()
    )
    split_sizes = {split: f"{len(examples)} (no labels: {'predicted only' if split in predicted else 'not used'})"
                   if split in unlabelled else len(examples) for split, examples in splits.items()}
    trainer.publish(FinetunedCard(
        pipeline_tag=pipeline_tag,
        task_description=task_description,
        base_model=card_base_model(model_path, model_args.init),
        auto_class="AutoModelForSequenceClassification",
        labels=labels_text,
        data=data_description + "\n\n" + markdown_table(split_sizes, ("split", "examples")),
        training=card_training_summary(training_args, model_path, model_args,
                                       {"max_seq_length": data_args.max_seq_length, "trained layers": trainable}),
        metrics=(metric_note + "\n\n" + markdown_table(scored, ("metric", "value")) + unlabelled_note
                 + figures_section(figures)),
        dataset=CardDataset.read_by_job(data_args.dataset_name, data_args.dataset_config_name,
                                        (data_args.train_file, data_args.validation_file, data_args.test_file),
                                        embedded_data, {"validation": data_args.validation_split_name,
                                                        "test": data_args.test_split_name}),
        scores=card_scores(flat, CARD_SCORES[task_type]),
    ))
    if trainer.is_world_process_zero():
        main_metrics = ("accuracy", "f1") if task_type == "classification" else ("pearson", "spearman")
        for split in ("intermediate_eval", "eval", "test"):
            shown = [f"{name} = {flat[f'{split}_{name}']:.4f}" for name in main_metrics if f"{split}_{name}" in flat]
            if shown:
                print(f"{split}: " + ", ".join(shown))
        for split, path in predicted.items():
            print(f"{split}: no labels ({len(splits[split]):,} examples), predicted only, not scored; "
                  f"predictions in {path}")
        print(f"trained on {training_args.world_size} process(es); saved the model, tokenizer, model card "
              f"and all_results.json to {training_args.output_dir}")
    return flat


def check_unlabelled_splits(unlabelled: Sequence[str], training_args: FinetuneTrainingArguments) -> None:
    """Refuse what needs labels that a split without labels lacks: training, evaluating during training."""
    if "train" in unlabelled and training_args.do_train:
        raise UsageError("the train split has no labels (all of them -1, null or empty); training needs labels")
    if "validation" in unlabelled and (training_args.eval_strategy != "no"
                                       or training_args.early_stopping_patience is not None):
        raise UsageError("the validation split has no labels (all of them -1, null or empty); evaluating during "
                         "training (--eval_strategy, --early_stopping_patience) needs a labelled validation split")


def load_sequence_classifier(path: str, config: Any, model_args: ModelArguments) -> Any:
    from transformers import AutoModelForSequenceClassification

    return load_model(AutoModelForSequenceClassification, path, config, model_args)


def main(argv: Sequence[str] | None = None) -> int:
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, ClassificationDataArguments, ClassificationTrainingArguments), argv
    )
    validate_flags(model_args, data_args, training_args)  # before anything is read or written
    text_columns = [data_args.text_column_name]
    splits, description = load_labelled_text_splits(
        data_args, text_columns, training_args.seed, lambda: pang_lee_splits(training_args.seed, text_columns[0]),
        model_args.dataset_kwargs(),
    )
    finetune_sequence_task(
        model_args, data_args, training_args, splits, text_columns, description, load_sequence_classifier,
        task_description="A text-classification model", intermediate=load_intermediate(data_args, text_columns),
        embedded_data=EMBEDDED_DATA,
    )
    return 0


if __name__ == "__main__":
    from mlm_suite.jobs.distributed import run_job

    raise SystemExit(run_job(main))
