"""Packing documents into full rows: layout, word ids, no lost tokens, per-document masking, cu_seqlens."""

from __future__ import annotations

import datasets
import pytest
import torch
from transformers import AutoTokenizer, DataCollatorForLanguageModeling

from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining import WORD_ID_SENTINEL
from mlm_suite.data.pretraining.packing import document_boundaries, pack_documents, packing_map_function, row_word_ids
from tests.helpers import NON_WORDPIECE_TOKENIZERS, check_whole_words_masked_together, train_byte_level_bpe

MAX_LENGTH = 128


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(downloads.minilm_dir())


@pytest.fixture(scope="module")
def review_texts() -> list[str]:
    return [text for _, text in downloads.pang_lee_reviews()[:150]]


@pytest.fixture(scope="module")
def review_encoding(tokenizer, review_texts):
    return tokenizer(review_texts, add_special_tokens=False, verbose=False)


@pytest.fixture(scope="module")
def review_tokens(review_encoding) -> list[list[int]]:
    return review_encoding["input_ids"]


@pytest.fixture(scope="module")
def review_word_ids(review_encoding, review_texts) -> list[list[int]]:
    return [review_encoding.word_ids(index) for index in range(len(review_texts))]


@pytest.fixture(scope="module")
def packed(tokenizer, review_tokens, review_word_ids):
    return pack_documents(review_tokens, review_word_ids, tokenizer, MAX_LENGTH, return_document_ids=True)


def test_small_example_matches_hand_layout(tokenizer):
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    documents = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14, 15, 16, 17, 18]]
    word_ids = [[0, 0, 1], [0, 1], [0, 1, 1, 2, 2, 2, 2, 3, 3]]
    packed = pack_documents(documents, word_ids, tokenizer, 8, True)
    # Row 1: [CLS] d0 [SEP] d1 [SEP]; d2 (9 tokens) needs two rows of at most 6 content tokens.
    assert packed["input_ids"] == [
        [cls, 5, 6, 7, sep, 8, 9, sep],
        [cls, 10, 11, 12, 13, 14, 15, sep],
        [cls, 16, 17, 18, sep],
    ]
    assert packed["position_ids"] == [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3, 4]]
    assert packed["special_tokens_mask"] == [[1, 0, 0, 0, 1, 0, 0, 1], [1, 0, 0, 0, 0, 0, 0, 1], [1, 0, 0, 0, 1]]
    assert packed["document_ids"] == [[0, 0, 0, 0, 0, 1, 1, 1], [2] * 8, [2] * 5]
    assert packed["attention_mask"] == [[1] * 8, [1] * 8, [1] * 5]
    # Words numbered along the row; d2's word 2 is cut by the row boundary: its last piece starts row 3's words.
    assert packed["word_ids"] == [[-1, 0, 0, 1, -1, 2, 3, -1], [-1, 0, 1, 1, 2, 2, 2, -1], [-1, 0, 1, 1, -1]]


def test_row_word_ids_hand_layout():
    # Each segment starts a new word, even where the tokenizer's ids of two segments coincide.
    assert row_word_ids([[3, 3, 4], [4, 5, 5]]) == [-1, 0, 0, 1, -1, 2, 3, 3, -1]
    assert row_word_ids([[7]]) == [-1, 0, -1]
    assert row_word_ids([]) == [-1]


def test_one_free_slot_starts_a_new_row_and_empty_documents_vanish(tokenizer):
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    packed = pack_documents([[5, 6, 7, 8, 9], [], [10]], [[0, 1, 2, 3, 4], [], [0]], tokenizer, 8)
    # After [CLS] 5..9 [SEP] one slot is left: too small for a token and its [SEP].
    assert packed["input_ids"] == [[cls, 5, 6, 7, 8, 9, sep], [cls, 10, sep]]
    assert packed["position_ids"] == [[0, 1, 2, 3, 4, 5, 6], [0, 1, 2]]


def test_no_content_token_lost_or_duplicated(packed, review_tokens):
    content = [
        token
        for row, special in zip(packed["input_ids"], packed["special_tokens_mask"])
        for token, is_special in zip(row, special)
        if not is_special
    ]
    assert content == [token for document in review_tokens for token in document]


def test_rows_fill_max_length(packed):
    lengths = [len(row) for row in packed["input_ids"]]
    assert max(lengths) <= MAX_LENGTH
    # Only the last row, or a row whose single free slot was unusable, may be shorter.
    assert all(length >= MAX_LENGTH - 1 for length in lengths[:-1])
    for key in ("position_ids", "attention_mask", "special_tokens_mask", "word_ids", "document_ids"):
        assert [len(row) for row in packed[key]] == lengths


def test_position_ids_restart_exactly_at_document_starts(packed, tokenizer):
    for row, positions, documents in zip(packed["input_ids"], packed["position_ids"], packed["document_ids"]):
        assert row[0] == tokenizer.cls_token_id and row[-1] == tokenizer.sep_token_id
        assert max(positions) <= MAX_LENGTH - 1
        starts = [i for i, position in enumerate(positions) if position == 0]
        document_starts = [0] + [i for i in range(1, len(row)) if documents[i] != documents[i - 1]]
        assert starts == document_starts
        # A document's [SEP] ends its segment, so every new segment follows a [SEP].
        assert all(row[i - 1] == tokenizer.sep_token_id for i in starts[1:])
        for i in range(1, len(row)):
            if i not in starts:
                assert positions[i] == positions[i - 1] + 1


def test_maskable_tokens_per_document_unchanged_by_packing(packed, tokenizer, review_texts):
    packed_maskable = [0] * len(review_texts)
    for documents, special in zip(packed["document_ids"], packed["special_tokens_mask"]):
        for document, is_special in zip(documents, special):
            packed_maskable[document] += 1 - is_special
    alone = tokenizer(review_texts, return_special_tokens_mask=True, verbose=False)["special_tokens_mask"]
    assert packed_maskable == [mask.count(0) for mask in alone]


def test_mlm_collator_masks_each_document_at_the_same_rate(packed, tokenizer):
    """A real collator that honours special_tokens_mask masks ~15 % of every document, never a special."""
    torch.manual_seed(0)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    features = [
        {"input_ids": row, "special_tokens_mask": special}
        for row, special in zip(packed["input_ids"], packed["special_tokens_mask"])
    ]
    per_document: dict[int, list[int]] = {}  # document -> [masked, maskable] over 4 draws
    for _ in range(4):
        batch = collator(features)
        chosen = batch["labels"] != -100
        for row, documents in enumerate(packed["document_ids"]):
            special = torch.tensor(packed["special_tokens_mask"][row], dtype=torch.bool)
            row_chosen = chosen[row, : len(documents)]
            assert not (row_chosen & special).any()
            for document, is_chosen, is_special in zip(documents, row_chosen.tolist(), special.tolist()):
                if not is_special:
                    counts = per_document.setdefault(document, [0, 0])
                    counts[0] += is_chosen
                    counts[1] += 1
    masked = sum(counts[0] for counts in per_document.values())
    total = sum(counts[1] for counts in per_document.values())
    assert abs(masked / total - 0.15) < 0.005
    # Every document (~900 tokens x 4 draws) stays within 5 sigma of 15 %.
    for chosen_count, count in per_document.values():
        sigma = (0.15 * 0.85 / count) ** 0.5
        assert abs(chosen_count / count - 0.15) < 5 * sigma


def test_document_boundaries_hand_computed():
    position_ids = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 0, 1, 0, 0]])
    # Row 0: segments of 5 and 3; row 1: 4, 2 then two padding tokens.
    attention_mask = torch.tensor([[1] * 8, [1, 1, 1, 1, 1, 1, 0, 0]])
    cu_seqlens = document_boundaries(position_ids, attention_mask)
    assert cu_seqlens.dtype == torch.int32
    assert cu_seqlens.tolist() == [0, 5, 8, 12, 14]
    # Without a mask the padding zeros are one-token segments of their own.
    assert document_boundaries(position_ids).tolist() == [0, 5, 8, 12, 14, 15, 16]
    # Left padding, and a row whose first real position is not 0 (a continuation) still starts a segment.
    left = document_boundaries(
        torch.tensor([[0, 0, 0, 1, 2], [3, 4, 0, 1, 2]]), torch.tensor([[0, 0, 1, 1, 1], [1] * 5])
    )
    assert left.tolist() == [0, 3, 5, 8]
    assert document_boundaries(torch.tensor([0, 1, 0, 1, 2])).tolist() == [0, 2, 5]


def test_document_boundaries_match_packed_segments(packed):
    width = max(len(row) for row in packed["position_ids"])
    position_ids = torch.zeros(len(packed["position_ids"]), width, dtype=torch.long)
    attention_mask = torch.zeros_like(position_ids)
    expected = [0]
    for row, (positions, documents) in enumerate(zip(packed["position_ids"], packed["document_ids"])):
        position_ids[row, : len(positions)] = torch.tensor(positions)
        attention_mask[row, : len(positions)] = 1
        run = 1
        for previous, current in zip(documents, documents[1:]):
            if current == previous:
                run += 1
            else:
                expected.append(expected[-1] + run)
                run = 1
        expected.append(expected[-1] + run)
    cu_seqlens = document_boundaries(position_ids, attention_mask)
    assert cu_seqlens.tolist() == expected
    assert cu_seqlens.diff().max().item() <= MAX_LENGTH


def test_map_function_with_datasets(tokenizer, review_texts, review_tokens, review_word_ids):
    dataset = datasets.Dataset.from_dict({"text": review_texts, "label": list(range(len(review_texts)))})
    function = packing_map_function(tokenizer, MAX_LENGTH, return_document_ids=True)
    whole = dataset.map(function, batched=True, batch_size=len(review_texts), remove_columns=dataset.column_names)
    reference = pack_documents(review_tokens, review_word_ids, tokenizer, MAX_LENGTH, return_document_ids=True)
    assert whole.column_names == list(reference)
    for column in reference:
        assert whole[column] == reference[column], column
    # Smaller batches: each batch ends with its own short row, but no content changes.
    batched = dataset.map(
        packing_map_function(tokenizer, MAX_LENGTH), batched=True, batch_size=40, remove_columns=["text", "label"]
    )
    assert len(batched) > len(whole)
    content = [
        token
        for row, special in zip(batched["input_ids"], batched["special_tokens_mask"])
        for token, is_special in zip(row, special)
        if not is_special
    ]
    assert content == [token for document in review_tokens for token in document]


@pytest.mark.parametrize("max_length", [2, 513])
def test_bad_max_length_names_both_values(tokenizer, max_length):
    with pytest.raises(ValueError, match=rf"max_length={max_length}.*model_max_length=512"):
        pack_documents([[5, 6]], [[0, 1]], tokenizer, max_length)
    with pytest.raises(ValueError, match=rf"max_length={max_length}"):
        packing_map_function(tokenizer, max_length)


def test_word_ids_must_match_the_documents(tokenizer):
    with pytest.raises(ValueError, match="one word id per token of every document"):
        pack_documents([[5, 6], [7]], [[0, 1], []], tokenizer, 8)
    with pytest.raises(ValueError, match="one word id per token of every document"):
        pack_documents([[5, 6], [7]], [[0, 1]], tokenizer, 8)


@NON_WORDPIECE_TOKENIZERS
def test_word_ids_of_any_fast_tokenizer_reach_whole_word_masking(train, review_texts):
    """Byte-level BPE and SentencePiece rows: the tokenizer's own word ids, numbered on along the row, and the
    whole-word collator masks every piece of a word together."""
    tokenizer = train(review_texts[:60])
    texts = [text[:150] for text in review_texts[:3]]  # short enough to share one row
    words = [tokenizer(text, add_special_tokens=False).word_ids() for text in texts]
    row = packing_map_function(tokenizer, 512)({"text": texts})["word_ids"]
    offsets = [0, max(words[0]) + 1, max(words[0]) + max(words[1]) + 2]
    expected = [WORD_ID_SENTINEL]
    for document_words, offset in zip(words, offsets):
        expected += [offset + word for word in document_words] + [WORD_ID_SENTINEL]
    assert row == [expected]

    packed = packing_map_function(tokenizer, 64, return_document_ids=True)({"text": review_texts[60:100]})
    features = [dict(zip(packed, values)) for values in zip(*packed.values())]
    check_whole_words_masked_together(tokenizer, features)


def test_a_document_continued_in_the_next_row_starts_a_new_word_at_the_cut(review_texts):
    tokenizer = train_byte_level_bpe(review_texts[:60])
    encoding = tokenizer(review_texts[100], add_special_tokens=False)
    packed = packing_map_function(tokenizer, 16)({"text": review_texts[100:101]})
    tokenizer_words = iter(encoding.word_ids())
    cut_inside_a_word = 0
    previous = None
    for row_words in packed["word_ids"]:
        content = row_words[1:-1]  # [CLS] piece [SEP]: one document, one segment per row
        assert content[0] == 0
        source = [next(tokenizer_words) for _ in content]
        # Within a row, two neighbours share a word exactly when the tokenizer says so.
        assert [a == b for a, b in zip(content, content[1:])] == [a == b for a, b in zip(source, source[1:])]
        cut_inside_a_word += source[0] == previous
        previous = source[-1]
    assert next(tokenizer_words, None) is None
    assert cut_inside_a_word > 0  # some row starts with the rest of a word cut at the end of the previous row


def test_shape_errors():
    with pytest.raises(ValueError, match="position_ids must be"):
        document_boundaries(torch.zeros(2, 3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_mask shape"):
        document_boundaries(torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 4))


def test_packed_row_gives_each_document_its_own_hidden_states(tokenizer):
    """A packed row through the padding-free encoder equals each document run on its own."""
    from mlm_suite import MlmSuiteConfig, MlmSuiteModel

    texts = ["the plot is thin .", "a warm , funny film with a great cast .", "dull ."]
    packed = packing_map_function(tokenizer, max_length=64, return_document_ids=True)({"text": texts})
    assert len(packed["input_ids"]) == 1, "the three documents should share one row"
    config = MlmSuiteConfig.preset("tiny", vocab_size=len(tokenizer), hidden_dropout_prob=0.0)
    torch.manual_seed(0)
    model = MlmSuiteModel(config, add_pooling_layer=False).eval()
    row = {key: torch.tensor(packed[key][0]) for key in ("input_ids", "position_ids", "document_ids")}
    with torch.no_grad():
        together = model(input_ids=row["input_ids"][None], position_ids=row["position_ids"][None]).last_hidden_state[0]
        for document in range(len(texts)):
            in_document = row["document_ids"] == document
            alone = model(
                input_ids=row["input_ids"][in_document][None],
                position_ids=row["position_ids"][in_document][None],
            ).last_hidden_state[0]
            torch.testing.assert_close(together[in_document], alone, atol=1e-5, rtol=1e-5)
