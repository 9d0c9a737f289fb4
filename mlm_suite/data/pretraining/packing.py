"""Packing tokenised documents into full rows (RoBERTa's FULL-SENTENCES), with document boundaries.

A packed row is ``[CLS] doc1 [SEP] doc2 [SEP] doc3... [SEP]``: every row starts with [CLS], every
document (or the part of it that fits) is followed by [SEP], and a document that does not fit is
cut at the row boundary and continued in the next row, after that row's [CLS]. Each document part
in a row is a *segment*; its ``position_ids`` restart at 0 (the first segment of a row counts its
[CLS] as position 0), which is how the padding-free encoder knows where to isolate attention.

Masking stays per document: the inserted [CLS]/[SEP] are marked in ``special_tokens_mask`` and
never masked, and every content token appears exactly once, so a masking collator that masks a
fraction of the non-special tokens masks the same expected fraction of every document as it would
unpacked. Rows carry the fast tokenizer's word ids (:func:`row_word_ids`), so whole-word and span
masking work with any fast tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from mlm_suite.data.pretraining.chunking import WORD_ID_SENTINEL

__all__ = ["content_tokens", "pack_documents", "packing_map_function", "document_boundaries", "row_word_ids"]

MIN_PACKING_LENGTH = 3  # [CLS], one content token, [SEP]


def check_row_layout(tokenizer: PreTrainedTokenizerBase, max_length: int, min_length: int, purpose: str) -> None:
    """Raise a ValueError unless ``tokenizer`` has [CLS]/[SEP] and ``min_length <= max_length <= model_max_length``."""
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise ValueError(
            f"{purpose} needs a tokenizer with a cls_token and a sep_token, "
            f"got cls_token={tokenizer.cls_token!r}, sep_token={tokenizer.sep_token!r}"
        )
    if not min_length <= max_length <= tokenizer.model_max_length:
        raise ValueError(
            f"max_length={max_length} must lie between {min_length} and the tokenizer's "
            f"model_max_length={tokenizer.model_max_length}"
        )


def _validate(tokenizer: PreTrainedTokenizerBase, max_length: int) -> None:
    check_row_layout(tokenizer, max_length, MIN_PACKING_LENGTH, "packing")


def content_tokens(texts: Sequence[str], tokenizer: PreTrainedTokenizerBase) -> tuple[list[list[int]], list[list[int]]]:
    """Token ids of each text without special tokens, and the fast tokenizer's word id of each token.

    What packed rows and NSP pairs are built from (:func:`pack_documents`, :func:`row_word_ids`).
    """
    if not texts:
        return [], []
    encoded = tokenizer(
        list(texts), add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False, verbose=False
    )
    return encoded["input_ids"], [encoded.word_ids(index) for index in range(len(texts))]


def row_word_ids(segments: Sequence[Sequence[int]]) -> list[int]:
    """Word ids of a row laid out ``[CLS] segment [SEP] segment [SEP] ...``, from its segments' tokenizer word ids.

    Args:
        segments: per segment, the fast tokenizer's word id of each of its tokens (``encoding.word_ids()``),
            numbered along the segment's source text so that consecutive tokens share an id exactly
            when they belong to one word.

    Returns:
        One id per token of the row: :data:`~mlm_suite.data.pretraining.chunking.WORD_ID_SENTINEL` at [CLS] and
        every [SEP]; content words numbered 0, 1, ... along the row. A new word starts wherever the
        tokenizer's word id changes and at the start of every segment, so words of different
        segments never share an id and the remaining pieces of a word cut at a segment's start (by
        truncation, or a document continued from the previous row) count as a word of their own.
    """
    row = [WORD_ID_SENTINEL]
    word = -1
    for segment in segments:
        for position, tokenizer_word in enumerate(segment):
            if position == 0 or tokenizer_word != segment[position - 1]:
                word += 1
            row.append(word)
        row.append(WORD_ID_SENTINEL)
    return row


def pack_documents(
    tokenized_documents: Sequence[Sequence[int]],
    document_word_ids: Sequence[Sequence[int]],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    return_document_ids: bool = False,
) -> dict[str, list[list[int]]]:
    """Concatenate tokenised documents into rows of at most ``max_length`` tokens.

    Args:
        tokenized_documents: token ids of each document, *without* special tokens. Empty
            documents contribute nothing.
        document_word_ids: for each document, the fast tokenizer's word id of each token
            (``encoding.word_ids(i)`` of the same encoding), same lengths as ``tokenized_documents``.
        tokenizer: gives ``cls_token_id`` and ``sep_token_id``.
        max_length: longest row, special tokens included (3 <= max_length <= model_max_length).
        return_document_ids: also return which document each token belongs to.

    Returns:
        A dict of lists with one entry per row (``n_rows``), each a list of the row's length
        (at most ``max_length``; all rows are ``max_length`` long except the last and rows whose
        one free slot could not hold a token plus its [SEP]; no padding):

        - ``input_ids``: the packed tokens.
        - ``position_ids``: 0, 1, 2, ... restarting at 0 at the first token of every document
          segment (the [CLS] for a row's first segment); always < ``max_length``.
        - ``attention_mask``: all ones.
        - ``special_tokens_mask``: 1 at the inserted [CLS] and [SEP] tokens, 0 on content.
        - ``word_ids``: per token, its word numbered along the row (:func:`row_word_ids`):
          the sentinel at [CLS]/[SEP], never one id for words of two segments, and a new word
          where a document continued from the previous row resumes.
        - with ``return_document_ids``: ``document_ids``, the index into ``tokenized_documents``
          of each token's document ([CLS] counts with the row's first segment, a [SEP] with the
          document it closes).
    """
    _validate(tokenizer, max_length)
    if len(document_word_ids) != len(tokenized_documents) or any(
        len(words) != len(ids) for words, ids in zip(document_word_ids, tokenized_documents)
    ):
        raise ValueError("document_word_ids must hold one word id per token of every document")
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    keys = ["input_ids", "position_ids", "attention_mask", "special_tokens_mask", "word_ids"]
    if return_document_ids:
        keys.append("document_ids")
    rows: dict[str, list[list[int]]] = {key: [] for key in keys}
    row: dict[str, list] = {}

    def start_row(document_index: int) -> None:
        # segment_words: the tokenizer's word ids of each segment, numbered along the row when it closes.
        row.update(
            input_ids=[cls_id], position_ids=[0], special_tokens_mask=[1], document_ids=[document_index], segment_words=[]
        )

    def close_row() -> None:
        rows["input_ids"].append(row["input_ids"])
        rows["position_ids"].append(row["position_ids"])
        rows["attention_mask"].append([1] * len(row["input_ids"]))
        rows["special_tokens_mask"].append(row["special_tokens_mask"])
        rows["word_ids"].append(row_word_ids(row["segment_words"]))
        if return_document_ids:
            rows["document_ids"].append(row["document_ids"])
        row.clear()

    for document_index, (document, words) in enumerate(zip(tokenized_documents, document_word_ids)):
        offset = 0
        while offset < len(document):
            # A segment needs one free slot for a content token and one for its closing [SEP].
            if row and len(row["input_ids"]) + 2 > max_length:
                close_row()
            if not row:
                start_row(document_index)
            first_position = 1 if len(row["input_ids"]) == 1 else 0
            take = min(len(document) - offset, max_length - len(row["input_ids"]) - 1)
            piece = list(document[offset : offset + take])
            row["input_ids"] += piece + [sep_id]
            row["position_ids"] += list(range(first_position, first_position + take + 1))
            row["special_tokens_mask"] += [0] * take + [1]
            row["document_ids"] += [document_index] * (take + 1)
            row["segment_words"].append(words[offset : offset + take])
            offset += take
    if row:
        close_row()
    return rows


def packing_map_function(
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    text_column: str = "text",
    return_document_ids: bool = False,
) -> Callable[[dict[str, list[Any]]], dict[str, list[list[int]]]]:
    """A batched ``datasets.Dataset.map`` function: rows = texts in, rows = packed rows out.

    Use it as ``dataset.map(f, batched=True, remove_columns=dataset.column_names)``. Packing
    happens within a batch, so every batch ends with one shorter row; larger ``batch_size``
    means fewer of them. Nothing is dropped. With ``return_document_ids`` the ids are positions
    within the batch. Needs a fast tokenizer: the rows' ``word_ids`` come from its encodings.

    Returns:
        ``f(batch) -> dict of lists`` with the keys of ``pack_documents``.
    """
    _validate(tokenizer, max_length)

    def pack(batch: dict[str, list[Any]]) -> dict[str, list[list[int]]]:
        token_ids, word_ids = content_tokens(batch[text_column], tokenizer)
        return pack_documents(token_ids, word_ids, tokenizer, max_length, return_document_ids)

    return pack


def document_boundaries(position_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Cumulative segment lengths (``cu_seqlens``) of packed rows, for variable-length attention.

    A segment starts at every token whose position id is 0 and at the first real token of every
    row. Real tokens are taken in row-major order, padding (``attention_mask == 0``, on either
    side) left out, which is the layout of flash-attention's ``*_varlen`` kernels.

    Args:
        position_ids: ``(batch, seq_len)`` or ``(seq_len,)`` integer tensor.
        attention_mask: same shape, 1 for real tokens and 0 for padding; ``None`` means no padding.

    Returns:
        ``(n_segments + 1,)`` int32 tensor ``[0, len_0, len_0 + len_1, ..., n_real_tokens]``; the
        longest segment is ``cu_seqlens.diff().max()``.
    """
    if position_ids.dim() == 1:
        position_ids = position_ids.unsqueeze(0)
        attention_mask = None if attention_mask is None else attention_mask.unsqueeze(0)
    if position_ids.dim() != 2:
        raise ValueError(f"position_ids must be (batch, seq_len) or (seq_len,), got shape {tuple(position_ids.shape)}")
    if attention_mask is None:
        real = torch.ones_like(position_ids, dtype=torch.bool)
    elif attention_mask.shape != position_ids.shape:
        raise ValueError(
            f"attention_mask shape {tuple(attention_mask.shape)} differs from position_ids shape "
            f"{tuple(position_ids.shape)}"
        )
    else:
        real = attention_mask.bool()
    first_real = real & (real.long().cumsum(dim=1) == 1)
    starts = ((position_ids == 0) | first_real)[real]
    start_indices = torch.nonzero(starts).flatten()
    total = torch.tensor([starts.numel()], device=position_ids.device)
    return torch.cat([start_indices, total]).to(torch.int32)
