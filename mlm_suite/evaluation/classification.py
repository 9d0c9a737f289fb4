"""Scores and outputs of sequence (and sentence-pair) classification and regression: the ``Trainer``'s
``compute_metrics`` (accuracy and macro-F1, or Pearson/Spearman and mean squared error), the predictions of
splits without labels in ``run_glue.py``'s format, and the confusion matrices the card shows. See docs/finetuning.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from mlm_suite.evaluation.plots import plot_confusion_matrix


def classification_metrics(eval_pred: Any) -> dict[str, float]:
    """Accuracy and macro-averaged F1 over the classes present in gold or predictions."""
    from sklearn.metrics import f1_score  # scikit-learn (~1.5 s) is imported where scores are computed, not by every job

    logits = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
    predictions = np.asarray(logits).argmax(axis=-1)
    gold = np.asarray(eval_pred.label_ids)
    # Classes absent from both gold and predictions are left out of the mean (each listed class has an F1).
    f1 = f1_score(gold, predictions, labels=np.union1d(gold, predictions), average="macro")
    return {"accuracy": float(np.mean(predictions == gold)), "f1": float(f1), "n_examples": int(gold.size)}


def regression_metrics(eval_pred: Any) -> dict[str, float]:
    """Pearson and Spearman correlation and mean squared error; a correlation is NaN where it is undefined
    (fewer than 2 examples, or constant predictions or gold scores)."""
    scores = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
    predicted = np.asarray(scores, dtype=np.float64).reshape(-1)
    gold = np.asarray(eval_pred.label_ids, dtype=np.float64).reshape(-1)
    if gold.size < 2:  # scipy refuses fewer than 2 pairs
        pearson = spearman = math.nan
    else:
        pearson, spearman = stats.pearsonr(predicted, gold).statistic, stats.spearmanr(predicted, gold).statistic
    return {
        "pearson": float(pearson),
        "spearman": float(spearman),
        "mse": float(np.mean((predicted - gold) ** 2)),
        "n_examples": int(gold.size),
    }


def confusion_matrix(gold: Sequence[int], predicted: Sequence[int], num_labels: int) -> np.ndarray:
    """``(num_labels, num_labels)`` counts: row = gold label id, column = predicted label id."""
    gold, predicted = np.asarray(gold, dtype=np.int64), np.asarray(predicted, dtype=np.int64)
    if gold.shape != predicted.shape:
        raise ValueError(f"gold has shape {gold.shape} but predicted {predicted.shape}")
    outside = (gold < 0) | (gold >= num_labels) | (predicted < 0) | (predicted >= num_labels)
    if outside.any():
        index = int(np.argmax(outside))
        raise ValueError(f"example {index}: label ids {gold[index]} (gold), {predicted[index]} (predicted) "
                         f"outside 0..{num_labels - 1}")
    if gold.size == 0:  # scikit-learn refuses empty inputs
        return np.zeros((num_labels, num_labels), dtype=np.int64)
    # scikit-learn drops ids outside ``labels`` without a word, hence the check above.
    from sklearn.metrics import confusion_matrix as sklearn_confusion_matrix

    return sklearn_confusion_matrix(gold, predicted, labels=np.arange(num_labels)).astype(np.int64)


def write_predictions(
    trainer: Any, datasets: Mapping[str, Any], label_list: Sequence[str] | None
) -> dict[str, Path]:
    """Predict each split of ``datasets`` (splits without labels) and write ``predict_results_<split>.txt``.

    The format of ``run_glue.py``'s ``predict_results_<task>.txt``: a header ``index<TAB>prediction``, then
    one line per example in the split's order, with the predicted class name (``label_list``, in id order)
    or, for regression (``label_list`` None), the predicted score with 3 decimals. No metrics are computed
    or saved; the main process writes the files. Returns the path per split.
    """
    output_dir = Path(trainer.args.output_dir)
    written = {}
    for split, dataset in datasets.items():
        output = trainer.predict(dataset, metric_key_prefix=f"predict_{split}")
        logits = np.asarray(output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions)
        if len(logits) != len(dataset):
            raise RuntimeError(f"{len(logits)} predictions for the {len(dataset)} examples of the {split} split")
        path = output_dir / f"predict_results_{split}.txt"
        if trainer.is_world_process_zero():
            if label_list is None:
                rows = (f"{index}\t{score:3.3f}" for index, score in enumerate(logits.reshape(len(logits), -1)[:, 0]))
            else:
                rows = (f"{index}\t{label_list[item]}" for index, item in enumerate(logits.argmax(axis=-1)))
            path.write_text("index\tprediction\n" + "".join(row + "\n" for row in rows), encoding="utf-8")
        written[split] = path
    return written


def write_confusion_matrices(
    output_dir: str | Path, kept: Mapping[str, Any], label_list: Sequence[str], scored_splits: Mapping[str, Any],
    write: bool = True,
) -> list[tuple[str, Path]]:
    """``confusion_matrix_<split>.png`` in ``output_dir`` for the validation and test splits the final model was scored
    on (``eval``/``test`` in ``scored_splits``, the results of :func:`~mlm_suite.jobs.common.finetune_training.run_trainer`).

    Drawn from the predictions the trainer kept (``kept``, by metric prefix:
    :class:`~mlm_suite.training.job_outputs.KeptPredictions`), so nothing is predicted again; ``write``: whether this
    process writes the files (the main one). Returns ``(caption, path)`` per picture, for the card.
    """
    output_dir = Path(output_dir)
    figures = []
    for prefix, split in (("eval", "validation"), ("test", "test")):
        if prefix not in scored_splits:
            continue
        scored = kept[prefix]
        logits = scored.predictions[0] if isinstance(scored.predictions, tuple) else scored.predictions
        matrix = confusion_matrix(scored.label_ids, np.asarray(logits).argmax(axis=-1), len(label_list))
        caption = (f"{output_dir.name}: confusion matrix on the {split} split ({matrix.sum()} examples, "
                   f"accuracy {np.trace(matrix) / matrix.sum():.4f})")
        path = output_dir / f"confusion_matrix_{split}.png"
        if write:
            plot_confusion_matrix(matrix, label_list, path, caption)
        figures.append((caption, path))
    return figures
