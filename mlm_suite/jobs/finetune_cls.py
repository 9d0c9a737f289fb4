"""Fine-tune a sequence-classification (or regression) model with the HF Trainer, as transformers' ``run_glue.py``.

Data: CSV/TSV or JSON lines with a text and a label column, or a Hub dataset; without data flags, the Pang & Lee
sentence polarity from the converted all-MiniLM-L6-v2. An unlabelled split is predicted
(``predict_results_<split>.txt``), not scored; ``--intermediate_train_file`` trains an intermediate task first. The
job itself, which the sentence-pair job runs too, is
:func:`mlm_suite.jobs.common.sequence_classification.finetune_sequence_classifier`. See docs/finetuning.md::

    mlm-suite finetune-cls --output_dir outputs/sentiment
    python examples/finetune_cls.py --train_file train.csv --validation_file dev.csv
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mlm_suite.data.inputs.builtin import BUILTIN_DATASETS
from mlm_suite.data.inputs.readers import Example
from mlm_suite.jobs.common.sequence_classification import (
    SequenceClassificationTrainingArguments,
    TextDataArguments,
    finetune_sequence_classifier,
)

#: What the job trains on without data flags.
EMBEDDED = BUILTIN_DATASETS["pang_lee_sentence_polarity"]


@dataclass
class ClassificationDataArguments(TextDataArguments):
    text_column_name: str = field(default="text", metadata={"help": "Column holding the text."})

    def text_columns(self) -> list[str]:
        return [self.text_column_name]

    def read_embedded(self, seed: int) -> dict[str, list[Example]]:
        return EMBEDDED.read(seed, self.text_column_name)


@dataclass
class ClassificationTrainingArguments(SequenceClassificationTrainingArguments):
    output_dir: str | None = field(default="outputs/sentiment", metadata={"help": "Where the model and results go."})
    num_train_epochs: float = field(default=3.0, metadata={"help": "Training epochs."})
    learning_rate: float = field(default=5e-5, metadata={"help": "Peak learning rate of AdamW."})


def main(argv: Sequence[str] | None = None) -> int:
    return finetune_sequence_classifier(argv, ClassificationDataArguments, ClassificationTrainingArguments, EMBEDDED,
                                        task_description="A text-classification model")


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    raise SystemExit(run_job(main))
