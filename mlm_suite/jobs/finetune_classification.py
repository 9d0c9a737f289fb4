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
    python examples/finetune_classification.py --train_file train.csv --validation_file dev.csv
    accelerate launch examples/finetune_classification.py --train_file reviews.jsonl --text_column_name review

``--intermediate_train_file`` adds a first stage of intermediate-task training (Phang et al.,
2018): the model is fine-tuned on that file (same columns and labels) before the task.

Reported: ``eval_accuracy`` and ``eval_f1`` (macro-averaged F1; pearson/spearman/mse for
regression), and ``test_*`` when there is a test split; for classes, a confusion matrix per split
(``confusion_matrix_validation.png``, ``confusion_matrix_test.png``) that the model card shows.

The machinery (:func:`finetune_sequence_task`) is shared with the sentence-pair job.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mlm_suite import resources
from mlm_suite.jobs.finetuning import (
    FinetuneTrainingArguments,
    JobTrainer,
    ModelArguments,
    apply_freezing,
    card_base_model,
    check_max_seq_length,
    class_label_names,
    classification_metrics,
    column,
    early_stopping,
    first_n,
    infer_task_type,
    initialisation,
    label_maps,
    label_table,
    load_hub_splits,
    load_model,
    parse_arguments,
    read_records,
    regression_metrics,
    resolve_label_list,
    resolve_model_path,
    run_trainer,
    save_everything,
    split_80_10_10,
    training_summary,
    validate_flags,
    write_card,
)
from mlm_suite.model_card import markdown_table
from mlm_suite.plots import confusion_matrix, figures_section, plot_confusion_matrix

SPLITS = ("train", "validation", "test")
Example = dict[str, Any]  # text column(s) and "label"


@dataclass
class TextDataArguments:
    """Data flags shared by the single-text and the sentence-pair jobs."""

    dataset_name: str | None = field(default=None, metadata={"help": "Hub dataset (needs Hub access)."})
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
def read_examples(path: str, text_columns: Sequence[str], label_column: str) -> list[Example]:
    """Rows of a data file reduced to the text column(s) and ``label``."""
    records = read_records(path)
    columns = {name: column(records, name, path) for name in (*text_columns, label_column)}
    return [
        {**{name: str(columns[name][row]) for name in text_columns}, "label": columns[label_column][row]}
        for row in range(len(records))
    ]


def load_text_splits(
    args: TextDataArguments, text_columns: Sequence[str], seed: int, embedded: Callable[[], tuple[dict, str]]
) -> tuple[dict[str, list[Example]], str]:
    """The splits as ``{split: examples}`` and a description, from the Hub, files or ``embedded()``.

    A lone ``--train_file`` is split 80/10/10 with ``random.Random(seed)``.
    """
    if args.dataset_name:
        splits = {}
        for split, dataset in load_hub_splits(args.dataset_name, args.dataset_config_name).items():
            names = class_label_names(dataset, args.label_column_name)
            splits[split] = [
                {**{name: row[name] for name in text_columns},
                 "label": names[row[args.label_column_name]] if names else row[args.label_column_name]}
                for row in dataset
            ]
        return splits, f"Hub dataset `{args.dataset_name}`"
    if args.train_file:
        files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
        if not (args.validation_file or args.test_file):
            examples = read_examples(args.train_file, text_columns, args.label_column_name)
            return dict(zip(SPLITS, split_80_10_10(examples, seed))), f"`{args.train_file}`, split 80/10/10 with a fixed seed"
        splits = {role: read_examples(path, text_columns, args.label_column_name) for role, path in files.items() if path}
        return splits, ", ".join(f"{role}: `{path}`" for role, path in files.items() if path)
    if args.validation_file or args.test_file:
        raise ValueError("--validation_file/--test_file need a --train_file")
    return embedded()


def pang_lee_splits(seed: int, text_column: str = "text") -> tuple[dict[str, list[Example]], str]:
    """Pang & Lee sentence polarity, labels -1/1 named negative/positive, split 80/10/10."""
    names = {-1: "negative", 1: "positive"}
    examples = [{text_column: text, "label": names[label]} for label, text in resources.pang_lee_sentences()]
    description = "Pang & Lee sentence polarity (4,000 movie-review snippets, negative/positive), split 80/10/10 with a fixed seed"
    return dict(zip(SPLITS, split_80_10_10(examples, seed))), description


def load_intermediate(
    data_args: TextDataArguments, text_columns: Sequence[str]
) -> tuple[list[Example], str] | None:
    """``--intermediate_train_file`` as examples and a description, or None."""
    if not data_args.intermediate_train_file:
        return None
    path = data_args.intermediate_train_file
    return read_examples(path, text_columns, data_args.label_column_name), f"`{path}`"


def check_labels_listed(labels: Sequence[Any], label_list: Sequence[str], source: str) -> None:
    """Raise a ValueError naming ``source`` when one of its labels is not in ``label_list``."""
    unknown = sorted({str(label) for label in labels} - set(label_list))
    if unknown:
        raise ValueError(f"labels {unknown} of {source} are not in the label list {list(label_list)}")


def class_names(labels: Sequence[Any]) -> list[str]:
    """Distinct labels as strings, in numeric order when they are all integers, else alphabetical."""
    names = {str(label) for label in labels}
    try:
        return sorted(names, key=int)
    except ValueError:
        return sorted(names)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
def finetune_sequence_task(
    model_args: ModelArguments,
    data_args: TextDataArguments,
    training_args: FinetuneTrainingArguments,
    splits: Mapping[str, list[Example]],
    text_columns: Sequence[str],
    data_description: str,
    build_model: Callable[[str, Any, ModelArguments], Any],
    task_description: str,
    pipeline_tag: str = "text-classification",
    intermediate: tuple[list[Example], str] | None = None,
) -> dict[str, float]:
    """Fine-tune, evaluate, save and write the card for a (pair) classification/regression task.

    ``build_model(path, config, model_args)`` builds the model; the config already
    carries the labels. ``intermediate`` (examples, description) is trained on first for
    ``data_args.intermediate_num_train_epochs``, with its own optimizer and schedule, and scored
    on the validation split (``intermediate_eval_*``). Returns the flat metrics dictionary (what
    ``all_results.json`` holds).
    """
    from datasets import Dataset
    from transformers import (
        AutoConfig,
        AutoTokenizer,
        Trainer,
        set_seed,
    )

    from mlm_suite.data.padding import DataCollatorForPadding

    limits = {"train": data_args.max_train_samples, "validation": data_args.max_eval_samples,
              "test": data_args.max_predict_samples}
    splits = {split: first_n(list(examples), limits.get(split)) for split, examples in splits.items() if examples}
    all_labels = [example["label"] for examples in splits.values() for example in examples]
    task_type = infer_task_type(all_labels, data_args.task_type)

    model_path = resolve_model_path(model_args.model_name_or_path, training_args)
    config = AutoConfig.from_pretrained(model_path)
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
        id2label, label2id = label_maps(label_list)
        config.update(dict(num_labels=len(label_list), id2label=id2label, label2id=label2id,
                           problem_type="single_label_classification"))
        if intermediate is not None:
            check_labels_listed([example["label"] for example in intermediate[0]], label_list, "the intermediate data")

    tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_path)
    check_max_seq_length(data_args.max_seq_length, config, model_path, tokenizer, pair=len(text_columns) == 2)

    def encode(examples: list[Example]) -> Dataset:
        raw = Dataset.from_dict({name: [example[name] for example in examples] for name in text_columns})
        encoded = raw.map(
            lambda batch: tokenizer(*(batch[name] for name in text_columns), truncation=True,
                                    max_length=data_args.max_seq_length),
            batched=True,
            remove_columns=list(text_columns),
        )
        labels = [float(example["label"]) if task_type == "regression" else config.label2id[str(example["label"])]
                  for example in examples]
        return encoded.add_column("labels", labels)

    datasets = {split: encode(examples) for split, examples in splits.items()}
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
            eval_dataset=datasets.get("validation"),
            processing_class=tokenizer,
            data_collator=DataCollatorForPadding(tokenizer),  # DataCollatorWithPadding's batches, faster
            compute_metrics=regression_metrics if task_type == "regression" else classification_metrics,
            callbacks=early_stopping(args, "pearson" if task_type == "regression" else "accuracy"),
            keep_predictions=True,  # for the confusion matrices
        )

    metrics = {}
    if intermediate is not None and training_args.do_train:
        stage_args = copy.copy(training_args)
        stage_args.num_train_epochs = data_args.intermediate_num_train_epochs
        stage_args.do_predict = False
        stage_data = {"train": encode(intermediate[0]), "validation": datasets.get("validation")}
        metrics = run_trainer(make_trainer(stage_args, stage_data["train"]), stage_data, stage_args, "intermediate_")
        data_description += (f"\n\nBefore the task, the model was fine-tuned for {stage_args.num_train_epochs:g} epochs "
                             f"on {len(intermediate[0]):,} examples of intermediate data: {intermediate[1]}.")
    trainer = make_trainer(training_args, datasets.get("train"))
    metrics |= run_trainer(trainer, datasets, training_args)
    save_everything(trainer, metrics)
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
    write_card(
        trainer,
        pipeline_tag=pipeline_tag,
        task_description=task_description,
        base_model=card_base_model(model_path, model_args),
        auto_class="AutoModelForSequenceClassification",
        labels=labels_text,
        data=data_description + "\n\n" + markdown_table({s: len(e) for s, e in splits.items()}, ("split", "examples")),
        training=training_summary(training_args, **initialisation(model_path, model_args),
                                  **{"max_seq_length": data_args.max_seq_length, "trained layers": trainable}),
        metrics=metric_note + "\n\n" + markdown_table(scored, ("metric", "value")) + figures_section(figures),
    )
    if trainer.is_world_process_zero():
        main_metrics = ("accuracy", "f1") if task_type == "classification" else ("pearson", "spearman")
        for split in ("intermediate_eval", "eval", "test"):
            shown = [f"{name} = {flat[f'{split}_{name}']:.4f}" for name in main_metrics if f"{split}_{name}" in flat]
            if shown:
                print(f"{split}: " + ", ".join(shown))
        print(f"trained on {training_args.world_size} process(es); saved the model, tokenizer, model card "
              f"and all_results.json to {training_args.output_dir}")
    return flat


def write_confusion_matrices(
    trainer: Any, label_list: Sequence[str], scored_splits: Mapping[str, Any]
) -> list[tuple[str, Path]]:
    """``confusion_matrix_<split>.png`` for the validation and test splits the final model was scored on
    (``eval``/``test`` in ``scored_splits``, the results of :func:`run_trainer`).

    Drawn from the predictions the trainer kept (``keep_predictions``), so nothing is predicted again; the
    main process writes the files. Returns ``(caption, path)`` per picture, for the card.
    """
    output_dir = Path(trainer.args.output_dir)
    figures = []
    for prefix, split in (("eval", "validation"), ("test", "test")):
        if prefix not in scored_splits:
            continue
        scored = trainer.kept_predictions[prefix]
        logits = scored.predictions[0] if isinstance(scored.predictions, tuple) else scored.predictions
        matrix = confusion_matrix(scored.label_ids, np.asarray(logits).argmax(axis=-1), len(label_list))
        caption = (f"{output_dir.name}: confusion matrix on the {split} split ({matrix.sum()} examples, "
                   f"accuracy {np.trace(matrix) / matrix.sum():.4f})")
        path = output_dir / f"confusion_matrix_{split}.png"
        if trainer.is_world_process_zero():
            plot_confusion_matrix(matrix, label_list, path, caption)
        figures.append((caption, path))
    return figures


def load_sequence_classifier(path: str, config: Any, model_args: ModelArguments) -> Any:
    from transformers import AutoModelForSequenceClassification

    return load_model(AutoModelForSequenceClassification, path, config, model_args)


def main(argv: Sequence[str] | None = None) -> int:
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, ClassificationDataArguments, ClassificationTrainingArguments), argv
    )
    validate_flags(model_args, data_args, training_args)  # before anything is read or written
    text_columns = [data_args.text_column_name]
    splits, description = load_text_splits(
        data_args, text_columns, training_args.seed, lambda: pang_lee_splits(training_args.seed, text_columns[0])
    )
    finetune_sequence_task(
        model_args, data_args, training_args, splits, text_columns, description, load_sequence_classifier,
        task_description="A text-classification model", intermediate=load_intermediate(data_args, text_columns),
    )
    return 0


if __name__ == "__main__":
    from mlm_suite.jobs.distributed import run_job

    raise SystemExit(run_job(main))
