"""Next-sentence pairs from real movie reviews: labels, lengths, provenance, segments, word ids, datasets.map."""

from __future__ import annotations

import warnings

import datasets
import pytest
from transformers import AutoTokenizer

from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining import WORD_ID_SENTINEL
from mlm_suite.data.pretraining.nsp import build_nsp_examples, nsp_map_function, split_sentences
from tests.helpers import NON_WORDPIECE_TOKENIZERS, check_whole_words_masked_together

MAX_LENGTH = 128


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(downloads.minilm_dir())


@pytest.fixture(scope="module")
def documents() -> list[list[str]]:
    return [split_sentences(text) for _, text in downloads.pang_lee_reviews()[:600]]


@pytest.fixture(scope="module")
def pairs(documents, tokenizer):
    return build_nsp_examples(documents, tokenizer, max_length=MAX_LENGTH, seed=0, return_provenance=True)


def _sentence_tokens(tokenizer, documents, document: int, sentences: list[int]) -> list[int]:
    return [t for s in sentences for t in tokenizer(documents[document][s], add_special_tokens=False)["input_ids"]]


def _is_contiguous_slice(part: list[int], whole: list[int]) -> bool:
    return any(whole[start : start + len(part)] == part for start in range(len(whole) - len(part) + 1))


def test_split_sentences():
    assert split_sentences("it works . really ? yes !  no end") == ["it works .", "really ?", "yes !", "no end"]
    assert split_sentences("  ") == []


def test_labels_are_balanced(pairs):
    labels = pairs["next_sentence_label"]
    assert len(labels) > 4000
    assert set(labels) == {0, 1}
    assert abs(sum(labels) / len(labels) - 0.5) < 0.02


def test_lengths_and_segments(pairs, tokenizer):
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    lengths = [len(ids) for ids in pairs["input_ids"]]
    assert max(lengths) <= MAX_LENGTH
    # Chunks are filled up to the target, so most pairs are (nearly) full.
    assert sum(length >= MAX_LENGTH - 10 for length in lengths) > 0.8 * len(lengths)
    for ids, types, attention, special in zip(
        pairs["input_ids"], pairs["token_type_ids"], pairs["attention_mask"], pairs["special_tokens_mask"]
    ):
        seps = [i for i, token in enumerate(ids) if token == sep]
        assert ids[0] == cls and seps[-1] == len(ids) - 1 and len(seps) >= 2
        first_sep = seps[0]  # review text holds no literal [SEP], so the first one ends A
        assert first_sep >= 2 and len(ids) - first_sep >= 3  # A and B are both non-empty
        assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        assert special == [1] + [0] * (first_sep - 1) + [1] + [0] * (len(ids) - first_sep - 2) + [1]
        assert attention == [1] * len(ids)


def test_random_b_always_from_another_document(pairs, documents):
    for label, a_document, b_document in zip(pairs["next_sentence_label"], pairs["a_document"], pairs["b_document"]):
        assert (a_document != b_document) == (label == 1)
    random_sources = {b for label, b in zip(pairs["next_sentence_label"], pairs["b_document"]) if label == 1}
    assert len(random_sources) > 0.5 * len(documents)


def test_pairs_carry_the_text_of_their_sentences(pairs, documents, tokenizer):
    sep = tokenizer.sep_token_id
    checked = 0
    for index in range(0, len(pairs["input_ids"]), 17):
        ids = pairs["input_ids"][index]
        first_sep = ids.index(sep)
        a_tokens, b_tokens = ids[1:first_sep], ids[first_sep + 1 : -1]
        a_sentences, b_sentences = pairs["a_sentences"][index], pairs["b_sentences"][index]
        assert a_sentences == list(range(a_sentences[0], a_sentences[-1] + 1))
        assert b_sentences == list(range(b_sentences[0], b_sentences[-1] + 1))
        if pairs["next_sentence_label"][index] == 0:
            # A true pair: B's first sentence is the one right after A's last.
            assert b_sentences[0] == a_sentences[-1] + 1
        # Truncation only cuts the front or the back of each side.
        a_source = _sentence_tokens(tokenizer, documents, pairs["a_document"][index], a_sentences)
        b_source = _sentence_tokens(tokenizer, documents, pairs["b_document"][index], b_sentences)
        assert _is_contiguous_slice(a_tokens, a_source)
        assert _is_contiguous_slice(b_tokens, b_source)
        checked += 1
    assert checked > 200


def test_true_pairs_are_consecutive_text(pairs, documents, tokenizer):
    """Untruncated true pairs decode to the document's consecutive sentences."""
    sep = tokenizer.sep_token_id
    found = 0
    for index, label in enumerate(pairs["next_sentence_label"]):
        if label != 0 or len(pairs["input_ids"][index]) >= MAX_LENGTH - 1:
            continue
        sentences = documents[pairs["a_document"][index]]
        first, last = pairs["a_sentences"][index][0], pairs["b_sentences"][index][-1]
        expected = tokenizer(" ".join(sentences[first : last + 1]), add_special_tokens=False)["input_ids"]
        ids = pairs["input_ids"][index]
        assert [token for token in ids[1:-1] if token != sep] == expected
        found += 1
    assert found > 50


def test_short_sequences_and_extreme_probabilities(documents, tokenizer):
    subset = documents[:60]
    short = build_nsp_examples(subset, tokenizer, MAX_LENGTH, short_seq_probability=1.0, seed=1)
    full = build_nsp_examples(subset, tokenizer, MAX_LENGTH, seed=1)
    short_total, full_total = sum(map(len, short["input_ids"])), sum(map(len, full["input_ids"]))
    assert short_total / len(short["input_ids"]) < 0.8 * full_total / len(full["input_ids"])
    assert set(build_nsp_examples(subset, tokenizer, 64, nsp_probability=0.0)["next_sentence_label"]) == {0}
    assert set(build_nsp_examples(subset, tokenizer, 64, nsp_probability=1.0)["next_sentence_label"]) == {1}


def test_seed_determines_the_pairs(documents, tokenizer):
    subset = documents[:30]
    first = build_nsp_examples(subset, tokenizer, 64, seed=3)
    assert build_nsp_examples(subset, tokenizer, 64, seed=3) == first
    assert build_nsp_examples(subset, tokenizer, 64, seed=4)["input_ids"] != first["input_ids"]


def test_short_documents(tokenizer):
    documents = [["one . ", "two ."], ["only one sentence ."], ["three .", "", "four ."], ["  "]]
    with pytest.raises(ValueError, match=r"document 1 has 1, document 3 has 0"):
        build_nsp_examples(documents, tokenizer, 32)
    with pytest.warns(UserWarning, match="skipped 2 of 4"):
        pairs = build_nsp_examples(documents, tokenizer, 32, on_short_document="skip", return_provenance=True)
    assert set(pairs["a_document"]) | set(pairs["b_document"]) <= {0, 2}
    # Empty sentences are ignored but provenance keeps the input's sentence indices.
    assert [2] in pairs["b_sentences"] or [2] in pairs["a_sentences"]
    with warnings.catch_warnings():  # too few documents left: refused at once, with no warning about the skipped ones
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="at least 2 documents"):
            build_nsp_examples(documents[:2], tokenizer, 32, on_short_document="skip")


def test_argument_errors(tokenizer):
    documents = [["a .", "b ."], ["c .", "d ."]]
    with pytest.raises(ValueError, match=r"max_length=513 .*model_max_length=512"):
        build_nsp_examples(documents, tokenizer, 513)
    with pytest.raises(ValueError, match=r"max_length=7 must lie between 8"):
        build_nsp_examples(documents, tokenizer, 7)
    with pytest.raises(ValueError, match="at least 2 documents"):
        build_nsp_examples(documents[:1], tokenizer)
    with pytest.raises(ValueError, match="nsp_probability"):
        build_nsp_examples(documents, tokenizer, nsp_probability=1.5)
    with pytest.raises(ValueError, match="on_short_document"):
        build_nsp_examples(documents, tokenizer, on_short_document="ignore")
    with pytest.raises(ValueError, match="document 0 is a string"):
        build_nsp_examples(["a . b .", "c . d ."], tokenizer)


def _as_features(pairs: dict[str, list]) -> list[dict[str, list[int]]]:
    return [dict(zip(pairs, values)) for values in zip(*pairs.values())]


def test_word_ids_number_the_words_along_the_pair(pairs):
    """A's words from 0, then B's on from there, one step at a time; the sentinel exactly at [CLS] and the [SEP]s."""
    for words, special in zip(pairs["word_ids"], pairs["special_tokens_mask"]):
        assert [word == WORD_ID_SENTINEL for word in words] == [bool(flag) for flag in special]
        content = [word for word in words if word != WORD_ID_SENTINEL]
        assert content[0] == 0 and all(step in (0, 1) for step in (b - a for a, b in zip(content, content[1:])))
        first_sep = words.index(WORD_ID_SENTINEL, 1)
        assert words[first_sep + 1] == words[first_sep - 1] + 1  # B's first word is never one of A's


@NON_WORDPIECE_TOKENIZERS
def test_word_ids_of_any_fast_tokenizer_reach_whole_word_masking(train, documents):
    """Byte-level BPE and SentencePiece pairs: untruncated pairs carry the tokenizer's own word ids, sentence
    after sentence, and the whole-word collator masks every piece of a word together."""
    tokenizer = train([" ".join(document) for document in documents[:60]])
    pairs = build_nsp_examples(documents[:80], tokenizer, max_length=64, seed=0, return_provenance=True)
    untruncated = 0
    for index, words in enumerate(pairs["word_ids"]):
        expected, offset = [WORD_ID_SENTINEL], 0
        for side in ("a", "b"):
            for sentence in pairs[f"{side}_sentences"][index]:
                text = documents[pairs[f"{side}_document"][index]][sentence]
                tokenizer_words = tokenizer(text, add_special_tokens=False).word_ids()
                expected += [offset + word for word in tokenizer_words]
                offset += max(tokenizer_words) + 1
            expected.append(WORD_ID_SENTINEL)
        if len(expected) == len(words):  # nothing cut
            assert words == expected
            untruncated += 1
    assert untruncated > 20
    check_whole_words_masked_together(tokenizer, _as_features(pairs)[:64])


def test_map_function_with_datasets(documents, tokenizer):
    dataset = datasets.Dataset.from_dict({"sentences": documents[:100], "label": list(range(100))})
    function = nsp_map_function(tokenizer, MAX_LENGTH, seed=0, return_provenance=True)
    mapped = dataset.map(
        function, batched=True, batch_size=25, with_indices=True, remove_columns=dataset.column_names
    )
    columns = {"input_ids", "token_type_ids", "attention_mask", "word_ids", "next_sentence_label"}
    assert set(mapped.column_names) >= columns
    labels = mapped["next_sentence_label"]
    assert len(labels) > 700 and abs(sum(labels) / len(labels) - 0.5) < 0.05
    assert max(len(ids) for ids in mapped["input_ids"]) <= MAX_LENGTH
    for label, a_document, b_document in zip(labels, mapped["a_document"], mapped["b_document"]):
        assert (a_document != b_document) == (label == 1)
        # Negatives come from the same batch of 25 documents; ids are dataset row indices.
        assert a_document // 25 == b_document // 25
    again = dataset.map(
        function, batched=True, batch_size=25, with_indices=True, remove_columns=dataset.column_names
    )
    assert again["input_ids"] == mapped["input_ids"]


def test_map_function_without_indices_reuses_the_seed_per_batch(documents, tokenizer):
    dataset = datasets.Dataset.from_dict({"sentences": documents[:40]})
    function = nsp_map_function(tokenizer, 64, seed=5)
    mapped = dataset.map(function, batched=True, batch_size=20, remove_columns=["sentences"])
    expected = []
    for start in (0, 20):
        expected += build_nsp_examples(documents[start : start + 20], tokenizer, 64, seed=5)["input_ids"]
    assert mapped["input_ids"] == expected


def test_map_function_one_document_batch_is_a_clear_error(documents, tokenizer):
    dataset = datasets.Dataset.from_dict({"sentences": documents[:5]})
    function = nsp_map_function(tokenizer, MAX_LENGTH)
    with pytest.raises(ValueError, match="drop_last_batch=True"):
        dataset.map(function, batched=True, batch_size=4, remove_columns=["sentences"])
    kept = dataset.map(function, batched=True, batch_size=4, drop_last_batch=True, remove_columns=["sentences"])
    assert len(kept) > 0
