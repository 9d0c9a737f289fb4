"""Pre-tokenised pretraining data: ``mlm-suite prepare-data`` writes it, ``mlm-suite pretrain --prepared_data`` reads it.

A prepared folder::

    mlm_suite_data.json  what made it: the tokenizer (name, size, fingerprint), max_seq_length, packing, the
                         documents, rows and tokens written, the most frequent training token
    tokenizer/           that tokenizer (``save_pretrained``)
    train/               the training rows: Arrow shards (``datasets.Dataset.save_to_disk``), memory-mapped when read
    validation/          the held-out documents, as text (the job tokenises them as it does in-memory ones)

The rows are the ones the pretraining job builds in memory from the same documents (same columns and values,
stored as int32/int8; ``example_index`` is the row number), whatever ``num_proc``: unpacked rows come from
:func:`~mlm_suite.data.chunking.tokenize_for_mlm`, document by document; packed rows pack groups of
:data:`PACKING_BATCH` consecutive documents, as the job's ``datasets.map`` batches do, so the documents are
tokenised on ``num_proc`` processes (token ids and the tokenizer's word ids) and packed afterwards in one.
Both kinds of row carry ``word_ids`` for whole-word and span masking.

A tokenizer is identified by :func:`tokenizer_fingerprint`, a hash of everything in its ``tokenizer.json`` that
decides the ids (vocabulary, normaliser, pre-tokeniser, post-processor, added tokens), so a folder used with
another tokenizer is refused (:func:`check_tokenizer`) rather than trained on with the wrong ids.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch
from datasets import Dataset, DatasetDict, Features, List, Value
from transformers import PreTrainedTokenizerBase

from mlm_suite.data.corpus import documents_dataset, hold_out
from mlm_suite.data.chunking import tokenize_for_mlm
from mlm_suite.data.packing import content_tokens, pack_documents, packing_map_function

__all__ = [
    "METADATA_FILE",
    "PACKING_BATCH",
    "PreparedData",
    "check_tokenizer",
    "load_prepared",
    "prepare_data",
    "pretraining_rows_function",
    "tokenizer_fingerprint",
]

METADATA_FILE = "mlm_suite_data.json"
FORMAT_VERSION = 1
# Documents packed together: datasets.map's default batch size, which the job's in-memory packing uses.
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
# Parts of tokenizer.json that change while tokenising (truncation, padding) or say nothing about the ids.
_VOLATILE_TOKENIZER_FIELDS = ("truncation", "padding", "version")


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """sha256 of the fast tokenizer's definition (``tokenizer.json`` without truncation and padding settings)."""
    definition = json.loads(tokenizer.backend_tokenizer.to_str())
    for name in _VOLATILE_TOKENIZER_FIELDS:
        definition.pop(name, None)
    return hashlib.sha256(json.dumps(definition, sort_keys=True).encode("utf-8")).hexdigest()


def pretraining_rows_function(
    tokenizer: PreTrainedTokenizerBase, max_seq_length: int, packing: bool = False, text_column: str = "text"
) -> Callable[[Mapping[str, Sequence[Any]]], dict[str, list[list[int]]]]:
    """A batched ``datasets`` map function from documents to the pretraining job's rows.

    ``dataset.map(pretraining_rows_function(tok, 128, packing=True), batched=True,
    remove_columns=dataset.column_names)``: without packing, every document becomes one row or more
    (:func:`~mlm_suite.data.chunking.tokenize_for_mlm`, word ids kept); with packing, the documents of a batch
    are packed into full rows with position ids restarting per document, word ids kept too
    (:func:`~mlm_suite.data.packing.packing_map_function`). Works on ``Dataset`` and ``IterableDataset`` alike.
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


def build_rows(
    documents: Dataset, tokenizer: PreTrainedTokenizerBase, max_seq_length: int, packing: bool, num_proc: int | None = None
) -> Dataset:
    """The job's rows of ``documents`` (a ``text`` column) with ``example_index``, tokenised on ``num_proc`` processes."""
    parallel = {"num_proc": num_proc if num_proc and num_proc > 1 else None}
    if packing:
        content = documents.map(
            _content_ids, batched=True, remove_columns=documents.column_names, fn_kwargs={"tokenizer": tokenizer},
            desc="tokenising documents", **parallel,
        )  # fmt: skip
        sample = _pack({"content_ids": [[tokenizer.cls_token_id]], "content_word_ids": [[0]]}, tokenizer, max_seq_length)
        rows = content.map(
            _pack, batched=True, batch_size=PACKING_BATCH, remove_columns=["content_ids", "content_word_ids"],
            fn_kwargs={"tokenizer": tokenizer, "max_length": max_seq_length}, features=_row_features(list(sample)),
            desc="packing",
        )  # fmt: skip
    else:
        sample = tokenize_for_mlm({"text": ["a"]}, tokenizer, max_seq_length)
        rows = documents.map(
            tokenize_for_mlm, batched=True, remove_columns=documents.column_names,
            fn_kwargs={"tokenizer": tokenizer, "max_length": max_seq_length}, features=_row_features(list(sample)),
            desc="tokenising documents", **parallel,
        )  # fmt: skip
    if len(rows) == 0:
        raise ValueError("the training documents produced no rows")
    # Seeded masks are keyed by this index, as they are for the job's in-memory rows.
    return rows.add_column("example_index", np.arange(len(rows), dtype=np.int64))


def token_counts(rows: Dataset, vocab_size: int) -> torch.Tensor:
    """``(vocab_size,)`` int64 counts of the ids in ``rows["input_ids"]``, read as Arrow in large batches."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for batch in rows.with_format("arrow").iter(batch_size=65536):
        ids = pc.list_flatten(batch["input_ids"]).to_numpy()
        counts += np.bincount(ids, minlength=vocab_size)
    return torch.from_numpy(counts)


def most_frequent_token(counts: torch.Tensor, tokenizer: PreTrainedTokenizerBase) -> int:
    """The most frequent non-special id in ``(vocab,)`` token counts: the MLM baseline's single prediction."""
    counts = counts.clone()
    counts[torch.tensor(tokenizer.all_special_ids)] = 0
    return int(counts.argmax())


@dataclass
class PreparedData:
    """A prepared folder, read: its metadata, the training rows (memory-mapped) and the held-out documents."""

    path: Path
    metadata: dict[str, Any]
    train: Dataset
    validation: Dataset

    @property
    def tokenizer_path(self) -> Path:
        return self.path / "tokenizer"


def prepare_data(
    train_files: Sequence[str | Path],
    tokenizer: PreTrainedTokenizerBase,
    output_dir: str | Path,
    *,
    max_seq_length: int,
    packing: bool = False,
    validation_file: str | Path | None = None,
    validation_split_percentage: float = 5.0,
    split_seed: int = 0,
    text_column: str = "text",
    num_proc: int | None = None,
    num_shards: int | None = None,
    max_train_samples: int | None = None,
) -> dict[str, Any]:
    """Tokenise (and pack) the documents of ``train_files`` into a prepared folder at ``output_dir``.

    Without ``validation_file``, ``validation_split_percentage`` of the documents are held out with
    ``split_seed`` (the job's seeded split: the same documents as in memory). Everything is written into a
    temporary folder beside ``output_dir`` and moved there at the end, so an interrupted or failed run leaves
    no half-written folder. ``output_dir`` must not exist, or be empty. ``max_train_samples`` keeps only the first
    training rows (as the pretraining job's ``--max_train_samples`` keeps them in memory).

    Returns:
        The metadata written to ``mlm_suite_data.json`` (with the throughput of this run).
    """
    started = time.time()
    output_dir = Path(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.partial-", dir=output_dir.parent))
    try:
        cache = str(work / "cache")
        documents = documents_dataset(train_files, text_column, num_proc, cache)
        if validation_file is not None:
            splits = DatasetDict(train=documents, validation=documents_dataset([validation_file], text_column, None, cache))
        else:
            splits = hold_out(documents, validation_split_percentage, split_seed)
        for name, split in splits.items():
            if len(split) == 0:
                raise ValueError(f"the {name} files hold no documents")
        rows = build_rows(splits["train"], tokenizer, max_seq_length, packing, num_proc)
        if max_train_samples is not None and len(rows) > max_train_samples:
            rows = rows.select(range(max_train_samples)).flatten_indices()
        counts = token_counts(rows, len(tokenizer))
        folder = work / "data"
        # (save_to_disk starts a pool of spawned processes for any num_proc, 1 included)
        rows.save_to_disk(str(folder / "train"), num_shards=num_shards, num_proc=num_proc if num_proc and num_proc > 1 else None)
        splits["validation"].flatten_indices().save_to_disk(str(folder / "validation"))
        tokenizer.save_pretrained(str(folder / "tokenizer"))
        seconds = time.time() - started
        tokens = int(counts.sum())
        metadata = {
            "format": FORMAT_VERSION,
            "tokenizer": {
                "name_or_path": tokenizer.name_or_path,
                "class": type(tokenizer).__name__,
                "size": len(tokenizer),
                "fingerprint": tokenizer_fingerprint(tokenizer),
            },
            "max_seq_length": max_seq_length,
            "packing": packing,
            "text_column": text_column,
            "train_files": [str(path) for path in train_files],
            "validation": str(validation_file) if validation_file else f"{validation_split_percentage:g} % held out (seed {split_seed})",
            "train_documents": len(splits["train"]),
            "validation_documents": len(splits["validation"]),
            "train_rows": len(rows),
            "train_tokens": tokens,
            "train_shards": len(list((folder / "train").glob("*.arrow"))),
            "baseline_token_id": most_frequent_token(counts, tokenizer),
            "num_proc": num_proc or 1,
            "seconds": round(seconds, 1),
            "tokens_per_second": round(tokens / seconds),
        }
        (folder / METADATA_FILE).write_text(json.dumps(metadata, indent=1) + "\n", encoding="utf-8")
        if output_dir.exists():
            output_dir.rmdir()  # empty (checked by the caller); a non-empty folder raises here and is kept
        os.replace(folder, output_dir)
        return metadata
    finally:
        shutil.rmtree(work, ignore_errors=True)


def load_prepared(path: str | Path) -> PreparedData:
    """Open a prepared folder (the training rows memory-mapped, nothing read into memory).

    Raises:
        ValueError: ``path`` is not a prepared folder, or one of another format version.
    """
    path = Path(path)
    metadata_file = path / METADATA_FILE
    if not metadata_file.is_file():
        raise ValueError(f"--prepared_data {path}: not a folder written by mlm-suite prepare-data (no {METADATA_FILE})")
    metadata = json.loads(metadata_file.read_text(encoding="utf-8"))
    if metadata.get("format") != FORMAT_VERSION:
        raise ValueError(
            f"--prepared_data {path} has format {metadata.get('format')!r}; this mlm-suite reads format "
            f"{FORMAT_VERSION}: prepare the data again"
        )
    return PreparedData(path, metadata, Dataset.load_from_disk(str(path / "train")), Dataset.load_from_disk(str(path / "validation")))


def check_tokenizer(prepared: PreparedData, tokenizer: PreTrainedTokenizerBase, source: str) -> None:
    """Raise a ValueError unless ``tokenizer`` (named ``source`` in the message) made ``prepared``'s rows."""
    recorded = prepared.metadata["tokenizer"]
    fingerprint = tokenizer_fingerprint(tokenizer)
    if fingerprint != recorded["fingerprint"]:
        raise ValueError(
            f"--prepared_data {prepared.path} was tokenised with {recorded['name_or_path']} ({recorded['size']} tokens, "
            f"fingerprint {recorded['fingerprint'][:12]}) but the tokenizer of {source} differs ({len(tokenizer)} tokens, "
            f"fingerprint {fingerprint[:12]}): prepare the data again with that tokenizer, or drop {source.split()[0]}"
        )
