"""Scoring a token-classification model inside the HF ``Trainer`` for ``mlm-suite finetune-ner``: its
``compute_metrics`` (entity F1 in both modes or token scores, and what was scored), logits turned into label ids
before they are gathered (Viterbi with a CRF), the predicted tags kept for the paired bootstrap, and the per-split
figures. Scores are word-level: evaluation data are aligned with the ``first`` strategy (one label per word).
See docs/finetuning.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

from mlm_suite.data.tagging import NO_SCHEME
from mlm_suite.evaluation.entities import (
    MODES,
    entity_counts,
    entity_scores,
    label_counts,
    make_compute_metrics,
    tag_scores,
    tag_sequences,
)
from mlm_suite.evaluation.plots import plot_label_scores

#: Scores that exist only for entity schemes (never reported for scheme none).
ENTITY_METRICS = ("f1", "precision", "recall", "conlleval_f1", "strict_f1", "gold_entities")


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


def ner_compute_metrics(id2label: Mapping[int, str], scheme: str, mode: str, memory: PredictionMemory | None = None):
    """``make_compute_metrics`` in ``mode`` plus F1 in both modes and what was scored.

    ``n_sentences`` (rows with at least one labelled word) and ``gold_entities`` make it
    checkable that every evaluation example was scored exactly once (e.g. under ``accelerate
    launch``, where the Trainer gathers predictions across processes). For scheme ``none`` the
    scores are token-level (accuracy, per-tag and macro/micro precision/recall/F1, ``n_tokens``)
    with ``n_sentences``. A ``memory`` keeps the predicted tags (see :class:`PredictionMemory`).
    """
    if scheme == NO_SCHEME:
        token_scorer = make_compute_metrics(id2label, scheme=NO_SCHEME)

        def compute_token_metrics(eval_pred: Any) -> dict[str, float]:
            results = token_scorer(eval_pred)
            gold, pred = tag_sequences(eval_pred, id2label)
            if memory is not None:
                memory.remember(gold, pred)
            results["n_sentences"] = sum(1 for tags in gold if tags)
            return results

        return compute_token_metrics
    scorers = {m: make_compute_metrics(id2label, scheme=scheme, mode=m) for m in MODES}

    def compute_metrics(eval_pred: Any) -> dict[str, float]:
        results = scorers[mode](eval_pred)
        for other in MODES:
            results[f"{other}_f1"] = results["f1"] if other == mode else scorers[other](eval_pred)["f1"]
        all_gold, pred = tag_sequences(eval_pred, id2label)
        if memory is not None:
            memory.remember(all_gold, pred)
        gold = [tags for tags in all_gold if tags]
        results["n_sentences"] = len(gold)
        results["gold_entities"] = int(entity_counts(gold, gold, scheme=scheme, mode=mode)[:, 2].sum())
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
    """Gold and predicted tags of ``dataset`` (rows as the Trainer scores them), predicted only if the
    trainer's :class:`PredictionMemory` did not keep them from the final evaluation."""
    id2label = {int(i): label for i, label in trainer.model.config.id2label.items()}
    gold = [[id2label[label] for label in row if label != -100] for row in dataset["labels"]]
    memory = getattr(trainer, "prediction_memory", None)
    pred = memory.recall(gold) if memory is not None else None
    if pred is not None:
        return gold, pred
    predicted_gold, pred = tag_sequences(trainer.predict(dataset), id2label)
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
