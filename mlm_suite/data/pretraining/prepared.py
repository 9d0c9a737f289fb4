"""Pre-tokenised pretraining data: ``mlm-suite prepare-data`` writes it, ``mlm-suite pretrain --prepared_data`` reads it.

A prepared folder::

    mlm_suite_data.json  what made it: the tokenizer (name, size, fingerprint), max_seq_length, packing, the
                         documents, rows and tokens written, the most frequent training token
    tokenizer/           that tokenizer (``save_pretrained``)
    train/               the training rows: Arrow shards (``datasets.Dataset.save_to_disk``), memory-mapped when read
    validation/          the held-out documents, as text (the job tokenises them as it does in-memory ones)

The rows are the ones the pretraining job builds in memory from the same documents, whatever ``num_proc``
(:func:`~mlm_suite.data.pretraining.rows.document_rows`); both kinds of row carry ``word_ids`` for whole-word and span
masking.

A tokenizer is identified by :func:`tokenizer_fingerprint`, a hash of everything in its ``tokenizer.json`` that
decides the ids (vocabulary, normaliser, pre-tokeniser, post-processor, added tokens), so a folder used with
another tokenizer is refused (:func:`check_tokenizer`) rather than trained on with the wrong ids.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import torch
from datasets import Dataset, DatasetDict
from transformers import PreTrainedTokenizerBase

from mlm_suite.data.pretraining.documents import documents_dataset, hold_out
from mlm_suite.data.pretraining.rows import document_rows, most_frequent_token
from mlm_suite.errors import PARTIAL_PREFIX, UsageError, staging_folder, writing

__all__ = [
    "METADATA_FILE",
    "PreparedData",
    "check_tokenizer",
    "load_prepared",
    "prepare_data",
    "tokenizer_fingerprint",
]

METADATA_FILE = "mlm_suite_data.json"
FORMAT_VERSION = 1
# Parts of tokenizer.json that change while tokenising (truncation, padding) or say nothing about the ids.
_VOLATILE_TOKENIZER_FIELDS = ("truncation", "padding", "version")


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """sha256 of the fast tokenizer's definition (``tokenizer.json`` without truncation and padding settings)."""
    definition = json.loads(tokenizer.backend_tokenizer.to_str())
    for name in _VOLATILE_TOKENIZER_FIELDS:
        definition.pop(name, None)
    return hashlib.sha256(json.dumps(definition, sort_keys=True).encode("utf-8")).hexdigest()


def token_counts(rows: Dataset, vocab_size: int) -> torch.Tensor:
    """``(vocab_size,)`` int64 counts of the ids in ``rows["input_ids"]``, read as Arrow in large batches."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for batch in rows.with_format("arrow").iter(batch_size=65536):
        ids = pc.list_flatten(batch["input_ids"]).to_numpy()
        counts += np.bincount(ids, minlength=vocab_size)
    return torch.from_numpy(counts)


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
    temporary folder inside ``output_dir`` (:data:`~mlm_suite.errors.PARTIAL_PREFIX`: the folder's parent may be
    read-only) and moved into place at the end, so an interrupted or failed run leaves no half-written data; a write that fails there (a full disk, a file-size limit) raises
    :class:`~mlm_suite.errors.WriteError` naming ``output_dir``. ``output_dir`` must not exist, or hold nothing but
    the job's lock. ``max_train_samples`` keeps only the first training rows (as the pretraining job's
    ``--max_train_samples`` keeps them in memory).

    Returns:
        The metadata written to ``mlm_suite_data.json`` (with the throughput of this run).
    """
    started = time.time()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)  # empty but for the job's lock (checked by the caller)
    with staging_folder(output_dir, PARTIAL_PREFIX) as work:
        cache = str(work / "cache")
        documents = documents_dataset(train_files, text_column, num_proc, cache)
        if validation_file is not None:
            splits = DatasetDict(train=documents, validation=documents_dataset([validation_file], text_column, None, cache))
        else:
            splits = hold_out(documents, validation_split_percentage, split_seed)
        for name, split in splits.items():
            if len(split) == 0:
                raise ValueError(f"the {name} files hold no documents")
        rows = document_rows(splits["train"], tokenizer, max_seq_length, packing, num_proc)
        if max_train_samples is not None and len(rows) > max_train_samples:
            rows = rows.select(range(max_train_samples)).flatten_indices()
        counts = token_counts(rows, len(tokenizer))
        with writing(output_dir):  # a full disk or a file-size limit names the folder (nothing of it is left)
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
            # Moved in part by part, the metadata last: a folder cut short without it is refused by load_prepared.
            for part in sorted(folder.iterdir(), key=lambda part: part.name == METADATA_FILE):
                os.replace(part, output_dir / part.name)
        return metadata


def load_prepared(path: str | Path) -> PreparedData:
    """Open a prepared folder (the training rows memory-mapped, nothing read into memory).

    Raises:
        UsageError: ``path`` is not a prepared folder, one of another format version, or a damaged one: unreadable
            metadata, a missing or truncated Arrow shard, fewer rows than its metadata records (naming the part and
            saying to prepare the data again).
    """
    path = Path(path)
    metadata_file = path / METADATA_FILE
    if not metadata_file.is_file():
        raise UsageError(f"--prepared_data {path}: not a folder written by mlm-suite prepare-data (no {METADATA_FILE})")
    try:
        metadata = json.loads(metadata_file.read_text(encoding="utf-8"))
    except ValueError as error:
        raise _damaged(metadata_file, error) from None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT_VERSION:
        found = metadata.get("format") if isinstance(metadata, dict) else None
        raise UsageError(
            f"--prepared_data {path} has format {found!r}; this mlm-suite reads format "
            f"{FORMAT_VERSION}: prepare the data again"
        )
    splits = {}
    for split, recorded in (("train", "train_rows"), ("validation", "validation_documents")):
        try:
            splits[split] = Dataset.load_from_disk(str(path / split))
        except (OSError, ValueError) as error:  # pyarrow's ArrowInvalid is a ValueError
            raise _damaged(path / split, error) from None
        if len(splits[split]) != metadata.get(recorded):
            raise _damaged(path / split, f"{len(splits[split]):,} rows where {METADATA_FILE} records {metadata.get(recorded)}")
    return PreparedData(path, metadata, splits["train"], splits["validation"])


def _damaged(part: Path, what: object) -> UsageError:
    return UsageError(f"--prepared_data {part} is damaged or incomplete ({what}): run mlm-suite prepare-data again")


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
