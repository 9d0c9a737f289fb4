"""Evaluation plots (``mlm_suite.evaluation.plots``): the numbers behind them, and that each is a real, readable PNG.

The jobs' own pictures are checked where the jobs run (``tests/e2e/test_finetune.py``, ``test_tagging_metrics.py``,
``tests/e2e/test_pretrain.py``) with :func:`assert_linked_png`.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from mlm_suite.evaluation.classification import confusion_matrix
from mlm_suite.evaluation.entities import entity_scores, label_counts, tag_scores
from mlm_suite.evaluation.plots import (
    figures_section,
    plot_anisotropy,
    plot_confusion_matrix,
    plot_label_scores,
    plot_pretraining_curves,
    plot_seed_scores,
)
from tests.helpers import assert_valid_png


def random_tags(rng: random.Random, n_sentences: int, tags: list[str]) -> list[list[str]]:
    return [[rng.choice(tags) for _ in range(rng.randint(1, 12))] for _ in range(n_sentences)]


# --------------------------------------------------------------------------------------------
# The numbers
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scheme,mode", [("BIO", "conlleval"), ("BIO", "strict"), ("BIOES", "strict"), ("IO", "conlleval")])
def test_label_counts_agree_with_the_entity_scores(scheme, mode):
    """Gold counts are the per-type support; predicted counts turn precision and recall into the same true
    positives (precision · predicted = recall · gold)."""
    rng = random.Random(7)
    prefixes = {"BIO": "BI", "BIOES": "BIES", "IO": "I"}[scheme]
    tags = ["O"] + [f"{p}-{t}" for p in prefixes for t in ("PER", "LOC", "ORG")]
    gold, pred = random_tags(rng, 150, tags), random_tags(rng, 150, tags)
    pred = [p[: len(g)] + ["O"] * (len(g) - len(p)) for g, p in zip(gold, pred)]
    counts = label_counts(gold, pred, scheme=scheme, mode=mode)
    per_type = entity_scores(gold, pred, scheme=scheme, mode=mode)["per_type"]
    assert list(counts) == sorted(per_type) and len(counts) == 3
    for type_, row in per_type.items():
        assert counts[type_]["gold"] == row["support"]
        assert row["precision"] * counts[type_]["predicted"] == pytest.approx(row["recall"] * counts[type_]["gold"])
        assert counts[type_]["predicted"] == label_counts(pred, pred, scheme=scheme, mode=mode)[type_]["gold"]


def test_label_counts_of_tags_without_entities_count_tokens():
    gold = [["DT", "NN", "VBZ"], ["PRP", "VBD"]]
    pred = [["DT", "NN", "NNS"], ["PRP", "PRP"]]
    counts = label_counts(gold, pred, scheme="none")
    assert counts == {"DT": {"gold": 1, "predicted": 1}, "NN": {"gold": 1, "predicted": 1},
                      "NNS": {"gold": 0, "predicted": 1}, "PRP": {"gold": 1, "predicted": 2},
                      "VBD": {"gold": 1, "predicted": 0}, "VBZ": {"gold": 1, "predicted": 0}}
    assert {tag: row["support"] for tag, row in tag_scores(gold, pred)["per_tag"].items()} == {
        tag: row["gold"] for tag, row in counts.items()}


# --------------------------------------------------------------------------------------------
# The pictures
# --------------------------------------------------------------------------------------------
def test_confusion_matrix_plot(tmp_path):
    labels = ["negative", "neutral", "positive"]
    matrix = confusion_matrix([0, 0, 1, 2, 2, 2], [0, 1, 1, 2, 0, 2], 3)
    path = plot_confusion_matrix(matrix, labels, tmp_path / "cm.png", "confusion matrix, validation split")
    width, height = assert_valid_png(path)
    assert (width, height) == (570, 450)  # (3 + 0.5 · 3 + 1.2) × (3 + 0.5 · 3) inches at 100 dpi


def test_label_scores_plot_scales_with_the_labels(tmp_path):
    rng = random.Random(0)
    tags = [f"T{i}" for i in range(40)]
    gold, pred = random_tags(rng, 100, tags), random_tags(rng, 100, tags)
    pred = [p[: len(g)] + ["T0"] * (len(g) - len(p)) for g, p in zip(gold, pred)]
    path = plot_label_scores(tag_scores(gold, pred)["per_tag"], label_counts(gold, pred, scheme="none"),
                             tmp_path / "tags.png", "per-tag token scores, test split", unit="tokens")
    width, _ = assert_valid_png(path)
    assert width == 1950  # 1.5 + 0.45 · 40 inches
    # no entity in gold or predictions: empty axes, still a picture with its title
    assert_valid_png(plot_label_scores({}, {}, tmp_path / "none.png", "no entities"), min_bytes=5_000)


def test_pretraining_curves_plot(tmp_path):
    history = [{"step": step, "loss": 5.0 - step / 10} for step in range(1, 21)]
    history += [{"step": step, "eval_loss": 4.5 - step / 20, "eval_mask_accuracy": step / 100,
                 "eval_mask_top5_accuracy": step / 50, "eval_mask_baseline_accuracy": 0.034} for step in (10, 20)]
    assert_valid_png(plot_pretraining_curves(history, tmp_path / "curves.png", "pretraining curves"))


def test_seed_scores_plot(tmp_path):
    per_seed = {0: {"eval_f1": 0.45, "test_f1": 0.38}, 1: {"eval_f1": 0.47, "test_f1": 0.44}, 42: {"eval_f1": 0.44}}
    summary = {"eval_f1": {"mean": 0.4533, "std": 0.0153}, "test_f1": {"mean": 0.41, "std": 0.0424}}
    path = plot_seed_scores(per_seed, summary, {"eval_f1": "validation", "test_f1": "test"}, tmp_path / "seeds.png",
                            "finetune-ner: f1 per seed", "f1")
    assert_valid_png(path)


def test_anisotropy_plot(tmp_path):
    rows = [{"layer": layer, "raw": 0.05 * layer, "standardized": -0.01} for layer in range(7)]
    assert_valid_png(plot_anisotropy(rows, tmp_path / "anisotropy.png", "Anisotropy by layer (minilm)"))


def test_figures_section_links_by_file_name():
    assert figures_section([]) == ""
    section = figures_section([("Confusion matrix, validation", Path("/out/run/confusion_matrix_validation.png"))])
    assert section == "\n\n### Figures\n\n![Confusion matrix, validation](confusion_matrix_validation.png)"


def test_the_png_check_rejects_blank_and_truncated_files(tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(4, 4))
    FigureCanvasAgg(figure)
    figure.savefig(tmp_path / "blank.png", dpi=100)
    with pytest.raises(AssertionError):
        assert_valid_png(tmp_path / "blank.png", min_bytes=0)
    matrix = np.array([[3, 1], [0, 4]])
    good = plot_confusion_matrix(matrix, ["a", "b"], tmp_path / "good.png", "a title")
    (tmp_path / "cut.png").write_bytes(good.read_bytes()[:-100])
    with pytest.raises(AssertionError):
        assert_valid_png(tmp_path / "cut.png")
