"""The pretraining job's corpus, whichever form it takes: documents in memory, a prepared folder of rows, or a stream.

The kinds of :class:`PretrainingCorpus` answer the same questions (held-out documents, training and held-out rows,
the baseline's token, whether a tokenizer fits, what the model card says about the data), so the job reads any of
them the same way. Every one turns documents into rows with :class:`~mlm_suite.data.pretraining.rows.RowFormat`.
Documents of several languages (:class:`MultilingualCorpus`) also answer per language. See docs/data.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset, DatasetDict, IterableDataset, concatenate_datasets
from transformers import PreTrainedTokenizerBase

from mlm_suite.data.inputs.readers import first_n
from mlm_suite.data.pretraining.languages import LanguageMix, language_sampling_probs, mix_rows, sample_multilingual_corpus
from mlm_suite.data.pretraining.masking import count_tokens
from mlm_suite.data.pretraining.packing import content_tokens
from mlm_suite.data.pretraining.prepared import PreparedData, check_tokenizer
from mlm_suite.data.pretraining.rows import (
    EVAL_SEED, RowFormat, most_frequent_row_token, most_frequent_token, pretraining_rows_function,
)  # fmt: skip
from mlm_suite.data.pretraining.streaming import ProcessStream, split_for_processes, stream_rows
from mlm_suite.errors import UsageError

__all__ = [
    "BASELINE_SAMPLE_DOCUMENTS", "InMemoryCorpus", "MultilingualCorpus", "MultilingualStream", "PreparedCorpus",
    "PretrainingCorpus",
    "StreamedCorpus", "VOCABULARY_SAMPLE_SEED",
]  # fmt: skip

# A stream is never read whole: its most frequent token (the baseline's prediction) is counted on its start.
BASELINE_SAMPLE_DOCUMENTS = 1000
# The seed of the α-sampled documents a multilingual run's vocabulary is trained on: the vocabulary follows the data.
VOCABULARY_SAMPLE_SEED = 0


class PretrainingCorpus:
    """What the pretraining job reads from its data. Subclasses implement :meth:`train_rows`,
    :meth:`baseline_token_id` and :meth:`card`.

    Args:
        description: the data as the model card names it.
        validation: the held-out documents (a ``text`` column).
        row_format: how documents become rows.
        held_out_split: the dataset's split the held-out documents came from (None: a file, or held out of train).
    """

    def __init__(
        self, description: str, validation: Dataset, row_format: RowFormat, held_out_split: str | None = None
    ) -> None:
        self.description = description
        self.validation = validation
        self.row_format = row_format
        self.held_out_split = held_out_split

    def tokenizer_texts(self) -> list[str]:
        """The documents a new vocabulary is trained on (none: the source's tokenizer is fixed)."""
        return []

    def check_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> None:
        """Raise ValueError when the rows need another tokenizer (any fast one with mask and pad tokens will do), or
        when the training documents hold no word for it."""

    def train_rows(self, tokenizer: PreTrainedTokenizerBase, seed: int) -> Dataset | ProcessStream:
        raise NotImplementedError

    def eval_rows(self, tokenizer: PreTrainedTokenizerBase, max_rows: int | None = None) -> Dataset:
        """The held-out rows (at most the first ``max_rows``), with fixed NSP pairs
        (:data:`~mlm_suite.data.pretraining.rows.EVAL_SEED`)."""
        return first_n(self.row_format.rows(self.validation, tokenizer, EVAL_SEED, "validation"), max_rows)

    def baseline_token_id(self, tokenizer: PreTrainedTokenizerBase, train_rows: Dataset | ProcessStream) -> int:
        """The most frequent non-special training token: the baseline's single prediction."""
        raise NotImplementedError

    def rows_trained(self, train_rows: Dataset | ProcessStream, rows_read: int) -> int:
        """The training rows of the run (``rows_read``: optimizer steps × rows per step)."""
        return len(train_rows)

    def card(self, train_rows: Dataset | ProcessStream, rows_read: int) -> dict[str, object]:
        """The training documents and rows, for the model card."""
        raise NotImplementedError


class InMemoryCorpus(PretrainingCorpus):
    """Documents read into memory (or Arrow), tokenised before step 1.

    Args:
        documents: ``train`` and ``validation`` splits with a ``text`` column.
        source: the training documents as the command line names them (``--train_file corpus.txt``), for messages.
    """

    def __init__(
        self, documents: DatasetDict, description: str, row_format: RowFormat, held_out_split: str | None = None,
        source: str = "the training documents",
    ) -> None:  # fmt: skip
        super().__init__(description, documents["validation"], row_format, held_out_split)
        self.train = documents["train"]
        self.source = source

    def tokenizer_texts(self) -> list[str]:
        return self.train["text"]

    def check_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> None:
        _check_words(self.train, tokenizer, self.source)

    def train_rows(self, tokenizer: PreTrainedTokenizerBase, seed: int) -> Dataset:
        return self.row_format.rows(self.train, tokenizer, seed, "training")

    def baseline_token_id(self, tokenizer: PreTrainedTokenizerBase, train_rows: Dataset) -> int:
        return most_frequent_row_token(train_rows, tokenizer)

    def card(self, train_rows: Dataset, rows_read: int) -> dict[str, object]:
        return {"documents": len(self.train), "rows": len(train_rows)}


def _check_words(documents: Dataset, tokenizer: PreTrainedTokenizerBase, source: str) -> None:
    """Raise UsageError when ``tokenizer`` reads every document of ``documents`` as empty."""
    # A document the tokenizer reads as empty (only characters its normaliser drops, such as zero-width spaces)
    # becomes a row of special tokens alone: documents of nothing else would train on nothing, with a loss of 0.
    for batch in documents.iter(batch_size=16):  # the first batch, as a rule
        if any(content_tokens(batch["text"], tokenizer)[0]):
            return
    raise UsageError(
        f"{source}: no word to train on after normalisation: the tokenizer reads every training document as "
        "empty (nothing but characters it drops, such as zero-width spaces or control characters)"
    )


class MultilingualCorpus(PretrainingCorpus):
    """Documents of several languages in memory (docs/pretraining.md#several-languages), each language's held out on
    its own. The training rows are drawn across languages as the run's :class:`~mlm_suite.data.pretraining.languages.LanguageMix`
    says (:func:`~mlm_suite.data.pretraining.languages.mix_rows`), each tagged with its language (``language_id``); a new
    vocabulary is trained on documents drawn with the mix's last exponent; the held-out rows, the baseline's token and
    the card's figures are given per language too.

    Args:
        documents: language → its ``train`` and ``validation`` splits (a ``text`` column).
        mix: the languages (in ``documents``' order or any) and how they are drawn.
        sources: language → its documents as the command line names them (``--train_file de.txt``), for messages.
        rows_before, total_steps: a phased mix's rows of the optimizer steps before a step (every process together)
            and the run's steps: each phase draws the rows of its own steps.
    """

    def __init__(
        self, documents: Mapping[str, DatasetDict], mix: LanguageMix, description: str, row_format: RowFormat,
        sources: Mapping[str, str], rows_before: Callable[[int], int] | None = None, total_steps: int | None = None,
    ) -> None:  # fmt: skip
        validation = concatenate_datasets([documents[language]["validation"] for language in mix.languages])
        super().__init__(description, validation, row_format)
        self.documents, self.mix, self.sources = documents, mix, sources
        self.rows_before, self.total_steps = rows_before, total_steps
        self.language_rows: dict[str, Dataset] = {}  # each language's training rows, once made
        self.language_spans: dict[str, range] = {}  # each language's rows in the held-out rows, once made

    @property
    def languages(self) -> tuple[str, ...]:
        return self.mix.languages

    def tokenizer_texts(self) -> list[str]:
        """As many documents as the corpus has, drawn across languages with the mix's last exponent (every language
        takes part then): small languages repeated, so that they get pieces of their own."""
        corpora = {language: self.documents[language]["train"]["text"] for language in self.languages}
        count = sum(len(texts) for texts in corpora.values())
        return sample_multilingual_corpus(corpora, count, self.mix.final_alpha, seed=VOCABULARY_SAMPLE_SEED)[0]

    def check_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> None:
        for language in self.languages:
            _check_words(self.documents[language]["train"], tokenizer, self.sources[language])

    def train_rows(self, tokenizer: PreTrainedTokenizerBase, seed: int) -> Dataset:
        self.language_rows = {
            language: self.row_format.rows(self.documents[language]["train"], tokenizer, seed, f"training ({language})")
            for language in self.languages
        }  # fmt: skip
        return mix_rows(self.language_rows, self.mix, seed, self.total_steps, self.rows_before).rows

    def eval_rows(self, tokenizer: PreTrainedTokenizerBase, max_rows: int | None = None) -> Dataset:
        """Every language's held-out rows (at most ``max_rows`` each), one language after the other
        (:attr:`language_spans`), numbered anew so that no two rows share their fixed masks."""
        parts, start = [], 0
        for language in self.languages:
            rows = self.row_format.rows(self.documents[language]["validation"], tokenizer, EVAL_SEED,
                                        f"validation ({language})")
            parts.append(first_n(rows, max_rows))
            self.language_spans[language] = range(start, start + len(parts[-1]))
            start += len(parts[-1])
        rows = concatenate_datasets(parts)
        return rows.remove_columns("example_index").add_column("example_index", list(range(len(rows))))

    def language_eval_rows(self, eval_rows: Dataset) -> dict[str, Dataset]:
        """Each language's part of :meth:`eval_rows`' rows (their masks the same as in the whole)."""
        return {language: eval_rows.select(self.language_spans[language]) for language in self.languages}

    def baseline_token_id(self, tokenizer: PreTrainedTokenizerBase, train_rows: Dataset) -> int:
        return most_frequent_row_token(train_rows, tokenizer)

    def language_baseline_token_ids(self, tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
        """Each language's most frequent training token: its baseline's single prediction."""
        return {language: most_frequent_row_token(rows, tokenizer) for language, rows in self.language_rows.items()}

    def language_texts(self, language: str, count: int) -> list[str]:
        """The first ``count`` training documents of ``language``."""
        documents = self.documents[language]["train"]
        return documents.select(range(min(count, len(documents))))["text"]

    def language_sizes(self) -> dict[str, tuple[int | str, int | str]]:
        """Each language's training documents and rows, for the card."""
        return {language: (len(self.documents[language]["train"]), len(self.language_rows.get(language, ())))
                for language in self.languages}

    def card(self, train_rows: Dataset, rows_read: int) -> dict[str, object]:
        documents = sum(len(self.documents[language]["train"]) for language in self.languages)
        return {"documents": documents, "rows": len(train_rows)}


class MultilingualStream(MultilingualCorpus):
    """Documents of several languages read as streams (``--streaming``): every process reads its own part of each
    language's stream (:func:`~mlm_suite.data.pretraining.streaming.split_for_processes`), tokenised on the fly, and
    the rows are drawn across languages by ``datasets``' ``interleave_datasets`` on the streams, with the probabilities
    of the mix's exponent over each language's size in bytes (a stream's rows are not counted ahead), every language's
    stream read again once it ends. The mix is constant over the run; held-out documents are each language's first.

    Args:
        streams: language → its whole training stream (held-out documents skipped).
        validation: language → its held-out documents.
        sizes: language → the size of its data (bytes of its file).
        process_index, world_size: this process and the processes of the run.
    """

    def __init__(
        self, streams: Mapping[str, IterableDataset], validation: Mapping[str, list[str]], sizes: Mapping[str, int],
        mix: LanguageMix, description: str, row_format: RowFormat, sources: Mapping[str, str], process_index: int = 0,
        world_size: int = 1,
    ) -> None:  # fmt: skip
        documents = {language: DatasetDict(validation=Dataset.from_dict({"text": list(validation[language])}))
                     for language in mix.languages}
        super().__init__(documents, mix, description, row_format, sources)
        self.streams, self.sizes = streams, sizes
        self.process_index, self.world_size = process_index, world_size

    def check_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> None:
        """A stream is not read ahead: its documents are tokenised as they come."""

    def train_rows(self, tokenizer: PreTrainedTokenizerBase, seed: int) -> ProcessStream:
        from datasets import interleave_datasets

        rows_function = pretraining_rows_function(tokenizer, self.row_format.max_seq_length, self.row_format.packing)
        parts = []
        for index, language in enumerate(self.languages):
            # Shards numbered apart per language: a streamed row's masks are keyed by its shard, document and rank.
            documents = self.streams[language].map(_language_shards, batched=True, fn_kwargs={"offset": index << 20})
            part = split_for_processes(documents, self.process_index, self.world_size)
            parts.append(stream_rows(part, rows_function).map(_tag_language, batched=True, fn_kwargs={"language_id": index}))
        if len(parts) == 1:
            return ProcessStream(parts[0])
        q = language_sampling_probs({language: self.sizes[language] for language in self.languages}, self.mix.final_alpha)
        mixed = interleave_datasets(parts, probabilities=[q[language] for language in self.languages], seed=seed,
                                    stopping_strategy="all_exhausted")
        return ProcessStream(mixed)

    def _first_rows(self, language: str, tokenizer: PreTrainedTokenizerBase) -> dict[str, list]:
        documents = [record["text"] for record in self.streams[language].take(BASELINE_SAMPLE_DOCUMENTS)]
        rows_function = pretraining_rows_function(tokenizer, self.row_format.max_seq_length, self.row_format.packing)
        return rows_function({"text": documents})

    def baseline_token_id(self, tokenizer: PreTrainedTokenizerBase, train_rows: ProcessStream) -> int:
        """The most frequent token of the first documents of every language's stream (the same on every process)."""
        counts = sum(count_tokens(self._first_rows(language, tokenizer)["input_ids"], len(tokenizer))
                     for language in self.languages)
        return most_frequent_token(counts, tokenizer)

    def language_baseline_token_ids(self, tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
        return {language: most_frequent_token(count_tokens(self._first_rows(language, tokenizer)["input_ids"], len(tokenizer)),
                                              tokenizer) for language in self.languages}

    def language_texts(self, language: str, count: int) -> list[str]:
        return [record["text"] for record in self.streams[language].take(count)]

    def language_sizes(self) -> dict[str, tuple[int | str, int | str]]:
        return {language: ("streamed", "streamed") for language in self.languages}

    def rows_trained(self, train_rows: ProcessStream, rows_read: int) -> int:
        return rows_read  # a stream has no length; every batch is full

    def card(self, train_rows: ProcessStream, rows_read: int) -> dict[str, object]:
        return {"documents": "streamed", "rows": f"{rows_read:,} read (streamed)"}


def _language_shards(batch: Mapping[str, list], offset: int) -> dict[str, list]:
    return {"shard": [shard + offset for shard in batch["shard"]]}


def _tag_language(batch: Mapping[str, list], language_id: int) -> dict[str, list]:
    return {"language_id": [language_id] * len(batch["input_ids"])}


class PreparedCorpus(PretrainingCorpus):
    """The training rows of a folder written by ``mlm-suite prepare-data`` (memory-mapped); the Trainer's sampler
    shuffles and splits them across processes, and a resumed run skips the rows already trained on.

    Args:
        prepared: the folder, opened (:func:`~mlm_suite.data.pretraining.prepared.load_prepared`).
        validation: held-out documents replacing the folder's own (None: the folder's).
        tokenizer_source: the flag that names the tokenizer, for the message when it is not the folder's.
    """

    def __init__(
        self, prepared: PreparedData, row_format: RowFormat, tokenizer_source: str, validation: Dataset | None = None
    ) -> None:
        metadata = prepared.metadata
        files = ", ".join(Path(f).name for f in metadata["train_files"])
        description = f"`{prepared.path.name}` (prepared from {files})"
        super().__init__(description, prepared.validation if validation is None else validation, row_format)
        self.prepared = prepared
        self.tokenizer_source = tokenizer_source

    def check_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> None:
        check_tokenizer(self.prepared, tokenizer, self.tokenizer_source)  # the rows are ids of one tokenizer

    def train_rows(self, tokenizer: PreTrainedTokenizerBase, seed: int) -> Dataset:
        return self.prepared.train

    def baseline_token_id(self, tokenizer: PreTrainedTokenizerBase, train_rows: Dataset) -> int:
        return self.prepared.metadata["baseline_token_id"]

    def card(self, train_rows: Dataset, rows_read: int) -> dict[str, object]:
        return {"documents": self.prepared.metadata["train_documents"], "rows": self.prepared.metadata["train_rows"]}


class StreamedCorpus(PretrainingCorpus):
    """Documents read as a ``datasets`` stream and tokenised on the fly; every process reads its own part
    (:mod:`mlm_suite.data.pretraining.streaming`) and the run ends at ``--max_steps``.

    Args:
        documents: the whole training stream (held-out documents skipped).
        part: this process's part of it (:func:`~mlm_suite.data.pretraining.streaming.split_for_processes`).
        validation: the held-out documents.
    """

    def __init__(
        self, documents: IterableDataset, part: IterableDataset, validation: list[str], description: str,
        row_format: RowFormat, held_out_split: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(description, Dataset.from_dict({"text": validation}), row_format, held_out_split)
        self.documents, self.part = documents, part

    def _rows_function(self, tokenizer: PreTrainedTokenizerBase):
        return pretraining_rows_function(tokenizer, self.row_format.max_seq_length, self.row_format.packing)

    def train_rows(self, tokenizer: PreTrainedTokenizerBase, seed: int) -> ProcessStream:
        return ProcessStream(stream_rows(self.part, self._rows_function(tokenizer)))

    def baseline_token_id(self, tokenizer: PreTrainedTokenizerBase, train_rows: ProcessStream) -> int:
        """The most frequent token of the stream's first documents (the same on every process)."""
        documents = [record["text"] for record in self.documents.take(BASELINE_SAMPLE_DOCUMENTS)]
        rows = self._rows_function(tokenizer)({"text": documents})
        ids = np.concatenate([np.asarray(row, dtype=np.int64) for row in rows["input_ids"]])
        return most_frequent_token(torch.from_numpy(np.bincount(ids, minlength=len(tokenizer))), tokenizer)

    def rows_trained(self, train_rows: ProcessStream, rows_read: int) -> int:
        return rows_read  # a stream has no length; every batch is full

    def card(self, train_rows: ProcessStream, rows_read: int) -> dict[str, object]:
        return {"documents": "streamed", "rows": f"{rows_read:,} read (streamed)"}
