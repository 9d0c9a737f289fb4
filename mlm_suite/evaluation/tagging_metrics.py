"""Scoring a token-classification model inside the HF ``Trainer`` for ``mlm-suite finetune-ner``: its
``compute_metrics`` (entity F1 in both modes or token scores, and what was scored), logits turned into label ids
before they are gathered (Viterbi with a CRF), the predicted tags kept for the paired bootstrap, and the per-split
figures. Scores are word-level: evaluation data are aligned with the ``first`` strategy (one label per word). They
are sentence-level too: a sentence longer than a window is read in overlapping windows, whose predictions are
merged back into one label per word (:class:`~mlm_suite.data.finetuning.alignment.SentenceWindows`) before anything is
scored. See docs/finetuning.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from mlm_suite.data.finetuning.alignment import SentenceWindows
from mlm_suite.data.finetuning.tagging import NO_SCHEME
from mlm_suite.evaluation.entities import (
    MODES,
    entity_counts,
    entity_scores,
    label_counts,
    sequence_metrics,
    tag_scores,
    tag_sequences,
)
from mlm_suite.evaluation.plots import plot_label_scores
from mlm_suite.training.features import TrainerFeature

#: Scores that exist only for entity schemes (never reported for scheme none).
ENTITY_METRICS = ("f1", "precision", "recall", "conlleval_f1", "strict_f1", "gold_entities")

#: The columns of an evaluation split that place each window in its sentence (``tokenize_and_align``'s): read by
#: :func:`sentence_windows`, never given to the model.
WINDOW_COLUMNS = ("example_id", "word_ids")


def main_metric(scheme: str) -> str:
    """The validation score that early stopping and the best model use: token accuracy without entities."""
    return "accuracy" if scheme == NO_SCHEME else "f1"


def check_best_model_metric(metric: str | None) -> None:
    """Scheme none reports no entity scores: ``--metric_for_best_model f1`` (or the like) is an error."""
    if metric and metric.removeprefix("eval_") in ENTITY_METRICS:
        raise ValueError(
            f"--metric_for_best_model {metric}: tags without entity scheme (none) are scored per token; "
            f"use accuracy, macro_f1 or micro_f1"
        )


class PredictionMemory(TrainerCallback):
    """The predicted tags of each evaluation set scored after training, keyed by its gold tags.

    The paired bootstrap against the HF baseline reuses them instead of predicting the validation
    and test sets a second time. What was predicted during training (other weights) is forgotten
    when training ends, so only the final model's predictions are ever reused.
    """

    def __init__(self) -> None:
        self._predictions: dict[tuple, list[list[str]]] = {}

    @staticmethod
    def _key(gold: Sequence[Sequence[str]]) -> tuple:
        return tuple(tuple(tags) for tags in gold)

    def remember(self, gold: Sequence[Sequence[str]], pred: list[list[str]]) -> None:
        self._predictions[self._key(gold)] = pred

    def recall(self, gold: Sequence[Sequence[str]]) -> list[list[str]] | None:
        return self._predictions.get(self._key(gold))

    def on_train_end(self, args, state, control, **kwargs):
        self._predictions.clear()


def sentence_windows(dataset: Any) -> SentenceWindows:
    """How the windows (rows) of an evaluation split make up its sentences, from its :data:`WINDOW_COLUMNS`."""
    return SentenceWindows(dataset["example_id"], dataset["word_ids"])


class SentenceScoring(TrainerFeature):
    """Scores whole sentences, however many windows hold them, a feature of the jobs' Trainer: an evaluated or
    predicted split keeps its :data:`WINDOW_COLUMNS` (``finetune_ner``'s encoded scored splits); while the Trainer
    reads it (:meth:`evaluating`, the rows without those columns), :meth:`compute_metrics` scores with
    ``score_sentences(eval_pred, windows)`` (:func:`ner_compute_metrics`), which merges the windows' predictions into
    one per word first, as transformers' question-answering Trainer of ``run_qa.py`` turns its windows back into
    examples. Predictions returned stay per window."""

    def __init__(self, score_sentences: Any) -> None:
        self.score_sentences = score_sentences
        self._windows: SentenceWindows | None = None

    @contextlib.contextmanager
    def evaluating(self, dataset: Any) -> Iterator[Any]:
        self._windows = sentence_windows(dataset)
        try:
            yield dataset.remove_columns(list(WINDOW_COLUMNS))
        finally:
            self._windows = None

    def compute_metrics(self, eval_pred: Any) -> dict[str, float]:
        """The Trainer's ``compute_metrics``: the sentences of the split being scored."""
        return self.score_sentences(eval_pred, self._windows)


def sentence_tags(
    eval_pred: Any, id2label: Mapping[int, str], windows: SentenceWindows
) -> tuple[list[list[str]], list[list[str]]]:
    """Gold and predicted tags per sentence (one per word) from a Trainer's predictions per window."""
    gold, pred = tag_sequences(eval_pred, id2label)
    return windows.merge(gold), windows.merge(pred)


def ner_compute_metrics(id2label: Mapping[int, str], scheme: str, mode: str, memory: PredictionMemory | None = None):
    """``compute_metrics(eval_pred, windows)``: ``make_compute_metrics`` in ``mode`` plus F1 in both modes and what
    was scored, over whole sentences.

    The predictions of the windows are first merged into one tag per word of each sentence by ``windows``
    (:func:`sentence_tags`), so an entity cut by a window's edge is one entity and a word in two windows one
    token. ``n_sentences``, ``n_tokens`` (words) and ``gold_entities`` are thus the data's and make it checkable
    that every sentence and word was scored exactly once (also under ``accelerate launch``, where the Trainer
    gathers predictions across processes). For scheme ``none`` the scores are token-level (accuracy, per-tag and
    macro/micro precision/recall/F1, ``n_tokens``) with ``n_sentences``. A ``memory`` keeps the predicted tags
    (see :class:`PredictionMemory`).
    """

    def compute_metrics(eval_pred: Any, windows: SentenceWindows) -> dict[str, float]:
        gold, pred = sentence_tags(eval_pred, id2label, windows)
        if memory is not None:
            memory.remember(gold, pred)
        results = sequence_metrics(gold, pred, scheme=scheme, mode=mode)
        if scheme != NO_SCHEME:
            for other in MODES:
                results[f"{other}_f1"] = results["f1"] if other == mode else entity_scores(
                    gold, pred, scheme=scheme, mode=other)["f1"]
            results["gold_entities"] = int(entity_counts(gold, gold, scheme=scheme, mode=mode)[:, 2].sum())
            results["n_tokens"] = sum(map(len, gold))
        results["n_sentences"] = len(gold)
        return results

    return compute_metrics


def make_preprocess_logits(model: Any):
    """Turn logits into label ids before they are gathered: Viterbi with a CRF, else argmax.

    Positions not to score (labels -100) get -100; with a CRF only labelled positions (the
    first piece of each word) form the chain, as in training.
    """

    def preprocess(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if isinstance(logits, tuple):
            logits = logits[0]
        if not getattr(model.config, "use_crf", False):
            return logits.argmax(dim=-1)
        mask = labels != -100
        predicted = torch.full_like(labels, -100)
        for row, path in enumerate(model.decode(logits, mask)):
            predicted[row, mask[row]] = torch.tensor(path, dtype=labels.dtype, device=labels.device)
        return predicted

    return preprocess


def predicted_tags(trainer: Any, dataset: Any) -> tuple[list[list[str]], list[list[str]]]:
    """Gold and predicted tags of the sentences of ``dataset`` (one per word, as the Trainer scores them), predicted
    only if the trainer's :class:`PredictionMemory` did not keep them from the final evaluation."""
    id2label = {int(i): label for i, label in trainer.model.config.id2label.items()}
    windows = sentence_windows(dataset)
    gold = windows.merge([[id2label[label] for label in row if label != -100] for row in dataset["labels"]])
    memory = getattr(trainer, "prediction_memory", None)
    pred = memory.recall(gold) if memory is not None else None
    if pred is not None:
        return gold, pred
    predicted_gold, pred = sentence_tags(trainer.predict(dataset), id2label, windows)
    if predicted_gold != gold:
        raise RuntimeError("the predicted rows do not line up with the dataset's labels")
    return gold, pred


def plot_scores_per_split(
    trainer: Any, datasets: Mapping[str, Any], scored_splits: Mapping[str, Any], scheme: str, mode: str
) -> list[tuple[str, Path]]:
    """``per_type_scores_<split>.png`` (``per_tag_scores_<split>.png`` for scheme none) for the validation and
    test splits the final model was scored on (``eval``/``test`` in ``scored_splits``).

    Precision, recall and F1 per entity type (per tag) above the gold and predicted counts, from the
    predicted tags the trainer kept (:func:`predicted_tags`); the main process writes the files. Returns
    ``(caption, path)`` per picture, for the card.
    """
    output_dir = Path(trainer.args.output_dir)
    figures = []
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if prefix not in scored_splits:
            continue
        gold, pred = predicted_tags(trainer, datasets[split])
        if scheme == NO_SCHEME:
            scores = tag_scores(gold, pred)
            per_label, unit, name = scores["per_tag"], "tokens", f"per_tag_scores_{split}.png"
            what = f"per-tag token scores on the {split} split (accuracy {scores['accuracy']:.4f})"
        else:
            scores = entity_scores(gold, pred, scheme=scheme, mode=mode)
            per_label, unit, name = scores["per_type"], "entities", f"per_type_scores_{split}.png"
            what = f"per-type entity scores on the {split} split ({mode} mode, {scheme}; micro F1 {scores['f1']:.4f})"
        caption = f"{output_dir.name}: {what}"
        if trainer.is_world_process_zero():
            counts = label_counts(gold, pred, scheme=scheme, mode=mode)
            plot_label_scores(per_label, counts, output_dir / name, caption, unit=unit)
        figures.append((caption, output_dir / name))
    return figures
