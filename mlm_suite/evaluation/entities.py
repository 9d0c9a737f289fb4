"""Entity- and token-level scores of tag sequences, a ``Trainer`` ``compute_metrics`` for token classification,
and the paired bootstrap. seqeval reads the entities, as conlleval.pl counts them (``mode="conlleval"``) or only
where they are well formed in the tag scheme (``mode="strict"``); tags without entities (scheme ``"none"``, e.g.
part of speech) are scored token by token. See docs/metrics.md#entity-and-token-scores.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from mlm_suite.data.finetuning.tagging import NO_SCHEME, ALLOWED_PREFIXES, UnknownTagError, normalize_scheme, parse_tag

MODES = ("conlleval", "strict")

# seqeval's name of each scheme. seqeval (and the scikit-learn it imports, ~2 s) is imported where entities are
# read, not with this module, which every job imports.
_SEQEVAL_SCHEMES = {"IO": "IOB1", "BIO": "IOB2", "IOB1": "IOB1", "BIOES": "IOBES"}


def _seqeval_scheme(scheme: str) -> type:
    from seqeval import scheme as seqeval_scheme

    return getattr(seqeval_scheme, _SEQEVAL_SCHEMES[scheme])

TagSequences = Sequence[Sequence[str]]


def _check_mode(mode: str, scheme: str | None, allow_none: bool = False) -> str | None:
    """Validate ``mode`` against ``scheme``; return the canonical scheme name (or None).

    ``scheme="none"`` (no entities) is returned as ``"none"`` with ``allow_none``, else refused.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    if scheme is None:
        if mode == "strict":
            # seqeval silently falls back to lenient counting here; a strict score must be strict.
            raise ValueError('mode="strict" needs a tag scheme (e.g. scheme="BIO"); got scheme=None')
        return None
    canonical = normalize_scheme(scheme, allow_none=True)
    if canonical == NO_SCHEME and not allow_none:
        raise ValueError(f"scheme {scheme!r} has no entities to score: use tag_scores (token-level scores)")
    return canonical


def _check_sequences(gold: TagSequences, pred: TagSequences, scheme: str | None) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} sentences but pred has {len(pred)}")
    for index, (gold_tags, pred_tags) in enumerate(zip(gold, pred)):
        if len(gold_tags) != len(pred_tags):
            raise ValueError(
                f"sentence {index}: gold has {len(gold_tags)} tags but pred has {len(pred_tags)}"
            )
        for side, tags in (("gold", gold_tags), ("pred", pred_tags)):
            for position, tag in enumerate(tags):
                try:
                    prefix, _ = parse_tag(tag)
                except UnknownTagError as error:
                    raise UnknownTagError(f"{side} sentence {index}, position {position}: {error}") from None
                if scheme is not None and prefix != "O" and prefix not in ALLOWED_PREFIXES[scheme]:
                    raise ValueError(
                        f"{side} sentence {index}, position {position}: {tag} is not a {scheme} tag"
                    )


def entity_scores(
    gold: TagSequences, pred: TagSequences, scheme: str | None = "BIO", mode: str = "conlleval"
) -> dict[str, Any]:
    """Entity-level micro precision/recall/F1, macro F1, per-type scores and token accuracy.

    Args:
        gold: reference tag sequences, one list of tags per sentence.
        pred: predicted tag sequences, same shape as ``gold``.
        scheme: tag scheme (see :mod:`mlm_suite.data.finetuning.tagging`); may be None only in conlleval mode.
        mode: ``"conlleval"``: seqeval's default, which counts chunks as the CoNLL script conlleval.pl does,
            leniently (``I-X`` after ``O`` or after another type starts an entity, a type switch inside a span
            ends one entity and starts another); the scheme only checks that every tag's prefix belongs to it,
            so BIOES predictions are not scored as BIO by mistake. ``"strict"``: seqeval's strict mode with
            the scheme's class (IOB2, IOB1 or IOBES; IO uses IOB1, which decodes it identically), where only
            well-formed entities count (in BIO an ``I-X`` after ``O`` is no entity at all).

    Returns:
        ``{"precision", "recall", "f1", "macro_f1", "accuracy", "per_type"}`` where ``per_type``
        maps each entity type found in gold or pred to ``{"precision", "recall", "f1", "support"}``
        (support = number of gold entities). Undefined ratios (0/0) are 0.

    Raises:
        ValueError: unknown mode/scheme, strict mode without a scheme, a length mismatch (naming
            the sentence) or a tag outside the scheme (naming sentence and position).
    """
    scheme = _check_mode(mode, scheme)
    _check_sequences(gold, pred, scheme)
    gold_lists = [list(tags) for tags in gold]
    pred_lists = [list(tags) for tags in pred]
    from seqeval.metrics import classification_report

    options: dict[str, Any] = {"mode": "strict", "scheme": _seqeval_scheme(scheme)} if mode == "strict" else {}
    has_entities = any(_entity_set(tags, mode, scheme) for tags in gold_lists + pred_lists)
    # seqeval averages over an empty list of types (a NaN and a warning) when there is no entity.
    report = (
        classification_report(gold_lists, pred_lists, output_dict=True, zero_division=0, **options)
        if has_entities
        else {}
    )
    averages = ("micro avg", "macro avg", "weighted avg")
    per_type = {
        type_: {
            "precision": float(row["precision"]),
            "recall": float(row["recall"]),
            "f1": float(row["f1-score"]),
            "support": int(row["support"]),
        }
        for type_, row in report.items()
        if type_ not in averages
    }
    micro = report.get("micro avg", {"precision": 0.0, "recall": 0.0, "f1-score": 0.0})
    total = sum(len(tags) for tags in gold_lists)
    correct = sum(g == p for gold_tags, pred_tags in zip(gold_lists, pred_lists) for g, p in zip(gold_tags, pred_tags))
    return {
        "precision": float(micro["precision"]),
        "recall": float(micro["recall"]),
        "f1": float(micro["f1-score"]),
        "macro_f1": float(np.mean([row["f1"] for row in per_type.values()])) if per_type else 0.0,
        "accuracy": correct / total if total else 0.0,
        "per_type": per_type,
    }


def _check_lengths(gold: TagSequences, pred: TagSequences) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} sentences but pred has {len(pred)}")
    for index, (gold_tags, pred_tags) in enumerate(zip(gold, pred)):
        if len(gold_tags) != len(pred_tags):
            raise ValueError(f"sentence {index}: gold has {len(gold_tags)} tags but pred has {len(pred_tags)}")


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def tag_scores(gold: TagSequences, pred: TagSequences) -> dict[str, Any]:
    """Token-level scores of tag sequences without entity structure (scheme ``"none"``, e.g. POS).

    Every token counts once. For a tag ``t``: precision = tokens tagged ``t`` correctly / tokens
    predicted ``t``, recall = the same / tokens whose gold tag is ``t``, F1 their harmonic mean
    (``2·tp / (predicted + gold)``); undefined ratios (0/0) are 0.

    * ``per_tag`` holds every tag found in gold or pred (sorted), with ``support`` = gold tokens;
    * ``macro_precision``/``macro_recall``/``macro_f1`` are the unweighted means of the per-tag
      values over those tags (``macro_f1`` is the mean of the per-tag F1s, not the F1 of the means);
    * ``micro_*`` pool the counts of all tags. Since each token has exactly one gold and one
      predicted tag, micro precision, recall and F1 all equal ``accuracy``.

    Returns:
        ``{"accuracy", "micro_precision", "micro_recall", "micro_f1", "macro_precision",
        "macro_recall", "macro_f1", "n_tokens", "per_tag"}``.
    """
    _check_lengths(gold, pred)
    # Counted by hand: the same values as scikit-learn's precision_recall_fscore_support, measured faster on
    # string tags (which it encodes first); tests/evaluation/test_entities.py compares the two.
    tp: dict[str, int] = {}
    predicted: dict[str, int] = {}
    support: dict[str, int] = {}
    for gold_tags, pred_tags in zip(gold, pred):
        for g, p in zip(gold_tags, pred_tags):
            support[g] = support.get(g, 0) + 1
            predicted[p] = predicted.get(p, 0) + 1
            if g == p:
                tp[g] = tp.get(g, 0) + 1
    per_tag = {}
    for tag in sorted(set(support) | set(predicted)):
        t, n_pred, n_gold = tp.get(tag, 0), predicted.get(tag, 0), support.get(tag, 0)
        per_tag[tag] = {
            "precision": _ratio(t, n_pred),
            "recall": _ratio(t, n_gold),
            "f1": _ratio(2 * t, n_pred + n_gold),
            "support": n_gold,
        }
    total_tp, total_pred, total_gold = sum(tp.values()), sum(predicted.values()), sum(support.values())

    def macro(key: str) -> float:
        return float(np.mean([row[key] for row in per_tag.values()])) if per_tag else 0.0

    return {
        "accuracy": _ratio(total_tp, total_gold),
        "micro_precision": _ratio(total_tp, total_pred),
        "micro_recall": _ratio(total_tp, total_gold),
        "micro_f1": _ratio(2 * total_tp, total_pred + total_gold),
        "macro_precision": macro("precision"),
        "macro_recall": macro("recall"),
        "macro_f1": macro("f1"),
        "n_tokens": total_gold,
        "per_tag": per_tag,
    }


#: The averaged scores of :func:`tag_scores` that ``compute_metrics`` reports for scheme ``"none"``.
TAG_SCORE_KEYS = (
    "accuracy", "micro_precision", "micro_recall", "micro_f1", "macro_precision", "macro_recall", "macro_f1",
)


def flat_tag_scores(scores: Mapping[str, Any]) -> dict[str, float]:
    """:func:`tag_scores` as one flat dict of numbers: the averages, ``n_tokens`` and, per tag,
    ``tag_<TAG>_precision``, ``tag_<TAG>_recall``, ``tag_<TAG>_f1`` and ``tag_<TAG>_support``
    (the tag is written as is, e.g. ``tag_PRP$_f1``; the statistic is after the last ``_``)."""
    flat: dict[str, float] = {key: float(scores[key]) for key in TAG_SCORE_KEYS}
    flat["n_tokens"] = int(scores["n_tokens"])
    for tag, row in scores["per_tag"].items():
        for key in ("precision", "recall", "f1"):
            flat[f"tag_{tag}_{key}"] = float(row[key])
        flat[f"tag_{tag}_support"] = int(row["support"])
    return flat


def per_tag_rows(metrics: Mapping[str, float], prefix: str) -> dict[str, dict[str, float]]:
    """``{tag: {"precision", "recall", "f1", "support"}}`` from the flat ``<prefix>_tag_<TAG>_<stat>`` scores
    (:func:`flat_tag_scores` as the Trainer reports them, e.g. with ``prefix`` ``eval`` or ``hf_test``)."""
    rows: dict[str, dict[str, float]] = {}
    start = f"{prefix}_tag_"
    for key, value in metrics.items():
        if key.startswith(start):
            tag, _, stat = key[len(start):].rpartition("_")
            rows.setdefault(tag, {})[stat] = value
    return dict(sorted(rows.items()))


def make_compute_metrics(
    id2label: Mapping[int, str] | Sequence[str], scheme: str | None = "BIO", mode: str = "conlleval"
) -> Callable[[Any], dict[str, float]]:
    """A ``compute_metrics`` function for :class:`transformers.Trainer` on token classification.

    The returned function takes an ``EvalPrediction`` (or a ``(predictions, label_ids)`` tuple):
    ``predictions`` are logits ``(n, seq, num_labels)`` (a tuple of arrays is accepted, its first
    item is used) or already arg-maxed ids ``(n, seq)``; ``label_ids`` are ``(n, seq)`` with
    ``-100`` at positions not to score. Those positions are dropped and each row's remaining
    positions form one tag sequence, scored with :func:`entity_scores`.

    The score is word-level only if the evaluation labels mark exactly one sub-token per word:
    align evaluation data with strategy ``"first"`` whatever strategy was used for training
    (with ``"all"`` every piece would count as a token and multi-piece entities would weigh
    more), so that scores of models trained with different alignments stay comparable.

    With ``scheme="none"`` (tags that are not an entity scheme, e.g. POS) the scores are
    token-level instead (``mode`` plays no part): :func:`flat_tag_scores` of :func:`tag_scores`.

    Returns:
        ``{"precision", "recall", "f1", "accuracy", "macro_f1"}`` as floats (Trainer adds ``eval_``);
        for ``scheme="none"``, ``accuracy``, ``micro_*``/``macro_*`` precision, recall and F1,
        ``n_tokens`` and the ``tag_<TAG>_*`` scores.
    """
    labels = dict(id2label) if isinstance(id2label, Mapping) else dict(enumerate(id2label))
    labels = {int(key): value for key, value in labels.items()}
    _check_mode(mode, scheme, allow_none=True)

    def compute_metrics(eval_pred: Any) -> dict[str, float]:
        return sequence_metrics(*tag_sequences(eval_pred, labels), scheme=scheme, mode=mode)

    return compute_metrics


def sequence_metrics(
    gold: TagSequences, pred: TagSequences, scheme: str | None = "BIO", mode: str = "conlleval"
) -> dict[str, float]:
    """The scores :func:`make_compute_metrics` reports, of tag sequences: ``{"precision", "recall", "f1",
    "accuracy", "macro_f1"}`` of :func:`entity_scores`, or for ``scheme="none"`` :func:`flat_tag_scores`."""
    if _check_mode(mode, scheme, allow_none=True) == NO_SCHEME:
        return flat_tag_scores(tag_scores(gold, pred))
    scores = entity_scores(gold, pred, scheme=scheme, mode=mode)
    return {key: float(scores[key]) for key in ("precision", "recall", "f1", "accuracy", "macro_f1")}


def tag_sequences(eval_pred: Any, id2label: Mapping[int, str]) -> tuple[list[list[str]], list[list[str]]]:
    """Gold and predicted tag sequences from a Trainer's ``EvalPrediction`` (or ``(predictions, label_ids)``).

    ``predictions`` are logits ``(n, seq, num_labels)`` (the first item of a tuple) or label ids
    ``(n, seq)``; positions whose ``label_ids`` are -100 are dropped, each row giving one sequence.
    """
    predictions, label_ids = (
        (eval_pred.predictions, eval_pred.label_ids) if hasattr(eval_pred, "label_ids") else eval_pred
    )
    if isinstance(predictions, (tuple, list)):
        predictions = predictions[0]
    predictions = np.asarray(predictions)
    label_ids = np.asarray(label_ids)
    if predictions.ndim == 3:
        predictions = predictions.argmax(axis=-1)
    if predictions.shape != label_ids.shape:
        raise ValueError(f"predictions have shape {predictions.shape} but label_ids {label_ids.shape}")
    gold, pred = [], []
    for row, (row_pred, row_gold) in enumerate(zip(predictions, label_ids)):
        keep = row_gold != -100
        for label_id in np.unique(np.concatenate([row_pred[keep], row_gold[keep]])):
            if int(label_id) not in id2label:
                raise ValueError(f"row {row}: label id {int(label_id)} is not in id2label")
        gold.append([id2label[int(i)] for i in row_gold[keep]])
        pred.append([id2label[int(i)] for i in row_pred[keep]])
    return gold, pred


def _entity_set(tags: list[str], mode: str, scheme: str | None) -> set[tuple]:
    from seqeval.metrics.sequence_labeling import get_entities
    from seqeval.scheme import Tokens

    if mode == "strict":
        tokens = Tokens(tags, scheme=_seqeval_scheme(scheme))
        return {entity.to_tuple()[1:] for entity in tokens.entities}
    return set(get_entities(tags))


def entity_counts(
    gold: TagSequences, pred: TagSequences, scheme: str | None = "BIO", mode: str = "conlleval"
) -> np.ndarray:
    """Per-sentence ``[true positives, predicted entities, gold entities]``, shape ``(n, 3)``.

    Entities are read exactly as :func:`entity_scores` reads them, so summing the rows and
    taking ``2 * tp / (predicted + gold)`` gives the same micro F1.
    """
    scheme = _check_mode(mode, scheme)
    _check_sequences(gold, pred, scheme)
    counts = np.zeros((len(gold), 3), dtype=np.int64)
    for index, (gold_tags, pred_tags) in enumerate(zip(gold, pred)):
        gold_entities = _entity_set(list(gold_tags), mode, scheme)
        pred_entities = _entity_set(list(pred_tags), mode, scheme)
        counts[index] = (len(gold_entities & pred_entities), len(pred_entities), len(gold_entities))
    return counts


def label_counts(
    gold: TagSequences, pred: TagSequences, scheme: str | None = "BIO", mode: str = "conlleval"
) -> dict[str, dict[str, int]]:
    """How many entities of each type gold and pred hold: ``{type: {"gold": n, "predicted": n}}``, types sorted.

    Entities are read exactly as :func:`entity_scores` reads them (so ``gold`` is its per-type ``support``).
    For ``scheme="none"`` the units are tokens and the keys tags, as :func:`tag_scores` counts them.
    """
    scheme = _check_mode(mode, scheme, allow_none=True)
    if scheme == NO_SCHEME:
        _check_lengths(gold, pred)
    else:
        _check_sequences(gold, pred, scheme)

    def count(sequences: TagSequences) -> Counter:
        if scheme == NO_SCHEME:
            return Counter(tag for tags in sequences for tag in tags)
        return Counter(entity[0] for tags in sequences for entity in _entity_set(list(tags), mode, scheme))

    gold_counts, pred_counts = count(gold), count(pred)
    return {
        label: {"gold": gold_counts[label], "predicted": pred_counts[label]}
        for label in sorted(gold_counts.keys() | pred_counts.keys())
    }


def _f1(tp: np.ndarray, predicted: np.ndarray, gold: np.ndarray) -> np.ndarray:
    denominator = predicted + gold
    return np.divide(2.0 * tp, denominator, out=np.zeros(np.shape(tp), dtype=float), where=denominator > 0)


#: Statistics :func:`paired_bootstrap` can test, computed from summed per-sentence counts.
BOOTSTRAP_METRICS = ("f1", "accuracy")


def _sentence_counts(
    gold: TagSequences, pred: TagSequences, scheme: str | None, mode: str, metric: str
) -> np.ndarray:
    """Per-sentence counts whose column sums give ``metric``: ``[tp, predicted, gold]`` entities for
    ``"f1"``, ``[correct, tokens]`` for ``"accuracy"``."""
    if metric == "f1":
        return entity_counts(gold, pred, scheme, mode)
    _check_lengths(gold, pred)
    return np.array(
        [[sum(g == p for g, p in zip(gold_tags, pred_tags)), len(gold_tags)] for gold_tags, pred_tags in zip(gold, pred)],
        dtype=np.int64,
    ).reshape(len(gold), 2)


def _statistic(metric: str, totals: np.ndarray) -> np.ndarray:
    """``metric`` from summed counts (last axis as :func:`_sentence_counts`)."""
    if metric == "f1":
        return _f1(totals[..., 0], totals[..., 1], totals[..., 2])
    correct, tokens = totals[..., 0], totals[..., 1]
    return np.divide(correct, tokens, out=np.zeros(np.shape(correct), dtype=float), where=tokens > 0)


def paired_bootstrap(
    gold: TagSequences,
    pred_a: TagSequences,
    pred_b: TagSequences,
    n_samples: int = 1000,
    seed: int = 0,
    scheme: str | None = "BIO",
    mode: str = "conlleval",
    metric: str | None = None,
) -> dict[str, Any]:
    """Paired bootstrap test that system A's score (entity F1 or token accuracy) beats system B's.

    Follows Berg-Kirkpatrick et al. (2012) as presented in Jurafsky & Martin (ch. 4): draw
    ``n_samples`` test sets of the same size by resampling sentences with replacement, compute
    δ(x⁽ⁱ⁾) = score_A − score_B on each, and report the fraction of samples with δ(x⁽ⁱ⁾) ≥ 2·δ(x)
    where δ(x) is the observed difference. The doubling re-centres the bootstrap distribution,
    which is shifted by δ(x), on the null hypothesis δ = 0.

    The p-value is one-sided for "A better than B": when δ(x) ≤ 0 it is large (identical systems
    give exactly 1.0); swap the systems to test the other direction. Counts are computed once per
    sentence (entities for F1, correct and all tokens for accuracy) and resampled with numpy, so
    the cost of a sample does not involve seqeval.

    Args:
        metric: ``"f1"`` (entity micro F1, read per ``scheme`` and ``mode``) or ``"accuracy"``
            (token accuracy; whole sentences are resampled, so a long sentence weighs more).
            Default: ``"accuracy"`` for ``scheme="none"`` (no entities), else ``"f1"``.

    Returns:
        ``{"delta", "p_value", "n_samples", "metric", "<metric>_a", "<metric>_b"}`` (e.g.
        ``f1_a``/``f1_b``).
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be positive, got {n_samples}")
    if len(pred_a) != len(pred_b):
        raise ValueError(f"pred_a has {len(pred_a)} sentences but pred_b has {len(pred_b)}")
    if len(gold) == 0:
        raise ValueError("paired_bootstrap needs at least one sentence")
    canonical = _check_mode(mode, scheme, allow_none=True)
    if metric is None:
        metric = "accuracy" if canonical == NO_SCHEME else "f1"
    if metric not in BOOTSTRAP_METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {BOOTSTRAP_METRICS}")
    if metric == "f1" and canonical == NO_SCHEME:
        raise ValueError(f"scheme {scheme!r} has no entities, so no entity F1: use metric='accuracy'")
    counts_a = _sentence_counts(gold, pred_a, scheme, mode, metric)
    counts_b = _sentence_counts(gold, pred_b, scheme, mode, metric)
    width = counts_a.shape[1]
    counts = np.column_stack([counts_a, counts_b])
    score_a = float(_statistic(metric, counts_a.sum(axis=0)))
    score_b = float(_statistic(metric, counts_b.sum(axis=0)))
    delta = score_a - score_b
    n = len(counts)
    rng = np.random.default_rng(seed)
    # A sample is a vector of how often each sentence was drawn; chunks bound the memory.
    chunk = max(1, 2_000_000 // n)
    sample_deltas = []
    for start in range(0, n_samples, chunk):
        size = min(chunk, n_samples - start)
        draws = rng.multinomial(n, np.full(n, 1.0 / n), size=size)
        totals = draws @ counts
        sample_deltas.append(_statistic(metric, totals[:, :width]) - _statistic(metric, totals[:, width:]))
    deltas = np.concatenate(sample_deltas)
    # A tiny tolerance keeps float noise from deciding ties (e.g. identical systems, δ = 0).
    p_value = float(np.mean(deltas >= 2 * delta - 1e-12))
    return {
        "delta": delta,
        "p_value": p_value,
        "n_samples": int(n_samples),
        "metric": metric,
        f"{metric}_a": score_a,
        f"{metric}_b": score_b,
    }
