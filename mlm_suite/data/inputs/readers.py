"""Reading local and Hub data for the jobs: files → rows, Hub (or saved) datasets → splits, fixed-seed splits.

Every file format of the jobs' inputs is read here, so a format is read the same way everywhere (and every file is
opened by :func:`mlm_suite.data.inputs.text_files.open_text`: UTF-8, a BOM allowed, anything else refused in one line):

* rows of files: CoNLL column files (:func:`read_conll`), JSON lines (:func:`read_json_lines`, the one JSON-lines
  reader: pretraining documents and WSD instances are read with it too), CSV/TSV or JSON-lines records
  (:func:`read_numbered_records`, :func:`read_records`, :func:`column`), tagged sentences (:func:`read_ner_file`),
  labelled texts (:func:`read_examples`), retrieval pairs and corpora (:func:`read_training_pairs`,
  :func:`read_retrieval_split`);
* Hub datasets and ``DatasetDict`` folders saved with ``save_to_disk`` (:func:`load_hub_splits`), with any split
  as validation/test (:func:`hub_split_names`, :func:`split_description`);
* the splits of the text and sentence-pair jobs (:func:`load_labelled_text_splits`, :class:`TextSplit`);
* what the jobs read without data flags: :mod:`mlm_suite.data.inputs.builtin`;
* fixed-seed 80/10/10 splits (:func:`split_80_10_10`) and ``--max_*_samples`` (:func:`first_n`, of lists and
  ``datasets.Dataset`` rows alike).

Which labels a split has (and whether it has any) is :mod:`mlm_suite.data.finetuning.labels`' concern; pretraining
documents (blank-line-separated text or JSON lines, a Hub dataset, a stream) are read by
:mod:`mlm_suite.data.pretraining.documents`.
"""

from __future__ import annotations

import csv
import json
import random
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from mlm_suite.data.finetuning.labels import check_label, hidden_label_splits, hub_split_labels, split_is_labelled
from mlm_suite.data.finetuning.tagging import Locator, line_locator
from mlm_suite.data.inputs.text_files import open_text
from mlm_suite.errors import UsageError


SPLITS = ("train", "validation", "test")
Sentence = tuple[list[str], list[str]]  # tokens and their tags
# What separates the columns of a CoNLL line: whitespace other than the no-break spaces (U+00A0, U+2007, U+202F),
# which str.split also splits at but which belong to their token ("New York" with a no-break space is one token).
_CONLL_COLUMN_SEPARATOR = re.compile(r"[^\S\u00a0\u2007\u202f]+")


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------
def read_conll(
    path: str | Path, with_lines: bool = False
) -> list[tuple[list[str], list[str]]] | tuple[list[tuple[list[str], list[str]]], list[list[int]]]:
    """Sentences of a CoNLL column file as ``(tokens, tags)``.

    One token per line with the token in the first column and the tag in the last one (columns
    in between, e.g. POS and chunk tags, are ignored); a blank line ends a sentence. Columns are separated by
    whitespace other than a no-break space, which is part of its token. Lines starting with ``-DOCSTART-``
    (document separators) are skipped.

    With ``with_lines``, returns ``(sentences, lines)`` where ``lines[i][j]`` is the 1-based line
    number of token ``j`` of sentence ``i``, for error messages that point into the file
    (:func:`mlm_suite.data.finetuning.tagging.line_locator`).

    Raises:
        ValueError: a non-blank line with fewer than two columns, as ``"<path> line <n>: ..."``.
    """
    sentences: list[tuple[list[str], list[str]]] = []
    lines: list[list[int]] = []
    tokens: list[str] = []
    tags: list[str] = []
    numbers: list[int] = []
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                if tokens:
                    sentences.append((tokens, tags))
                    lines.append(numbers)
                    tokens, tags, numbers = [], [], []
                continue
            columns = [column for column in _CONLL_COLUMN_SEPARATOR.split(line) if column]
            if columns[0] == "-DOCSTART-":
                continue
            if len(columns) < 2:
                raise ValueError(
                    f"{path} line {line_number}: expected 'token ... tag' (at least two columns), got {line.strip()!r}"
                )
            tokens.append(columns[0])
            tags.append(columns[-1])
            numbers.append(line_number)
    if tokens:
        sentences.append((tokens, tags))
        lines.append(numbers)
    return (sentences, lines) if with_lines else sentences


def read_json_lines(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSON-lines file with their 1-based line numbers (blank lines skipped), read line by line:
    memory stays bounded by the longest line, whatever the size of the file.

    Raises:
        UsageError: a line that is not valid JSON, or a JSON value other than an object, naming the file and line.
    """
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise UsageError(f"{path} line {line_number}: not valid JSON ({error})") from None
            if not isinstance(record, dict):
                raise UsageError(f"{path} line {line_number}: expected a JSON object, got {type(record).__name__}")
            yield line_number, record


def read_numbered_records(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """Rows of a JSON-lines (``.json``/``.jsonl``) or CSV/TSV file as dictionaries, with the line each ends on.

    Raises:
        UsageError: a JSON line that is not an object, a CSV row with more or fewer fields than the header (an
            unquoted comma in a text), a file the csv module cannot parse; each naming the file and line.
    """
    path = Path(path)
    if path.suffix in (".json", ".jsonl"):
        return list(read_json_lines(path))
    if path.suffix in (".csv", ".tsv"):
        return _read_delimited(path, "\t" if path.suffix == ".tsv" else ",")
    raise UsageError(f"{path}: unsupported file type {path.suffix!r}; use .json/.jsonl (JSON lines), .csv or .tsv")


def _read_delimited(path: Path, delimiter: str) -> list[tuple[int, dict[str, Any]]]:
    """The rows of a CSV/TSV file under its header (blank lines skipped), as ``csv.DictReader`` reads them, except
    that a row whose fields do not match the header is an error rather than padded or kept under a ``None`` key."""
    records = []
    with open_text(path, newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        try:
            header = next(reader, [])
            for row in reader:
                if not row:
                    continue
                if len(row) != len(header):
                    quote = "quote the text cells that hold the delimiter" if len(row) > len(header) else "fill in every field"
                    raise UsageError(f"{path} line {reader.line_num}: {len(row)} fields but the header has "
                                     f"{len(header)} ({', '.join(header)}); {quote}")
                records.append((reader.line_num, dict(zip(header, row))))
        except csv.Error as error:
            raise UsageError(f"{path} line {reader.line_num}: not valid CSV ({error})") from None
    return records


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines (``.json``/``.jsonl``) or CSV/TSV file as dictionaries."""
    return [record for _, record in read_numbered_records(path)]


def column(records: Sequence[Mapping[str, Any]], name: str, source: str) -> list[Any]:
    """The values of column ``name``; a missing column raises naming the columns there are."""
    if records and name not in records[0]:
        raise ValueError(f"{source} has no column {name!r}; its columns are {sorted(records[0])}")
    for index, record in enumerate(records):
        if name not in record:
            raise ValueError(f"{source}, row {index}: no column {name!r}")
    return [record[name] for record in records]


class TaggedSentences(NamedTuple):
    """The tagged sentences of one file (or Hub split) as read, before any split, and how to name a place in it."""

    name: str
    sentences: list[Sentence]
    #: ``(sentence index, position) -> "train.conll line 57"``; None: ``"<name>: sentence i, position j"``.
    locate: Locator | None = None

    def where(self, index: int, position: int) -> str:
        if self.locate is not None:
            return self.locate(index, position)
        return f"{self.name}: sentence {index}, position {position}"


def read_ner_file(path: str, text_column: str, label_column: str) -> TaggedSentences:
    """A CoNLL column file, or JSON lines (``.json``/``.jsonl``) with token and tag lists.

    The :class:`TaggedSentences` know each token's line, so later errors name ``<path> line <n>``
    (for JSON lines, where a sentence is one line, also the 1-based token number).
    """
    if not path.endswith((".json", ".jsonl")):
        sentences, lines = read_conll(path, with_lines=True)
    else:
        sentences, lines = _tagged_json_lines(path, text_column, label_column)
    if not sentences:
        raise UsageError(f"{path}: no examples (no tagged sentences in the file)")
    return TaggedSentences(path, sentences, line_locator(path, lines))


def _tagged_json_lines(path: str, text_column: str, label_column: str) -> tuple[list[Sentence], list[list[int]]]:
    """The sentences of a JSON-lines file of token and tag lists, and each token's line."""
    sentences, lines = [], []
    for line, record in read_json_lines(path):
        for name in (text_column, label_column):
            if name not in record:
                raise ValueError(f"{path} line {line}: no {name!r} field (fields: {sorted(record)})")
        tokens, tags = list(record[text_column]), list(record[label_column])
        if len(tokens) != len(tags):
            raise ValueError(f"{path} line {line}: {len(tokens)} tokens but {len(tags)} tags")
        if not all(isinstance(tag, str) for tag in tags):
            raise ValueError(f"{path} line {line}: tags must be strings such as 'B-PER' or 'NN', got {tags}")
        sentences.append((tokens, tags))
        lines.append([line] * len(tokens))
    return sentences, lines


# --------------------------------------------------------------------------------------------
# Hub (or saved) datasets
# --------------------------------------------------------------------------------------------
def load_hub_splits(
    dataset_name: str,
    dataset_config_name: str | None,
    *,
    validation_split_name: str = "validation",
    test_split_name: str | None = "test",
    require_train: bool = False,
    **load_kwargs: Any,
) -> dict[str, Any]:
    """Train/validation/test splits of a Hub dataset (needs network access to the Hub), or of a
    ``DatasetDict`` saved on disk (``save_to_disk``; ``dataset_name`` is then its folder), keyed by role.

    The validation and test roles are played by the splits ``validation_split_name`` and ``test_split_name``
    (``--validation_split_name validation_matched`` for MNLI; ``test_split_name`` None: no test role), checked by
    :func:`hub_split_names`. ``load_kwargs`` go to ``load_dataset`` (``cache_dir``,
    ``token``). The splits stay ``datasets.Dataset`` objects (Arrow), as loaded.

    Raises:
        UsageError: a split name the dataset lacks (naming the splits it has); no train split with ``require_train``.
    """
    from datasets import load_dataset, load_from_disk

    if (Path(dataset_name).expanduser() / "dataset_dict.json").is_file():
        if dataset_config_name:
            raise UsageError(f"--dataset_config_name is for Hub datasets; {dataset_name} is a saved dataset folder")
        raw = load_from_disk(str(Path(dataset_name).expanduser()))
    else:
        raw = load_dataset(dataset_name, dataset_config_name, **load_kwargs)
    names = hub_split_names(raw, dataset_name, validation_split_name, test_split_name)
    if require_train and "train" not in names:
        raise UsageError(f"{dataset_name} has no train split (splits: {list(raw)})")
    return {role: raw[name] for role, name in names.items()}


def hub_split_names(
    available: Iterable[str], dataset_name: str, validation_split_name: str = "validation",
    test_split_name: str | None = "test",
) -> dict[str, str]:
    """``{role: split}`` for the roles ``train``, ``validation`` and ``test`` that ``available`` has.

    A role whose split is missing is left out when the split has its default name (a dataset without a test
    split); a name given with ``--validation_split_name``/``--test_split_name`` must exist.

    Raises:
        UsageError: a split name other than the default that the dataset lacks, naming the splits it has.
    """
    available = list(available)
    wanted = {"train": ("train", None), "validation": (validation_split_name, "validation")}
    if test_split_name is not None:
        wanted["test"] = (test_split_name, "test")
    found = {}
    for role, (name, default) in wanted.items():
        if name in available:
            found[role] = name
        elif default is not None and name != default:
            raise UsageError(f"--{role}_split_name {name}: {dataset_name} has no such split; its splits are {available}")
    return found


def split_description(splits: Mapping[str, str]) -> str:
    """`` (validation split `validation_matched`)`` for the roles read from splits of other names, else ``""``."""
    other = [f"{role} split `{name}`" for role, name in splits.items() if name != role]
    return f" ({', '.join(other)})" if other else ""


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------
def split_80_10_10(items: Sequence[Any], seed: int) -> tuple[list[Any], list[Any], list[Any]]:
    """Shuffle with ``random.Random(seed)`` and cut into 80 % train, 10 % validation, 10 % test."""
    shuffled = list(items)
    random.Random(seed).shuffle(shuffled)
    train_end = int(round(0.8 * len(shuffled)))
    validation_end = train_end + int(round(0.1 * len(shuffled)))
    return shuffled[:train_end], shuffled[train_end:validation_end], shuffled[validation_end:]


def first_n(items: Any, limit: int | None) -> Any:
    """At most the first ``limit`` items of a list or rows of a ``datasets.Dataset`` (all of them when ``limit`` is
    None), as ``run_mlm.py`` selects them: ``--max_*_samples``."""
    if limit is None or len(items) <= limit:
        return items
    return items.select(range(limit)) if hasattr(items, "select") else items[:limit]


# --------------------------------------------------------------------------------------------
# Texts with labels (the sequence-classification and sentence-pair jobs)
# --------------------------------------------------------------------------------------------
Example = dict[str, Any]  # text column(s) and "label" (None in a split without labels)


@dataclass
class TextSplit:
    """One split as it is tokenised: its text column(s) as a ``datasets.Dataset`` and one label per row.

    A Hub (or saved) dataset's split keeps its texts in Arrow, as loaded (:func:`load_labelled_text_splits`); files and
    the embedded data are lists of :data:`Example` first (:meth:`of`). A label is None on a row without one.
    """

    texts: Any  # a datasets.Dataset with exactly the text columns
    labels: list[Any]

    @classmethod
    def of(cls, examples: Sequence[Example], text_columns: Sequence[str]) -> TextSplit:
        from datasets import Dataset

        texts = Dataset.from_dict({name: [example[name] for example in examples] for name in text_columns})
        return cls(texts, [example["label"] for example in examples])

    def __len__(self) -> int:
        return len(self.labels)

    def head(self, limit: int | None) -> TextSplit:
        """The first ``limit`` rows (all when ``limit`` is None): ``--max_*_samples``."""
        if limit is None or limit >= len(self):
            return self
        return TextSplit(first_n(self.texts, limit), first_n(self.labels, limit))


def read_examples(
    path: str, text_columns: Sequence[str], label_column: str, role: str = "train", labels_optional: bool = False
) -> list[Example]:
    """Rows of a data file reduced to the text column(s) and ``label``.

    A label that is null or empty is None; a file must have labels on every row or on none (a file without
    any is to be predicted; with ``labels_optional``, for validation and test files, the label column may
    also be absent altogether).

    Raises:
        UsageError: a file without rows; labels on some rows only, naming the file (the ``role`` split), the count
            and the first line without one; a NaN or infinite label, naming the file, line and value.
    """
    numbered = read_numbered_records(path)
    if not numbered:
        raise UsageError(f"{path}: no examples (the {role} file has no rows)")
    lines = [line for line, _ in numbered]
    records = [record for _, record in numbered]
    columns = {name: column(records, name, path) for name in text_columns}
    if labels_optional and not any(label_column in record for record in records):
        labels: list[Any] = [None] * len(records)
    else:
        labels = column(records, label_column, path)
        source = f"{path} (the {role} split, column {label_column!r})"
        if split_is_labelled(labels, source, where=lambda row: f"line {lines[row]}"):
            for line, label in zip(lines, labels):
                check_label(label, f"{path} line {line} (column {label_column!r})")
        else:
            labels = [None] * len(records)
    return [
        {**{name: str(columns[name][row]) for name in text_columns}, "label": labels[row]}
        for row in range(len(records))
    ]


def load_labelled_text_splits(
    text_columns: Sequence[str],
    label_column: str,
    seed: int,
    embedded: Callable[[], tuple[dict, str]],
    *,
    files: Mapping[str, str | None],
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    validation_split_name: str = "validation",
    test_split_name: str = "test",
    load_kwargs: Mapping[str, Any] | None = None,
) -> tuple[dict[str, list[Example] | TextSplit], str]:
    """The splits as ``{split: examples}`` and a description, from a Hub dataset, files or ``embedded()``.

    ``files`` maps ``train``/``validation``/``test`` to a file or None; a lone training file is split 80/10/10
    with ``random.Random(seed)``; a validation or test file whose labels are all -1 is unlabelled as a Hub split is
    (:func:`~mlm_suite.data.finetuning.labels.hidden_label_splits`). A Hub (or saved) dataset's splits are :class:`TextSplit` objects whose texts stay
    in Arrow (only the labels are read into lists); its validation and test roles are the splits
    ``validation_split_name``/``test_split_name``, and ``load_kwargs`` go to ``load_dataset``.
    """
    if dataset_name:
        raw = load_hub_splits(dataset_name, dataset_config_name, validation_split_name=validation_split_name,
                              test_split_name=test_split_name, **(load_kwargs or {}))
        labels = hub_split_labels(raw, label_column, dataset_name)  # None: a split without labels
        splits = {}
        for split, dataset in raw.items():
            missing = [name for name in text_columns if name not in dataset.column_names]
            if missing:
                raise UsageError(f"{dataset_name} has no column {missing[0]!r}; its columns are {dataset.column_names}")
            splits[split] = TextSplit(dataset.select_columns(list(text_columns)),
                                      [None] * len(dataset) if labels[split] is None else labels[split])
        saved = (Path(dataset_name).expanduser() / "dataset_dict.json").is_file()
        names = {"train": "train", "validation": validation_split_name, "test": test_split_name}
        return splits, (f"{'dataset folder' if saved else 'Hub dataset'} `{dataset_name}`"
                        + split_description({role: names[role] for role in raw}))
    given = {role: files[role] for role in SPLITS if files.get(role)}
    if "train" in given:
        if len(given) == 1:
            examples = read_examples(given["train"], text_columns, label_column)
            return dict(zip(SPLITS, split_80_10_10(examples, seed))), f"`{given['train']}`, split 80/10/10 with a fixed seed"
        splits = {role: read_examples(path, text_columns, label_column, role, labels_optional=role != "train")
                  for role, path in given.items()}
        for role in hidden_label_splits({role: [example["label"] for example in examples]
                                         for role, examples in splits.items()}):
            splits[role] = [{**example, "label": None} for example in splits[role]]
        return splits, ", ".join(f"{role}: `{path}`" for role, path in given.items())
    if given:
        raise ValueError("--validation_file/--test_file need a --train_file")
    return embedded()


def load_intermediate(
    path: str | None, text_columns: Sequence[str], label_column: str
) -> tuple[list[Example], str] | None:
    """The intermediate-task training file (``--intermediate_train_file``) as examples and a description, or None."""
    if not path:
        return None
    examples = read_examples(path, text_columns, label_column, "intermediate training")
    if examples and examples[0]["label"] is None:
        raise UsageError(f"--intermediate_train_file {path} has no labels in column {label_column!r}")
    return examples, f"`{path}`"


# --------------------------------------------------------------------------------------------
# Retrieval: query/document pairs, corpora and their queries
# --------------------------------------------------------------------------------------------
@dataclass
class RetrievalSplit:
    """Queries, the corpus they search and, per query, the indices of its relevant documents in ``corpus``."""

    queries: list[str]
    corpus: list[str]
    relevant: list[set[int]]

    def limited(self, max_queries: int | None) -> "RetrievalSplit":
        return RetrievalSplit(first_n(self.queries, max_queries), self.corpus, first_n(self.relevant, max_queries))


Pair = dict[str, Any]  # "query", "document", "negatives" (a list of texts)


def _text(value: Any) -> str | None:
    """A non-empty text, or None for a missing or empty cell."""
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _texts(value: Any) -> list[str]:
    """One text or a list of texts (JSON) → the non-empty ones."""
    values = value if isinstance(value, list) else [value]
    return [text for text in map(_text, values) if text is not None]


def required_texts(row: dict[str, Any], columns: Sequence[str], path: str, line: int, why: str = "") -> list[str]:
    """The non-empty texts of ``columns`` in ``row``; a missing or empty one is an error naming the file and line."""
    texts = [_text(row.get(name)) for name in columns]
    for name, text in zip(columns, texts):
        if text is None:
            raise UsageError(f"{path} line {line}: no {name!r}{why}; the row has {sorted(row)}")
    return texts


def read_training_pairs(path: str, query_column: str, document_column: str, negative_column: str) -> list[Pair]:
    """Query/document pairs (with any hard negatives: a text, or in JSON a list of them); a row without a query or
    a document is an error naming its line."""
    pairs = []
    for line, row in read_numbered_records(path):
        query, document = required_texts(row, (query_column, document_column), path, line,
                                         " (a query needs a document)")
        pairs.append({"query": query, "document": document, "negatives": _texts(row.get(negative_column))})
    if not pairs:
        raise UsageError(f"{path}: no query/document pairs")
    return pairs


def read_retrieval_split(
    corpus_path: str, queries_path: str, *, id_column: str, text_column: str, query_column: str,
    document_id_column: str,
) -> RetrievalSplit:
    """A corpus (``id_column``: unique ids, ``text_column``: non-empty texts) and queries (``query_column``) whose
    relevant ids (``document_id_column``: one, or in JSON a list) it holds."""
    index: dict[str, tuple[int, int]] = {}  # document id -> (position in the corpus, line)
    corpus = []
    for line, row in read_numbered_records(corpus_path):
        document_id, text = required_texts(row, (id_column, text_column), corpus_path, line)
        if document_id in index:
            raise UsageError(f"{corpus_path} line {line}: duplicate document id {document_id!r} (first on line {index[document_id][1]})")
        index[document_id] = (len(corpus), line)
        corpus.append(text)
    if not corpus:
        raise UsageError(f"{corpus_path}: the corpus is empty")
    queries, relevant = [], []
    for line, row in read_numbered_records(queries_path):
        query, ids = _text(row.get(query_column)), _texts(row.get(document_id_column))
        if query is None or not ids:
            missing = query_column if query is None else document_id_column
            raise UsageError(f"{queries_path} line {line}: no {missing!r} (a query needs a relevant document id)")
        unknown = [document_id for document_id in ids if document_id not in index]
        if unknown:
            raise UsageError(f"{queries_path} line {line}: document id {unknown[0]!r} is not in {corpus_path}")
        queries.append(query)
        relevant.append({index[document_id][0] for document_id in ids})
    if not queries:
        raise UsageError(f"{queries_path}: no queries")
    return RetrievalSplit(queries, corpus, relevant)


__all__ = [
    "SPLITS",
    "Example",
    "Pair",
    "RetrievalSplit",
    "Sentence",
    "TaggedSentences",
    "TextSplit",
    "column",
    "first_n",
    "hub_split_names",
    "load_hub_splits",
    "load_intermediate",
    "load_labelled_text_splits",
    "read_conll",
    "read_examples",
    "read_json_lines",
    "read_ner_file",
    "read_numbered_records",
    "read_records",
    "read_retrieval_split",
    "read_training_pairs",
    "required_texts",
    "split_80_10_10",
    "split_description",
]
