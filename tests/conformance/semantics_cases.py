"""One optimizer step of every head through the real Trainer, for the training-semantics parity matrix.

``test_training_semantics.py`` trains each case once on a batch of 8 rows and compares that step with
the same 8 rows as accumulated micro-batches and, launched as a script under ``accelerate launch``
(``python semantics_cases.py OUT``), as 2 processes of 4 rows each: gradients, weights after the
step and the logged loss and gradient norm must agree. The rows carry different numbers of
labelled items (masked tokens, tagged tokens), so a loss normalised per micro-batch instead of over
the whole step would show.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import TrainerCallback, TrainingArguments

from mlm_suite import (
    MlmSuiteForMaskedLM,
    MlmSuiteForNextSentencePrediction,
    MlmSuiteForPairClassification,
    MlmSuiteForPreTraining,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSentenceEmbedding,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
)
from mlm_suite.jobs.common.running import end_process_group
from mlm_suite.training.retrieval import EmbeddingPrediction, GradientCaching, RetrievalCollator
from mlm_suite.training.trainer import standard_features
from mlm_suite.training.trainer import JobTrainer
from tests.helpers import make_random_batch, make_tiny_config

ROWS = 8
LENGTHS = (9, 3, 7, 5, 9, 2, 6, 8)
BIO = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}


@dataclass
class Case:
    model_class: type
    labels: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None  # the batch → its label tensors
    config: dict = field(default_factory=dict)
    mini_batch_size: int | None = None  # sentence embeddings: gradient caching (GradientCaching)


def _retrieval_rows() -> list[dict[str, list[int]]]:
    """8 queries with their positive documents (every other one with a hard negative), as token ids."""
    generator = torch.Generator().manual_seed(2)

    def text() -> list[int]:
        return torch.randint(1, 99, (int(torch.randint(2, 9, (1,), generator=generator)),), generator=generator).tolist()

    return [{"query": text(), "document": text(), "negatives": [text()] if row % 2 else []} for row in range(ROWS)]


def _mlm_labels(batch):
    labels = torch.full_like(batch["input_ids"], -100)
    for row, count in enumerate([1, 2, 3, 4, 5, 1, 6, 2]):  # uneven: no split of the rows has equal counts
        labels[row, :count] = batch["input_ids"][row, :count]
    return labels


def _token_labels(batch, num_labels=5):
    generator = torch.Generator().manual_seed(1)
    labels = torch.randint(0, num_labels, batch["input_ids"].shape, generator=generator)
    labels[batch["attention_mask"] == 0] = -100
    labels[:, 1::3] = -100  # continuation pieces of words
    return labels


def _bio_labels(batch):
    labels = _token_labels(batch)
    labels[labels > 0] = 1  # O or B-PER: a path every constraint allows
    return labels


NSP = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1])
CLASSES = torch.tensor([0, 2, 1, 2, 0, 1, 1, 2])

CASES: dict[str, Case] = {
    "mlm": Case(MlmSuiteForMaskedLM, lambda b: {"labels": _mlm_labels(b)}),
    "mlm_nsp": Case(MlmSuiteForPreTraining, lambda b: {"labels": _mlm_labels(b), "next_sentence_label": NSP}),
    "nsp": Case(MlmSuiteForNextSentencePrediction, lambda b: {"labels": NSP}),
    "sequence": Case(MlmSuiteForSequenceClassification, lambda b: {"labels": CLASSES}, {"num_labels": 3}),
    "sequence_weighted": Case(
        MlmSuiteForSequenceClassification,
        lambda b: {"labels": CLASSES},
        {"num_labels": 3, "class_weights": [0.2, 1.0, 3.0], "label_smoothing": 0.1},
    ),
    "multi_label": Case(
        MlmSuiteForSequenceClassification,
        lambda b: {"labels": (torch.arange(ROWS * 3).view(ROWS, 3) % 4 == 1).float()},
        {"num_labels": 3, "problem_type": "multi_label_classification"},
    ),
    "regression": Case(
        MlmSuiteForSequenceClassification, lambda b: {"labels": torch.linspace(-1, 2, ROWS)}, {"num_labels": 1}
    ),
    "pair": Case(MlmSuiteForPairClassification, lambda b: {"labels": CLASSES}, {"num_labels": 3}),
    "tokens": Case(MlmSuiteForTokenClassification, lambda b: {"labels": _token_labels(b)}, {"num_labels": 5}),
    "tokens_weighted": Case(
        MlmSuiteForTokenClassification,
        lambda b: {"labels": _token_labels(b)},
        {"num_labels": 5, "class_weights": [1.0, 2.0, 0.5, 3.0, 1.5]},
    ),
    "tokens_crf": Case(
        MlmSuiteForTokenClassification,
        lambda b: {"labels": _bio_labels(b)},
        {"num_labels": 5, "use_crf": True, "tagging_scheme": "BIO", "id2label": BIO},
    ),
    # Every answer inside its row: the Trainer counts no QA items (no "labels"), so it averages the
    # micro-batches' means, which equals the step's mean only when they hold as many answers each.
    "qa": Case(
        MlmSuiteForQuestionAnswering,
        lambda b: {"start_positions": torch.tensor([1, 0, 2, 1, 3, 0, 2, 4]), "end_positions": torch.tensor([4, 2, 5, 3, 8, 1, 5, 7])},
    ),
    # In-batch negatives: a micro-batch's queries are scored against its own documents only, so
    # accumulating micro-batches (or splitting the batch across processes) is not one large batch;
    # what must hold is that 2 processes of 4 equal one process accumulating the same two halves, and
    # that gradient caching (mini-batches of 3 sequences) equals embedding the whole batch at once.
    "embeddings": Case(MlmSuiteForSentenceEmbedding, None),
    "embeddings_cached": Case(MlmSuiteForSentenceEmbedding, None, mini_batch_size=3),
}
IN_BATCH_NEGATIVES = ("embeddings", "embeddings_cached")


def rows(case: Case) -> list[dict[str, torch.Tensor]]:
    if case.labels is None:
        return _retrieval_rows()
    batch = make_random_batch(LENGTHS, seed=4, pairs=True)
    batch.update(case.labels(batch))
    return [{key: value[row] for key, value in batch.items()} for row in range(ROWS)]


def build_model(case: Case) -> torch.nn.Module:
    torch.manual_seed(0)
    return case.model_class(make_tiny_config(type_vocab_size=2, classifier_dropout=0.0, **case.config))


class GradientRecorder(TrainerCallback):
    """Keeps the gradients the optimizer is about to apply."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.gradients = model, {}

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.gradients = {
            f"grad.{name}": p.grad.detach().clone() for name, p in self.model.named_parameters() if p.grad is not None
        }


def train_one_step(
    name: str, output_dir: Path, batch_size: int, accumulation: int = 1, trainer_class: type = JobTrainer
) -> dict[str, torch.Tensor]:
    """One SGD step of case ``name`` over its 8 rows: the gradients, the weights after it, the logged loss and norm."""
    case = CASES[name]
    model = build_model(case)
    args = TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        learning_rate=0.5,
        optim="sgd",
        weight_decay=0.0,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,  # clipping acts on the gradient norm, so a mis-scaled loss changes the step itself
        logging_steps=1,
        save_strategy="no",
        seed=0,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )
    recorder = GradientRecorder(model)
    extra = {}
    if case.model_class is MlmSuiteForSentenceEmbedding:
        caching = [GradientCaching(case.mini_batch_size)] if case.mini_batch_size is not None else []
        extra = {"data_collator": RetrievalCollator(),
                 "features": (*standard_features(), EmbeddingPrediction(), *caching)}
    trainer = trainer_class(model=model, args=args, train_dataset=rows(case), callbacks=[recorder], **extra)
    trainer.train()
    logged = next(entry for entry in trainer.state.log_history if "loss" in entry)
    return {
        **recorder.gradients,
        **{f"weight.{key}": value.detach().clone() for key, value in model.state_dict().items()},
        "loss": torch.tensor(float(logged["loss"])),
        "grad_norm": torch.tensor(float(logged["grad_norm"])),
    }


def batch_loss(name: str) -> float:
    """The case's loss on its 8 rows in one forward pass, as the model reports it (before any step)."""
    case = CASES[name]
    model = build_model(case)
    if case.labels is None:
        batch = RetrievalCollator()(rows(case))
    else:
        batch = {key: torch.stack([row[key] for row in rows(case)]) for key in rows(case)[0]}
    with torch.no_grad():
        return model(**batch).loss.item()


if __name__ == "__main__":  # under accelerate launch: every case, 4 rows per process
    out = Path(sys.argv[1])
    for case_name in CASES:
        result = train_one_step(case_name, out / case_name, batch_size=ROWS // 2)
        if torch.distributed.get_rank() == 0:
            save_file({key: value.contiguous() for key, value in result.items()}, str(out / f"{case_name}.safetensors"))
    # The jobs' ending (a kept barrier, then the group destroyed): a gloo group left to interpreter exit can abort a
    # process after it finished ("terminate called without an active exception", see mlm_suite/jobs/common/running.py).
    end_process_group()
