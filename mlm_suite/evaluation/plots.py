"""The evaluation plots the jobs write next to their results (confusion matrices, per-type scores, pretraining
curves, scores per seed) and the card section that shows them. Figures are PNG files drawn on matplotlib's Agg
canvas without pyplot, so no global backend state is touched and nothing needs a display. See
docs/models.md#evaluation-plots.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
SCORE_NAMES = ("precision", "recall", "f1")


def _figure(width: float, height: float) -> Figure:
    # matplotlib is imported when a figure is drawn, not with the jobs that import this module (~0.5 s).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _wrapped(title: str, figure: Figure, fontsize: float = 10) -> str:
    """``title`` broken into lines that fit the figure's width (about 0.6 em per character)."""
    width_points = figure.get_figwidth() * 72
    return textwrap.fill(title, max(20, int(width_points / (0.6 * fontsize))))


def _save(figure: Figure, path: str | Path) -> Path:
    path = Path(path)
    figure.savefig(path, dpi=DPI, format="png")
    return path


def _tick_labels(axes, labels: Sequence[str], axis: str = "x") -> None:
    """Label names as ticks, turned when there are many or long ones."""
    positions = np.arange(len(labels))
    if axis == "y":
        axes.set_yticks(positions, labels)
        return
    crowded = len(labels) > 12 or max((len(label) for label in labels), default=0) > 8
    axes.set_xticks(positions, labels, rotation=90 if len(labels) > 12 else (40 if crowded else 0),
                    ha="center" if len(labels) > 12 or not crowded else "right")


# --------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------
def plot_confusion_matrix(matrix: np.ndarray, labels: Sequence[str], path: str | Path, title: str) -> Path:
    """Counts of each (gold, predicted) pair, shaded by the share of the gold label's examples (its recall on
    the diagonal); each cell shows the count and that share."""
    matrix = np.asarray(matrix)
    n = len(labels)
    totals = matrix.sum(axis=1, keepdims=True)
    shares = np.divide(matrix, totals, out=np.zeros(matrix.shape, dtype=float), where=totals > 0)
    side = 3.0 + 0.5 * n
    figure = _figure(side + 1.2, side)
    axes = figure.subplots()
    image = axes.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    if n <= 25:
        for row in range(n):
            for column in range(n):
                axes.text(column, row, f"{matrix[row, column]}\n{shares[row, column]:.0%}", ha="center", va="center",
                          fontsize=9 if n <= 10 else 6, color="white" if shares[row, column] > 0.6 else "black")
    _tick_labels(axes, labels)
    _tick_labels(axes, labels, axis="y")
    axes.set_xlabel("predicted label")
    axes.set_ylabel("gold label")
    axes.set_title(_wrapped(title, figure), fontsize=10)
    figure.colorbar(image, ax=axes, shrink=0.8, label="share of the gold label's examples")
    return _save(figure, path)


# --------------------------------------------------------------------------------------------
# Token classification
# --------------------------------------------------------------------------------------------
def plot_label_scores(
    scores: Mapping[str, Mapping[str, float]],
    counts: Mapping[str, Mapping[str, int]],
    path: str | Path,
    title: str,
    unit: str = "entities",
) -> Path:
    """Precision, recall and F1 per label (top) above the gold and predicted counts per label (bottom).

    Args:
        scores: ``{label: {"precision", "recall", "f1", ...}}``, the ``per_type`` of
            :func:`mlm_suite.evaluation.entities.entity_scores` or the ``per_tag`` of :func:`mlm_suite.evaluation.entities.tag_scores`.
        counts: ``{label: {"gold", "predicted"}}`` (:func:`mlm_suite.evaluation.entities.label_counts`); its labels, in
            order, are the bars.
        unit: what the counts count (``"entities"``, ``"tokens"``), for the axis.
    """
    labels = list(counts)
    positions = np.arange(len(labels))
    figure = _figure(max(6.0, 1.5 + 0.45 * len(labels)), 6.0)
    score_axes, count_axes = figure.subplots(2, 1, sharex=True)
    width = 0.27
    for offset, name in zip((-width, 0.0, width), SCORE_NAMES):
        values = [scores.get(label, {}).get(name, 0.0) for label in labels]
        score_axes.bar(positions + offset, values, width, label="F1" if name == "f1" else name)
    score_axes.set_ylim(0.0, 1.15)  # the legend sits above 1
    score_axes.set_yticks(np.linspace(0.0, 1.0, 6))
    score_axes.set_ylabel("score")
    score_axes.legend(ncols=3, loc="upper center", fontsize=8)
    score_axes.grid(axis="y", alpha=0.3)
    score_axes.set_title(_wrapped(title, figure), fontsize=10)
    for offset, side in zip((-width / 2, width / 2), ("gold", "predicted")):
        count_axes.bar(positions + offset, [counts[label][side] for label in labels], width, label=side)
    highest = max((max(row["gold"], row["predicted"]) for row in counts.values()), default=0)
    count_axes.set_ylim(0, max(1, highest) * 1.25)  # room for the legend
    count_axes.set_ylabel(f"{unit} (count)")
    count_axes.legend(ncols=2, loc="upper center", fontsize=8)
    count_axes.grid(axis="y", alpha=0.3)
    _tick_labels(count_axes, labels)
    return _save(figure, path)


# --------------------------------------------------------------------------------------------
# Anisotropy
# --------------------------------------------------------------------------------------------
def plot_anisotropy(results: Sequence[Mapping[str, float]], path: str | Path, title: str) -> Path:
    """The expected cosine of random word pairs per layer, raw and z-scored (``mlm-suite anisotropy``'s rows)."""
    layers = [row["layer"] for row in results]
    figure = _figure(6.0, 4.0)
    axis = figure.subplots()
    axis.plot(layers, [row["raw"] for row in results], marker="o", label="raw")
    axis.plot(layers, [row["standardized"] for row in results], marker="s", label="z-scored")
    axis.axhline(0.0, color="grey", linewidth=0.5)
    axis.set_xticks(layers)
    axis.set_xlabel("layer (0 = embeddings)")
    axis.set_ylabel("expected cosine of random word pairs")
    axis.set_title(_wrapped(title, figure))
    axis.legend()
    return _save(figure, path)


# --------------------------------------------------------------------------------------------
# Pretraining
# --------------------------------------------------------------------------------------------
def plot_pretraining_curves(log_history: Sequence[Mapping[str, float]], path: str | Path, title: str) -> Path:
    """Train and eval loss (left) and held-out ``[MASK]`` accuracy, top-5 and the baseline (right) per step.

    ``log_history`` is the Trainer's (``trainer.state.log_history``): ``loss`` at each logging step, the
    ``eval_*`` metrics of :mod:`mlm_suite.evaluation.masked_lm` at each evaluation.
    """

    def series(key: str) -> list[tuple[float, float]]:
        return [(entry["step"], entry[key]) for entry in log_history if key in entry]

    figure = _figure(10.0, 4.0)
    loss_axes, accuracy_axes = figure.subplots(1, 2)
    for key, label, style in (("loss", "train loss", "-"), ("eval_loss", "eval loss", "o-")):
        points = series(key)
        if points:
            loss_axes.plot(*zip(*points), style, label=label)
    loss_axes.set_xlabel("optimizer step")
    loss_axes.set_ylabel("loss")
    loss_axes.set_title("loss")
    loss_axes.legend()
    highest = 0.0
    for key, label, style in (("eval_mask_accuracy", "accuracy at [MASK]", "o-"),
                              ("eval_mask_top5_accuracy", "top-5 accuracy at [MASK]", "s--")):
        points = series(key)
        if points:
            accuracy_axes.plot(*zip(*points), style, label=label)
            highest = max(highest, *(value for _, value in points))
    baseline = series("eval_mask_baseline_accuracy")
    if baseline:  # fixed evaluation masks and baseline token: the same at every evaluation
        accuracy_axes.axhline(baseline[-1][1], color="grey", linestyle=":",
                              label=f"most-frequent-token baseline ({baseline[-1][1]:.3f})")
        highest = max(highest, baseline[-1][1])
    accuracy_axes.set_ylim(0.0, min(1.0, max(0.1, 1.3 * highest)))
    accuracy_axes.set_xlabel("optimizer step")
    accuracy_axes.set_ylabel("held-out accuracy")
    accuracy_axes.set_title("held-out [MASK] accuracy")
    accuracy_axes.legend(fontsize=8)
    figure.suptitle(_wrapped(title, figure, 12))
    return _save(figure, path)


# --------------------------------------------------------------------------------------------
# Seeds
# --------------------------------------------------------------------------------------------
def plot_seed_scores(
    per_seed: Mapping[int, Mapping[str, float]],
    summary: Mapping[str, Mapping[str, float]],
    names: Mapping[str, str],
    path: str | Path,
    title: str,
    metric: str,
) -> Path:
    """Each seed's score (dots, labelled with the seed) per series, with the mean ± sample standard deviation.

    Args:
        per_seed: ``{seed: {key: score}}``.
        summary: ``{key: {"mean", "std", ...}}`` of :func:`mlm_suite.jobs.seeds.summarize`.
        names: ``{key: axis label}`` of the series to draw, in order.
    """
    keys = list(names)
    figure = _figure(max(5.0, 1.0 + 1.6 * len(keys)), 4.5)
    axes = figure.subplots()
    seeds = list(per_seed)
    spread = np.linspace(-0.15, 0.15, len(seeds)) if len(seeds) > 1 else np.zeros(1)
    for x, key in enumerate(keys):
        for offset, seed in zip(spread, seeds):
            if key in per_seed[seed]:
                axes.plot(x + offset, per_seed[seed][key], "o", color="tab:blue", alpha=0.7)
                axes.annotate(str(seed), (x + offset, per_seed[seed][key]), textcoords="offset points",
                              xytext=(4, 2), fontsize=7)
        mean, std = summary[key]["mean"], summary[key]["std"]
        axes.errorbar(x + 0.3, mean, yerr=std, fmt="D", color="tab:red", capsize=5,
                      label="mean ± sd" if x == 0 else None)
        axes.annotate(f"{mean:.4f}\n± {std:.4f}", (x + 0.3, mean), textcoords="offset points", xytext=(7, -8),
                      fontsize=8, color="tab:red")
    axes.set_xticks(range(len(keys)), [names[key] for key in keys])
    axes.set_xlim(-0.6, len(keys) - 0.1)
    axes.set_ylabel(metric)
    axes.grid(axis="y", alpha=0.3)
    axes.legend(loc="best", fontsize=8)
    axes.set_title(_wrapped(title, figure), fontsize=10)
    return _save(figure, path)


# --------------------------------------------------------------------------------------------
# Cards
# --------------------------------------------------------------------------------------------
def figures_section(figures: Sequence[tuple[str, str | Path]]) -> str:
    """A markdown section showing each ``(caption, picture)``, linked by file name (the card's folder)."""
    if not figures:
        return ""
    return "\n\n### Figures\n\n" + "\n\n".join(f"![{caption}]({Path(path).name})" for caption, path in figures)
