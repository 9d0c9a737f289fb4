"""The pretraining job's corpus sources (mlm_suite.data.pretraining.corpora)."""

from __future__ import annotations

import pytest
from datasets import Dataset, DatasetDict

from mlm_suite.data.pretraining.corpora import InMemoryCorpus
from mlm_suite.data.pretraining.rows import RowFormat
from mlm_suite.errors import UsageError


def in_memory(training_texts: list[str]) -> InMemoryCorpus:
    documents = DatasetDict(train=Dataset.from_dict({"text": training_texts}),
                            validation=Dataset.from_dict({"text": ["a"]}))
    return InMemoryCorpus(documents, "`x.txt`", RowFormat(max_seq_length=32), source="--train_file x.txt")


def test_documents_the_tokenizer_reads_as_empty_are_refused_naming_their_flag(tokenizer):
    invisible = ["\u200b\u200b", "\u200c \u200d\u2060", "\x07"]  # zero-width and control characters: BERT drops them
    with pytest.raises(UsageError, match="^--train_file x.txt: no word to train on after normalisation"):
        in_memory(invisible).check_tokenizer(tokenizer)
    in_memory(invisible * 20 + ["one word"]).check_tokenizer(tokenizer)  # a word anywhere is enough
