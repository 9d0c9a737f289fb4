"""Fine-tuning a classifier (or regressor) of one text or of a pair of texts: the job ``finetune-cls`` and
``finetune-pair`` both run (:func:`finetune_sequence_classifier`), as ``run_glue.py`` handles single texts and pairs
alike; each command gives it its data flags, its built-in data and its defaults.

The data flags (:class:`TextDataArguments`), the splits cut to ``--max_*_samples`` and sorted into labelled and
unlabelled ones (a split without labels is predicted, not scored), classification or regression and the label
list written into the config, tokenisation, the Trainer, the optional intermediate-task stage, and the model card
with the summary lines. See docs/finetuning.md.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mlm_suite.data.finetuning.labels import (
    are_whole_numbers,
    check_class_set,
    check_labels_listed,
    class_names,
    infer_task_type,
    label_maps,
    labels_as,
    resolve_label_list,
    split_is_labelled,
)
from mlm_suite.data.inputs.builtin import BuiltinDataset
from mlm_suite.data.mapping import map_options
from mlm_suite.data.inputs.readers import Example, TextSplit, first_n, load_intermediate, load_labelled_text_splits
from mlm_suite.errors import UsageError
from mlm_suite.evaluation.classification import (
    classification_metrics,
    regression_metrics,
    write_confusion_matrices,
    write_predictions,
)
from mlm_suite.evaluation.plots import figures_section
from mlm_suite.jobs.common.arguments import (
    check_at_least,
    check_file,
    check_positive,
    derived_training_arguments,
    overwrite_cache_field,
    parse_arguments,
    preprocessing_num_workers_field,
    test_split_name_field,
    validation_split_name_field,
)
from mlm_suite.jobs.common.checkpoints import resume_checkpoint, stage_checkpoint
from mlm_suite.jobs.common.finetune_training import (
    FinetuneTrainingArguments,
    card_training_summary,
    early_stopping,
    run_trainer,
    save_everything,
    trains_flattened,
)
from mlm_suite.jobs.common.model_loading import (
    ModelArguments,
    apply_freezing,
    check_max_seq_length,
    load_config,
    load_model,
    load_tokenizer,
    mlm_suite_checkpoint,
    resolve_model_path,
)
from mlm_suite.jobs.common.output_folder import claim_output_folder, paths_read
from mlm_suite.cards import CardDataset, FinetunedCard, card_base_model, card_scores, label_table, markdown_table
from mlm_suite.training.job_outputs import KeptPredictions
from mlm_suite.training.trainer import JobTrainer, standard_features

INTERMEDIATE_DIR = "intermediate"  # under --output_dir: the intermediate stage's checkpoints
#: The headline scores in the card's metadata per task type: metric key → (metric type, name as the card says it).
CARD_SCORES = {
    "classification": {"accuracy": ("accuracy", "accuracy"), "f1": ("f1", "macro F1")},
    "regression": {"pearson": ("pearsonr", "Pearson correlation"), "spearman": ("spearmanr", "Spearman correlation"),
                   "mse": ("mse", "mean squared error")},
}


@dataclass
class TextDataArguments:
    """Data flags shared by the single-text and the sentence-pair jobs. Each job's subclass adds its text columns
    and says what it reads from them (:meth:`text_columns`, :meth:`read_embedded`)."""

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

    def __post_init__(self) -> None:
        for flag in ("max_seq_length", "max_train_samples", "max_eval_samples", "max_predict_samples",
                     "preprocessing_num_workers"):
            check_at_least(flag, getattr(self, flag), 1)
        check_positive("intermediate_num_train_epochs", self.intermediate_num_train_epochs)
        for flag in ("train_file", "validation_file", "test_file", "intermediate_train_file"):
            check_file(flag, getattr(self, flag))

    def text_columns(self) -> list[str]:
        """The columns of a row's text: one, or two for a pair (read as ``[CLS] A [SEP] B [SEP]``)."""
        raise NotImplementedError

    def read_embedded(self, seed: int) -> dict[str, list[Example]]:
        """What the job trains on without data flags, split 80/10/10 with ``seed``, in :meth:`text_columns`."""
        raise NotImplementedError

    def data_source(self) -> dict[str, Any]:
        """Where :func:`~mlm_suite.data.inputs.readers.load_labelled_text_splits` reads the data (its keyword
        arguments)."""
        return dict(files={"train": self.train_file, "validation": self.validation_file, "test": self.test_file},
                    dataset_name=self.dataset_name, dataset_config_name=self.dataset_config_name,
                    validation_split_name=self.validation_split_name, test_split_name=self.test_split_name)


@dataclass
class SequenceClassificationTrainingArguments(FinetuneTrainingArguments):
    """The Trainer's flags of both jobs: the labels are the ``labels`` column unless ``--label_names`` says otherwise.
    Each job subclasses it with its own ``output_dir``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.label_names is None:
            # The Trainer finds label columns in forward()'s signature; a head whose forward takes
            # **kwargs (the pair head) would have its labels dropped and never be scored.
            self.label_names = ["labels"]


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def limited_splits(
    splits: Mapping[str, list[Example] | TextSplit], data_args: TextDataArguments, text_columns: Sequence[str]
) -> dict[str, TextSplit]:
    """The non-empty splits as :class:`TextSplit` objects, cut to ``--max_train/eval/predict_samples``."""
    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_predict_samples}
    return {split: examples.head(limits.get(split)) if isinstance(examples, TextSplit)
            else TextSplit.of(first_n(list(examples), limits.get(split)), text_columns)
            for split, examples in splits.items() if len(examples)}


def unlabelled_splits(splits: Mapping[str, TextSplit], training_args: FinetuneTrainingArguments) -> list[str]:
    """The splits without labels (to predict, not score), refusing what would need their labels: training on
    them, evaluating on them during training."""
    unlabelled = [split for split, examples in splits.items()
                  if not split_is_labelled(examples.labels, f"the {split} split")]
    if "train" in unlabelled and training_args.do_train:
        raise UsageError("the train split has no labels (all of them -1, null or empty); training needs labels")
    if "validation" in unlabelled and (training_args.eval_strategy != "no"
                                       or training_args.early_stopping_patience is not None):
        raise UsageError("the validation split has no labels (all of them -1, null or empty); evaluating during "
                         "training (--eval_strategy, --early_stopping_patience) needs a labelled validation split")
    return unlabelled


def settle_labels(
    splits: Mapping[str, TextSplit], unlabelled: Sequence[str], intermediate: tuple[list[Example], str] | None,
    requested_task_type: str, training: bool,
) -> tuple[str, dict[str, TextSplit], tuple[list[Example], str] | None]:
    """Classification or regression, decided from the labels of every labelled split together (``--task_type``, or
    :func:`~mlm_suite.data.finetuning.labels.infer_task_type`), and the splits and intermediate data with their labels
    as the task reads them (:func:`~mlm_suite.data.finetuning.labels.labels_as`). A classifier to train needs a train
    split of two classes or more holding every class of the other splits
    (:func:`~mlm_suite.data.finetuning.labels.check_class_set`).
    """
    labels = scored_labels(splits, unlabelled)
    task_type = infer_task_type(labels, requested_task_type)
    intermediate_labels = [example["label"] for example in intermediate[0]] if intermediate is not None else []
    whole_numbers = are_whole_numbers(labels + intermediate_labels)
    settled = {split: examples if split in unlabelled
               else TextSplit(examples.texts, labels_as(examples.labels, task_type, f"the {split} split", whole_numbers))
               for split, examples in splits.items()}
    if task_type == "classification" and training and "train" in settled and "train" not in unlabelled:
        check_class_set({split: examples.labels for split, examples in settled.items() if split not in unlabelled})
    if intermediate is not None:
        examples, description = intermediate
        as_read = labels_as(intermediate_labels, task_type, "the intermediate data", whole_numbers)
        intermediate = [{**example, "label": label} for example, label in zip(examples, as_read)], description
    return task_type, settled, intermediate


def scored_labels(splits: Mapping[str, TextSplit], unlabelled: Sequence[str]) -> list[Any]:
    """Every label of the labelled splits."""
    return [label for split, examples in splits.items() if split not in unlabelled for label in examples.labels]


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------
def sequence_classifier_class(config: Any, pair: bool) -> type:
    """``MlmSuiteForPairClassification`` (segment ids 0/1) for a pair of texts on a model with segment embeddings,
    ``MlmSuiteForSequenceClassification`` otherwise: a family without them (RoBERTa, DistilBERT, ModernBERT) tells
    the two texts apart by the separators between them, as its own classes do."""
    from mlm_suite import MlmSuiteForPairClassification, MlmSuiteForSequenceClassification

    return MlmSuiteForPairClassification if pair and config.type_vocab_size >= 2 else MlmSuiteForSequenceClassification


def configure_head(
    config: Any, task_type: str, labels: Sequence[Any], model_path: str, model_args: ModelArguments,
    data_args: TextDataArguments, intermediate: tuple[list[Example], str] | None,
) -> list[str]:
    """Write the head's pooling (``--classifier_pooling``) and labels into ``config``; return the label list
    (empty for a regression).

    A fine-tuned checkpoint keeps its label order when it knows every label of the data
    (:func:`~mlm_suite.data.finetuning.labels.resolve_label_list`); the intermediate data's labels must be among them.
    """
    if model_args.classifier_pooling is not None:
        config.classifier_pooling = model_args.classifier_pooling
    if task_type == "regression":
        config.update(dict(num_labels=1, id2label={0: "score"}, label2id={"score": 0}, problem_type="regression"))
        return []
    data_labels = list(data_args.label_list) if data_args.label_list else class_names(labels)
    check_labels_listed(labels, data_labels, "the data")
    label_list = resolve_label_list(config, data_labels, model_path, model_args.ignore_mismatched_sizes)
    if not label_list:
        raise UsageError(f"no split has labels and {model_path} names no classes: there is nothing to learn classes from")
    id2label, label2id = label_maps(label_list)
    config.update(dict(num_labels=len(label_list), id2label=id2label, label2id=label2id,
                       problem_type="single_label_classification"))
    if intermediate is not None:
        check_labels_listed([example["label"] for example in intermediate[0]], label_list, "the intermediate data")
    return label_list


def text_encoder(
    tokenizer: Any, text_columns: Sequence[str], data_args: TextDataArguments, task_type: str, config: Any
) -> Callable[[TextSplit], Any]:
    """A function that tokenises a :class:`TextSplit` into a ``datasets.Dataset`` with its ``labels`` (class ids,
    or scores for a regression; no ``labels`` column for a split without labels)."""
    def encode(split: TextSplit) -> Any:
        # Each row is tokenised alone: the same rows whatever the number of processes.
        encoded = split.texts.map(
            lambda batch: tokenizer(*(batch[name] for name in text_columns), truncation=True,
                                    max_length=data_args.max_seq_length),
            batched=True,
            remove_columns=list(text_columns),
            **map_options(split.texts, data_args.preprocessing_num_workers, data_args.overwrite_cache),
        )
        if split.labels and split.labels[0] is None:  # a split without labels: predicted only
            return encoded
        labels = [float(label) if task_type == "regression" else config.label2id[str(label)] for label in split.labels]
        return encoded.add_column("labels", labels)

    return encode


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
def build_trainer(
    model: Any, args: FinetuneTrainingArguments, tokenizer: Any, train_dataset: Any, eval_dataset: Any, task_type: str
) -> JobTrainer:
    """A Trainer scored by accuracy and macro F1 (Pearson, Spearman and MSE for a regression), keeping the
    predictions for the confusion matrices; early stopping, if asked for, watches accuracy (Pearson)."""
    from mlm_suite.data.padding import DataCollatorForPadding

    args, callbacks = early_stopping(args, "pearson" if task_type == "regression" else "accuracy")
    return JobTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=DataCollatorForPadding(tokenizer, flatten=trains_flattened(model, args)),
        eval_data_collator=DataCollatorForPadding(tokenizer),  # DataCollatorWithPadding's batches, faster
        compute_metrics=regression_metrics if task_type == "regression" else classification_metrics,
        callbacks=callbacks,
        features=(*standard_features(), KeptPredictions()),  # the predictions kept for the confusion matrices
    )


def intermediate_stage(
    model: Any, tokenizer: Any, encode: Callable[[TextSplit], Any], intermediate: tuple[list[Example], str] | None,
    text_columns: Sequence[str], validation: Any, training_args: FinetuneTrainingArguments,
    data_args: TextDataArguments, task_type: str, checkpoint: str | None,
) -> tuple[dict[str, dict[str, float]], str]:
    """Fine-tune ``model`` on the intermediate data first (``--intermediate_train_file``), with its own optimizer and
    schedule, for ``--intermediate_num_train_epochs``, scored on the validation split (``intermediate_eval_*``);
    its checkpoints go to ``<output_dir>/intermediate``. Returns its metrics and the sentence the card's data
    section adds.

    A run that resumes the task from a ``checkpoint`` skips the stage: its result is in the checkpoint's weights (its
    scores are then not reported again).
    """
    if intermediate is None or not training_args.do_train:
        return {}, ""
    metrics: dict[str, dict[str, float]] = {}
    if checkpoint is None:
        stage_dir = os.path.join(training_args.output_dir, INTERMEDIATE_DIR)
        stage_args = derived_training_arguments(  # its checkpoints apart from the task's
            training_args, output_dir=stage_dir, resume_from_checkpoint=None,
            num_train_epochs=data_args.intermediate_num_train_epochs, do_predict=False,
        )
        stage_resume = stage_checkpoint(stage_args)
        stage_data = {"train": encode(TextSplit.of(intermediate[0], text_columns)), "validation": validation}
        stage = build_trainer(model, stage_args, tokenizer, stage_data["train"], validation, task_type)
        # Evaluated as the task is (--do_eval as given), on the validation split alone.
        metrics = run_trainer(stage, stage_data, training_args, "intermediate_", checkpoint=stage_resume)
        with contextlib.suppress(OSError):
            os.rmdir(stage_dir)  # the folder the stage's Trainer created, unless it holds checkpoints
    elif training_args.process_index == 0:
        print(f"the intermediate stage is not run again: {checkpoint} holds its result", file=sys.stderr)
    epochs = data_args.intermediate_num_train_epochs
    note = (f"\n\nBefore the task, the model was fine-tuned for {epochs:g} epochs "
            f"on {len(intermediate[0]):,} examples of intermediate data: {intermediate[1]}.")
    return metrics, note


def predict_unlabelled(
    trainer: JobTrainer, datasets: Mapping[str, Any], unlabelled: Sequence[str], training_args: FinetuneTrainingArguments,
    label_list: Sequence[str] | None, task_type: str,
) -> dict[str, Any]:
    """``predict_results_<split>.txt`` for each split without labels that ``--do_eval``/``--do_predict`` asks for."""
    asked = {"validation": training_args.do_eval, "test": training_args.do_predict}
    return write_predictions(trainer, {split: datasets[split] for split in unlabelled if asked.get(split)},
                             label_list if task_type == "classification" else None)


# --------------------------------------------------------------------------------------------
# Model card and summary
# --------------------------------------------------------------------------------------------
def write_card_and_summary(
    trainer: JobTrainer, metrics: Mapping[str, Mapping[str, float]], predicted: Mapping[str, Any],
    splits: Mapping[str, TextSplit], unlabelled: Sequence[str], label_list: Sequence[str], task_type: str,
    config: Any, model_path: str, trainable: str, model_args: ModelArguments, data_args: TextDataArguments,
    training_args: FinetuneTrainingArguments, data_description: str, task_description: str,
    embedded_data: CardDataset, pipeline_tag: str = "text-classification",
) -> None:
    """The model card (scores, confusion matrices, split sizes) and, on the main process, the summary lines."""
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
        figures = write_confusion_matrices(trainer.args.output_dir, trainer.feature(KeptPredictions).by_prefix,
                                           label_list, scored_splits=metrics, write=trainer.is_world_process_zero())
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


# --------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------
def finetune_sequence_classifier(
    argv: Sequence[str] | None, data_arguments: type[TextDataArguments],
    training_arguments: type[SequenceClassificationTrainingArguments], embedded: BuiltinDataset, task_description: str,
) -> int:
    """Run the job on ``argv``, parsed into :class:`ModelArguments`, ``data_arguments`` (whose text columns make it
    a single-text or a sentence-pair job) and ``training_arguments``; ``embedded`` is what it trains on without data
    flags, ``task_description`` how the model card names the model."""
    from transformers import set_seed

    model_args, data_args, training_args = parse_arguments((ModelArguments, data_arguments, training_arguments), argv)
    # Detecting last checkpoint: --resume_from_checkpoint, or the last one of a stopped run (checked against this run
    # before the folder rule removes the earlier results)
    stage_dirs = [os.path.join(training_args.output_dir, INTERMEDIATE_DIR)] if data_args.intermediate_train_file else []
    checkpoint = claim_output_folder(
        training_args.output_dir, {**model_args.sources(), **paths_read(data_args)},
        overwrite=training_args.overwrite_output_dir,
        resume=lambda: resume_checkpoint(training_args, stage_dirs, trains=training_args.do_train),
    )

    # Data
    text_columns = data_args.text_columns()
    splits, data_description = load_labelled_text_splits(
        text_columns, data_args.label_column_name, training_args.seed,
        lambda: (data_args.read_embedded(training_args.seed), embedded.description),
        **data_args.data_source(), load_kwargs=model_args.dataset_kwargs(),
    )
    intermediate = load_intermediate(data_args.intermediate_train_file, text_columns, data_args.label_column_name)
    splits = limited_splits(splits, data_args, text_columns)
    unlabelled = unlabelled_splits(splits, training_args)
    task_type, splits, intermediate = settle_labels(splits, unlabelled, intermediate, data_args.task_type,
                                                    training_args.do_train)
    labels = scored_labels(splits, unlabelled)

    # Model: the folder as an mlm_suite folder (a native one converted, with its head), the source's tokenizer
    pair = len(text_columns) == 2
    source = resolve_model_path(model_args.model_name_or_path, training_args)
    model_path = mlm_suite_checkpoint(source, **model_args.pretrained_kwargs())
    config = load_config(model_path, model_args)
    label_list = configure_head(config, task_type, labels, source, model_args, data_args, intermediate)
    tokenizer = load_tokenizer(source, model_args, config)
    check_max_seq_length(data_args.max_seq_length, config, source, tokenizer, pair=pair)
    encode = text_encoder(tokenizer, text_columns, data_args, task_type, config)
    datasets = {split: encode(examples) for split, examples in splits.items()}
    scored = {split: dataset for split, dataset in datasets.items() if split not in unlabelled}
    set_seed(training_args.seed)
    model = load_model(sequence_classifier_class(config, pair), model_path, config, model_args)
    trainable = apply_freezing(model, model_args.train_last_k_layers)

    # Training (the intermediate stage first), evaluation on the validation split, prediction on the test split
    metrics, intermediate_note = intermediate_stage(model, tokenizer, encode, intermediate, text_columns,
                                                    scored.get("validation"), training_args, data_args, task_type,
                                                    checkpoint)
    trainer = build_trainer(model, training_args, tokenizer, scored.get("train"), scored.get("validation"), task_type)
    metrics |= run_trainer(trainer, scored, training_args, checkpoint=checkpoint)
    save_everything(trainer, metrics)

    # Predict: the splits without labels
    predicted = predict_unlabelled(trainer, datasets, unlabelled, training_args, label_list, task_type)

    # Model card and summary
    write_card_and_summary(
        trainer, metrics, predicted, splits, unlabelled, label_list, task_type, config, source, trainable,
        model_args, data_args, training_args, data_description + intermediate_note,
        task_description=task_description, embedded_data=CardDataset.embedded(embedded.name, embedded.card_name),
    )
    return 0


__all__ = [
    "CARD_SCORES",
    "INTERMEDIATE_DIR",
    "SequenceClassificationTrainingArguments",
    "TextDataArguments",
    "build_trainer",
    "configure_head",
    "finetune_sequence_classifier",
    "intermediate_stage",
    "limited_splits",
    "predict_unlabelled",
    "scored_labels",
    "sequence_classifier_class",
    "settle_labels",
    "text_encoder",
    "unlabelled_splits",
    "write_card_and_summary",
]
