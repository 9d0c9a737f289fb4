"""``mlm_suite.data.words``: the one word splitter, with BERT's split and the split that keeps compound words."""

from __future__ import annotations

import inspect

from mlm_suite.data.finetuning.alignment import predict_entities
from mlm_suite.data.words import BERT_WORD_PATTERN, COMPOUND_WORD_PATTERN, split_words

TEXT = "Don't stop,  believing in New-York’s trains!"


def test_split_words_offsets():
    split = split_words("Don't stop,  believing!")
    assert [word for word, _, _ in split] == ["Don", "'", "t", "stop", ",", "believing", "!"]
    assert all("Don't stop,  believing!"[start:end] == word for word, start, end in split)


def test_the_bert_split_is_the_default_and_cuts_at_every_punctuation_mark():
    assert split_words(TEXT) == split_words(TEXT, BERT_WORD_PATTERN)
    assert [word for word, _, _ in split_words(TEXT)] == [
        "Don", "'", "t", "stop", ",", "believing", "in", "New", "-", "York", "’", "s", "trains", "!",
    ]  # fmt: skip


def test_compound_words_keep_their_inner_apostrophes_and_hyphens():
    split = split_words(TEXT, COMPOUND_WORD_PATTERN)
    assert [word for word, _, _ in split] == ["Don't", "stop", ",", "believing", "in", "New-York’s", "trains", "!"]
    assert all(TEXT[start:end] == word for word, start, end in split)
    assert inspect.signature(predict_entities).parameters["word_pattern"].default == COMPOUND_WORD_PATTERN
