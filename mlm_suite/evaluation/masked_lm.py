"""Masked-language-model accuracy per corruption kind, and a fill-mask probe.

BERT-style masking turns a selected token into ``[MASK]``, a random token or leaves it unchanged; accuracy over
all of them rewards a model that copies its input. The headline is therefore accuracy at ``[MASK]`` positions,
reported beside the random and kept positions (each with its count), top-5 accuracy at ``[MASK]`` positions and
the most-frequent-token baseline on those same positions. A position's kind is read off what the model saw (a
random replacement that drew the original token counts as kept: the model cannot tell them apart). See
docs/pretraining.md for a ``Trainer`` that reports them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import numpy as np
import torch
from transformers import BatchEncoding, EvalPrediction, PreTrainedTokenizerBase

TOP_K = 5
IGNORE_INDEX = -100
#: The corruption kinds of selected positions, and the kind of a position that was not selected.
KINDS = ("mask", "random", "kept")
NOT_SELECTED = ""


def masked_lm_scores(
    inputs: np.ndarray,
    labels: np.ndarray,
    predictions: np.ndarray,
    mask_token_id: int,
    baseline_token_id: int,
    top_k_hits: np.ndarray | None = None,
    label_log_probs: np.ndarray | None = None,
) -> dict[str, float]:
    """Scores over the selected positions (``labels != -100``), split by corruption kind.

    Args:
        inputs: ``(batch, seq)`` ids the model saw.
        labels: ``(batch, seq)`` original ids at selected positions, -100 elsewhere.
        predictions: ``(batch, seq)`` top-1 predicted ids (any value where not selected).
        mask_token_id: the tokenizer's mask id.
        baseline_token_id: the single prediction of the baseline (the most frequent training token).
        top_k_hits: ``(batch, seq)`` bool, whether the label is among the top-k predictions.
        label_log_probs: ``(batch, seq)`` log-probability of the label, for the MLM loss.

    Returns:
        :func:`kind_scores` of the kinds read off ``inputs`` (:func:`corruption_kinds`), and ``mlm_loss``
        (mean negative log-likelihood over all selected positions, as the training loss counts them).
    """
    inputs, labels, predictions = (np.asarray(array) for array in (inputs, labels, predictions))
    if not inputs.shape == labels.shape == predictions.shape:
        raise ValueError(f"inputs {inputs.shape}, labels {labels.shape} and predictions {predictions.shape} differ in shape")
    kinds = corruption_kinds(inputs, labels, mask_token_id)
    scores = kind_scores(kinds, labels, predictions, baseline_token_id, top_k_hits)
    if label_log_probs is not None:
        scores["mlm_loss"] = -_mean_over(np.asarray(label_log_probs, dtype=np.float64), kinds != NOT_SELECTED)
    return scores


def corruption_kinds(inputs: np.ndarray, labels: np.ndarray, mask_token_id: int) -> np.ndarray:
    """``(batch, seq)`` kind of each position: ``"mask"``, ``"random"``, ``"kept"`` where selected
    (``labels != -100``), :data:`NOT_SELECTED` elsewhere. A selected position shows the mask token, its original
    token (kept, or a random replacement that drew it) or another token (random)."""
    inputs, labels = np.asarray(inputs), np.asarray(labels)
    kinds = np.where(inputs == mask_token_id, "mask", np.where(inputs == labels, "kept", "random"))
    return np.where(labels != IGNORE_INDEX, kinds, NOT_SELECTED)


def kind_scores(
    kinds: np.ndarray,
    labels: np.ndarray,
    predictions: np.ndarray,
    baseline_token_id: int | None = None,
    top_k_hits: np.ndarray | None = None,
    top_k: int = TOP_K,
) -> dict[str, float]:
    """Accuracy per corruption kind, given the kind of every position.

    Args:
        kinds: the corruption kind per position, one of :data:`KINDS`, or :data:`NOT_SELECTED` (``""``)
            at positions not to score.
        labels: original ids, same shape.
        predictions: top-1 predicted ids, same shape.
        baseline_token_id: the baseline's single prediction (the most frequent training token); None: no baseline.
        top_k_hits: bool, whether the label is among the top ``top_k`` predictions.

    Returns:
        ``mask_accuracy`` (the headline), ``random_accuracy``, ``kept_accuracy``, their counts ``mask_tokens``,
        ``random_tokens``, ``kept_tokens``, and ``selected_tokens``; ``mask_baseline_accuracy`` with a
        baseline, ``mask_top<top_k>_accuracy`` with ``top_k_hits``. An accuracy over no position is NaN.

    Raises:
        ValueError: shapes that differ, or a kind that is not one of :data:`KINDS` (naming it and its position).
    """
    kinds, labels, predictions = (np.asarray(array) for array in (kinds, labels, predictions))
    if not kinds.shape == labels.shape == predictions.shape:
        raise ValueError(f"kinds {kinds.shape}, labels {labels.shape} and predictions {predictions.shape} differ in shape")
    unknown = ~np.isin(kinds, (*KINDS, NOT_SELECTED))
    if unknown.any():
        index = tuple(int(i) for i in np.argwhere(unknown)[0])
        position = index[0] if len(index) == 1 else index
        raise ValueError(f"kind {str(kinds[index])!r} at position {position} is not one of {KINDS}")
    correct = predictions == labels
    scores: dict[str, float] = {}
    for kind in KINDS:
        scores[f"{kind}_accuracy"] = _mean_over(correct, kinds == kind)
        scores[f"{kind}_tokens"] = int((kinds == kind).sum())
    scores["selected_tokens"] = int((kinds != NOT_SELECTED).sum())
    if baseline_token_id is not None:
        scores["mask_baseline_accuracy"] = _mean_over(labels == baseline_token_id, kinds == "mask")
    if top_k_hits is not None:
        scores[f"mask_top{top_k}_accuracy"] = _mean_over(np.asarray(top_k_hits, dtype=bool), kinds == "mask")
    return scores


def _mean_over(values: np.ndarray, where: np.ndarray) -> float:
    return float(values[where].mean()) if where.any() else float("nan")


def preprocess_logits_for_mlm_metrics(logits: Any, labels: Any) -> tuple[torch.Tensor, ...]:
    """Shrink one eval batch's dense ``(batch, seq, vocab)`` logits before the Trainer gathers them.

    Returns ``(batch, seq)`` tensors: top-1 predicted ids, whether the label is in the top
    ``TOP_K``, the label's log-probability (all -100 / False / 0 where nothing is selected); with an
    NSP head also ``(batch,)`` predicted next-sentence labels. The softmax runs at selected positions only.
    """
    mlm_logits, nsp_logits = logits if isinstance(logits, tuple) else (logits, None)
    mlm_labels = labels[0] if isinstance(labels, tuple) else labels
    selected = mlm_labels != IGNORE_INDEX
    scores = mlm_logits[selected].float()  # (n_selected, vocab)
    targets = mlm_labels[selected]  # (n_selected,)
    top = scores.topk(min(TOP_K, scores.shape[-1]), dim=-1).indices  # (n_selected, k)
    predictions = torch.full_like(mlm_labels, IGNORE_INDEX)
    predictions[selected] = top[:, 0]
    top_k_hits = torch.zeros_like(selected)
    top_k_hits[selected] = (top == targets[:, None]).any(-1)
    label_log_probs = torch.zeros(mlm_labels.shape, dtype=torch.float32, device=mlm_labels.device)
    label_log_probs[selected] = scores.log_softmax(-1).gather(1, targets[:, None]).squeeze(1)
    outputs = (predictions, top_k_hits, label_log_probs)
    return outputs if nsp_logits is None else (*outputs, nsp_logits.argmax(-1))


def make_mlm_compute_metrics(mask_token_id: int, baseline_token_id: int):
    """A ``compute_metrics`` for a Trainer that uses :func:`preprocess_logits_for_mlm_metrics` and
    ``include_for_metrics=["inputs"]``: :func:`masked_lm_scores`, plus ``nsp_accuracy`` with an NSP head."""

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        if prediction.inputs is None:
            raise ValueError(
                "MLM metrics read the corruption kind off the inputs: set "
                "TrainingArguments(include_for_metrics=['inputs'])"
            )
        predictions, top_k_hits, label_log_probs, *nsp_predictions = prediction.predictions
        labels = prediction.label_ids
        mlm_labels, nsp_labels = (labels[0], labels[1]) if isinstance(labels, (tuple, list)) else (labels, None)
        metrics = masked_lm_scores(
            prediction.inputs, mlm_labels, predictions, mask_token_id, baseline_token_id, top_k_hits, label_log_probs
        )
        if nsp_predictions:
            metrics["nsp_accuracy"] = float(np.mean(nsp_predictions[0] == nsp_labels))
        return metrics

    return compute_metrics


# ------------------------------------------------------------------------------------------------
# Fill-mask probe
# ------------------------------------------------------------------------------------------------
_WORD = re.compile(r"[a-z]+")
#: How :func:`readable_token` shows whitespace (byte-level BPE's lone "Ġ" and "Ċ", SentencePiece's lone "▁").
_VISIBLE_WHITESPACE = {" ": "␣", "\n": "↵", "\t": "⇥"}


def readable_token(tokenizer: PreTrainedTokenizerBase, token_id: int) -> str:
    """Vocabulary entry ``token_id`` as it reads in place of the mask token, for people to read.

    Decoded, so without the vocabulary's own markers (byte-level BPE's "Ġ" word start and "Ċ" line break,
    SentencePiece's "▁", WordPiece's "##" continuation: "Ġfilm", "▁film" and "film" all show as ``film``), and
    without surrounding whitespace. A token that is whitespace alone shows each character: ``␣`` a space, ``↵`` a
    line break, ``⇥`` a tab, any other as its Python escape (``\\r``).
    """
    mask = tokenizer.decode([tokenizer.mask_token_id])
    # Decoded after the mask token: a SentencePiece decoder drops the space a text starts with, so a lone "▁"
    # decoded alone would be empty.
    text = tokenizer.decode([tokenizer.mask_token_id, token_id]).removeprefix(mask)
    return text.strip() or "".join(_VISIBLE_WHITESPACE.get(character, ascii(character)[1:-1]) for character in text)


def _word_positions(encoding: BatchEncoding, start: int, end: int) -> list[int]:
    """Positions of the tokens of the words (as the fast tokenizer's pre-tokenizer splits them, word-start marker
    included) that characters ``start:end`` of the encoded text fall in."""
    words = {encoding.token_to_word(token) for token in map(encoding.char_to_token, range(start, end)) if token is not None}
    return [position for position, word in enumerate(encoding.word_ids()) if word is not None and word in words]


def probe_sentences(
    texts: Sequence[str], tokenizer: PreTrainedTokenizerBase, count: int = 8, seed: int = 0, max_length: int | None = None
) -> list[tuple[str, str]]:
    """``count`` fixed probe sentences with one word replaced by the mask token, and that word.

    Sentences of 8–40 words (and at most ``max_length`` tokens, special tokens included: the rows the model is
    trained on) are taken from ``texts`` in order, at most one per text; the masked word
    is drawn (seeded) among the lower-case alphabetic words of at least 3 letters that are one token in
    their sentence (with the space before them, as byte-level BPE and SentencePiece tokenize a word that
    follows another), so a single mask token stands for the whole word. Needs a fast tokenizer.
    """
    rng = random.Random(seed)
    probes: list[tuple[str, str]] = []
    for text in texts:
        if len(probes) >= count:  # (count 0: no probe)
            break
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
            words = sentence.split()
            if not 8 <= len(words) <= 40:
                continue
            encoding = tokenizer(sentence)
            if max_length is not None and len(encoding["input_ids"]) > max_length:
                continue
            starts = accumulate((len(word) + 1 for word in words[:-1]), initial=0)  # the words are one space apart
            candidates = [
                index
                for index, (word, start) in enumerate(zip(words, starts))
                if _WORD.fullmatch(word) and len(word) >= 3
                and len(_word_positions(encoding, start, start + len(word))) == 1
            ]
            if not candidates:
                continue
            index = rng.choice(candidates)
            answer, words[index] = words[index], tokenizer.mask_token
            probes.append((" ".join(words), answer))
            break
    return probes


@torch.inference_mode()
def fill_mask_probe(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, probes: Sequence[tuple[str, str]], top_k: int = TOP_K
) -> list[dict[str, Any]]:
    """Top-``top_k`` answers of ``model`` at the mask of each probe sentence, as ``pipeline("fill-mask")`` gives them.

    Works with any masked-LM head, including MLM + NSP pretraining heads (``prediction_logits``), which the
    pipeline does not take. The model reads the sentence with the answer in place, tokenized, its word's tokens
    replaced by one mask token: as training masks text, whether or not the tokenizer's mask token takes in the
    space before it (tokenizing ``"was <mask>"`` with a byte-level BPE whose mask token does not would leave a
    lone "Ġ" before the mask). Returns one dict per probe: ``sentence``, ``answer`` (the masked word) and
    ``predictions`` (best first, each as :func:`readable_token` shows it). Needs a fast tokenizer.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    try:
        results = []
        for sentence, answer in probes:
            before, found, after = sentence.partition(tokenizer.mask_token)
            encoded = tokenizer(before + answer + after)
            positions = _word_positions(encoded, len(before), len(before) + len(answer))
            if not found or not positions:
                raise ValueError(f"probe {sentence!r}: no {tokenizer.mask_token} standing for a word {answer!r}")
            first, stop = positions[0], positions[-1] + 1
            inputs = {key: values[: first + 1] + values[stop:] for key, values in encoded.items()}
            inputs["input_ids"][first] = tokenizer.mask_token_id
            outputs = model(**{key: torch.tensor([values], device=device) for key, values in inputs.items()})
            logits = outputs.logits if "logits" in outputs else outputs.prediction_logits  # (1, seq, vocab)
            top = logits[0, first].topk(top_k).indices.tolist()
            predictions = [readable_token(tokenizer, token_id) for token_id in top]
            results.append({"sentence": sentence, "answer": answer, "predictions": predictions})
        return results
    finally:
        model.train(was_training)
