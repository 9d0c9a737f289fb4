"""Pretraining documents, read in one place: from text and JSON-lines files (lazily: as a list, as Arrow, or as a
stream) and from Hub (or saved) datasets, for the pretraining job and ``mlm-suite prepare-data``.

One format everywhere (the pretraining job's): a plain-text file holds one document per block of lines,
blocks separated by blank (whitespace-only) lines; a ``.json``/``.jsonl`` file holds one JSON object per
line with the document in a string field (``text_column``), read by
:func:`~mlm_suite.data.inputs.readers.read_json_lines`. :func:`iter_documents` reads either format
line by line, so memory stays bounded by the longest document, whatever the size of the file.

* :func:`iter_documents`: the documents of one file; an error names the file and the line. :func:`read_documents`:
  all of them, in a list.
* :func:`document_stream`: the documents of several files as a ``datasets.IterableDataset`` with one
  shard per file; every document carries ``shard`` (its file) and ``document`` (its position in that file).
* :func:`hub_document_stream`: the same for a ``datasets.load_dataset`` name, read with ``streaming=True``
  (one shard per shard of that dataset).
* :func:`documents_dataset`: the documents of several files as an Arrow dataset (on disk, not in memory).
* :func:`hold_out`: the seeded held-out split of a dataset of documents.
* :class:`DocumentOrigin`: where the pretraining job's documents come from (its data flags), read whole by
  :func:`load_pretraining_documents` (a Hub split's texts by :func:`hub_documents`) or as a stream by
  :func:`stream_pretraining_documents`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict, Features, IterableDataset, Value, load_dataset
from datasets.exceptions import DatasetGenerationError

from mlm_suite.data.inputs.readers import hub_split_names, load_hub_splits, read_json_lines, split_description
from mlm_suite.data.inputs.text_files import open_text
from mlm_suite.errors import UsageError

__all__ = [
    "DOCUMENT_FEATURES",
    "HELD_OUT_SEED",
    "DocumentOrigin",
    "Texts",
    "document_stream",
    "documents_dataset",
    "hold_out",
    "hub_document_stream",
    "hub_documents",
    "is_json_lines",
    "iter_documents",
    "load_pretraining_documents",
    "read_documents",
    "stream_head",
    "stream_pretraining_documents",
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
    if is_json_lines(path):
        for number, record in read_json_lines(path):
            if not isinstance(record.get(text_column), str):
                raise ValueError(f"{path} line {number} has no string field {text_column!r}")
            if record[text_column].strip():
                yield record[text_column].strip()
        return
    with open_text(path) as lines:
        block: list[str] = []
        for line in lines:
            if line.strip():
                block.append(line)
            elif block:
                yield "".join(block).strip()
                block = []
        if block:
            yield "".join(block).strip()


def read_documents(path: str | Path, text_column: str = "text") -> list[str]:
    """Documents of a local file: JSON lines (``.json``/``.jsonl``) or blank-line-separated text blocks."""
    documents = list(iter_documents(path, text_column))
    if not documents:
        raise ValueError(f"{path} holds no text: nothing to train or evaluate on")
    return documents


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


# ------------------------------------------------------------------------------------------------
# The pretraining job's documents
# ------------------------------------------------------------------------------------------------
def hub_documents(
    dataset: Any, name: str, text_column: str = "text", num_proc: int | None = None, overwrite_cache: bool = False
) -> Any:
    """The non-blank texts of a Hub (or saved) split as a ``datasets.Dataset`` with one ``text`` column, in order.

    The split stays in Arrow: the text column is selected and filtered there (on ``num_proc`` processes), never
    copied into a Python list.
    """
    if text_column not in dataset.column_names:
        raise ValueError(f"{name} has no column {text_column!r} (columns: {dataset.column_names}); pass --text_column_name")
    texts = dataset.select_columns([text_column])
    if text_column != "text":
        texts = texts.rename_column(text_column, "text")
    return texts.filter(
        lambda batch: [bool(text and text.strip()) for text in batch["text"]], batched=True,
        num_proc=num_proc if num_proc and num_proc > 1 else None,
        load_from_cache_file=False if overwrite_cache else None, desc=f"dropping blank documents of {name}",
    )  # fmt: skip


@dataclass(frozen=True)
class Texts:
    """Documents already in memory, as a :class:`DocumentOrigin`'s ``embedded`` data: ``texts``, and ``description``,
    how the card names them (a language of a built-in multilingual corpus)."""

    texts: Sequence[str]
    description: str

    def read(self) -> list[str]:
        return list(self.texts)


@dataclass(frozen=True)
class DocumentOrigin:
    """Where pretraining documents come from: ``train_file`` (documents separated by blank lines, or JSON lines with
    ``text_column``), a Hub (or saved) dataset ``dataset_name``, or neither: ``embedded``, a built-in dataset of
    :mod:`mlm_suite.data.inputs.builtin` whose ``read()`` gives the texts; held-out documents from ``validation_file`` or
    the dataset's split ``validation_split_name``."""

    train_file: str | None = None
    validation_file: str | None = None
    dataset_name: str | None = None
    dataset_config_name: str | None = None
    validation_split_name: str = "validation"
    text_column: str = "text"
    embedded: Any = None

    def validation_documents(self) -> list[str] | None:
        return read_documents(self.validation_file, self.text_column) if self.validation_file else None

    def training_flag(self) -> str:
        """The training documents as the command line names them, for messages."""
        if self.dataset_name:
            return f"--dataset_name {self.dataset_name}"
        return f"--train_file {self.train_file}" if self.train_file else "the embedded default data"


def load_pretraining_documents(
    origin: DocumentOrigin,
    validation_split_percentage: float = 5.0,
    num_proc: int | None = None,
    overwrite_cache: bool = False,
    **load_kwargs: Any,
) -> tuple[Any, str, str | None]:
    """Pretraining documents in memory: ``train`` and ``validation`` splits (a ``DatasetDict``) with one ``text``
    column, a description of the data, and the dataset's split the held-out documents came from (None: a file, or
    held out of train).

    A Hub (or saved) dataset's splits stay in Arrow (:func:`hub_documents`, on ``num_proc`` processes). Without
    held-out documents, ``validation_split_percentage`` of the documents, drawn with ``HELD_OUT_SEED``.
    """
    name, column = origin.dataset_name, origin.text_column
    validation = origin.validation_documents()
    held_out_split = None
    if name:
        raw = load_hub_splits(name, origin.dataset_config_name, validation_split_name=origin.validation_split_name,
                              test_split_name=None, require_train=True, **load_kwargs)
        read = {"text_column": column, "num_proc": num_proc, "overwrite_cache": overwrite_cache}
        documents = hub_documents(raw["train"], f"{name}[train]", **read)
        split_names = {"train": "train"}
        if validation is None and "validation" in raw:
            validation = hub_documents(raw["validation"], f"{name}[{origin.validation_split_name}]", **read)
            split_names["validation"] = held_out_split = origin.validation_split_name
        config = f" ({origin.dataset_config_name})" if origin.dataset_config_name else ""
        description = f"`{name}`{config}{split_description(split_names)}"
    elif origin.train_file:
        documents = read_documents(origin.train_file, column)
        description = f"`{Path(origin.train_file).name}`"
    elif origin.embedded is not None:
        documents, description = origin.embedded.read(), origin.embedded.description
    else:
        raise ValueError("a DocumentOrigin needs train_file, dataset_name or embedded")
    if not len(documents):
        raise ValueError(f"{description} holds no training text")

    train = documents if isinstance(documents, Dataset) else Dataset.from_dict({"text": documents})
    if validation is not None:
        held_out = validation if isinstance(validation, Dataset) else Dataset.from_dict({"text": validation})
        return DatasetDict(train=train, validation=held_out), description, held_out_split
    return hold_out(train, validation_split_percentage, HELD_OUT_SEED), description, None


def stream_pretraining_documents(
    origin: DocumentOrigin, held_out_documents: int = 500, **load_kwargs: Any
) -> tuple[Any, list[str], str, str | None]:
    """Pretraining documents as a stream (a file or a dataset, never read whole): the training stream (a
    ``datasets.IterableDataset`` with ``shard`` and ``document`` positions), the held-out documents, a
    description of the data and the dataset's split the held-out documents came from (None: a file or the stream).

    Without a validation file or split, the first ``held_out_documents`` of the stream are held out (and skipped by
    training); from a dataset's validation split, its first ``held_out_documents``.
    """
    name, column = origin.dataset_name, origin.text_column
    validation = origin.validation_documents()
    held_out_split = None
    if origin.train_file:
        description = f"`{Path(origin.train_file).name}` (streamed)"

        def open_stream(held_out: int) -> Any:
            return document_stream([origin.train_file], column, held_out=held_out)
    else:
        splits = load_dataset(name, origin.dataset_config_name, streaming=True, **load_kwargs)
        names = hub_split_names(splits, name, origin.validation_split_name, test_split_name=None)
        if "train" not in names:
            raise UsageError(f"--dataset_name {name} has no train split (splits: {list(splits)})")
        config = f" ({origin.dataset_config_name})" if origin.dataset_config_name else ""
        description = f"`{name}{config}` (streamed)"
        if validation is None and "validation" in names:
            held_out_split = names["validation"]
            head = hub_document_stream(splits[held_out_split], column).take(held_out_documents)
            validation = [record["text"] for record in head]

        def open_stream(held_out: int) -> Any:
            return hub_document_stream(splits["train"], column, held_out=held_out)
    if validation is not None:
        return open_stream(0), validation, description, held_out_split
    validation = stream_head(open_stream(0), held_out_documents)
    if not validation:
        raise UsageError(f"{description} holds no documents")
    return open_stream(held_out_documents), validation, description, None
