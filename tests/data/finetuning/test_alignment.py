"""Tests for word/sub-token alignment on real WNUT-16 tweets with the real MiniLM WordPiece
tokenizer and two tokenizers trained here (byte-level BPE, SentencePiece-style Metaspace BPE),
windowing of long documents, and entity prediction on raw text with tiny BERT models."""

import warnings

import datasets
import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

from mlm_suite.data.inputs import downloads
from mlm_suite.data.finetuning.alignment import (
    ALIGN_STRATEGIES,
    AlignmentStats,
    SentenceWindows,
    align_labels,
    b_to_i_map,
    document_word_predictions,
    predict_entities,
    tokenize_and_align,
    word_predictions,
)
from mlm_suite.data.finetuning.tagging import entity_spans

# Prediction strategies that read back exactly what each alignment strategy wrote.
ROUND_TRIPS = [("first", "first"), ("all", "first"), ("all", "mean"), ("all", "max"), ("all_b_to_i", "first")]


@pytest.fixture(scope="module")
def wnut():
    return downloads.read_wnut16()


@pytest.fixture(scope="module")
def label2id(wnut):
    return {label: i for i, label in enumerate(sorted({tag for _, tags in wnut for tag in tags}))}


@pytest.fixture(scope="module")
def wordpiece():
    return transformers.AutoTokenizer.from_pretrained(downloads.minilm_dir())


def train_tokenizer(wnut, pre_tokenizer, special):
    """A small BPE vocabulary (many words split into several pieces) with [CLS]-like specials."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizer
    alphabet = pre_tokenizers.ByteLevel.alphabet() if isinstance(pre_tokenizer, pre_tokenizers.ByteLevel) else []
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<pad>", "<unk>", *special], initial_alphabet=alphabet, show_progress=False
    )
    tokenizer.train_from_iterator((" ".join(words) for words, _ in wnut), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{special[0]} $A {special[1]}", special_tokens=[(special[0], 2), (special[1], 3)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>", cls_token=special[0], sep_token=special[1]
    )


@pytest.fixture(scope="module")
def tokenizers(wnut, wordpiece):
    return {
        "wordpiece": wordpiece,
        "byte_bpe": train_tokenizer(wnut, pre_tokenizers.ByteLevel(add_prefix_space=True), ["<s>", "</s>"]),
        "metaspace": train_tokenizer(wnut, pre_tokenizers.Metaspace(), ["<cls>", "<sep>"]),
    }


def one_hot_logits(labels, num_labels, rng):
    """Logits whose argmax is each aligned label; ignored positions get random scores."""
    logits = rng.normal(size=(len(labels), num_labels))
    for position, label in enumerate(labels):
        if label != -100:
            logits[position, label] = 10.0
    return logits


def predictions_by_example(encoded, num_labels, strategy, rng, fallback_label=None):
    windows = {}
    for row, example in enumerate(encoded["example_id"]):
        windows.setdefault(example, []).append(row)
    return {
        example: document_word_predictions(
            [one_hot_logits(encoded["labels"][row], num_labels, rng) for row in rows],
            [encoded["word_ids"][row] for row in rows],
            strategy,
            num_words=encoded["num_words"][rows[0]],
            fallback_label=fallback_label,
        )
        for example, rows in windows.items()
    }


@pytest.fixture(scope="module")
def round_trips(wnut, label2id, tokenizers):
    """For each tokenizer and ROUND_TRIPS pair: the encoded tweets, their stats and word predictions.

    Half of WNUT-16 (1,197 tweets) keeps the run short; every alignment is encoded once.
    """
    tweets = wnut[::2]
    batch = {"tokens": [words for words, _ in tweets], "ner_tags": [tags for _, tags in tweets]}
    rng = np.random.default_rng(0)
    results = {}
    for name, tokenizer in tokenizers.items():
        for align_strategy in ALIGN_STRATEGIES:
            stats = AlignmentStats()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a few tweets hold characters that BERT drops
                encoded = tokenize_and_align(batch, tokenizer, label2id, strategy=align_strategy, max_length=128, stats=stats)
            for predict_strategy in [p for a, p in ROUND_TRIPS if a == align_strategy]:
                predicted = predictions_by_example(encoded, len(label2id), predict_strategy, rng, label2id["O"])
                results[name, align_strategy, predict_strategy] = (tweets, encoded, stats, predicted)
    return results


@pytest.mark.parametrize("tokenizer_name", ["wordpiece", "byte_bpe", "metaspace"])
def test_round_trip_on_wnut_for_every_strategy(label2id, round_trips, tokenizer_name):
    for align_strategy, predict_strategy in ROUND_TRIPS:
        tweets, _, stats, predicted = round_trips[tokenizer_name, align_strategy, predict_strategy]
        # Words without any sub-token get the fallback O; in WNUT they are all O, so nothing differs.
        assert all(tweets[example][1][word] == "O" for example, word in stats.empty_words)
        for example, (_, tags) in enumerate(tweets):
            expected = [label2id[tag] for tag in tags]
            assert predicted[example] == expected, (tokenizer_name, align_strategy, predict_strategy, example)
        assert stats.examples == len(tweets) and stats.words_truncated == 0


def test_tokenizers_really_split_words(wnut, tokenizers):
    # The round trip above is only a test if many words have several pieces.
    words = [word for words, _ in wnut[:200] for word in words]
    for tokenizer in tokenizers.values():
        encoding = tokenizer(words, is_split_into_words=True, add_special_tokens=False)
        assert len(encoding["input_ids"]) > 1.3 * len(words)


def count_token_level_entities(encoded, id2label):
    total = 0
    for labels in encoded["labels"]:
        tags = [id2label[label] for label in labels if label != -100]
        total += len(entity_spans(tags, "BIO", lenient=True))
    return total


@pytest.mark.parametrize("tokenizer_name", ["wordpiece", "byte_bpe", "metaspace"])
def test_entity_counts_do_not_depend_on_the_strategy(label2id, round_trips, tokenizer_name):
    id2label = {i: label for label, i in label2id.items()}
    for align_strategy, predict_strategy in ROUND_TRIPS:
        tweets, encoded, _, predicted = round_trips[tokenizer_name, align_strategy, predict_strategy]
        gold_entities = sum(len(entity_spans(tags, "BIO")) for _, tags in tweets)
        decoded = sum(len(entity_spans([id2label[i] for i in labels], "BIO")) for labels in predicted.values())
        assert decoded == gold_entities > 500
        token_level = count_token_level_entities(encoded, id2label)
        if align_strategy == "all":
            # B- on every piece of a word splits it into several entities at the sub-token level.
            assert token_level > gold_entities
        else:
            assert token_level == gold_entities


def test_align_labels_by_hand():
    word_ids = [None, 0, 0, 1, 2, 2, 2, None]
    labels = ["B-PER", "O", "B-LOC"]
    assert align_labels(labels, word_ids) == [-100, "B-PER", -100, "O", "B-LOC", -100, -100, -100]
    assert align_labels(labels, word_ids, "all") == [-100, "B-PER", "B-PER", "O", "B-LOC", "B-LOC", "B-LOC", -100]
    assert align_labels(labels, word_ids, "all_b_to_i", ignore_index=-1) == [
        -1, "B-PER", "I-PER", "O", "B-LOC", "I-LOC", "I-LOC", -1,
    ]
    label2id = {"O": 0, "B-PER": 1, "I-PER": 2, "B-LOC": 3, "I-LOC": 4}
    assert b_to_i_map(label2id) == {1: 2, 3: 4}
    assert align_labels([1, 0, 3], word_ids, "all_b_to_i", b_to_i=b_to_i_map(label2id)) == [
        -100, 1, 2, 0, 3, 4, 4, -100,
    ]


def test_align_labels_errors():
    with pytest.raises(ValueError, match="integer labels needs b_to_i"):
        align_labels([1, 0], [None, 0, 0, 1, None], "all_b_to_i")
    with pytest.raises(ValueError, match="unknown alignment strategy 'last'"):
        align_labels(["O"], [0], "last")
    with pytest.raises(ValueError, match="word id 2 in word_ids but there are only 2 word labels"):
        align_labels(["O", "O"], [None, 0, 1, 2, None])
    with pytest.raises(ValueError, match="has 'B-PER' but no 'I-PER'"):
        b_to_i_map({"O": 0, "B-PER": 1})


def test_word_predictions_strategies_by_hand():
    word_ids = [None, 0, 0, 0, 1, None]
    # Word 0: first piece says label 0; the other two pieces say label 1, so mean picks 1.
    # Max picks the single most confident piece: the first one, at label 0.
    logits = torch.tensor(
        [[0.0, 0.0], [9.0, 0.0], [0.0, 3.0], [0.0, 3.0], [0.0, 3.0], [5.0, 0.0]]
    )
    assert word_predictions(logits, word_ids, "first") == [0, 1]
    assert word_predictions(logits, word_ids, "mean") == [1, 1]
    assert word_predictions(logits, word_ids, "max") == [0, 1]
    assert all(type(label) is int for label in word_predictions(logits.numpy(), word_ids))
    with pytest.raises(ValueError, match="unknown prediction strategy 'vote'"):
        word_predictions(logits, word_ids, "vote")
    with pytest.raises(ValueError, match="do not match 5 word_ids"):
        word_predictions(logits, word_ids[:5])
    with pytest.raises(ValueError, match="word 1 has no sub-token"):
        word_predictions(logits[:4], [None, 0, 0, 2])
    # Words 1 and 3 have no piece and get the fallback; word 2's piece (row 3) says label 1.
    assert word_predictions(logits[:4], [None, 0, 0, 2], fallback_label=0, num_words=4) == [0, 0, 1, 0]
    with pytest.raises(ValueError, match="word_ids mention word 2 but num_words is 2"):
        word_predictions(logits[:4], [None, 0, 0, 2], num_words=2)


def long_document(wnut, min_words):
    words, tags = [], []
    for sentence_words, sentence_tags in wnut:
        words += sentence_words
        tags += sentence_tags
        if len(words) >= min_words:
            return words, tags
    raise AssertionError("not enough words")


def test_document_three_times_max_length_gets_every_label(wnut, label2id, wordpiece):
    words, tags = long_document(wnut, 200)
    assert len(wordpiece(words, is_split_into_words=True)["input_ids"]) > 3 * 64
    gold = [label2id[tag] for tag in tags]
    for align_strategy, predict_strategy in ROUND_TRIPS:
        for stride in (0, 16):
            encoded = tokenize_and_align(
                {"tokens": [words], "ner_tags": [tags]}, wordpiece, label2id, strategy=align_strategy,
                max_length=64, stride=stride,
            )
            assert len(encoded["input_ids"]) >= 4 and max(map(len, encoded["input_ids"])) == 64
            predicted = predictions_by_example(encoded, len(label2id), predict_strategy, np.random.default_rng(2))
            assert predicted[0] == gold, (align_strategy, predict_strategy, stride)
            # Every word owns a labelled first piece in some window, so nothing is lost in training.
            if align_strategy == "first":
                assert sum(label != -100 for labels in encoded["labels"] for label in labels) >= len(words)


def test_windowed_predictions_equal_full_sequence_predictions(wnut, wordpiece):
    """Windows cut from one long sequence of position-dependent logits give the full sequence's words."""
    words, _ = long_document(wnut, 300)
    full = wordpiece(words, is_split_into_words=True)
    rng = np.random.default_rng(3)
    full_logits = rng.normal(size=(len(full["input_ids"]), 5))
    max_length, stride = 48, 12
    encoded = tokenize_and_align({"tokens": [words]}, wordpiece, {}, labels_column=None, max_length=max_length, stride=stride)
    step = max_length - 2 - stride
    window_logits = []
    for index, input_ids in enumerate(encoded["input_ids"]):
        # Content token j of window k is token 1 + k * step + j of the full sequence.
        start = 1 + index * step
        content = len(input_ids) - 2
        assert input_ids[1:-1] == full["input_ids"][start : start + content]
        window_logits.append(np.vstack([rng.normal(size=5), full_logits[start : start + content], rng.normal(size=5)]))
    assert len(window_logits) > 3
    for strategy in ("first", "mean", "max"):
        plain = word_predictions(full_logits, full.word_ids(), strategy)
        assert document_word_predictions(window_logits, encoded["word_ids"], strategy) == plain
        # A single window is the plain case.
        assert document_word_predictions([full_logits], [full.word_ids()], strategy) == plain


def test_sentence_windows_merge_by_hand():
    # Example 7: two windows sharing words 2 and 3. Word 2 has more context in window 0 (1 token on its right) than
    # in window 1, which starts with it (and so leaves it unlabelled); word 3 has more in window 1 (left 1, right 2).
    # Example 9: one window, word 0 in two pieces. Example 4: window 1 starts inside word 1, whose first piece (and
    # label) is in window 0.
    word_ids = [[None, 0, 1, 2, 3, None], [None, 2, 3, 4, 5, None], [None, 0, 0, 1, None],
                [None, 0, 1, 1, None], [None, 1, 2, None]]
    windows = SentenceWindows([7, 7, 9, 4, 4], word_ids)
    labels = [["a0", "a1", "a2", "a3"], ["b3", "b4", "b5"], ["c0", "c1"], ["d0", "d1"], ["e2"]]
    assert windows.merge(labels) == [["a0", "a1", "a2", "b3", "b4", "b5"], ["c0", "c1"], ["d0", "d1", "e2"]]
    with pytest.raises(ValueError, match="window 1 has 4 labels but 3 labelled words: .* 'first' strategy"):
        windows.merge([labels[0], ["b2", *labels[1]], *labels[2:]])
    with pytest.raises(ValueError, match="4 windows of labels for 5 windows"):
        windows.merge(labels[:4])
    with pytest.raises(ValueError, match="the windows of example 7 are not consecutive"):
        SentenceWindows([7, 9, 7], word_ids[:3])


@pytest.mark.parametrize("stride", [0, 16])
def test_sentence_windows_give_each_word_of_long_sentences_one_label(wnut, label2id, wordpiece, stride):
    """Long documents among short tweets, in windows of 64: merged back, the labels at the windows' labelled
    positions are the words' own, one per word, from the window tokenize_and_align's predictions read it in."""
    examples = [long_document(wnut, 200), *wnut[:5], long_document(wnut[10:], 150)]
    encoded = tokenize_and_align({"tokens": [w for w, _ in examples], "ner_tags": [t for _, t in examples]}, wordpiece,
                                 label2id, max_length=64, stride=stride, example_ids=range(100, 100 + len(examples)))
    assert len(encoded["input_ids"]) > len(examples) + 6  # the long documents span several windows
    windows = SentenceWindows(encoded["example_id"], encoded["word_ids"])
    rows = [[label for label in labels if label != -100] for labels in encoded["labels"]]
    labelled, words = sum(map(len, rows)), sum(len(words) for words, _ in examples)
    assert labelled > words if stride else labelled == words  # the words windows share are labelled in each
    assert windows.merge(rows) == [[label2id[tag] for tag in tags] for _, tags in examples]
    # Each word is read in the window document_word_predictions reads it in (window k predicts label k).
    chosen = windows.merge([[window] * len(row) for window, row in enumerate(rows)])
    one_hot = np.eye(len(rows))
    start = 0
    for example, (words, _) in enumerate(examples):
        own = range(start, start + encoded["example_id"].count(100 + example))
        logits = [np.tile(one_hot[window], (len(encoded["word_ids"][window]), 1)) for window in own]
        assert chosen[example] == document_word_predictions(logits, [encoded["word_ids"][window] for window in own])
        assert len(chosen[example]) == len(words)
        start = own.stop
    # With a stride, a word near the end of a window is read in the next one, where it has more context.
    first_holder = {}
    for window in range(encoded["example_id"].count(100)):
        for word in encoded["word_ids"][window]:
            first_holder.setdefault(word, window)
    assert any(chosen[0][word] > first_holder[word] for word in range(len(examples[0][0]))) == (stride > 0)


def test_tokenize_and_align_with_datasets_map(wnut, label2id, wordpiece):
    dataset = datasets.Dataset.from_dict(
        {"words": [w for w, _ in wnut[:40]], "tags": [[label2id[t] for t in tags] for _, tags in wnut[:40]]}
    )
    mapped = dataset.map(
        lambda batch, indices: tokenize_and_align(
            batch, wordpiece, label2id, words_column="words", labels_column="tags", example_ids=indices
        ),
        batched=True,
        batch_size=16,
        with_indices=True,
        remove_columns=dataset.column_names,
    )
    assert mapped["example_id"] == list(range(40))
    assert set(mapped.column_names) == {"input_ids", "attention_mask", "token_type_ids", "labels", "word_ids", "example_id", "num_words"}
    row = mapped[7]
    assert row["word_ids"][0] is None and row["word_ids"][-1] is None
    assert row["num_words"] == len(wnut[7][0])
    assert [label for label in row["labels"] if label != -100] == [label2id[t] for t in wnut[7][1]]


def test_tokenize_and_align_errors(label2id, wordpiece):
    batch = {"tokens": [["Paris", "is"], ["in", "France"]], "ner_tags": [["B-geo-loc", "O"], ["O", "B-geo-loc"]]}
    with pytest.raises(ValueError, match="ByT5Tokenizer is a slow.*needs a fast tokenizer"):
        tokenize_and_align(batch, transformers.ByT5Tokenizer(), label2id)
    with pytest.raises(ValueError, match="example 1: 2 words but 1 labels"):
        tokenize_and_align({"tokens": batch["tokens"], "ner_tags": [["B-geo-loc", "O"], ["O"]]}, wordpiece, label2id)
    with pytest.raises(ValueError, match="example 12, word 1: label 'B-LOC' is not in label2id"):
        tokenize_and_align(
            {"tokens": batch["tokens"], "ner_tags": [["O", "O"], ["O", "B-LOC"]]}, wordpiece, label2id, example_ids=[11, 12]
        )
    with pytest.raises(ValueError, match="example 0, word 0: label id 99 is not a value of label2id"):
        tokenize_and_align({"tokens": [["a"]], "ner_tags": [[99]]}, wordpiece, label2id)
    with pytest.raises(ValueError, match="stride only applies to windows"):
        tokenize_and_align(batch, wordpiece, label2id, truncate=True, stride=4)


def test_words_without_tokens_are_counted_and_get_the_fallback(label2id, wordpiece):
    # U+200B (zero-width space) and U+0000 vanish in BERT's normaliser: no sub-token at all.
    words = ["Paris", "\u200b", "is", "\x00"]
    stats = AlignmentStats()
    with pytest.warns(UserWarning, match=r"2 word\(s\) produced no sub-token.*word 1 \('\\u200b'\) of example 5"):
        encoded = tokenize_and_align(
            {"tokens": [words], "ner_tags": [["B-geo-loc", "O", "O", "O"]]}, wordpiece, label2id, example_ids=[5], stats=stats
        )
    assert (stats.words_without_tokens, stats.empty_words) == (2, [(5, 1), (5, 3)])
    assert encoded["num_words"] == [4]
    logits = one_hot_logits(encoded["labels"][0], len(label2id), np.random.default_rng(0))
    with pytest.raises(ValueError, match="word 1 has no sub-token"):
        word_predictions(logits, encoded["word_ids"][0])
    predicted = word_predictions(logits, encoded["word_ids"][0], num_words=4, fallback_label=label2id["O"])
    assert predicted == [label2id["B-geo-loc"], label2id["O"], label2id["O"], label2id["O"]]


def test_truncation_reports_lost_words(wnut, label2id, wordpiece):
    words, tags = long_document(wnut, 100)
    stats = AlignmentStats()
    with pytest.warns(UserWarning, match="truncate=True dropped"):
        encoded = tokenize_and_align(
            {"tokens": [words], "ner_tags": [tags]}, wordpiece, label2id, max_length=32, truncate=True, stats=stats
        )
    assert len(encoded["input_ids"]) == 1
    kept = {word for word in encoded["word_ids"][0] if word is not None}
    assert stats.words_truncated == len(words) - len(kept) > 50
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # short inputs lose nothing and say nothing
        tokenize_and_align({"tokens": [words[:5]], "ner_tags": [tags[:5]]}, wordpiece, label2id, truncate=True)


# --- predict_entities with tiny random BERTs.

LABELS = ["O", "B-person", "I-person", "B-geo-loc", "I-geo-loc"]


def tiny_bert(wordpiece, winner=None):
    """A random 2-layer BERT (hidden 32, 64 positions) whose classifier always picks ``winner``."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=wordpiece.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)},
    )
    model = transformers.BertForTokenClassification(config).eval()
    if winner is not None:
        with torch.no_grad():
            model.classifier.weight.zero_()
            model.classifier.bias.copy_(torch.nn.functional.one_hot(torch.tensor(LABELS.index(winner)), len(LABELS)) * 5.0)
    return model


def test_predict_entities_spans_slice_the_text(wordpiece):
    text = "  Barack Obama met   Angela-Merkel in Paris , didn't he?\tYes ."
    words = ["Barack", "Obama", "met", "Angela-Merkel", "in", "Paris", ",", "didn't", "he", "?", "Yes", "."]
    [every_word] = predict_entities([text], tiny_bert(wordpiece, "B-person"), wordpiece)
    assert [entity["text"] for entity in every_word] == words
    for entity in every_word:
        assert text[entity["start"] : entity["end"]] == entity["text"]
        assert entity["type"] == "person" and 0.0 < entity["score"] <= 1.0
    # I- after I- of one type continues: the whole text (trimmed) is one entity.
    [[whole]] = predict_entities([text], tiny_bert(wordpiece, "I-person"), wordpiece, strategy="mean")
    assert (whole["start"], whole["end"]) == (2, len(text))
    assert predict_entities([text, "", "x y"], tiny_bert(wordpiece, "O"), wordpiece) == [[], [], []]


def test_predict_entities_on_a_text_three_times_the_model_length(wordpiece):
    words = [f"word{i}" for i in range(120)]
    text = " ".join(words)
    assert len(wordpiece(text)["input_ids"]) > 3 * 64
    [entities] = predict_entities([text], tiny_bert(wordpiece, "B-geo-loc"), wordpiece, batch_size=2)
    assert [entity["text"] for entity in entities] == words


def test_predict_entities_agrees_with_plain_predictions_on_short_inputs(wordpiece):
    model = tiny_bert(wordpiece)  # random classifier: predictions vary word to word
    texts = ["Barack Obama visited New York and Paris last week", "Paris Hilton", "nothing here at all"]
    results = predict_entities(texts, model, wordpiece, strategy="max", batch_size=2)
    for text, entities in zip(texts, results):
        words = text.split()
        encoding = wordpiece(words, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            logits = model(**encoding).logits[0]
        tags = [LABELS[i] for i in word_predictions(logits, encoding.word_ids(), "max")]
        expected = [" ".join(words[start:end]) for _, start, end in entity_spans(tags, "BIO", lenient=True)]
        assert [entity["text"] for entity in entities] == expected
    assert sum(map(len, results)) > 0


def test_predict_entities_finds_a_rigged_word(wordpiece):
    """A model that tags the word "paris" (any case) B-geo-loc and everything else O."""
    model = tiny_bert(wordpiece)
    paris = wordpiece.convert_tokens_to_ids("paris")
    with torch.no_grad():
        # Switch off attention and feed-forward outputs: each position's hidden state is then a
        # layer-normalised copy of its embedding, so the classifier sees the token itself.
        for layer in model.bert.encoder.layer:
            for dense in (layer.attention.output.dense, layer.output.dense):
                dense.weight.zero_()
                dense.bias.zero_()
        embeddings = model.bert.embeddings
        embeddings.word_embeddings.weight[:, 0] = -1.0
        embeddings.word_embeddings.weight[paris, 0] = 1.0
        embeddings.position_embeddings.weight[:, 0] = 0.0
        embeddings.token_type_embeddings.weight[:, 0] = 0.0
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        model.classifier.weight[LABELS.index("B-geo-loc"), 0] = 10.0
        model.classifier.bias[LABELS.index("O")] = 1.0
    text = "I love Paris, and PARIS loves me. Parisian?"
    [entities] = predict_entities([text], model, wordpiece)
    assert [(e["type"], e["start"], e["end"], e["text"]) for e in entities] == [
        ("geo-loc", 7, 12, "Paris"),
        ("geo-loc", 18, 23, "PARIS"),
    ]
