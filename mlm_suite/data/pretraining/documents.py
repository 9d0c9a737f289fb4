"""Pretraining documents from text and JSON-lines files, read lazily: as a list, as Arrow, or as a stream.

One format everywhere (the pretraining job's): a plain-text file holds one document per block of lines,
blocks separated by blank (whitespace-only) lines; a ``.json``/``.jsonl`` file holds one JSON object per
line with the document in a string field (``text_column``). :func:`iter_documents` reads either format
line by line, so memory stays bounded by the longest document, whatever the size of the file.

* :func:`iter_documents`: the documents of one file; an error names the file and the line.
* :func:`document_stream`: the documents of several files as a ``datasets.IterableDataset`` with one
  shard per file; every document carries ``shard`` (its file) and ``document`` (its position in that file).
* :func:`hub_document_stream`: the same for a ``datasets.load_dataset`` name, read with ``streaming=True``
  (one shard per shard of that dataset).
* :func:`documents_dataset`: the documents of several files as an Arrow dataset (on disk, not in memory).
* :func:`hold_out`: the seeded held-out split of a dataset of documents.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from datasets import Dataset, DatasetDict, Features, IterableDataset, Value
from datasets.exceptions import DatasetGenerationError

from mlm_suite.data.inputs.text_files import open_text

__all__ = [
    "DOCUMENT_FEATURES",
    "HELD_OUT_SEED",
    "document_stream",
    "documents_dataset",
    "hold_out",
    "hub_document_stream",
    "is_json_lines",
    "iter_documents",
    "stream_head",
]

# The seed of the pretraining job's held-out split, shared by mlm-suite prepare-data: the same documents held out.
HELD_OUT_SEED = 0
# Columns of a document stream: the text and where it comes from (shard, position within the shard).
DOCUMENT_FEATURES = Features({"text": Value("string"), "shard": Value("int32"), "document": Value("int64")})


def is_json_lines(path: str | Path) -> bool:
    return Path(path).suffix.lower() in (".json", ".jsonl")


def iter_documents(path: str | Path, text_column: str = "text") -> Iterator[str]:
    """The non-empty documents of ``path`` (JSON lines, or blank-line-separated text blocks), stripped.

    Raises:
        ValueError: a JSON line that is not an object with a string ``text_column``, naming file and line.
    """
    path = Path(path)
    with open_text(path) as lines:
        if is_json_lines(path):
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path} line {number} is not JSON ({error.msg}); expected JSON lines") from None
                if not isinstance(record, dict) or not isinstance(record.get(text_column), str):
                    raise ValueError(f"{path} line {number} has no string field {text_column!r}")
                if record[text_column].strip():
                    yield record[text_column].strip()
            return
        block: list[str] = []
        for line in lines:
            if line.strip():
                block.append(line)
            elif block:
                yield "".join(block).strip()
                block = []
        if block:
            yield "".join(block).strip()


def _file_documents(path: Sequence[str], shard: Sequence[int], text_column: str, held_out: int) -> Iterator[dict]:
    """``datasets`` generator: the documents of some files; the first ``held_out`` of shard 0 are left out."""
    for file, shard_index in zip(path, shard):
        for position, text in enumerate(iter_documents(file, text_column)):
            if shard_index == 0 and position < held_out:
                continue
            yield {"text": text, "shard": shard_index, "document": position}


def document_stream(paths: Sequence[str | Path], text_column: str = "text", held_out: int = 0) -> IterableDataset:
    """The documents of ``paths`` as a stream, one shard per file, in file order.

    Args:
        held_out: the first ``held_out`` documents of the first file are left out of the stream (they are the
            held-out documents, :func:`stream_head`).
    """
    return IterableDataset.from_generator(
        _file_documents, features=DOCUMENT_FEATURES, gen_kwargs=_file_arguments(paths, text_column, held_out)
    )


def _file_arguments(paths: Sequence[str | Path], text_column: str, held_out: int) -> dict:
    """``gen_kwargs`` of :func:`_file_documents`: one shard per file (``datasets`` splits the lists)."""
    return {"path": [str(path) for path in paths], "shard": list(range(len(paths))), "text_column": text_column, "held_out": held_out}


def documents_dataset(
    paths: Sequence[str | Path], text_column: str = "text", num_proc: int | None = None, cache_dir: str | None = None
) -> Dataset:
    """The documents of ``paths`` as an Arrow dataset with one ``text`` column, in file order.

    Written to ``cache_dir`` as it is read (never held in memory whole), by up to ``num_proc`` processes,
    one file each.
    """
    workers = min(num_proc or 1, len(paths))
    try:
        dataset = Dataset.from_generator(
            _file_documents,
            features=DOCUMENT_FEATURES,
            gen_kwargs=_file_arguments(paths, text_column, held_out=0),
            num_proc=workers if workers > 1 else None,
            cache_dir=cache_dir,
        )
    except DatasetGenerationError:
        # The error a worker met arrives wrapped, its type lost across processes: a file the user must fix is found
        # again here, read in this process, and raised as it is.
        for path in paths:
            for _ in iter_documents(path, text_column):
                pass
        raise
    return dataset.remove_columns(["shard", "document"])


def _dataset_documents(shard: Sequence[int], dataset: IterableDataset, text_column: str, held_out: int) -> Iterator[dict]:
    """``datasets`` generator: the non-blank texts of some shards of a streamed dataset, with their positions."""
    for shard_index in shard:
        records = dataset.shard(num_shards=dataset.num_shards, index=shard_index)
        # ``iter`` rather than ``for record in records``: inside a dataloader worker, iterating a ``datasets``
        # IterableDataset splits its shards across the workers again; this one-shard dataset would then yield
        # nothing in every worker but worker 0, whose shards would silently never be read.
        texts = (text for batch in records.iter(batch_size=1000) for text in batch[text_column])
        for position, text in enumerate(texts):
            if (shard_index == 0 and position < held_out) or not (text and text.strip()):
                continue
            yield {"text": text.strip(), "shard": shard_index, "document": position}


def hub_document_stream(dataset: IterableDataset, text_column: str = "text", held_out: int = 0) -> IterableDataset:
    """A streamed ``datasets.load_dataset(..., streaming=True)`` split as a document stream with positions.

    Raises:
        ValueError: the dataset has no column ``text_column``.
    """
    if dataset.column_names is not None and text_column not in dataset.column_names:
        raise ValueError(f"the dataset has no column {text_column!r} (columns: {dataset.column_names}); pass --text_column_name")
    return IterableDataset.from_generator(
        _dataset_documents,
        features=DOCUMENT_FEATURES,
        gen_kwargs={
            "shard": list(range(dataset.num_shards)),
            "dataset": dataset,
            "text_column": text_column,
            "held_out": held_out,
        },
    )


def stream_head(stream: IterableDataset, held_out: int) -> list[str]:
    """The texts a stream built with ``held_out`` leaves out: documents ``0 .. held_out - 1`` of shard 0.

    ``stream`` is the same source built with ``held_out=0`` (not split across processes): its first shard comes first.
    """
    head = itertools.takewhile(lambda record: record["shard"] == 0 and record["document"] < held_out, stream)
    return [record["text"] for record in head]


def hold_out(documents: Dataset, percentage: float, seed: int = HELD_OUT_SEED) -> DatasetDict:
    """``train`` and ``validation`` splits: a seeded ``percentage`` of the documents (at least one) held out.

    Raises:
        ValueError: too few documents to leave any for training.
    """
    held_out = max(1, round(len(documents) * percentage / 100))
    if held_out >= len(documents):
        raise ValueError(
            f"{len(documents)} document(s) cannot be split into training and validation documents; "
            "add documents or pass --validation_file"
        )
    split = documents.train_test_split(test_size=held_out, seed=seed)
    return DatasetDict(train=split["train"], validation=split["test"])
