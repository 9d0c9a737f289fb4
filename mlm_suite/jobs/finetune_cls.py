"""Fine-tune a sequence-classification (or regression) model with the HF Trainer, as transformers' ``run_glue.py``.

Data: CSV/TSV or JSON lines with a text and a label column, or a Hub dataset; without data flags, the Pang & Lee
sentence polarity from the converted all-MiniLM-L6-v2. An unlabelled split is predicted
(``predict_results_<split>.txt``), not scored; ``--intermediate_train_file`` trains an intermediate task first. What
this job shares with the sentence-pair job is in :mod:`mlm_suite.jobs.sequence_classification`. See
docs/finetuning.md::

    mlm-suite finetune-cls --output_dir outputs/sentiment
    python examples/finetune_cls.py --train_file train.csv --validation_file dev.csv
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from mlm_suite.data.inputs.builtin import BUILTIN_DATASETS
from mlm_suite.data.inputs.readers import load_intermediate, load_labelled_text_splits
from mlm_suite.jobs.arguments import parse_arguments
from mlm_suite.jobs.output_folder import claim_output_folder, paths_read
from mlm_suite.jobs.checkpoints import resume_checkpoint
from mlm_suite.jobs.finetune_training import FinetuneTrainingArguments, run_trainer, save_everything
from mlm_suite.jobs.model_loading import (
    ModelArguments,
    apply_freezing,
    check_max_seq_length,
    load_config,
    load_model,
    load_tokenizer,
    resolve_model_path,
)
from mlm_suite.jobs.sequence_classification import (
    INTERMEDIATE_DIR,
    TextDataArguments,
    build_trainer,
    configure_head,
    intermediate_stage,
    limited_splits,
    predict_unlabelled,
    scored_labels,
    settle_labels,
    text_encoder,
    unlabelled_splits,
    write_card_and_summary,
)
from mlm_suite.cards import CardDataset

#: What the job trains on without data flags.
EMBEDDED = BUILTIN_DATASETS["pang_lee_sentence_polarity"]


@dataclass
class ClassificationDataArguments(TextDataArguments):
    text_column_name: str = field(default="text", metadata={"help": "Column holding the text."})


@dataclass
class ClassificationTrainingArguments(FinetuneTrainingArguments):
    output_dir: str | None = field(default="outputs/sentiment", metadata={"help": "Where the model and results go."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Training epochs."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate of AdamW."})


def main(argv: Sequence[str] | None = None) -> int:
    from transformers import AutoModelForSequenceClassification, set_seed

    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, ClassificationDataArguments, ClassificationTrainingArguments), argv
    )
    claim_output_folder(training_args.output_dir, {**model_args.sources(), **paths_read(data_args)},
                        overwrite=training_args.overwrite_output_dir)

    # Detecting last checkpoint: --resume_from_checkpoint, or the last one of a stopped run (before the Trainer
    # creates the output folder)
    stage_dirs = [os.path.join(training_args.output_dir, INTERMEDIATE_DIR)] if data_args.intermediate_train_file else []
    training_args.resume_from_checkpoint = resume_checkpoint(training_args, stage_dirs, trains=training_args.do_train)

    # Data
    text_columns = [data_args.text_column_name]
    splits, data_description = load_labelled_text_splits(
        text_columns, data_args.label_column_name, training_args.seed,
        lambda: (EMBEDDED.read(training_args.seed, text_columns[0]), EMBEDDED.description),
        **data_args.data_source(), load_kwargs=model_args.dataset_kwargs(),
    )
    intermediate = load_intermediate(data_args.intermediate_train_file, text_columns, data_args.label_column_name)
    splits = limited_splits(splits, data_args, text_columns)
    unlabelled = unlabelled_splits(splits, training_args)
    task_type, splits, intermediate = settle_labels(splits, unlabelled, intermediate, data_args.task_type,
                                                    training_args.do_train)
    labels = scored_labels(splits, unlabelled)

    # Model
    model_path = resolve_model_path(model_args.model_name_or_path, training_args)
    config = load_config(model_path, model_args)
    label_list = configure_head(config, task_type, labels, model_path, model_args, data_args, intermediate)
    tokenizer = load_tokenizer(model_path, model_args, config)
    check_max_seq_length(data_args.max_seq_length, config, model_path, tokenizer)
    encode = text_encoder(tokenizer, text_columns, data_args, task_type, config)
    datasets = {split: encode(examples) for split, examples in splits.items()}
    scored = {split: dataset for split, dataset in datasets.items() if split not in unlabelled}
    set_seed(training_args.seed)
    model = load_model(AutoModelForSequenceClassification, model_path, config, model_args)
    trainable = apply_freezing(model, model_args.train_last_k_layers)

    # Training (the intermediate stage first), evaluation on the validation split, prediction on the test split
    metrics, intermediate_note = intermediate_stage(model, tokenizer, encode, intermediate, text_columns,
                                                    scored.get("validation"), training_args, data_args, task_type)
    trainer = build_trainer(model, training_args, tokenizer, scored.get("train"), scored.get("validation"), task_type)
    metrics |= run_trainer(trainer, scored, training_args)
    save_everything(trainer, metrics)

    # Predict: the splits without labels
    predicted = predict_unlabelled(trainer, datasets, unlabelled, training_args, label_list, task_type)

    # Model card and summary
    write_card_and_summary(
        trainer, metrics, predicted, splits, unlabelled, label_list, task_type, config, model_path, trainable,
        model_args, data_args, training_args, data_description + intermediate_note,
        task_description="A text-classification model",
        embedded_data=CardDataset.embedded(EMBEDDED.name, EMBEDDED.card_name),
    )
    return 0


if __name__ == "__main__":
    from mlm_suite.jobs.running import run_job

    raise SystemExit(run_job(main))
