"""Fine-tune a sentence-pair model (NLI, paraphrase, STS, coherence) with the HF Trainer.

Inputs are ``[CLS] A [SEP] B [SEP]`` with segment ids 0/1 (``MlmSuiteForPairClassification``); files name
``--sentence1_column`` and ``--sentence2_column``, Hub datasets work as in ``run_glue.py``. Without data flags it
trains discourse coherence on the Pang & Lee reviews (does B follow A?). The job itself, which the single-text job
runs too, is :func:`mlm_suite.jobs.common.sequence_classification.finetune_sequence_classifier`. See docs/finetuning.md::

    mlm-suite finetune-pair --output_dir outputs/coherence
    accelerate launch examples/finetune_pair.py --train_file sts.jsonl --task_type regression
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mlm_suite.data.inputs.builtin import BUILTIN_DATASETS
from mlm_suite.data.inputs.readers import Example
from mlm_suite.jobs.common.arguments import check_at_least
from mlm_suite.jobs.common.sequence_classification import (
    SequenceClassificationTrainingArguments,
    TextDataArguments,
    finetune_sequence_classifier,
)

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

    def text_columns(self) -> list[str]:
        return [self.sentence1_column, self.sentence2_column]

    def read_embedded(self, seed: int) -> dict[str, list[Example]]:
        return EMBEDDED.read(seed, self.coherence_train_pairs, self.coherence_eval_pairs, tuple(self.text_columns()))


@dataclass
class PairTrainingArguments(SequenceClassificationTrainingArguments):
    output_dir: str | None = field(default="outputs/coherence", metadata={"help": "Where the model and results go."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Training epochs."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate of AdamW."})


def main(argv: Sequence[str] | None = None) -> int:
    return finetune_sequence_classifier(argv, PairDataArguments, PairTrainingArguments, EMBEDDED,
                                        task_description="A sentence-pair classification model")


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    raise SystemExit(run_job(main))
