"""Next-sentence-prediction (NSP) pairs ``[CLS] A [SEP] B [SEP]`` for BERT pretraining (docs/pretraining.md).

Pairs are built as Google BERT's ``create_instances_from_document`` builds them, with two differences that keep the
labels exactly Bernoulli(``nsp_probability``): a chunk closes only with at least two sentences (no forced random
pair for a lone sentence), and a random B is drawn uniformly from the *other* documents.
"""

from __future__ import annotations

import random
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from transformers import PreTrainedTokenizerBase

from mlm_suite.data.pretraining.packing import check_row_layout, content_tokens, row_word_ids

__all__ = ["split_sentences", "build_nsp_examples", "nsp_map_function"]

MIN_NSP_LENGTH = 8
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    """Split text after every ``.``, ``!`` or ``?`` followed by white space; empty pieces are dropped."""
    return [sentence.strip() for sentence in _SENTENCE_END.split(text) if sentence.strip()]


def _validate(
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    nsp_probability: float,
    short_seq_probability: float,
    on_short_document: str,
) -> None:
    check_row_layout(tokenizer, max_length, MIN_NSP_LENGTH, "building NSP pairs")
    if not 0.0 <= nsp_probability <= 1.0:
        raise ValueError(f"nsp_probability must lie in [0, 1], got {nsp_probability}")
    if not 0.0 <= short_seq_probability <= 1.0:
        raise ValueError(f"short_seq_probability must lie in [0, 1], got {short_seq_probability}")
    if on_short_document not in ("error", "skip"):
        raise ValueError(f"on_short_document must be 'error' or 'skip', got {on_short_document!r}")


@dataclass
class _Sentences:
    """One document's non-empty sentences: their token ids, word ids and index in the input document.

    The word ids are the tokenizer's (``encoding.word_ids()``), shifted so that they keep growing
    from one sentence to the next: adjacent tokens of two sentences never share a word.
    """

    token_ids: list[list[int]] = field(default_factory=list)
    word_ids: list[list[int]] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.token_ids)


def _tokenize_documents(
    documents: Sequence[Sequence[str]], tokenizer: PreTrainedTokenizerBase
) -> list[_Sentences]:
    """Tokenise every sentence of every document in one batched call of the fast tokenizer (word ids kept)."""
    flat: list[str] = []
    owners: list[tuple[int, int]] = []
    for document_index, document in enumerate(documents):
        if isinstance(document, str):
            raise ValueError(
                f"document {document_index} is a string; every document must be a list of sentences "
                "(use split_sentences(text))"
            )
        for sentence_index, sentence in enumerate(document):
            if sentence.strip():
                flat.append(sentence)
                owners.append((document_index, sentence_index))
    token_ids, word_ids = content_tokens(flat, tokenizer)
    tokenized = [_Sentences() for _ in documents]
    for (document_index, sentence_index), ids, words in zip(owners, token_ids, word_ids):
        # A sentence of control characters only tokenises to nothing; it cannot make A or B.
        if ids:
            sentences = tokenized[document_index]
            first = sentences.word_ids[-1][-1] + 1 if sentences else 0
            sentences.token_ids.append(ids)
            sentences.word_ids.append([first + word for word in words])
            sentences.positions.append(sentence_index)
    return tokenized


def _usable_documents(
    tokenized: list[_Sentences], on_short_document: str, document_ids: Sequence[int], hint: str = ""
) -> list[int]:
    """Positions of the documents with at least two sentences; raise or warn about the others."""
    short = [(document_ids[index], len(sentences)) for index, sentences in enumerate(tokenized) if len(sentences) < 2]
    if short and on_short_document == "error":
        listed = ", ".join(f"document {index} has {count}" for index, count in short[:5])
        more = f" (and {len(short) - 5} more)" if len(short) > 5 else ""
        raise ValueError(
            f"NSP needs documents of at least 2 non-empty sentences: {listed}{more}; "
            "pass on_short_document='skip' to leave such documents out"
        )
    usable = [index for index, sentences in enumerate(tokenized) if len(sentences) >= 2]
    if len(usable) < 2:  # refused at once: the message counts the usable documents, a warning would repeat it
        raise ValueError(
            f"NSP needs at least 2 documents of >= 2 sentences (a random B always comes from another "
            f"document), got {len(usable)} of {len(tokenized)}{hint}"
        )
    if short:
        warnings.warn(f"skipped {len(short)} of {len(tokenized)} documents with fewer than 2 sentences")
    return usable


def _truncate_pair(a_length: int, b_length: int, max_tokens: int, rng: random.Random) -> tuple[slice, slice]:
    """The parts of A and B kept: drop tokens from the longer side, from its front or back at random, until both fit."""
    a_start, a_end, b_start, b_end = 0, a_length, 0, b_length
    while (a_end - a_start) + (b_end - b_start) > max_tokens:
        if a_end - a_start > b_end - b_start:
            if rng.random() < 0.5:
                a_start += 1
            else:
                a_end -= 1
        elif rng.random() < 0.5:
            b_start += 1
        else:
            b_end -= 1
    return slice(a_start, a_end), slice(b_start, b_end)


def _build_pairs(
    tokenized: list[_Sentences],
    usable: list[int],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    nsp_probability: float,
    short_seq_probability: float,
    rng: random.Random,
    return_provenance: bool,
    document_ids: Sequence[int],
) -> dict[str, list[Any]]:
    """Pairs of the ``usable`` documents (positions in ``tokenized``), reported under ``document_ids``."""
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    max_tokens = max_length - 3  # room for [CLS], [SEP], [SEP]
    output: dict[str, list[Any]] = {
        "input_ids": [],
        "token_type_ids": [],
        "attention_mask": [],
        "special_tokens_mask": [],
        "word_ids": [],
        "next_sentence_label": [],
    }
    if return_provenance:
        output.update(a_document=[], b_document=[], a_sentences=[], b_sentences=[])

    def tokens_and_words(document: int, sentence_indices: list[int]) -> tuple[list[int], list[int]]:
        """The concatenated token ids and word ids of some sentences of a document."""
        chosen = tokenized[document]
        tokens = [token for j in sentence_indices for token in chosen.token_ids[j]]
        return tokens, [word for j in sentence_indices for word in chosen.word_ids[j]]

    def emit(label: int, a_doc: int, b_doc: int, a_sents: list[int], b_sents: list[int]) -> None:
        (a, a_words), (b, b_words) = tokens_and_words(a_doc, a_sents), tokens_and_words(b_doc, b_sents)
        a_kept, b_kept = _truncate_pair(len(a), len(b), max_tokens, rng)
        a, b = a[a_kept], b[b_kept]
        output["input_ids"].append([cls_id, *a, sep_id, *b, sep_id])
        output["token_type_ids"].append([0] * (len(a) + 2) + [1] * (len(b) + 1))
        output["attention_mask"].append([1] * (len(a) + len(b) + 3))
        output["special_tokens_mask"].append([1] + [0] * len(a) + [1] + [0] * len(b) + [1])
        output["word_ids"].append(row_word_ids([a_words[a_kept], b_words[b_kept]]))
        output["next_sentence_label"].append(label)
        if return_provenance:
            output["a_document"].append(document_ids[a_doc])
            output["b_document"].append(document_ids[b_doc])
            output["a_sentences"].append([tokenized[a_doc].positions[j] for j in a_sents])
            output["b_sentences"].append([tokenized[b_doc].positions[j] for j in b_sents])

    for order, document_index in enumerate(usable):
        sentences = tokenized[document_index].token_ids
        n = len(sentences)
        target_length = max_tokens
        if rng.random() < short_seq_probability:
            target_length = rng.randint(2, max_tokens)
        chunk: list[int] = []
        chunk_length = 0
        i = 0
        while i < n:
            chunk.append(i)
            chunk_length += len(sentences[i])
            # Close only with >= 2 sentences (a true B must exist) and never strand the last sentence.
            if i == n - 1 or (chunk_length >= target_length and len(chunk) >= 2 and i != n - 2):
                if len(chunk) >= 2:
                    a_end = rng.randint(1, len(chunk) - 1)
                    a_sents = chunk[:a_end]
                    a_length = sum(len(sentences[j]) for j in a_sents)
                    if rng.random() < nsp_probability:
                        # Uniform over the other usable documents: skip over this one's slot.
                        other = rng.randrange(len(usable) - 1)
                        other_index = usable[other + (other >= order)]
                        other_sentences = tokenized[other_index].token_ids
                        b_length = 0
                        b_sents: list[int] = []
                        for j in range(rng.randrange(len(other_sentences)), len(other_sentences)):
                            b_length += len(other_sentences[j])
                            b_sents.append(j)
                            if b_length >= target_length - a_length:
                                break
                        emit(1, document_index, other_index, a_sents, b_sents)
                        # The chunk's B sentences were not used: start the next chunk with them.
                        i -= len(chunk) - a_end
                    else:
                        emit(0, document_index, document_index, a_sents, chunk[a_end:])
                chunk = []
                chunk_length = 0
            i += 1
    return output


def build_nsp_examples(
    documents: Sequence[Sequence[str]],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int = 128,
    nsp_probability: float = 0.5,
    seed: int = 0,
    short_seq_probability: float = 0.0,
    on_short_document: Literal["error", "skip"] = "error",
    return_provenance: bool = False,
) -> dict[str, list[Any]]:
    """Build ``[CLS] A [SEP] B [SEP]`` next-sentence pairs from documents split into sentences.

    Args:
        documents: the documents, each a list of sentences (strings; empty ones are ignored).
            At least two documents must have two or more sentences.
        tokenizer: a fast tokenizer with ``cls_token`` and ``sep_token`` (sentences are tokenised
            once, in one batched call, without special tokens).
        max_length: longest pair, special tokens included; 8 <= max_length <= model_max_length.
        nsp_probability: probability that B is random text (label 1) rather than the continuation.
        seed: seed of the ``random.Random`` that makes all choices; same inputs, same pairs.
        short_seq_probability: per document, the probability of a target length drawn uniformly in
            ``[2, max_length - 3]`` instead of the full length (Google uses 0.1), so that the model
            also sees short inputs.
        on_short_document: documents with fewer than 2 sentences cannot give a true pair:
            ``"error"`` raises a ValueError naming them, ``"skip"`` leaves them out (with a warning)
            and also never uses them as a source of random B.
        return_provenance: also return where each pair comes from (for tests and debugging).

    Returns:
        A dict of lists, one entry per pair (``n_pairs`` of them), in document order:

        - ``input_ids``: ``[CLS] A [SEP] B [SEP]``, length <= ``max_length`` (no padding).
        - ``token_type_ids``: 0 up to and including the first [SEP], then 1.
        - ``attention_mask``: all ones.
        - ``special_tokens_mask``: 1 at [CLS] and the two [SEP]s, else 0.
        - ``word_ids``: per token, its word (from the tokenizer's ``encoding.word_ids()``),
          numbered along the pair (:func:`~mlm_suite.data.pretraining.packing.row_word_ids`): the sentinel
          at [CLS]/[SEP], distinct ids for the words of different sentences and of A and B,
          and the remaining pieces of a word cut by truncation count as a word of their own.
        - ``next_sentence_label``: 0 when B follows A in the same document, 1 when B is random.
        - with ``return_provenance``: ``a_document`` / ``b_document`` (index into ``documents``)
          and ``a_sentences`` / ``b_sentences`` (indices of the sentences in their document;
          the tokens are these sentences' tokens, possibly cut at the front or back).
    """
    _validate(tokenizer, max_length, nsp_probability, short_seq_probability, on_short_document)
    tokenized = _tokenize_documents(documents, tokenizer)
    usable = _usable_documents(tokenized, on_short_document, range(len(documents)))
    return _build_pairs(
        tokenized,
        usable,
        tokenizer,
        max_length,
        nsp_probability,
        short_seq_probability,
        random.Random(seed),
        return_provenance,
        document_ids=range(len(documents)),
    )


def nsp_map_function(
    tokenizer: PreTrainedTokenizerBase,
    max_length: int = 128,
    nsp_probability: float = 0.5,
    seed: int = 0,
    sentences_column: str = "sentences",
    short_seq_probability: float = 0.0,
    on_short_document: Literal["error", "skip"] = "error",
    return_provenance: bool = False,
) -> Callable[..., dict[str, list[Any]]]:
    """A batched ``datasets.Dataset.map`` function: rows = documents in, rows = NSP pairs out.

    Use it as ``dataset.map(f, batched=True, with_indices=True, remove_columns=dataset.column_names)``.
    The random B sentences of a batch come from the *other documents of the same batch*, so every
    batch must hold at least two usable documents: pick ``batch_size`` accordingly and pass
    ``drop_last_batch=True`` if the last batch could hold a single document.

    With ``with_indices=True`` each batch draws from its own random stream, seeded by ``seed`` and
    the batch's first row index (so results do not depend on ``num_proc``), and provenance
    document ids are dataset row indices; without it every batch reuses the stream of ``seed``
    and provenance ids are positions within the batch.

    Args: as ``build_nsp_examples``; ``sentences_column`` holds each document's list of sentences.

    Returns:
        ``f(batch, indices=None) -> dict of lists`` with the keys of ``build_nsp_examples``.
    """
    _validate(tokenizer, max_length, nsp_probability, short_seq_probability, on_short_document)

    def nsp_pairs(batch: dict[str, list[Any]], indices: list[int] | None = None) -> dict[str, list[Any]]:
        documents = batch[sentences_column]
        if indices is None:
            batch_seed, document_ids = seed, range(len(documents))
        else:
            batch_seed = int(np.random.SeedSequence([seed, indices[0]]).generate_state(1)[0])
            document_ids = indices
        tokenized = _tokenize_documents(documents, tokenizer)
        hint = " in this batch: raise batch_size, or pass drop_last_batch=True for a one-document last batch"
        usable = _usable_documents(tokenized, on_short_document, document_ids, hint)
        return _build_pairs(
            tokenized,
            usable,
            tokenizer,
            max_length,
            nsp_probability,
            short_seq_probability,
            random.Random(batch_seed),
            return_provenance,
            document_ids=document_ids,
        )

    return nsp_pairs
