"""mlm_suite.evaluation.classification's scores against hand counts and the libraries they call, on the edge
cases: a class never predicted, a class in neither gold nor predictions, constant predictions, ties, one example."""

import math

import numpy as np
import pytest
from scipy import stats
from transformers import EvalPrediction

from mlm_suite.evaluation.classification import classification_metrics, confusion_matrix, regression_metrics


def logits_for(predicted: list[int], num_labels: int) -> np.ndarray:
    return np.eye(num_labels)[predicted]


def test_macro_f1_over_the_classes_in_gold_or_predictions():
    gold = [0, 0, 1, 1, 2, 2]
    predicted = [0, 0, 0, 1, 0, 1]  # class 2 is never predicted; class 3 of 4 appears nowhere
    metrics = classification_metrics(EvalPrediction(predictions=logits_for(predicted, 4), label_ids=np.array(gold)))
    # per-class F1 = 2 tp / (predicted + gold): class 0 4/6, class 1 2/4, class 2 0; class 3 left out
    assert metrics["f1"] == pytest.approx((4 / 6 + 2 / 4 + 0.0) / 3)
    assert metrics["accuracy"] == pytest.approx(3 / 6) and metrics["n_examples"] == 6


def test_macro_f1_equals_the_hand_count_on_random_labels():
    rng = np.random.default_rng(0)
    for _ in range(20):
        gold, predicted = rng.integers(0, 5, 40), rng.integers(0, 4, 40)
        f1s = [2 * np.sum((predicted == c) & (gold == c)) / (np.sum(predicted == c) + np.sum(gold == c))
               for c in np.union1d(gold, predicted)]
        logits = (logits_for(predicted, 6), np.zeros(3))  # a tuple: its first item are the logits
        metrics = classification_metrics(EvalPrediction(predictions=logits, label_ids=gold))
        assert metrics["f1"] == pytest.approx(float(np.mean(f1s)), abs=1e-15)


def regression(predicted, gold):
    return regression_metrics(EvalPrediction(predictions=np.asarray(predicted, dtype=np.float32)[:, None],
                                             label_ids=np.asarray(gold, dtype=np.float32)))


def test_regression_metrics_equal_scipy_with_ties():
    predicted, gold = [0.5, 1.0, 1.0, 3.0, 2.5], [1.0, 1.0, 2.0, 3.0, 3.0]  # ties on both sides
    metrics = regression(predicted, gold)
    assert metrics["pearson"] == pytest.approx(stats.pearsonr(predicted, gold).statistic, abs=1e-7)
    # average ranks for ties: ranks (1, 2.5, 2.5, 5, 4) against (1.5, 1.5, 3, 4.5, 4.5)
    assert metrics["spearman"] == pytest.approx(float(np.corrcoef([1, 2.5, 2.5, 5, 4], [1.5, 1.5, 3, 4.5, 4.5])[0, 1]))
    assert metrics["mse"] == pytest.approx(np.mean((np.array(predicted) - np.array(gold)) ** 2))
    assert metrics["n_examples"] == 5


def test_undefined_correlations_are_nan():
    with pytest.warns(stats.ConstantInputWarning):
        constant = regression([2.0, 2.0, 2.0], [1.0, 2.0, 3.0])  # a model that predicts one score
    assert math.isnan(constant["pearson"]) and math.isnan(constant["spearman"])
    assert constant["mse"] == pytest.approx(2 / 3)
    single = regression([2.0], [1.0])
    assert math.isnan(single["pearson"]) and math.isnan(single["spearman"]) and single["mse"] == 1.0


def test_confusion_matrix_counts_gold_rows_and_predicted_columns():
    matrix = confusion_matrix([0, 0, 1, 2, 2, 2], [0, 1, 1, 2, 0, 2], 3)
    assert matrix.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]] and matrix.dtype == np.int64
    assert confusion_matrix([1, 1], [1, 1], 3).tolist() == [[0, 0, 0], [0, 2, 0], [0, 0, 0]]  # labels never seen
    assert confusion_matrix([], [], 2).tolist() == [[0, 0], [0, 0]]
    with pytest.raises(ValueError, match=r"example 1: label ids 3 \(gold\), 0 \(predicted\) outside 0..2"):
        confusion_matrix([0, 3], [0, 0], 3)
    with pytest.raises(ValueError, match="shape"):
        confusion_matrix([0, 1], [0], 3)
