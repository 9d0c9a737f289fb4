"""A new language for an existing model (``mlm-suite pretrain --extend_vocabulary N``, docs/pretraining.md#a-new-language-for-an-existing-model).

A checkpoint whose vocabulary serves a language badly cuts its words into many pieces. :func:`extend_tokenizer`
learns pieces from the training text with the tokenizer's own algorithm and adds the first ``N`` the tokenizer lacks
to **its model** (not as added tokens, which would match anywhere inside a word):

* WordPiece (BERT, MiniLM, ELECTRA, DistilBERT): a WordPiece vocabulary learnt on the text's words as the tokenizer's
  normalizer and pre-tokenizer make them (:func:`~mlm_suite.data.pretraining.vocabulary.learn_wordpiece_vocabulary`),
  its pieces in the order they were learnt; longest-match segmentation then prefers them where they fit;
* BPE (RoBERTa, ModernBERT): ``tokenizers``' BPE trainer on the text, its merges in order, each whose parts the
  vocabulary holds (or an earlier new merge made) appended after the old merges;
* Unigram (XLM-R): ``tokenizers``' Unigram trainer on the text, its most probable pieces, with their log-probabilities.

The new pieces take the ids after the tokenizer's. :func:`grow_embeddings` gives each new embedding row (and output
bias) the mean of those of the pieces the old tokenizer cut it into, and resizes the tied decoder. Pieces per word
on the training text are counted before and after.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerBase

from mlm_suite.data.pretraining.languages import pieces_per_word
from mlm_suite.data.pretraining.vocabulary import word_counts, canonical_unigram_pieces, learn_wordpiece_vocabulary
from mlm_suite.errors import UsageError

__all__ = ["EXTENDABLE_MODELS", "VocabularyExtension", "extend_tokenizer", "grow_embeddings", "resumed_extension"]

#: The tokenizer models whose vocabulary can be extended, as ``tokenizer.json`` names them.
EXTENDABLE_MODELS = ("WordPiece", "BPE", "Unigram")
# Pieces learnt beyond those asked for, so that enough remain once the pieces the tokenizer holds are left out.
_SPARE = 4


@dataclass(frozen=True)
class VocabularyExtension:
    """A tokenizer extended by :func:`extend_tokenizer`: ``tokenizer`` (a copy; the old one is unchanged), the new
    ``pieces`` (their ids follow the old tokenizer's), for each the ids of the ``old_pieces`` the old tokenizer cuts it
    into, the ``algorithm`` that learnt them, and the pieces per word of the training text before and after."""

    tokenizer: PreTrainedTokenizerBase
    pieces: tuple[str, ...]
    old_pieces: tuple[tuple[int, ...], ...]
    first_id: int
    algorithm: str
    pieces_per_word_before: float
    pieces_per_word_after: float

    def describe(self) -> str:
        """One line for the printout and the card."""
        return (f"{len(self.pieces)} pieces learnt from the training text by {self.algorithm} (ids {self.first_id} to "
                f"{self.first_id + len(self.pieces) - 1}): {self.pieces_per_word_before:.2f} → "
                f"{self.pieces_per_word_after:.2f} pieces per word")


def _backend(tokenizer: PreTrainedTokenizerBase, source: str) -> dict:
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(f"--extend_vocabulary: {source}'s tokenizer ({type(tokenizer).__name__}) is not a fast one, "
                         "whose model the pieces are added to")
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    kind = state["model"]["type"]
    if kind not in EXTENDABLE_MODELS:
        raise UsageError(f"--extend_vocabulary: {source}'s tokenizer is a {kind} model, which cannot learn new pieces "
                         f"(extendable: {', '.join(EXTENDABLE_MODELS)})")
    return state


# Each learns a vocabulary of ``size`` from the text as the tokenizer normalises and splits it, and returns the pieces
# the tokenizer lacks, in the order they should join it, each with what joins with it (a BPE merge, a Unigram score),
# and whether the text had no more to learn (the vocabulary stayed below ``size``). WordPiece reads the text's word
# counts (counted once for every size tried), the trainers the text itself.
def _wordpiece_candidates(state: dict, backend: Tokenizer, words: Counter[str], size: int,
                          taken: set[str]) -> tuple[list[tuple[str, None]], bool]:
    prefix = state["model"].get("continuing_subword_prefix") or "##"
    learnt = learn_wordpiece_vocabulary(words, size, [], min_frequency=2, prefix=prefix)
    return [(piece, None) for piece in learnt if piece not in taken], len(learnt) < size


def _bpe_candidates(state: dict, backend: Tokenizer, texts: Sequence[str], size: int,
                    taken: set[str]) -> tuple[list[tuple[str, tuple[str, str]]], bool]:
    learner = Tokenizer(models.BPE())
    learner.normalizer, learner.pre_tokenizer = backend.normalizer, backend.pre_tokenizer
    alphabet = pre_tokenizers.ByteLevel.alphabet() if "ByteLevel" in json.dumps(state.get("pre_tokenizer")) else []
    learner.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=size, initial_alphabet=alphabet, show_progress=False))
    learnt = json.loads(learner.to_str())["model"]
    candidates, known = [], set(taken)
    for merge in learnt["merges"]:  # in order; a merge whose parts the vocabulary lacks could never apply
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        if left + right not in known and left in known and right in known:
            candidates.append((left + right, (left, right)))
            known.add(left + right)
    return candidates, len(learnt["vocab"]) < size


def _unigram_candidates(state: dict, backend: Tokenizer, texts: Sequence[str], size: int,
                        taken: set[str]) -> tuple[list[tuple[str, float]], bool]:
    learner = Tokenizer(models.Unigram())
    learner.normalizer, learner.pre_tokenizer = backend.normalizer, backend.pre_tokenizer
    learner.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=size, show_progress=False))
    learnt = json.loads(learner.to_str())["model"]["vocab"]
    pieces = canonical_unigram_pieces([(piece, score) for piece, score in learnt])  # most probable first
    return [(piece, score) for piece, score in pieces if piece not in taken], len(learnt) < size


def extend_tokenizer(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], count: int, source: str = "the checkpoint"
) -> VocabularyExtension:
    """``tokenizer`` with ``count`` pieces learnt from ``texts`` added to its model (see the module).

    Raises:
        UsageError: a tokenizer that cannot be extended (a slow one, or a model other than WordPiece, BPE or
            Unigram), or a text that yields fewer than ``count`` pieces the tokenizer lacks.
    """
    state = _backend(tokenizer, source)
    model = state["model"]
    kind = model["type"]
    backend = tokenizer.backend_tokenizer
    first_id = len(tokenizer)
    taken = set(tokenizer.get_vocab())
    if kind == "Unigram" and len(model["vocab"]) != first_id:
        raise UsageError(f"--extend_vocabulary: {source}'s Unigram tokenizer has tokens outside its model's pieces "
                         "(added tokens in the middle of the ids), after which no piece can be added")
    learn = {"WordPiece": _wordpiece_candidates, "BPE": _bpe_candidates, "Unigram": _unigram_candidates}[kind]
    read = word_counts(backend, texts) if kind == "WordPiece" else texts
    size = 256 + count * _SPARE
    while True:  # a vocabulary learnt from the text holds many of the tokenizer's pieces: learn more until enough are new
        candidates, saturated = learn(state, backend, read, size, taken)
        if len(candidates) >= count or saturated:
            break
        size *= 2
    chosen = candidates[:count]
    pieces = [piece for piece, _ in chosen]
    vocab = model["vocab"]
    if kind == "Unigram":
        model["vocab"] = vocab + [[piece, score] for piece, score in chosen]
    else:
        model["vocab"] = {**vocab, **{piece: first_id + index for index, piece in enumerate(pieces)}}
    if kind == "BPE":
        as_strings = bool(model["merges"]) and isinstance(model["merges"][0], str)
        model["merges"] = model["merges"] + [" ".join(merge) if as_strings else list(merge) for _, merge in chosen]
    if len(pieces) < count:
        raise UsageError(f"--extend_vocabulary {count}: the training text yields {len(pieces)} piece(s) that {source}'s "
                         f"tokenizer lacks (the others {kind} learns from it are in its vocabulary already): ask for at "
                         f"most {len(pieces)}, or train on more text")
    extended = copy.deepcopy(tokenizer)
    extended._tokenizer = Tokenizer.from_str(json.dumps(state))
    return _extension(tokenizer, extended, texts)


def _extension(tokenizer: PreTrainedTokenizerBase, extended: PreTrainedTokenizerBase, texts: Sequence[str]) -> VocabularyExtension:
    """The :class:`VocabularyExtension` of ``tokenizer`` into ``extended``, whose new pieces have the ids after
    ``tokenizer``'s; pieces per word counted on (the first 2,000 of) ``texts``."""
    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    first_id = len(tokenizer)
    by_id = {index: piece for piece, index in extended.get_vocab().items()}
    pieces = tuple(by_id[index] for index in range(first_id, len(extended)))
    prefix = model.get("continuing_subword_prefix") or "##"
    sample = list(texts[:2000])
    return VocabularyExtension(
        tokenizer=extended, pieces=pieces,
        old_pieces=tuple(_old_pieces(tokenizer.backend_tokenizer, piece, model["type"], prefix) for piece in pieces),
        first_id=first_id, algorithm=model["type"], pieces_per_word_before=pieces_per_word(tokenizer, sample),
        pieces_per_word_after=pieces_per_word(extended, sample),
    )  # fmt: skip


def resumed_extension(
    tokenizer: PreTrainedTokenizerBase, extended: PreTrainedTokenizerBase, texts: Sequence[str]
) -> VocabularyExtension:
    """The extension a resumed run's checkpoint saved: ``extended`` (its tokenizer) holds ``tokenizer``'s pieces and
    the new ones after them.

    Raises:
        UsageError: ``extended`` is not ``tokenizer`` extended (another tokenizer, or no new piece).
    """
    _backend(tokenizer, "the checkpoint")
    vocabulary = extended.get_vocab()
    if len(extended) <= len(tokenizer) or any(vocabulary.get(piece) != index for piece, index in tokenizer.get_vocab().items()):
        raise UsageError(f"the checkpoint resumed holds a tokenizer of {len(extended)} tokens that is not the continued "
                         f"model's ({len(tokenizer)} tokens) extended: resume from a checkpoint of this run")
    return _extension(tokenizer, extended, texts)


def _old_pieces(backend: Tokenizer, piece: str, kind: str, prefix: str) -> tuple[int, ...]:
    """The ids of the pieces the old tokenizer's model cuts ``piece`` into: a WordPiece continuation (``##icht``) as
    the middle of a word, into continuation pieces by longest match (``##ich`` ``##t``)."""
    if kind != "WordPiece" or not piece.startswith(prefix):
        return tuple(token.id for token in backend.model.tokenize(piece))
    vocabulary, text, ids, start = backend.get_vocab(with_added_tokens=False), piece[len(prefix):], [], 0
    while start < len(text):
        end = next((end for end in range(len(text), start, -1) if prefix + text[start:end] in vocabulary), None)
        if end is None:  # a character the old vocabulary lacks: the word would be unknown
            return (backend.model.token_to_id(backend.model.unk_token),)
        ids.append(vocabulary[prefix + text[start:end]])
        start = end
    return tuple(ids)


def grow_embeddings(model: torch.nn.Module, extension: VocabularyExtension) -> None:
    """Give ``model`` rows for the extension's pieces: the word embeddings (and the tied decoder and its bias) resized
    when they have no row for them, each new row the mean of its old pieces' rows (a piece the old tokenizer could not
    cut keeps the resized row)."""
    needed = extension.first_id + len(extension.pieces)
    if model.get_input_embeddings().weight.shape[0] < needed:
        model.resize_token_embeddings(needed, mean_resizing=False)
    embeddings = model.get_input_embeddings().weight  # (vocab, hidden)
    output = model.get_output_embeddings()
    bias = getattr(output, "bias", None) if output is not None else None  # (vocab,)
    with torch.no_grad():
        for offset, old in enumerate(extension.old_pieces):
            if not old:
                continue
            row, old = extension.first_id + offset, list(old)
            embeddings[row] = embeddings[old].mean(0)
            if bias is not None:
                bias[row] = bias[old].mean(0)
