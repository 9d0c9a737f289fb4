"""The stock ``transformers.Trainer`` on mlm_suite's heads, beside the same run on ``BertFor*``: a conformance matrix.

For each head (masked LM, pretraining MLM + NSP, sequence classification, regression, multi-label, token
classification, extractive QA) and each ``TrainingArguments`` feature a user of transformers' ``run_*.py`` reaches
for, one tiny run (3 optimizer steps, batch 4) of the stock Trainer trains a random tiny ``BertFor*`` and the
mlm_suite head converted from it (``convert_checkpoint``, so both start from the same weights; dropout off).
Both must succeed and, where the feature is deterministic, agree: the mean training loss and the evaluation loss
after training (which moves only if every step's gradients matched) to ``FP32_RTOL`` (``BF16_RTOL`` under bf16
autocast), and the metrics ``compute_metrics`` reads off the evaluation outputs. Features that cannot apply to a
head are listed in ``NOT_APPLICABLE`` with the reason, which holds for ``BertFor*`` too. docs/models.md lists the
matrix.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np
import pytest
import torch
from transformers import (
    BertForMaskedLM,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    Trainer,
    TrainingArguments,
)

from tests.helpers import TINY_VOCAB, make_tiny_bert_config
from mlm_suite import convert_checkpoint
from mlm_suite.model import (
    MlmSuiteForMaskedLM,
    MlmSuiteForPreTraining,
    MlmSuiteForQuestionAnswering,
    MlmSuiteForSequenceClassification,
    MlmSuiteForTokenClassification,
)

FP32_RTOL = 1e-5
BF16_RTOL = 2e-2
MASK_ID = 3
NUM_EXAMPLES = 12
EXTRA_TOKENS = 5  # added by the vocabulary-resize cell

HEADS = {
    # head: (BERT class, mlm_suite class, BERT config overrides)
    "masked_lm": (BertForMaskedLM, MlmSuiteForMaskedLM, {}),
    "pretraining": (BertForPreTraining, MlmSuiteForPreTraining, {}),
    "single_label": (BertForSequenceClassification, MlmSuiteForSequenceClassification, {"num_labels": 3}),
    "regression": (BertForSequenceClassification, MlmSuiteForSequenceClassification, {"num_labels": 1, "problem_type": "regression"}),
    "multi_label": (
        BertForSequenceClassification, MlmSuiteForSequenceClassification,
        {"num_labels": 4, "problem_type": "multi_label_classification"},
    ),
    "token": (  # real tag names: saving a token-classification head with placeholder names (LABEL_0...) warns
        BertForTokenClassification, MlmSuiteForTokenClassification,
        {"id2label": {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}},
    ),
    "question_answering": (BertForQuestionAnswering, MlmSuiteForQuestionAnswering, {}),
}
TOKEN_LABELS = ("masked_lm", "pretraining", "token")

# transformers renamed gradient_checkpointing to activation_checkpointing (5.24 warns on the old name); older releases
# within our floor (5.1) have only the old name.
CHECKPOINTING = (
    "activation_checkpointing" if "activation_checkpointing" in TrainingArguments.__dataclass_fields__
    else "gradient_checkpointing"
)

FEATURES = {
    # feature: TrainingArguments it sets (evaluation, saving and the model edits are set up in run_pair)
    "baseline": {},
    "neftune": {"neftune_noise_alpha": 5.0},
    "label_smoothing": {"label_smoothing_factor": 0.1},
    "gradient_checkpointing": {CHECKPOINTING: True},
    # aot_eager: dynamo traces the model and autograd as inductor would, without minutes of CPU code generation.
    "torch_compile": {"torch_compile": True, "torch_compile_backend": "aot_eager"},
    "bf16_cpu": {"bf16": True},
    "load_best_model_at_end": {
        "load_best_model_at_end": True, "eval_strategy": "steps", "eval_steps": 1, "save_strategy": "steps",
        "save_steps": 1, "metric_for_best_model": "loss", "save_only_model": True,
    },
    "resize_token_embeddings": {},
    "include_for_metrics": {"include_for_metrics": ["inputs", "loss"]},
    "eval_do_concat_batches": {"eval_do_concat_batches": False, "include_for_metrics": ["inputs"]},
    "average_tokens_across_devices": {"average_tokens_across_devices": True},
    "group_by_length": {"train_sampling_strategy": "group_by_length"},
    "auto_find_batch_size": {"auto_find_batch_size": True},
}
# The default suite runs every head's baseline, the features whose code path depends on the head on every head,
# and the other features on the masked-LM head (and the resize on the pretraining head, whose decoder is tied too);
# the remaining cells and every torch_compile cell are marked slow.
ON_EVERY_HEAD = {"baseline", "label_smoothing", "bf16_cpu"}


def is_slow(head: str, feature: str) -> bool:
    if feature == "torch_compile":
        return True
    return feature not in ON_EVERY_HEAD and head != "masked_lm" and (head, feature) != ("pretraining", "resize_token_embeddings")


def marks_of(head: str, feature: str) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.slow] if is_slow(head, feature) else []
    return marks + [pytest.mark.compile] if feature == "torch_compile" else marks


NOT_APPLICABLE = {
    # The Trainer's label smoother reads outputs["logits"] and gathers integer class ids (for multi-label
    # classification the Trainer turns it off itself, so that cell runs).
    ("pretraining", "label_smoothing"): "the pretraining output has no 'logits' for the Trainer's label smoother",
    ("regression", "label_smoothing"): "the Trainer's label smoother takes class ids, not regression targets",
}


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def make_examples(head: str, num_labels: int, vocab_size: int = TINY_VOCAB, seed: int = 0) -> list[dict]:
    """Fixed examples of lengths 5..16 (QA: all 12 tokens, since BERT's QA softmax also runs over pad positions)."""
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for index in range(NUM_EXAMPLES):
        length = 12 if head == "question_answering" else 5 + (index * 7) % 12
        ids = torch.randint(4, vocab_size, (length,), generator=generator)
        example = {"input_ids": ids.tolist(), "token_type_ids": [0] * (length // 2) + [1] * (length - length // 2)}
        if head in ("masked_lm", "pretraining"):
            masked = torch.rand(length, generator=generator) < 0.3
            masked[1] = True  # at least one prediction per row
            example["labels"] = torch.where(masked, ids, -100).tolist()
            example["input_ids"] = ids.masked_fill(masked, MASK_ID).tolist()
        if head == "pretraining":
            example["next_sentence_label"] = index % 2
        elif head == "single_label":
            example["labels"] = index % num_labels
        elif head == "regression":
            example["labels"] = float(torch.randn((), generator=generator))
        elif head == "multi_label":
            example["labels"] = torch.randint(0, 2, (num_labels,), generator=generator).float().tolist()
        elif head == "token":
            example["labels"] = torch.randint(0, num_labels, (length,), generator=generator).tolist()
        elif head == "question_answering":
            start = int(torch.randint(1, length - 2, (), generator=generator))
            example["start_positions"], example["end_positions"] = start, start + 1
        examples.append(example)
    return examples


def make_collator(head: str):
    token_labels = head in TOKEN_LABELS

    def collate_head(features: list[dict]) -> dict[str, torch.Tensor]:
        longest = max(len(feature["input_ids"]) for feature in features)

        def padded(key: str, pad: int) -> torch.Tensor:
            return torch.tensor([feature[key] + [pad] * (longest - len(feature[key])) for feature in features])

        batch = {"input_ids": padded("input_ids", 0), "token_type_ids": padded("token_type_ids", 0)}
        batch["attention_mask"] = (torch.arange(longest) < torch.tensor([len(f["input_ids"]) for f in features])[:, None]).long()
        for key in features[0]:
            if key not in batch:
                batch[key] = padded(key, -100) if key == "labels" and token_labels else torch.tensor([f[key] for f in features])
        return batch

    return collate_head


def checksum(predictions, inputs) -> float:
    """Sum of every prediction at real tokens (per-token outputs) or of every row (per-sequence outputs), in float64.

    Pads differ by design (BERT computes them, mlm_suite leaves them out), so they are left out. QA's start and end
    scores are centred per row: their softmax over positions ignores a shift, so the QA bias has no gradient but
    rounding noise, which AdamW turns into steps of either sign. Takes the Trainer's concatenated arrays or, with
    ``eval_do_concat_batches=False``, its lists of per-batch arrays.
    """
    if isinstance(inputs, list):
        return sum(checksum(batch_predictions, batch_inputs) for batch_predictions, batch_inputs in zip(predictions, inputs))
    arrays = predictions if isinstance(predictions, tuple) else (predictions,)
    real = np.asarray(inputs) > 0  # the Trainer pads inputs with -100 across batches, the collator with 0
    total = 0.0
    for array in arrays:
        array = np.asarray(array, dtype=np.float64)
        if array.shape == real.shape:  # QA: (rows, seq)
            array = array - np.where(real, array, 0).sum(1, keepdims=True) / real.sum(1, keepdims=True)
        if array.shape[:2] == real.shape:
            array = array[real]
        total += float(array.sum())
    return total


def compute_metrics(prediction) -> dict[str, float]:
    inputs = prediction.inputs if isinstance(prediction.inputs, list) else [prediction.inputs]
    metrics = {
        "checksum": checksum(prediction.predictions, prediction.inputs),
        "input_ids_sum": float(sum(np.where(batch > 0, batch, 0).sum() for batch in inputs)),
    }
    if prediction.losses is not None:
        metrics["mean_loss"] = float(np.mean(prediction.losses))
    return metrics


# --------------------------------------------------------------------------------------------
# Models: a tiny random BertFor* and the mlm_suite head converted from it
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def converted_pairs(tmp_path_factory):
    """head → (BERT folder, converted mlm_suite folder), made once per module."""
    pairs = {}
    for head, (bert_class, _, overrides) in HEADS.items():
        root = tmp_path_factory.mktemp(head)
        torch.manual_seed(0)
        bert_class(make_tiny_bert_config(**overrides)).save_pretrained(root / "bert")
        pairs[head] = (root / "bert", convert_checkpoint(root / "bert", root / "mlm_suite"))
    return pairs


def run_one(model, head: str, feature: str, output_dir, vocab_size: int) -> dict[str, float]:
    """Train ``model`` with the stock Trainer (3 steps), evaluate it; return what is compared."""
    num_labels = model.config.num_labels
    train, evaluation = make_examples(head, num_labels, vocab_size), make_examples(head, num_labels, vocab_size, seed=1)
    settings = dict(
        output_dir=str(output_dir), report_to="none", save_strategy="no", use_cpu=True, seed=0, max_steps=3,
        per_device_train_batch_size=4, per_device_eval_batch_size=4, learning_rate=1e-3, warmup_steps=0,
        logging_steps=1, disable_tqdm=True,
    )
    args = TrainingArguments(**{**settings, **FEATURES[feature]})
    uses_metrics = "include_for_metrics" in FEATURES[feature]
    # For multi-label classification the Trainer turns label smoothing off itself (see NOT_APPLICABLE), and says so.
    turns_smoothing_off = head == "multi_label" and feature == "label_smoothing"
    with pytest.warns(UserWarning, match="Label smoothing is not compatible") if turns_smoothing_off else nullcontext():
        trainer = Trainer(
            model=model, args=args, train_dataset=train, eval_dataset=evaluation, data_collator=make_collator(head),
            compute_metrics=compute_metrics if uses_metrics else None,
        )
    result = {"training_loss": trainer.train().training_loss}
    metrics = trainer.evaluate()
    result.update({name: value for name, value in metrics.items() if name in ("eval_loss", "eval_checksum", "eval_input_ids_sum", "eval_mean_loss")})
    if feature == "load_best_model_at_end":
        result["best_metric"] = trainer.state.best_metric
        result["best_step"] = float(trainer.state.best_model_checkpoint.rsplit("-", 1)[-1])
    return result


def load_pair(head: str, converted_pairs, feature: str):
    bert_class, ours_class, _ = HEADS[head]
    bert_dir, ours_dir = converted_pairs[head]
    models = [bert_class.from_pretrained(bert_dir), ours_class.from_pretrained(ours_dir)]
    vocab_size = TINY_VOCAB
    if feature == "resize_token_embeddings":
        vocab_size += EXTRA_TOKENS
        for model in models:
            torch.manual_seed(1)  # the new rows are drawn at random, the same for both
            model.resize_token_embeddings(vocab_size)
        bert_rows, ours_rows = (model.get_input_embeddings().weight for model in models)
        torch.testing.assert_close(ours_rows, bert_rows)
    return models, vocab_size


CELLS = [
    pytest.param(head, feature, marks=marks_of(head, feature), id=f"{head}-{feature}")
    for head in HEADS
    for feature in FEATURES
    if (head, feature) not in NOT_APPLICABLE
]


@pytest.mark.parametrize("head, feature", CELLS)
def test_stock_trainer_feature_matches_bert(head, feature, converted_pairs, tmp_path):
    models, vocab_size = load_pair(head, converted_pairs, feature)
    bert, ours = (run_one(model, head, feature, tmp_path / name, vocab_size) for model, name in zip(models, ("bert", "ours")))
    assert bert.keys() == ours.keys()
    assert all(math.isfinite(value) for value in ours.values()), ours
    rtol = BF16_RTOL if feature == "bf16_cpu" else FP32_RTOL
    for name, expected in bert.items():
        assert ours[name] == pytest.approx(expected, rel=rtol, abs=1e-6), f"{name}: mlm_suite {ours[name]}, BERT {expected}"


@pytest.mark.parametrize("head, feature", sorted(NOT_APPLICABLE))
def test_inapplicable_cells_fail_alike_for_bert(head, feature, converted_pairs, tmp_path):
    """Where a feature cannot apply to a head, it fails for BertFor* as for mlm_suite, with the same error type."""
    models, vocab_size = load_pair(head, converted_pairs, feature)
    errors = []
    for model, name in zip(models, ("bert", "ours")):
        try:
            run_one(model, head, feature, tmp_path / name, vocab_size)
            errors.append(None)
        except Exception as error:  # noqa: BLE001 (the type is what is compared)
            errors.append(type(error))
    assert errors[0] is not None and errors[0] is errors[1], errors
