"""The sections of ``finetune-ner``'s card: the labels, the scores (with the HF comparison), and the summary printed
at the end of a run (:func:`ner_summary`). See docs/models.md#what-the-jobs-write.
"""

from __future__ import annotations

from collections.abc import Mapping

from mlm_suite.cards.rendering import label_table, markdown_table, table_cell
from mlm_suite.data.finetuning.tagging import NO_SCHEME
from mlm_suite.evaluation.entities import MODES, per_tag_rows


def ner_task_description(scheme: str, num_labels: int) -> str:
    """The card's one-line description of a token-classification model over ``scheme`` tags."""
    if scheme == NO_SCHEME:
        return f"A token-classification (tagging) model over {num_labels} tags without entity scheme (e.g. POS)"
    return f"A token-classification (named-entity) model over {scheme} tags"


def ner_labels_section(scheme: str, read_scheme: str, use_crf: bool, id2label: Mapping[int, str]) -> str:
    """The card's labels section: the tagging scheme (and the one the data were read in), CRF decoding, the labels."""
    return (
        f"Tagging scheme: **{scheme}**"
        + (" (the tags are not an entity scheme; scored token by token)" if scheme == NO_SCHEME else "")
        + (f" (converted from {read_scheme})" if read_scheme != scheme else "")
        + f". CRF decoding: {'yes' if use_crf else 'no'}.\n\n"
        + label_table({i: table_cell(label) for i, label in id2label.items()})
    )


def ner_card_score_names(scheme: str | None, mode: str) -> dict[str, tuple[str, str]]:
    """The headline scores of the card's metadata: metric key → (metric type, name as the card says it)."""
    if scheme == NO_SCHEME:
        return {"accuracy": ("accuracy", "token accuracy"), "macro_f1": ("f1", "macro F1 over the tags")}
    return {"f1": ("f1", f"entity F1 ({mode})"), "precision": ("precision", f"entity precision ({mode})"),
            "recall": ("recall", f"entity recall ({mode})"), "accuracy": ("accuracy", "token accuracy")}


def _comparison_rows(
    metrics: Mapping[str, float], compare_hf: bool, scheme: str | None = None
) -> list[tuple[str, float, float | None]]:
    if scheme == NO_SCHEME:
        names = [(key, name) for key, name in (("accuracy", "accuracy"), ("macro_f1", "macro F1"))]
    else:
        names = [(f"{mode}_f1", f"F1 ({mode})") for mode in MODES]
    rows = []
    for split in ("eval", "test"):
        for suffix, name in names:
            key = f"{split}_{suffix}"
            if key in metrics:
                rows.append((f"{split} {name}", metrics[key], metrics.get(f"hf_{key}") if compare_hf else None))
    return rows


def per_tag_table(metrics: Mapping[str, float], compare_hf: bool, markdown: bool = True) -> tuple[str, str]:
    """The per-tag scores of the test split (else validation) and that split's name, as a table.

    With the HF baseline, its per-tag F1 is a last column. Markdown for the card, plain text otherwise.
    """
    split = "test" if any(key.startswith("test_tag_") for key in metrics) else "eval"
    ours = per_tag_rows(metrics, split)
    theirs = per_tag_rows(metrics, f"hf_{split}") if compare_hf else {}
    header = ["tag", "support", "precision", "recall", "F1"] + (["HF F1"] if theirs else [])
    body = []
    for tag, row in ours.items():
        cells = [table_cell(tag) if markdown else tag, str(int(row.get("support", 0)))]
        cells += [f"{row.get(stat, 0.0):.4f}" for stat in ("precision", "recall", "f1")]
        if theirs:
            cells.append(f"{theirs[tag]['f1']:.4f}" if tag in theirs else "-")
        body.append(cells)
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
    else:
        widths = [8] + [10] * (len(header) - 1)
        lines = ["".join(f"{cell:<{w}}" if i == 0 else f"{cell:>{w}}" for i, (cell, w) in enumerate(zip(cells, widths)))
                 for cells in [header] + body]
    return "\n".join(lines), split


def ner_metrics_section(metrics: Mapping[str, float], mode: str, compare_hf: bool, scheme: str | None = None) -> str:
    """Model-card evaluation section: scores (metric mode stated) and, if run, the HF comparison.

    For scheme none: token accuracy, macro/micro averages and a per-tag table.
    """
    scored = {
        key: value
        for key, value in metrics.items()
        if key.startswith(("eval_", "test_")) and not key.endswith(("runtime", "per_second"))
        and not key.startswith(("eval_tag_", "test_tag_"))
    }
    if scheme == NO_SCHEME:
        table, split = per_tag_table(metrics, compare_hf)
        text = (
            "Token-level scores at word level (the first sub-token of each word): `accuracy`, and precision, recall "
            "and F1 per tag with their macro averages (unweighted mean over the tags in gold or predictions) and "
            "micro averages (pooled counts, equal to accuracy).\n\n"
            + markdown_table(scored, ("metric", "value"))
            + f"\n\nPer tag on the {'test' if split == 'test' else 'validation'} split "
            "(all splits: `<split>_tag_<TAG>_<precision|recall|f1|support>` in `all_results.json`):\n\n" + table
        )
    else:
        text = (
            f"Entity-level micro scores at word level; `f1`/`precision`/`recall` count entities in **{mode}** mode "
            "(`conlleval`: as conlleval.pl, lenient; `strict`: only well-formed entities).\n\n"
            + markdown_table(scored, ("metric", "value"))
        )
    if compare_hf:
        rows = _comparison_rows(metrics, compare_hf, scheme)
        table = ["| metric | mlm_suite | HF BertForTokenClassification |", "|---|---|---|"]
        table += [f"| {name} | {ours:.4f} | {theirs:.4f} |" for name, ours, theirs in rows if theirs is not None]
        text += (
            "\n\nHF's `BertForTokenClassification` fine-tuned in the same run from the all-MiniLM-L6-v2 weights "
            "with the same data split, seed and hyper-parameters:\n\n" + "\n".join(table)
        )
        significance = _bootstrap_lines(metrics)
        if significance:
            text += "\n\n" + "\n".join(f"- {line}" for line in significance)
    return text


def ner_summary(metrics: Mapping[str, float], compare_hf: bool, scheme: str | None = None) -> str:
    """The scores printed at the end of a run (for scheme none with the per-tag table)."""
    lines = [f"{'':<24}{'mlm_suite':>10}" + (f"{'HF BERT':>10}" if compare_hf else "")]
    for name, ours, theirs in _comparison_rows(metrics, compare_hf, scheme):
        lines.append(f"{name:<24}{ours:>10.4f}" + (f"{theirs:>10.4f}" if theirs is not None else ""))
    lines += _bootstrap_lines(metrics)
    if scheme == NO_SCHEME and any(key.startswith(("eval_tag_", "test_tag_")) for key in metrics):
        table, split = per_tag_table(metrics, compare_hf, markdown=False)
        lines += [f"per tag ({'test' if split == 'test' else 'validation'} split, mlm_suite):", table]
    return "\n".join(lines)


def _bootstrap_lines(metrics: Mapping[str, float]) -> list[str]:
    lines = []
    for split in ("eval", "test"):
        if f"{split}_bootstrap_p_value" not in metrics:
            continue
        metric = "accuracy" if f"{split}_accuracy_delta_vs_hf" in metrics else "f1"
        name = "accuracy" if metric == "accuracy" else "F1"
        lines.append(
            f"{split} {name} mlm_suite - HF = {metrics[f'{split}_{metric}_delta_vs_hf']:+.4f} "
            f"(paired bootstrap, one-sided p = {metrics[f'{split}_bootstrap_p_value']:.3f})"
        )
    return lines
