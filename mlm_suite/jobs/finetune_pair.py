"""Fine-tune a sentence-pair model (NLI, paraphrase, STS, coherence) with the HF Trainer.

Inputs are ``[CLS] A [SEP] B [SEP]`` with segment ids 0/1 (``MlmSuiteForPairClassification``); files name
``--sentence1_column`` and ``--sentence2_column``, Hub datasets work as in ``run_glue.py``. Without data flags it
trains discourse coherence on the Pang & Lee reviews (does B follow A?). What this job shares with the single-text
job is in :mod:`mlm_suite.jobs.sequence_classification`. See docs/finetuning.md::

    mlm-suite finetune-pair --output_dir outputs/coherence
    accelerate launch examples/finetune_pair.py --train_file sts.jsonl --task_type regression
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mlm_suite.data.inputs.builtin import BUILTIN_DATASETS
from mlm_suite.data.inputs.readers import load_intermediate, load_labelled_text_splits
from mlm_suite.jobs.arguments import check_at_least, parse_arguments
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
EMBEDDED = BUILTIN_DATASETS["pang_lee_review_coherence"]


@dataclass
class PairDataArguments(TextDataArguments):
    sentence1_column: str = field(default="sentence1", metadata={"help": "Column of the first sentence (A)."})
    sentence2_column: str = field(default="sentence2", metadata={"help": "Column of the second sentence (B)."})
    coherence_train_pairs: int = field(
        default=2000, metadata={"help": "Embedded coherence data: training pairs (half positive)."}
    )
    coherence_eval_pairs: int = field(
        default=400, metadata={"help": "Embedded coherence data: pairs in each of validation and test."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        # pairs come in positive/negative twos
        check_at_least("coherence_train_pairs", self.coherence_train_pairs, 2)
        check_at_least("coherence_eval_pairs", self.coherence_eval_pairs, 2)


@dataclass
class PairTrainingArguments(FinetuneTrainingArguments):
    output_dir: str | None = field(default="outputs/coherence", metadata={"help": "Where the model and results go."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Training epochs."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate of AdamW."})


def load_pair_model(path: str, config: Any, model_args: ModelArguments) -> Any:
    """``MlmSuiteForPairClassification`` for mlm_suite checkpoints, the Auto class otherwise."""
    from transformers import AutoModelForSequenceClassification

    from mlm_suite import MlmSuiteForPairClassification

    model_class = MlmSuiteForPairClassification if config.model_type == "mlm_suite" else AutoModelForSequenceClassification
    return load_model(model_class, path, config, model_args)


def main(argv: Sequence[str] | None = None) -> int:
    from transformers import set_seed

    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, PairDataArguments, PairTrainingArguments), argv
    )
    claim_output_folder(training_args.output_dir, {**model_args.sources(), **paths_read(data_args)},
                        overwrite=training_args.overwrite_output_dir)

    # Detecting last checkpoint: --resume_from_checkpoint, or the last one of a stopped run (before the Trainer
    # creates the output folder)
    stage_dirs = [os.path.join(training_args.output_dir, INTERMEDIATE_DIR)] if data_args.intermediate_train_file else []
    training_args.resume_from_checkpoint = resume_checkpoint(training_args, stage_dirs, trains=training_args.do_train)

    # Data
    text_columns = [data_args.sentence1_column, data_args.sentence2_column]
    splits, data_description = load_labelled_text_splits(
        text_columns, data_args.label_column_name, training_args.seed,
        lambda: (EMBEDDED.read(training_args.seed, data_args.coherence_train_pairs, data_args.coherence_eval_pairs,
                               tuple(text_columns)), EMBEDDED.description),
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
    check_max_seq_length(data_args.max_seq_length, config, model_path, tokenizer, pair=True)
    encode = text_encoder(tokenizer, text_columns, data_args, task_type, config)
    datasets = {split: encode(examples) for split, examples in splits.items()}
    scored = {split: dataset for split, dataset in datasets.items() if split not in unlabelled}
    set_seed(training_args.seed)
    model = load_pair_model(model_path, config, model_args)
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
        task_description="A sentence-pair classification model",
        embedded_data=CardDataset.embedded(EMBEDDED.name, EMBEDDED.card_name),
    )
    return 0


if __name__ == "__main__":
    from mlm_suite.jobs.running import run_job

    raise SystemExit(run_job(main))
