"""The pretraining job's rows: documents tokenised (or packed) into model rows, or NSP sentence pairs, each with the
``example_index`` its seeded masks are keyed by. The same documents give the same rows in memory, in a prepared
folder and in a stream: all three go through :func:`pretraining_rows_function` (docs/data.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from datasets import Dataset, Features, List, Value
from transformers import PreTrainedTokenizerBase

from mlm_suite.data.pretraining.chunking import tokenize_for_mlm
from mlm_suite.data.mapping import map_options
from mlm_suite.data.pretraining.masking import count_tokens
from mlm_suite.data.pretraining.nsp import build_nsp_examples, split_sentences
from mlm_suite.data.pretraining.packing import content_tokens, pack_documents, packing_map_function

__all__ = [
    "EVAL_SEED",
    "PACKING_BATCH",
    "RowFormat",
    "document_rows",
    "most_frequent_row_token",
    "most_frequent_token",
    "nsp_rows",
    "pretraining_rows_function",
]

# The seed of the held-out rows' NSP pairs and masks: it does not follow --seed, so that they are the same in every
# run and eval numbers can be compared across runs.
EVAL_SEED = 1234
# Documents packed together: datasets.map's default batch size, which a stream's map uses too.
PACKING_BATCH = 1000
# Storage type of each row column (the collator reads them back as int64).
_COLUMN_TYPES = {
    "input_ids": "int32",
    "attention_mask": "int8",
    "token_type_ids": "int8",
    "special_tokens_mask": "int8",
    "position_ids": "int32",
    "word_ids": "int32",
}


def pretraining_rows_function(
    tokenizer: PreTrainedTokenizerBase, max_seq_length: int, packing: bool = False, text_column: str = "text"
) -> Callable[[Mapping[str, Sequence[Any]]], dict[str, list[list[int]]]]:
    """A batched ``datasets`` map function from documents to MLM rows, for ``Dataset`` and ``IterableDataset`` alike.

    Without packing every document becomes one row or more
    (:func:`~mlm_suite.data.pretraining.chunking.tokenize_for_mlm`); with packing the documents of a batch are packed into full rows, position ids restarting per document
    (:func:`~mlm_suite.data.pretraining.packing.packing_map_function`). Both keep the tokenizer's ``word_ids``.
    """
    if packing:
        return packing_map_function(tokenizer, max_seq_length, text_column=text_column)

    def tokenize(batch: Mapping[str, Sequence[Any]]) -> dict[str, list[list[int]]]:
        return tokenize_for_mlm(batch, tokenizer, max_seq_length, text_column=text_column)

    return tokenize


def _content_ids(batch: Mapping[str, Sequence[str]], tokenizer: PreTrainedTokenizerBase) -> dict[str, list[list[int]]]:
    """Token ids of each document without special tokens, and the tokenizer's word ids: what packing concatenates."""
    token_ids, word_ids = content_tokens(batch["text"], tokenizer)
    return {"content_ids": token_ids, "content_word_ids": word_ids}


def _pack(batch: Mapping[str, Sequence[list[int]]], tokenizer: PreTrainedTokenizerBase, max_length: int) -> dict:
    return pack_documents(batch["content_ids"], batch["content_word_ids"], tokenizer, max_length)


def _row_features(columns: Sequence[str]) -> Features:
    return Features({name: List(Value(_COLUMN_TYPES[name])) for name in columns})


def with_example_index(rows: Dataset) -> Dataset:
    # Seeded masks are keyed by this index, so a row's mask does not depend on batching or on its process.
    return rows.add_column("example_index", np.arange(len(rows), dtype=np.int64))


def document_rows(
    documents: Dataset,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    packing: bool = False,
    num_proc: int | None = None,
    *,
    split: str = "training",
    overwrite_cache: bool = False,
) -> Dataset:
    """The MLM rows of ``documents`` (a ``text`` column) with ``example_index``: :func:`pretraining_rows_function`'s.

    Documents are tokenised on ``num_proc`` processes; packed rows are packed afterwards in this one, in batches
    of :data:`PACKING_BATCH` documents, so the rows do not depend on ``num_proc``. Stored compactly (int32/int8).
    """
    if packing:
        content = documents.map(
            _content_ids, batched=True, remove_columns=documents.column_names, fn_kwargs={"tokenizer": tokenizer},
            desc=f"tokenising {split} documents", **map_options(documents, num_proc, overwrite_cache),
        )  # fmt: skip
        sample = _pack({"content_ids": [[tokenizer.cls_token_id]], "content_word_ids": [[0]]}, tokenizer, max_seq_length)
        rows = content.map(
            _pack, batched=True, batch_size=PACKING_BATCH, remove_columns=["content_ids", "content_word_ids"],
            fn_kwargs={"tokenizer": tokenizer, "max_length": max_seq_length}, features=_row_features(list(sample)),
            desc=f"packing {split} documents", **map_options(content, overwrite_cache=overwrite_cache),
        )  # fmt: skip
    else:
        sample = tokenize_for_mlm({"text": ["a"]}, tokenizer, max_seq_length)
        rows = documents.map(
            pretraining_rows_function(tokenizer, max_seq_length), batched=True, remove_columns=documents.column_names,
            features=_row_features(list(sample)), desc=f"tokenising {split} documents",
            **map_options(documents, num_proc, overwrite_cache),
        )  # fmt: skip
    if len(rows) == 0:
        raise ValueError(f"the {split} documents produced no rows")
    return with_example_index(rows)


def nsp_rows(
    documents: Dataset, tokenizer: PreTrainedTokenizerBase, max_seq_length: int, nsp_probability: float, seed: int,
    split: str = "training",
) -> Dataset:
    """Sentence pairs of ``documents`` for MLM + next-sentence prediction (their random B drawn from the whole split,
    in this process), with ``example_index``."""
    try:
        # A one-sentence document gives no true pair; it is left out (with a warning) rather than refusing a
        # whole corpus for it (one of the 1,500 embedded reviews is one sentence long).
        pairs = build_nsp_examples(
            [split_sentences(text) for text in documents["text"]], tokenizer, max_seq_length,
            nsp_probability=nsp_probability, seed=seed, on_short_document="skip",
        )  # fmt: skip
    except ValueError as error:
        raise ValueError(f"{split} documents: {error}") from None
    return with_example_index(Dataset.from_dict(pairs))


@dataclass(frozen=True)
class RowFormat:
    """How a corpus's documents become the rows of a run: MLM rows (packed or not) or NSP pairs."""

    max_seq_length: int
    packing: bool = False
    objective: Literal["mlm", "mlm_nsp"] = "mlm"
    nsp_probability: float = 0.5
    num_proc: int | None = None
    overwrite_cache: bool = False

    def rows(self, documents: Dataset, tokenizer: PreTrainedTokenizerBase, seed: int, split: str) -> Dataset:
        """The rows of ``documents``; ``seed`` draws NSP pairs (MLM masks are drawn later, by the collator)."""
        if self.objective == "mlm_nsp":
            return nsp_rows(documents, tokenizer, self.max_seq_length, self.nsp_probability, seed, split)
        return document_rows(
            documents, tokenizer, self.max_seq_length, self.packing, self.num_proc, split=split,
            overwrite_cache=self.overwrite_cache,
        )  # fmt: skip


def most_frequent_token(counts: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> int:
    """The most frequent non-special id in ``(vocab,)`` token counts: the MLM baseline's single prediction."""
    counts = counts.clone()
    counts[torch.tensor(tokenizer.all_special_ids)] = 0
    return int(counts.argmax())


def most_frequent_row_token(rows: Dataset, tokenizer: PreTrainedTokenizerBase) -> int:
    """The most frequent non-special token id of the training rows: the baseline's single prediction."""
    return most_frequent_token(count_tokens(rows, len(tokenizer)), tokenizer)
