"""Fine-tune a sentence-pair model (NLI, paraphrase, STS, coherence) with the HF Trainer.

Inputs are ``[CLS] A [SEP] B [SEP]`` with segment ids 0/1, fed to ``MlmSuiteForPairClassification``
(HF BERT checkpoints get ``AutoModelForSequenceClassification``). Files are CSV/TSV or JSON
lines with ``--sentence1_column``, ``--sentence2_column`` and ``--label_column_name``; labels
that are non-integer numbers (STS scores) make it a regression, or force it with ``--task_type``.
Hub datasets work with ``--dataset_name`` (e.g. ``nyu-mll/glue --dataset_config_name mrpc``; MNLI with
``--validation_split_name validation_matched --test_split_name test_matched``), and so do
``DatasetDict`` folders saved with ``save_to_disk``. A split without labels (GLUE's test splits, -1
throughout) is predicted into ``predict_results_<split>.txt``, not scored, as in the single-text job.

Without data flags it trains a discourse-coherence task built from the Pang & Lee movie
reviews: does sentence B really follow sentence A? Positives are consecutive sentences of a
review; each negative keeps a positive's A and takes B from another review. Reviews are split
80/10/10 with a fixed seed before pairs are built, so no review feeds two splits::

    mlm-suite finetune-pair --output_dir outputs/coherence
    python examples/finetune_pair.py --train_file mrpc_train.csv --validation_file mrpc_dev.csv \\
        --sentence1_column "#1 String" --sentence2_column "#2 String" --label_column_name Quality
    accelerate launch examples/finetune_pair.py --train_file sts.jsonl --task_type regression
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mlm_suite.data import resources
from mlm_suite.data.readers import SPLITS, Example, load_intermediate, load_labelled_text_splits, split_80_10_10
from mlm_suite.jobs.arguments import parse_arguments, validate_flags
from mlm_suite.jobs.finetune_cls import TextDataArguments, finetune_sequence_task
from mlm_suite.jobs.finetuning import FinetuneTrainingArguments, ModelArguments
from mlm_suite.jobs.model_loading import load_model
from mlm_suite.cards import CardDataset

FOLLOWS, RANDOM = "follows", "random"


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


@dataclass
class PairTrainingArguments(FinetuneTrainingArguments):
    output_dir: str | None = field(default="outputs/coherence", metadata={"help": "Where the model and results go."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Training epochs."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate of AdamW."})


def review_sentences(text: str) -> list[str]:
    """The sentences of a Pang & Lee review (the corpus has one sentence per line)."""
    return [line.strip() for line in text.split("\n") if line.strip()]


def coherence_examples(
    reviews: Sequence[list[str]], n_pairs: int, rng: random.Random, columns: tuple[str, str]
) -> list[Example]:
    """``n_pairs`` balanced pairs from ``reviews`` (lists of sentences), shuffled.

    Each positive ``(A, B)`` (B follows A in a review) is matched by a negative ``(A, B')`` whose
    B' is a random sentence of another review, so A alone says nothing about the label.
    """
    if len(reviews) < 2:
        raise ValueError("coherence pairs need at least two reviews (negatives come from another review)")
    consecutive = [(r, i) for r, sentences in enumerate(reviews) for i in range(len(sentences) - 1)]
    first, second = columns
    examples = []
    for r, i in rng.sample(consecutive, min(n_pairs // 2, len(consecutive))):
        other = rng.randrange(len(reviews) - 1)
        other += other >= r  # uniform over the reviews other than r
        a, b = reviews[r][i], reviews[r][i + 1]
        examples.append({first: a, second: b, "label": FOLLOWS})
        examples.append({first: a, second: rng.choice(reviews[other]), "label": RANDOM})
    rng.shuffle(examples)
    return examples


def coherence_splits(args: PairDataArguments, seed: int) -> tuple[dict[str, list[Example]], str]:
    """The embedded discourse-coherence data: reviews split 80/10/10, then pairs built per split."""
    reviews = [review_sentences(text) for _, text in resources.pang_lee_reviews()]
    rng = random.Random(seed)
    sizes = {"train": args.coherence_train_pairs, "validation": args.coherence_eval_pairs,
             "test": args.coherence_eval_pairs}
    columns = (args.sentence1_column, args.sentence2_column)
    splits = {
        split: coherence_examples(part, sizes[split], rng, columns)
        for split, part in zip(SPLITS, split_80_10_10(reviews, seed))
    }
    description = (
        "Discourse coherence from the Pang & Lee movie reviews (1,500 reviews): does B follow A? "
        f"Label `{FOLLOWS}`: B is the sentence after A in a review; `{RANDOM}`: B comes from another review. "
        "Balanced, reviews split 80/10/10 with a fixed seed before pairing (no review in two splits)"
    )
    return splits, description


def load_pair_model(path: str, config: Any, model_args: ModelArguments) -> Any:
    """``MlmSuiteForPairClassification`` for mlm_suite checkpoints, the Auto class otherwise."""
    from transformers import AutoModelForSequenceClassification

    from mlm_suite import MlmSuiteForPairClassification

    model_class = MlmSuiteForPairClassification if config.model_type == "mlm_suite" else AutoModelForSequenceClassification
    return load_model(model_class, path, config, model_args)


def main(argv: Sequence[str] | None = None) -> int:
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, PairDataArguments, PairTrainingArguments), argv
    )
    validate_flags(model_args, data_args, training_args)  # before anything is read or written
    text_columns = [data_args.sentence1_column, data_args.sentence2_column]
    splits, description = load_labelled_text_splits(
        data_args, text_columns, training_args.seed, lambda: coherence_splits(data_args, training_args.seed),
        model_args.dataset_kwargs(),
    )
    finetune_sequence_task(
        model_args, data_args, training_args, splits, text_columns, description, load_pair_model,
        task_description="A sentence-pair classification model",
        intermediate=load_intermediate(data_args, text_columns),
        embedded_data=CardDataset.embedded(
            "pang_lee_review_coherence", "Pang & Lee review coherence (built in, 80/10/10 split)"
        ),
    )
    return 0


if __name__ == "__main__":
    from mlm_suite.jobs.distributed import run_job

    raise SystemExit(run_job(main))
