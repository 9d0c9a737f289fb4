"""Word ↔ sub-token alignment for token classification (NER, POS tagging).

Data sets label *words*; models see sub-tokens. This module moves labels from words to
sub-tokens for training (:func:`align_labels`, :func:`tokenize_and_align`), moves predictions
from sub-tokens back to words (:func:`word_predictions`, :func:`document_word_predictions`),
and runs a model on raw text end to end (:func:`predict_entities`).

Training strategies (which sub-tokens of a word carry its label):

* ``"first"``: only the first piece; the others get ``ignore_index`` (-100, skipped by the loss).
* ``"all"``: every piece gets the word's label.
* ``"all_b_to_i"``: every piece; continuation pieces of a ``B-X`` word get ``I-X`` so that the
  pieces of one word read as one entity in BIO/IOB1.

Prediction strategies (how a word's label is read from its pieces' logits):

* ``"first"``: the argmax at the word's first piece (the natural pair of the ``"first"`` and
  ``"all_b_to_i"`` training strategies);
* ``"mean"`` / ``"max"``: the argmax of the mean / elementwise max of the pieces' softmax
  distributions (meant for models trained with ``"all"``).

Long inputs are split into overlapping windows by the fast tokenizer
(``return_overflowing_tokens`` with ``stride``, by default a quarter of a window: :func:`window_stride`)
rather than cut, and each word takes its prediction from the window where it has the most context
on both sides (:func:`document_word_predictions` from logits, :class:`SentenceWindows` from the
labels a Trainer predicted per window), so a long input is read in windows but predicted and scored
as the one input it is. A window may start in
the middle of a word; such a word's leading pieces are not its first piece and are treated as
continuation pieces. When a window starts exactly at a word that the previous window also
holds, that word is conservatively treated the same way; this never leaves a word without a
labelled first piece, because the earlier window has it.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np
import torch

from mlm_suite.data.finetuning.tagging import entity_spans
from mlm_suite.data.words import COMPOUND_WORD_PATTERN, split_words

ALIGN_STRATEGIES = ("first", "all", "all_b_to_i")
PREDICTION_STRATEGIES = ("first", "mean", "max")

Label = Union[int, str]
WordIds = Sequence[Union[int, None]]


def b_to_i_map(label2id: Mapping[str, int]) -> dict[int, int]:
    """Map the id of each ``B-X`` label to the id of ``I-X``, for ``"all_b_to_i"`` with int labels.

    Raises:
        ValueError: a ``B-X`` label has no ``I-X`` partner in ``label2id``.
    """
    mapping = {}
    for label, label_id in label2id.items():
        if label.startswith("B-"):
            inside = "I-" + label[2:]
            if inside not in label2id:
                raise ValueError(f"label2id has {label!r} but no {inside!r} for its continuation pieces")
            mapping[label_id] = label2id[inside]
    return mapping


def _continuation_label(label: Label, b_to_i: Mapping[Label, Label] | None) -> Label:
    if b_to_i is not None:
        return b_to_i.get(label, label)
    return "I-" + label[2:] if label.startswith("B-") else label


def _align(
    word_labels: Sequence[Label],
    word_ids: WordIds,
    strategy: str,
    ignore_index: int,
    b_to_i: Mapping[Label, Label] | None,
    continued_word: int | None,
) -> list[Label]:
    if strategy not in ALIGN_STRATEGIES:
        raise ValueError(f"unknown alignment strategy {strategy!r}; expected one of {ALIGN_STRATEGIES}")
    if strategy == "all_b_to_i" and b_to_i is None and not all(isinstance(label, str) for label in word_labels):
        raise ValueError(
            "strategy 'all_b_to_i' with integer labels needs b_to_i, a mapping from each B- label id "
            "to its I- label id (build it with b_to_i_map(label2id))"
        )
    aligned: list[Label] = []
    previous = None
    for word in word_ids:
        if word is None:
            aligned.append(ignore_index)
        elif not 0 <= word < len(word_labels):
            raise ValueError(f"word id {word} in word_ids but there are only {len(word_labels)} word labels")
        elif (word != previous and word != continued_word) or strategy == "all":
            aligned.append(word_labels[word])
        elif strategy == "first":
            aligned.append(ignore_index)
        else:
            aligned.append(_continuation_label(word_labels[word], b_to_i))
        previous = word
    return aligned


def align_labels(
    word_labels: Sequence[Label],
    word_ids: WordIds,
    strategy: str = "first",
    ignore_index: int = -100,
    b_to_i: Mapping[Label, Label] | None = None,
) -> list[Label]:
    """One label per sub-token from one label per word.

    Args:
        word_labels: the words' labels, ints (ids) or strings (tags).
        word_ids: the fast tokenizer's ``encoding.word_ids()``: the word index of each sub-token,
            None for special tokens (which get ``ignore_index``).
        strategy: ``"first"``, ``"all"`` or ``"all_b_to_i"`` (see the module docstring).
        ignore_index: label of positions the loss skips.
        b_to_i: for ``"all_b_to_i"``, the label continuation pieces of a ``B-`` word get. Optional
            for string labels (``"B-X"`` → ``"I-X"``), required for int labels (:func:`b_to_i_map`).
    """
    return _align(word_labels, word_ids, strategy, ignore_index, b_to_i, continued_word=None)


@dataclass
class AlignmentStats:
    """Counters that :func:`tokenize_and_align` adds to when given one.

    With ``datasets.map(num_proc>1)`` each worker counts into its own copy; read the warnings
    (or map in one process) for totals.
    """

    examples: int = 0
    windows: int = 0
    words_truncated: int = 0
    words_without_tokens: int = 0
    #: ``(example_id, word_index)`` of each word that produced no sub-token.
    empty_words: list[tuple[Any, int]] = field(default_factory=list)


def _require_fast(tokenizer: Any) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError(
            f"{type(tokenizer).__name__} is a slow (Python) tokenizer: word alignment needs a fast "
            "tokenizer (backed by the Rust `tokenizers` library), whose encodings provide word_ids(). "
            "Load one with AutoTokenizer.from_pretrained(...) (fast by default) or convert it."
        )


def _label_ids(labels: Sequence[Label], label2id: Mapping[str, int], known_ids: set[int], example_id: Any) -> list[int]:
    ids = []
    for position, label in enumerate(labels):
        if isinstance(label, str):
            if label not in label2id:
                raise ValueError(
                    f"example {example_id}, word {position}: label {label!r} is not in label2id "
                    f"(known labels: {sorted(label2id)})"
                )
            ids.append(label2id[label])
        elif int(label) in known_ids:
            ids.append(int(label))
        else:
            raise ValueError(
                f"example {example_id}, word {position}: label id {label!r} is not a value of label2id"
            )
    return ids


def _continued_word(word_ids: WordIds, previous_word_ids: WordIds | None) -> int | None:
    """The word this window's first token continues from the previous window of the same example."""
    if previous_word_ids is None:
        return None
    first = next((word for word in word_ids if word is not None), None)
    return first if first is not None and first in set(previous_word_ids) else None


def tokenize_and_align(
    examples: Mapping[str, Sequence[Any]],
    tokenizer: Any,
    label2id: Mapping[str, int],
    strategy: str = "first",
    max_length: int = 512,
    stride: int = 0,
    words_column: str = "tokens",
    labels_column: str | None = "ner_tags",
    truncate: bool = False,
    example_ids: Sequence[Any] | None = None,
    ignore_index: int = -100,
    stats: AlignmentStats | None = None,
) -> dict[str, list[Any]]:
    """Tokenize pre-split words and align their labels; a batched ``datasets.map`` function.

    Every example is split into windows of at most ``max_length`` tokens overlapping by
    ``stride`` tokens, so no word is lost. One output row per window::

        ds.map(lambda batch, idx: tokenize_and_align(batch, tokenizer, label2id, example_ids=idx),
               batched=True, with_indices=True, remove_columns=ds.column_names)

    Args:
        examples: columns ``words_column`` (lists of words) and ``labels_column`` (lists of
            labels: strings mapped through ``label2id``, or ids that must be values of it).
        tokenizer: a fast tokenizer.
        label2id: label names to ids.
        strategy: ``"first"``, ``"all"`` or ``"all_b_to_i"``.
        max_length: tokens per window, special tokens included.
        stride: tokens shared by consecutive windows (context for the words near a window edge).
        words_column / labels_column: column names; ``labels_column=None`` for unlabelled text.
        truncate: keep only the first window of each example. The words cut off get no label;
            their number is added to ``stats.words_truncated`` and reported in a warning.
        example_ids: ids of the examples of this batch (``with_indices=True`` gives the dataset
            indices); default the position in the batch.
        ignore_index: label of positions the loss skips.
        stats: counters to add to.

    Returns:
        Columns ``input_ids``, ``attention_mask`` (and ``token_type_ids`` if the tokenizer makes
        them), ``labels`` (unless unlabelled), ``word_ids`` (None for special tokens),
        ``example_id`` and ``num_words`` (words in the example, so that
        :func:`document_word_predictions` can give a label to every word).

    A word that produces no sub-token (e.g. only zero-width or control characters) cannot carry a
    label. It is not dropped silently: it is counted in ``stats.words_without_tokens`` /
    ``stats.empty_words`` and reported in a warning, and prediction gives it the fallback label
    (``fallback_label`` of :func:`document_word_predictions`).

    Raises:
        ValueError: a slow tokenizer, ``truncate`` with a ``stride``, a words/labels length
            mismatch, or a label that is not in ``label2id`` (each naming the example).
    """
    _require_fast(tokenizer)
    if truncate and stride:
        raise ValueError("stride only applies to windows; truncate=True keeps the first window only")
    words_batch = [list(words) for words in examples[words_column]]
    ids = list(example_ids) if example_ids is not None else list(range(len(words_batch)))
    labels_batch = None
    if labels_column is not None:
        labels_batch = []
        known_ids = set(label2id.values())
        for example_id, words, labels in zip(ids, words_batch, examples[labels_column]):
            if len(words) != len(labels):
                raise ValueError(f"example {example_id}: {len(words)} words but {len(labels)} labels")
            labels_batch.append(_label_ids(labels, label2id, known_ids, example_id))
    b_to_i = b_to_i_map(label2id) if strategy == "all_b_to_i" else None

    encoding = tokenizer(
        words_batch,
        is_split_into_words=True,
        truncation=True,
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
    )
    output: dict[str, list[Any]] = {name: [] for name in ("input_ids", "attention_mask", "token_type_ids")}
    output.update(word_ids=[], example_id=[], num_words=[])
    if labels_batch is not None:
        output["labels"] = []
    seen_words: list[set[int]] = [set() for _ in words_batch]
    kept_words: list[set[int]] = [set() for _ in words_batch]
    previous_sample, previous_word_ids = None, None
    for window, sample in enumerate(encoding["overflow_to_sample_mapping"]):
        word_ids = encoding.word_ids(window)
        first_of_example = sample != previous_sample
        continued = None if first_of_example else _continued_word(word_ids, previous_word_ids)
        previous_sample, previous_word_ids = sample, word_ids
        present = {word for word in word_ids if word is not None}
        seen_words[sample] |= present
        if truncate and not first_of_example:
            continue
        kept_words[sample] |= present
        for name in ("input_ids", "attention_mask", "token_type_ids"):
            if name in encoding:
                output[name].append(encoding[name][window])
        output["word_ids"].append(list(word_ids))
        output["example_id"].append(ids[sample])
        output["num_words"].append(len(words_batch[sample]))
        if labels_batch is not None:
            output["labels"].append(
                _align(labels_batch[sample], word_ids, strategy, ignore_index, b_to_i, continued)
            )
    if not output["token_type_ids"]:
        del output["token_type_ids"]

    empty = [(sample, word) for sample, words in enumerate(words_batch)
             for word in range(len(words)) if word not in seen_words[sample]]
    truncated = sum(len(seen - kept) for seen, kept in zip(seen_words, kept_words))
    if stats is not None:
        stats.examples += len(words_batch)
        stats.windows += len(output["input_ids"])
        stats.words_truncated += truncated
        stats.words_without_tokens += len(empty)
        stats.empty_words.extend((ids[sample], word) for sample, word in empty)
    if empty:
        sample, word = empty[0]
        warnings.warn(
            f"{len(empty)} word(s) produced no sub-token and cannot carry a label, e.g. word {word} "
            f"({words_batch[sample][word]!r}) of example {ids[sample]}; at prediction time they get "
            "the fallback label",
            stacklevel=2,
        )
    if truncated:
        warnings.warn(
            f"truncate=True dropped {truncated} word(s) beyond max_length={max_length}; they get no "
            "label (use windows, truncate=False, to keep them)",
            stacklevel=2,
        )
    return output


def _as_numpy(logits: Any) -> np.ndarray:
    if isinstance(logits, torch.Tensor):
        return logits.detach().float().cpu().numpy()
    return np.asarray(logits, dtype=np.float64)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def _best_windows(window_word_ids: Sequence[WordIds]) -> tuple[dict[int, int], list[dict[int, list[int]]]]:
    """For each word of one document split into windows, the window it is predicted from, and the positions of
    each word's pieces in each window.

    The window is the one where the word has the most context on both sides: the largest min(tokens left of the
    word, tokens right of it) in the window, the "maximum context" rule of BERT's SQuAD windows
    (``_check_is_max_context``) that stride-based Hugging Face pipelines follow too; a word near a window's edge
    is thus read where it is far from any edge. Ties go to the window holding its first piece (the one labelled
    in training and evaluation, and read by the ``"first"`` strategy), then to the one holding more of its pieces,
    then to the earlier window.
    """
    best: dict[int, tuple[tuple[int, bool, int], int]] = {}
    positions: list[dict[int, list[int]]] = []
    previous: WordIds | None = None
    for window, word_ids in enumerate(window_word_ids):
        pieces: dict[int, list[int]] = {}
        for position, word in enumerate(word_ids):
            if word is not None:
                pieces.setdefault(word, []).append(position)
        positions.append(pieces)
        content = [position for position, word in enumerate(word_ids) if word is not None]
        rank = {position: index for index, position in enumerate(content)}
        continued = _continued_word(word_ids, previous)
        previous = word_ids
        for word, word_positions in pieces.items():
            left = rank[word_positions[0]]
            right = len(content) - 1 - rank[word_positions[-1]]
            key = (min(left, right), word != continued, len(word_positions))
            if word not in best or key > best[word][0]:
                best[word] = (key, window)
    return {word: window for word, (_, window) in best.items()}, positions


def _word_labels_and_scores(
    window_logits: Sequence[Any],
    window_word_ids: Sequence[WordIds],
    strategy: str,
    num_words: int | None,
    fallback_label: int | None,
) -> tuple[list[int], list[float]]:
    """Label id and its probability for each word of one document split into windows."""
    if strategy not in PREDICTION_STRATEGIES:
        raise ValueError(f"unknown prediction strategy {strategy!r}; expected one of {PREDICTION_STRATEGIES}")
    if len(window_logits) != len(window_word_ids):
        raise ValueError(f"{len(window_logits)} windows of logits but {len(window_word_ids)} of word_ids")
    best, positions = _best_windows(window_word_ids)

    total = num_words if num_words is not None else (max(best) + 1 if best else 0)
    if best and max(best) >= total:
        raise ValueError(f"word_ids mention word {max(best)} but num_words is {total}")
    labels: list[int] = []
    scores: list[float] = []
    cache: dict[int, np.ndarray] = {}
    for word in range(total):
        if word not in best:
            if fallback_label is None:
                raise ValueError(
                    f"word {word} has no sub-token in word_ids (e.g. it is made only of zero-width or "
                    "control characters); pass fallback_label to give such words a label"
                )
            labels.append(int(fallback_label))
            scores.append(0.0)
            continue
        window = best[word]
        if window not in cache:
            logits = _as_numpy(window_logits[window])
            if logits.ndim != 2 or logits.shape[0] != len(window_word_ids[window]):
                raise ValueError(
                    f"window {window}: logits of shape {logits.shape} do not match "
                    f"{len(window_word_ids[window])} word_ids (expected (seq, num_labels))"
                )
            cache[window] = _softmax(logits)
        probabilities = cache[window][positions[window][word]]
        if strategy == "first":
            combined = probabilities[0]
        elif strategy == "mean":
            combined = probabilities.mean(axis=0)
        else:
            combined = probabilities.max(axis=0)
        label = int(combined.argmax())
        labels.append(label)
        scores.append(float(combined[label]))
    return labels, scores


def word_predictions(
    logits: Any,
    word_ids: WordIds,
    strategy: str = "first",
    num_words: int | None = None,
    fallback_label: int | None = None,
) -> list[int]:
    """One predicted label id per word from one sequence's sub-token scores.

    Args:
        logits: ``(seq, num_labels)`` scores, torch or numpy.
        word_ids: the encoding's ``word_ids()`` (None for special tokens, which are ignored).
        strategy: ``"first"``, ``"mean"`` or ``"max"`` (see the module docstring).
        num_words: number of words of the input; default one more than the largest word id.
            Give it when trailing words may have produced no sub-token.
        fallback_label: label id for words without any sub-token; without it they raise.

    Returns:
        A list of python ints, one per word, in word order.
    """
    return _word_labels_and_scores([logits], [word_ids], strategy, num_words, fallback_label)[0]


def document_word_predictions(
    window_logits: Sequence[Any],
    window_word_ids: Sequence[WordIds],
    strategy: str = "first",
    num_words: int | None = None,
    fallback_label: int | None = None,
) -> list[int]:
    """One predicted label id per word of a document split into overlapping windows.

    The windows are those of one example, in order (as :func:`tokenize_and_align` emits them).
    Each word takes its prediction from the window where it has the most context on both sides:
    the maximum over windows of min(tokens left of the word, tokens right of it) in the window.
    Arguments are as in :func:`word_predictions`, with one logits array and one word_ids list
    per window.
    """
    return _word_labels_and_scores(window_logits, window_word_ids, strategy, num_words, fallback_label)[0]


def window_stride(tokenizer: Any, max_length: int) -> int:
    """Tokens shared by consecutive windows of ``max_length`` tokens: a quarter of a window's own tokens, so that
    every word can be predicted from a window where it has context on both sides (as
    :func:`document_word_predictions` and :class:`SentenceWindows` choose it)."""
    return max(max_length - tokenizer.num_special_tokens_to_add(pair=False), 0) // 4


class SentenceWindows:
    """How the windows of a set of examples make up the examples, so that what is predicted window by window is
    read, and scored, example by example (``mlm-suite finetune-ner``'s evaluation).

    The windows are rows of :func:`tokenize_and_align` with labels aligned with the ``"first"`` strategy, in the
    order it emits them, given by their ``example_id`` and ``word_ids`` columns. A Trainer predicts a label at
    every labelled position of every window; :meth:`merge` turns those (one sequence per window, the labelled
    positions in order, as a ``compute_metrics`` reads them once the -100 positions are dropped) into one label
    per word of each example. A word that several windows hold (windows overlap by a ``stride``) takes the label
    of the window where it has the most context on both sides, as :func:`document_word_predictions` chooses; an
    entity cut by a window's edge is thus one entity, and a word in two windows one word. A word that produced no
    sub-token has no label to merge and is left out (:func:`tokenize_and_align` warns about it).
    """

    def __init__(self, example_ids: Sequence[Any], word_ids: Sequence[WordIds]) -> None:
        if len(example_ids) != len(word_ids):
            raise ValueError(f"{len(example_ids)} example ids but {len(word_ids)} windows of word_ids")
        # Per window: for each word labelled there ("first": at its first piece, unless the window continues
        # the word from the previous window), its index among the window's labelled positions.
        self._labelled: list[dict[int, int]] = []
        # Per example: for each word, in order, (window, index among that window's labelled positions).
        self._sources: list[list[tuple[int, int]]] = []
        start, seen = 0, set()
        for example_id, windows in itertools.groupby(example_ids):
            if example_id in seen:
                raise ValueError(f"the windows of example {example_id} are not consecutive")
            seen.add(example_id)
            end = start + len(list(windows))
            self._add_example(word_ids[start:end], first_window=start)
            start = end

    def _add_example(self, window_word_ids: Sequence[WordIds], first_window: int) -> None:
        previous = None
        for word_ids in window_word_ids:
            present = [word for word in word_ids if word is not None]
            words = _align(range(max(present, default=-1) + 1), word_ids, "first", -1, None,
                           _continued_word(word_ids, previous))
            self._labelled.append({word: index for index, word in enumerate(word for word in words if word != -1)})
            previous = word_ids
        best, _ = _best_windows(window_word_ids)
        # The chosen window holds the word's first piece, labelled there (_best_windows' first tie-break).
        self._sources.append([(first_window + best[word], self._labelled[first_window + best[word]][word])
                              for word in sorted(best)])

    def merge(self, window_labels: Sequence[Sequence[Label]]) -> list[list[Label]]:
        """One label per word of each example from the labels at each window's labelled positions.

        Raises:
            ValueError: not one sequence per window, or a window whose sequence is not as long as its labelled
                positions (labels not aligned with ``"first"``, or rows out of order).
        """
        if len(window_labels) != len(self._labelled):
            raise ValueError(f"{len(window_labels)} windows of labels for {len(self._labelled)} windows")
        for window, (labels, words) in enumerate(zip(window_labels, self._labelled)):
            if len(labels) != len(words):
                raise ValueError(
                    f"window {window} has {len(labels)} labels but {len(words)} labelled words: the labels must "
                    "be aligned with the 'first' strategy, the windows in tokenize_and_align's order"
                )
        return [[window_labels[window][index] for window, index in sources] for sources in self._sources]


@torch.inference_mode()
def predict_entities(
    texts: Sequence[str],
    model: Any,
    tokenizer: Any,
    strategy: str = "first",
    scheme: str = "BIO",
    batch_size: int = 8,
    max_length: int | None = None,
    stride: int | None = None,
    word_pattern: str = COMPOUND_WORD_PATTERN,
) -> list[list[dict[str, Any]]]:
    """Entities in raw texts, with character spans, from any token-classification model.

    Each text is split into words with ``word_pattern`` (keeping character offsets), the words
    are tokenized into windows, the model scores every window, each word gets a label
    (:func:`document_word_predictions`) and the word tags are decoded into entities the lenient
    (conlleval) way, since a model may emit e.g. ``I-X`` after ``O``.

    Args:
        texts: raw strings.
        model: a model returning ``logits`` of shape ``(batch, seq, num_labels)``, whose
            ``config.id2label`` names the labels in ``scheme``.
        tokenizer: the model's fast tokenizer.
        strategy: prediction strategy, ``"first"``, ``"mean"`` or ``"max"``.
        scheme: tag scheme of the model's labels.
        batch_size: windows per forward pass.
        max_length: tokens per window; default the smaller of the tokenizer's and the model's limit.
        stride: tokens shared by consecutive windows; default a quarter of a window (:func:`window_stride`).
        word_pattern: regular expression matching one word (default: words keep their inner apostrophes and
            hyphens, :data:`~mlm_suite.data.words.COMPOUND_WORD_PATTERN`).

    Returns:
        For each text, a list of ``{"type", "start", "end", "text", "score"}`` where
        ``text == original[start:end]`` and ``score`` is the mean probability of the entity's word
        labels. Words producing no sub-token get the label ``O`` when the model has one.
    """
    _require_fast(tokenizer)
    id2label = {int(key): value for key, value in model.config.id2label.items()}
    outside = next((label_id for label_id, label in id2label.items() if label == "O"), None)
    limits = [tokenizer.model_max_length, getattr(model.config, "max_position_embeddings", None), max_length]
    max_length = min(limit for limit in limits if limit)
    if stride is None:
        stride = window_stride(tokenizer, max_length)
    split = [split_words(text, word_pattern) for text in texts]  # (word, start, end) per word
    encoded = tokenize_and_align(
        {"tokens": [[word for word, _, _ in words] for words in split]}, tokenizer, label2id={}, labels_column=None,
        max_length=max_length, stride=stride,
    )
    model.eval()
    device = next(model.parameters()).device
    inputs = [name for name in ("input_ids", "attention_mask", "token_type_ids") if name in encoded]
    window_logits: list[torch.Tensor] = []
    for start in range(0, len(encoded["input_ids"]), batch_size):
        rows = [{name: encoded[name][row] for name in inputs} for row in range(start, start + batch_size)
                if row < len(encoded["input_ids"])]
        batch = tokenizer.pad(rows, return_tensors="pt", return_attention_mask=True).to(device)
        output = model(**batch)
        logits = output.logits if hasattr(output, "logits") else output[0]
        # Padding may sit on either side; the window's own tokens are where the mask is 1.
        window_logits.extend(row_logits[mask.bool()] for row_logits, mask in zip(logits, batch["attention_mask"]))

    results: list[list[dict[str, Any]]] = []
    windows_of: dict[int, list[int]] = {}
    for window, example in enumerate(encoded["example_id"]):
        windows_of.setdefault(example, []).append(window)
    for example, (text, words) in enumerate(zip(texts, split)):
        windows = windows_of.get(example, [])
        labels, scores = _word_labels_and_scores(
            [window_logits[window] for window in windows],
            [encoded["word_ids"][window] for window in windows],
            strategy,
            num_words=len(words),
            fallback_label=outside,
        )
        tags = [id2label[label] for label in labels]
        entities = []
        for type_, first, end in entity_spans(tags, scheme, lenient=True):
            char_start, char_end = words[first][1], words[end - 1][2]
            entities.append(
                {
                    "type": type_,
                    "start": char_start,
                    "end": char_end,
                    "text": text[char_start:char_end],
                    "score": float(np.mean(scores[first:end])),
                }
            )
        results.append(entities)
    return results
