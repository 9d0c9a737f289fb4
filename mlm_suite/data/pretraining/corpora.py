"""The pretraining job's corpus, whichever form it takes: documents in memory, a prepared folder of rows, or a stream.

The three kinds of :class:`PretrainingCorpus` answer the same questions (held-out documents, training and held-out
rows, the baseline's token, whether a tokenizer fits, what the model card says about the data), so the job reads any
of them the same way. Every one turns documents into rows with :class:`~mlm_suite.data.pretraining.rows.RowFormat`.
See docs/data.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from datasets import Dataset, DatasetDict, IterableDataset
from transformers import PreTrainedTokenizerBase

from mlm_suite.data.pretraining.packing import content_tokens
from mlm_suite.data.pretraining.prepared import PreparedData, check_tokenizer
from mlm_suite.data.pretraining.rows import (
    EVAL_SEED, RowFormat, most_frequent_row_token, most_frequent_token, pretraining_rows_function,
)  # fmt: skip
from mlm_suite.data.pretraining.streaming import ProcessStream, stream_rows
from mlm_suite.errors import UsageError

__all__ = ["BASELINE_SAMPLE_DOCUMENTS", "InMemoryCorpus", "PreparedCorpus", "PretrainingCorpus", "StreamedCorpus"]

# A stream is never read whole: its most frequent token (the baseline's prediction) is counted on its start.
BASELINE_SAMPLE_DOCUMENTS = 1000


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

    def eval_rows(self, tokenizer: PreTrainedTokenizerBase) -> Dataset:
        """The held-out rows, with fixed NSP pairs (:data:`~mlm_suite.data.pretraining.rows.EVAL_SEED`)."""
        return self.row_format.rows(self.validation, tokenizer, EVAL_SEED, "validation")

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
        # A document the tokenizer reads as empty (only characters its normaliser drops, such as zero-width spaces)
        # becomes a row of special tokens alone: documents of nothing else would train on nothing, with a loss of 0.
        for batch in self.train.iter(batch_size=16):  # the first batch, as a rule
            if any(content_tokens(batch["text"], tokenizer)[0]):
                return
        raise UsageError(
            f"{self.source}: no word to train on after normalisation: the tokenizer reads every training document as "
            "empty (nothing but characters it drops, such as zero-width spaces or control characters)"
        )

    def train_rows(self, tokenizer: PreTrainedTokenizerBase, seed: int) -> Dataset:
        return self.row_format.rows(self.train, tokenizer, seed, "training")

    def baseline_token_id(self, tokenizer: PreTrainedTokenizerBase, train_rows: Dataset) -> int:
        return most_frequent_row_token(train_rows, tokenizer)

    def card(self, train_rows: Dataset, rows_read: int) -> dict[str, object]:
        return {"documents": len(self.train), "rows": len(train_rows)}


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
