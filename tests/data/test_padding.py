"""The fast padding collators give exactly the batches of transformers' DataCollatorWithPadding and
DataCollatorForTokenClassification, on real tokenised data."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from transformers import (
    AutoTokenizer,
    BatchEncoding,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
)

from mlm_suite.data.inputs import downloads
from mlm_suite.data.padding import DataCollatorForPadding, DataCollatorForTokenLabels
from mlm_suite.data.flattening import flatten_batch
from mlm_suite.data.padding import real_positions

BATCH_SIZES = (1, 7, 32)


@pytest.fixture(scope="module", params=["right", "left"])
def side_tokenizer(request, minilm_dir):
    """The MiniLM tokenizer padding on each side (a fresh one: the session tokenizer is shared)."""
    return AutoTokenizer.from_pretrained(minilm_dir, padding_side=request.param)


@pytest.fixture(scope="module")
def sentences() -> list[tuple[int, str]]:
    return downloads.pang_lee_sentences()[:48] + downloads.pang_lee_sentences()[-48:]


@pytest.fixture(scope="module")
def tweets() -> list[tuple[list[str], list[str]]]:
    return downloads.read_wnut16()[:96]


def fast(collator):
    """``collator``, failing the test if it hands a batch to the transformers collator."""

    def no_fallback():
        pytest.fail("the batch went to the transformers collator")

    collator._transformers_collator = no_fallback
    return collator


def assert_same_batch(ours, theirs) -> None:
    """Same type, keys in the same order, and per key the same dtype, shape and values."""
    assert type(ours) is type(theirs)
    assert list(ours.keys()) == list(theirs.keys())
    for key, expected in theirs.items():
        got = ours[key]
        assert type(got) is type(expected), key
        assert got.dtype == expected.dtype, key
        assert got.shape == expected.shape, key
        if isinstance(expected, torch.Tensor):
            assert torch.equal(got, expected), key
        else:
            np.testing.assert_array_equal(got, expected, err_msg=key)


def batches(rows: list, sizes=BATCH_SIZES, seed: int = 0):
    """A few random batches of each size (a batch of one needs no padding at all)."""
    rng = random.Random(seed)
    for size in sizes:
        for _ in range(3):
            yield rng.sample(rows, size)


def sentence_rows(tokenizer, sentences, label: str = "int", pairs: bool = False, drop=()) -> list[dict]:
    texts = [text for _, text in sentences]
    if pairs:
        encoded = tokenizer(texts[::2], texts[1::2], truncation=True, max_length=96)
    else:
        encoded = tokenizer(texts, truncation=True, max_length=96)
    rows = [{key: encoded[key][i] for key in encoded if key not in drop} for i in range(len(encoded["input_ids"]))]
    for i, row in enumerate(rows):
        polarity = sentences[i][0]
        if label == "int":
            row["label"] = polarity
        elif label == "float":
            row["label"] = polarity * 0.75 + i / 1000  # regression
        elif label == "multi":
            row["labels"] = [float(polarity), float(1 - polarity), 0.5]  # multi-label targets
        elif label == "label_ids":
            row["label_ids"] = polarity
    return rows


def tweet_rows(tokenizer, tweets, label_name: str = "labels", drop=()) -> list[dict]:
    """WNUT16 tweets, tags on the first sub-token of each word and -100 elsewhere (as the NER job aligns them)."""
    tags = sorted({tag for _, sentence_tags in tweets for tag in sentence_tags})
    encoded = tokenizer([words for words, _ in tweets], is_split_into_words=True, truncation=True, max_length=64)
    rows = []
    for i, (_, sentence_tags) in enumerate(tweets):
        labels, previous = [], None
        for word in encoded.word_ids(i):
            labels.append(-100 if word is None or word == previous else tags.index(sentence_tags[word]))
            previous = word
        row = {key: encoded[key][i] for key in encoded if key not in drop}
        row[label_name] = labels
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------ sequence labels


@pytest.mark.parametrize("label", ["int", "float", "multi", "label_ids", "none"])
@pytest.mark.parametrize("multiple", [None, 8])
def test_sequence_batches_equal_data_collator_with_padding(side_tokenizer, sentences, label, multiple):
    rows = sentence_rows(side_tokenizer, sentences, label=label)
    ours = fast(DataCollatorForPadding(side_tokenizer, pad_to_multiple_of=multiple))
    theirs = DataCollatorWithPadding(side_tokenizer, pad_to_multiple_of=multiple)
    for batch in batches(rows):
        got = ours(batch)
        assert_same_batch(got, theirs(batch))
    assert isinstance(got, BatchEncoding)
    if label != "none":
        assert "labels" in got and "label" not in got and "label_ids" not in got
        assert got["labels"].dtype == (torch.int64 if label in ("int", "label_ids") else torch.float32)


@pytest.mark.parametrize("drop", [(), ("token_type_ids",), ("attention_mask",), ("token_type_ids", "attention_mask")])
def test_pairs_and_missing_inputs_equal_data_collator_with_padding(side_tokenizer, sentences, drop):
    rows = sentence_rows(side_tokenizer, sentences, pairs=True, drop=drop)
    assert any(1 in row.get("token_type_ids", [1]) for row in rows)
    ours, theirs = fast(DataCollatorForPadding(side_tokenizer)), DataCollatorWithPadding(side_tokenizer)
    for batch in batches(rows):
        got = ours(batch)
        assert_same_batch(got, theirs(batch))
    if "attention_mask" in drop:
        # Made when absent (the tokenizer's model inputs include it), after the given keys, before the labels.
        assert list(got.keys())[-2:] == ["attention_mask", "labels"]
    real = real_positions(np.array([len(row["input_ids"]) for row in batch]), got["input_ids"].shape[1],
                          side_tokenizer.padding_side)
    assert torch.equal(got["attention_mask"], torch.from_numpy(real.astype(np.int64)))


def test_special_tokens_mask_and_extra_columns(side_tokenizer, sentences):
    """special_tokens_mask is padded with 1; a per-example extra column is stacked as transformers stacks it."""
    texts = [text for _, text in sentences]
    encoded = side_tokenizer(texts, truncation=True, max_length=64, return_special_tokens_mask=True)
    rows = [{**{key: encoded[key][i] for key in encoded}, "idx": i, "label": i % 2} for i in range(len(texts))]
    ours = fast(DataCollatorForPadding(side_tokenizer, pad_to_multiple_of=16))
    theirs = DataCollatorWithPadding(side_tokenizer, pad_to_multiple_of=16)
    for batch in batches(rows):
        assert_same_batch(ours(batch), theirs(batch))


@pytest.mark.parametrize("format", ["numpy", "torch", None])
def test_dataset_rows_equal_data_collator_with_padding(tokenizer, sentences, format):
    """Rows as a datasets.Dataset gives them: Python lists, or numpy arrays / tensors once formatted."""
    from datasets import Dataset

    rows = sentence_rows(tokenizer, sentences, label="float")
    dataset = Dataset.from_list(rows).with_format(format)
    ours, theirs = fast(DataCollatorForPadding(tokenizer)), DataCollatorWithPadding(tokenizer)
    for indices in batches(list(range(len(rows))), sizes=(7, 32)):
        batch = [dataset[i] for i in indices]
        assert_same_batch(ours(batch), theirs(batch))


def test_int32_arrays_and_tensors_equal_data_collator_with_padding(tokenizer, sentences):
    rows = sentence_rows(tokenizer, sentences)
    ours, theirs = fast(DataCollatorForPadding(tokenizer)), DataCollatorWithPadding(tokenizer)
    for convert in (lambda row: np.asarray(row, dtype=np.int32), lambda row: torch.tensor(row, dtype=torch.int16)):
        converted = [{key: convert(value) if isinstance(value, list) else value for key, value in row.items()}
                     for row in rows]
        for batch in batches(converted, sizes=(5, 32)):
            assert_same_batch(ours(batch), theirs(batch))


# ------------------------------------------------------------------------------------------------ per-token labels


@pytest.mark.parametrize("label_name", ["labels", "label"])
@pytest.mark.parametrize("multiple", [None, 8])
@pytest.mark.parametrize("drop", [(), ("token_type_ids",)])
def test_token_batches_equal_data_collator_for_token_classification(side_tokenizer, tweets, label_name, multiple, drop):
    rows = tweet_rows(side_tokenizer, tweets, label_name=label_name, drop=drop)
    ours = fast(DataCollatorForTokenLabels(side_tokenizer, pad_to_multiple_of=multiple))
    theirs = DataCollatorForTokenClassification(side_tokenizer, pad_to_multiple_of=multiple)
    for batch in batches(rows):
        got = ours(batch)
        assert_same_batch(got, theirs(batch))
    assert list(got.keys())[-1] == label_name and got[label_name].dtype == torch.int64
    assert (got[label_name][got["attention_mask"] == 0] == -100).all()


@pytest.mark.parametrize("label", ["int", "multi"])
def test_flattening_collators_flatten_their_padded_batch(tokenizer, sentences, tweets, label):
    """``flatten=True``: the padded batch laid end to end, sequence labels kept per row, token labels per token."""
    rows = sentence_rows(tokenizer, sentences, label=label, pairs=True)[:5]
    flat = DataCollatorForPadding(tokenizer, flatten=True)(rows)
    expected = flatten_batch(DataCollatorForPadding(tokenizer)(rows), labels_per_row=True)
    assert flat.keys() == expected.keys() and flat["labels"].shape[0] == 5 and flat["cu_seq_lens_q"].shape == (6,)
    for key, value in expected.items():
        assert torch.equal(flat[key], value) if isinstance(value, torch.Tensor) else flat[key] == value, key
    rows = tweet_rows(tokenizer, tweets)[:5]
    flat = DataCollatorForTokenLabels(tokenizer, flatten=True)(rows)
    padded = DataCollatorForTokenLabels(tokenizer)(rows)
    real = padded["attention_mask"].bool()
    assert torch.equal(flat["labels"][0], padded["labels"][real]) and "masked_lm_positions" not in flat
    assert torch.equal(flat["input_ids"][0], padded["input_ids"][real]) and flat["max_length_q"] == real.sum(1).max()


def test_token_label_variants_equal_data_collator_for_token_classification(side_tokenizer, tweets):
    """Another label pad id, labels as arrays or tensors, labels shorter than the inputs, no labels at all."""
    rows = tweet_rows(side_tokenizer, tweets)
    variants = {
        "arrays": [{**row, "labels": np.asarray(row["labels"], dtype=np.int32)} for row in rows],
        "tensors": [{**row, "labels": torch.tensor(row["labels"])} for row in rows],
        "shorter": [{**row, "labels": row["labels"][: len(row["labels"]) // 2]} for row in rows],
        "none": [{key: value for key, value in row.items() if key != "labels"} for row in rows],
        "lists": rows,
    }
    for pad_id in (-100, 0):
        ours = fast(DataCollatorForTokenLabels(side_tokenizer, label_pad_token_id=pad_id))
        theirs = DataCollatorForTokenClassification(side_tokenizer, label_pad_token_id=pad_id)
        for name, variant in variants.items():
            for batch in batches(variant, sizes=(6, 32)):
                assert_same_batch(ours(batch), theirs(batch))


# ------------------------------------------------------------------------------------------------ fallbacks


def test_what_the_fast_path_does_not_handle_goes_to_transformers(tokenizer, sentences, tweets):
    rows = sentence_rows(tokenizer, sentences)
    token_rows = tweet_rows(tokenizer, tweets)
    batch, token_batch = rows[:9], token_rows[:9]
    cases = [
        (DataCollatorForPadding(tokenizer, padding="max_length", max_length=128),
         DataCollatorWithPadding(tokenizer, padding="max_length", max_length=128), batch),
        (DataCollatorForPadding(tokenizer, return_tensors="np"),
         DataCollatorWithPadding(tokenizer, return_tensors="np"), batch),
        (DataCollatorForTokenLabels(tokenizer, return_tensors="np"),
         DataCollatorForTokenClassification(tokenizer, return_tensors="np"), token_batch),
        (DataCollatorForTokenLabels(tokenizer, padding="max_length", max_length=80),
         DataCollatorForTokenClassification(tokenizer, padding="max_length", max_length=80), token_batch),
        # bool attention masks: transformers' dtype depends on whether the batch needs padding
        (DataCollatorForPadding(tokenizer), DataCollatorWithPadding(tokenizer),
         [{**row, "attention_mask": [True] * len(row["input_ids"])} for row in batch]),
    ]
    for ours, theirs, features in cases:
        assert_same_batch(ours(features), theirs(features))
    ours, theirs = DataCollatorForTokenLabels(tokenizer), DataCollatorForTokenClassification(tokenizer)
    assert_same_batch(ours(token_batch, return_tensors="np"), theirs(token_batch, return_tensors="np"))


def test_errors_match_transformers(minilm_dir, tokenizer, sentences):
    rows = sentence_rows(tokenizer, sentences)
    # a text column: neither can make a tensor of it
    with_text = [{**row, "text": text} for row, (_, text) in zip(rows, sentences)]
    for collator in (DataCollatorForPadding(tokenizer), DataCollatorWithPadding(tokenizer)):
        with pytest.raises(ValueError, match="Unable to create tensor"):
            collator(with_text[:4])
    no_pad = AutoTokenizer.from_pretrained(minilm_dir)
    no_pad.pad_token = None
    for collator in (DataCollatorForPadding(no_pad), DataCollatorWithPadding(no_pad)):
        with pytest.raises(ValueError, match="padding token"):
            collator(rows[:4])
    with pytest.raises(ValueError, match="one entry per input id"):
        DataCollatorForPadding(tokenizer)([{**rows[0], "token_type_ids": rows[0]["token_type_ids"][:-1]}, rows[1]])
    with pytest.raises(ValueError, match="pad_to_multiple_of"):
        DataCollatorForPadding(tokenizer, pad_to_multiple_of=0)


def test_padding_uses_the_tokenizer_at_call_time(minilm_dir, sentences):
    """The padding side and pad id are read at each call, as transformers reads them."""
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    rows = sentence_rows(tokenizer, sentences)[:12]
    ours, theirs = fast(DataCollatorForPadding(tokenizer)), DataCollatorWithPadding(tokenizer)
    right = ours(rows)
    tokenizer.padding_side = "left"
    left = ours(rows)
    assert_same_batch(left, theirs(rows))
    assert not torch.equal(left["input_ids"], right["input_ids"])
    assert (left["attention_mask"][:, -1] == 1).all()
