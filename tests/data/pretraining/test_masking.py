"""Tests of mlm_suite.data.pretraining.masking on real text: Pang & Lee movie reviews (~1.3 M WordPiece tokens).

The statistical tests compare observed frequencies with the requested ones at 3 binomial standard
deviations, and random-token distributions with chi-square goodness-of-fit tests (p > 0.001).
Every collator runs seeded, so each test is deterministic: it cannot flake, and a pass is a pass
of the same draw every time.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence

import datasets
import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)
from transformers.models.bert import BertTokenizerLegacy

from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining import (
    WORD_ID_SENTINEL,
    DataCollatorForMaskedLM,
    MaskingEpochCallback,
    count_tokens,
    tokenize_for_mlm,
)
from mlm_suite.data.pretraining.masking import check_mlm_tokenizer
from tests.helpers import (
    Feature,
    MAX_LENGTH,
    masked_words,
    padded,
    roberta_tokenizer,
    special_tokens_only,
    train_byte_level_bpe,
    word_index,
    xlm_roberta_tokenizer,
)

P = 0.15
MODES = ("token", "whole_word", "span")
# E[min(G, 10)] for G ~ Geometric(0.2) on {1, 2, ...}: sum_{k=0}^{9} 0.8^k.
CLIPPED_GEOMETRIC_MEAN = (1 - 0.8**10) / 0.2


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    # The machine is shared: intra-op threads of tiny tensor ops only contend with each other.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [text for _, text in downloads.pang_lee_reviews()]


@pytest.fixture(scope="module")
def wordpiece() -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(downloads.minilm_dir())


def as_features(encoded: dict[str, list]) -> list[Feature]:
    return [dict(zip(encoded.keys(), values)) for values in zip(*encoded.values())]


@pytest.fixture(scope="module")
def corpus(texts, wordpiece) -> list[Feature]:
    """All reviews in rows of at most 128 WordPiece tokens, [CLS] ... [SEP], with word ids."""
    return as_features(tokenize_for_mlm({"text": texts}, wordpiece, MAX_LENGTH))


def collate_all(collator: DataCollatorForMaskedLM, features: Sequence[Feature], batch_size: int = 1024):
    """Collate in large batches; every batch padded to 128 so that outputs stack to ``(N, 128)``."""
    batches = [collator(features[start : start + batch_size]) for start in range(0, len(features), batch_size)]
    keys = ("input_ids", "labels", "attention_mask")
    return {key: torch.cat([batch[key] for batch in batches]).numpy() for key in keys}


def within_3_sigma(count: int, trials: int, probability: float) -> bool:
    return abs(count - trials * probability) <= 3 * math.sqrt(trials * probability * (1 - probability))


def non_special_ids(tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    return np.setdiff1d(np.arange(len(tokenizer)), tokenizer.all_special_ids)


def uniform_chisquare_p(tokens: np.ndarray, allowed: np.ndarray, bins: int = 50) -> float:
    """p-value of ``tokens`` being uniform over ``allowed`` ids, in ``bins`` equal-size groups of ids."""
    groups = np.array_split(allowed, bins)
    edges = np.array([group[0] for group in groups[1:]])
    observed = np.bincount(np.searchsorted(edges, tokens, side="right"), minlength=bins)
    expected = np.array([len(group) for group in groups]) * len(tokens) / len(allowed)
    return chisquare(observed, expected).pvalue


@pytest.fixture(scope="module")
def wordpiece_runs(corpus, wordpiece):
    """Each masking mode over the whole corpus, plus the original ids and word ids ``(N, 128)``."""
    runs = {}
    for mode in MODES:
        collator = DataCollatorForMaskedLM(
            wordpiece, mlm_probability=P, masking=mode, seed=0, pad_to_multiple_of=MAX_LENGTH
        )
        start = time.perf_counter()
        runs[mode] = collate_all(collator, corpus)
        runs[mode]["seconds"] = time.perf_counter() - start
    original = padded([feature["input_ids"] for feature in corpus], wordpiece.pad_token_id)
    word_ids = padded([feature["word_ids"] for feature in corpus], WORD_ID_SENTINEL)
    return runs, original, word_ids


def check_masking_statistics(tokenizer, output, original, word_ids, mode) -> dict[str, float]:
    """Assert the invariants and rates of one masked corpus; return the measured rates."""
    special = np.array(tokenizer.all_special_ids)
    corrupted, labels = output["input_ids"], output["labels"]
    selected = labels != -100
    maskable = ~np.isin(original, special) & (word_ids >= 0 if mode != "token" else True)

    # Labels hold the originals where selected; nothing else changes.
    assert np.array_equal(labels[selected], original[selected])
    assert np.array_equal(corrupted[~selected], original[~selected])
    # Never a special token or padding; padding is never attended to either.
    assert not (selected & ~maskable).any()
    padding = original == tokenizer.pad_token_id
    assert padding.any() and (labels[padding] == -100).all() and (output["attention_mask"][padding] == 0).all()

    n_maskable, n_selected = int(maskable.sum()), int(selected.sum())
    assert within_3_sigma(n_selected, n_maskable, P), (mode, n_selected / n_maskable)

    as_mask = selected & (corrupted == tokenizer.mask_token_id)
    as_random = selected & ~as_mask & (corrupted != original)
    kept = selected & (corrupted == original)
    assert within_3_sigma(int(as_mask.sum()), n_selected, 0.8), (mode, as_mask.sum() / n_selected)
    # A random draw equal to the original counts as "kept": a 1 / len(vocab) effect, far below 3 sigma.
    assert within_3_sigma(int(as_random.sum()), n_selected, 0.1), (mode, as_random.sum() / n_selected)
    assert within_3_sigma(int(kept.sum()), n_selected, 0.1), (mode, kept.sum() / n_selected)

    random_tokens = corrupted[as_random]
    assert not np.isin(random_tokens, special).any()
    p_uniform = uniform_chisquare_p(random_tokens, non_special_ids(tokenizer))
    assert p_uniform > 1e-3, (mode, p_uniform)

    if mode != "token":
        # Over a word's maskable tokens: SentencePiece's <unk> of an unknown character sits inside a word (WordPiece's
        # [UNK] is a whole word), and like every special token it is never masked.
        sizes, hits = masked_words(np.where(maskable, word_index(word_ids), -1), selected)
        assert ((hits == 0) | (hits == sizes)).all(), "a word was masked partly"
        assert ((hits == sizes) & (sizes > 1)).sum() > 100, "too few multi-token words masked to be a test"
    return {
        "rate": n_selected / n_maskable,
        "mask": as_mask.sum() / n_selected,
        "random": as_random.sum() / n_selected,
        "keep": kept.sum() / n_selected,
        "uniform_p": p_uniform,
    }


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_rates_split_and_random_tokens_on_a_million_tokens(wordpiece_runs, wordpiece, mode):
    runs, original, word_ids = wordpiece_runs
    n_tokens = int((original != wordpiece.pad_token_id).sum())
    assert n_tokens > 1_000_000
    check_masking_statistics(wordpiece, runs[mode], original, word_ids, mode)
    # Seeded token masking (one generator per example, the slow path) must stay fast.
    if mode == "token":
        assert n_tokens / runs[mode]["seconds"] > 50_000


def test_wordpiece_word_ids_follow_the_continuation_marker(corpus, wordpiece):
    for feature in corpus[:500]:
        tokens = wordpiece.convert_ids_to_tokens(feature["input_ids"])
        words = feature["word_ids"]
        for position, token in enumerate(tokens):
            if token.startswith("##") and words[position - 1] != WORD_ID_SENTINEL:
                assert words[position] == words[position - 1]


@pytest.mark.slow
def test_spans_are_whole_word_runs_with_clipped_geometric_lengths(wordpiece_runs):
    runs, original, word_ids = wordpiece_runs
    selected = runs["span"]["labels"] != -100
    words = word_index(word_ids)
    sizes, hits = masked_words(words, selected)
    word_selected = hits > 0
    # Flat position of each word's first and last token: consecutive words are adjacent (can
    # belong to one span) only if no special token separates them.
    flat = words.ravel()
    inside = np.flatnonzero(flat >= 0)
    first = np.full(len(sizes), -1)
    first[flat[inside][::-1]] = inside[::-1]
    last = first + sizes - 1
    adjacent_to_previous = np.concatenate([[False], first[1:] == last[:-1] + 1])
    run_start = word_selected & ~(np.concatenate([[False], word_selected[:-1]]) & adjacent_to_previous)
    run_of_word = np.cumsum(run_start) - 1
    run_lengths = np.bincount(run_of_word[word_selected])  # in words

    assert run_lengths.min() >= 1 and run_lengths.max() <= 10
    histogram = np.bincount(run_lengths, minlength=11)[1:] / len(run_lengths)
    # Geometric shape: decreasing over 1..9 (10 collects the clipped tail).
    assert (np.diff(histogram[:9]) < 0).all(), histogram
    # The token budget ends a sequence's spans; the span crossing it is more often a long one,
    # which pulls the observed mean a few percent below the sampling distribution's 4.46.
    assert abs(run_lengths.mean() / CLIPPED_GEOMETRIC_MEAN - 1) < 0.1, run_lengths.mean()


def test_unigram_random_tokens_follow_the_counts(corpus, wordpiece):
    counts = count_tokens(corpus, len(wordpiece))
    assert int(counts.sum()) == sum(len(feature["input_ids"]) for feature in corpus)
    subset = corpus[:2500]
    collator = DataCollatorForMaskedLM(
        wordpiece,
        mask_replace_prob=0.0,
        random_replace_prob=1.0,
        random_token_distribution="unigram",
        token_counts=counts,
        seed=1,
        pad_to_multiple_of=MAX_LENGTH,
    )
    output = collate_all(collator, subset)
    drawn = output["input_ids"][output["labels"] != -100]
    assert len(drawn) > 40_000
    assert not np.isin(drawn, wordpiece.all_special_ids).any()

    weights = counts.double().numpy().copy()
    weights[wordpiece.all_special_ids] = 0
    expected = len(drawn) * weights / weights.sum()
    observed = np.bincount(drawn, minlength=len(weights))
    # Ids expected at least 5 times are their own bin; the rare rest share one.
    frequent = expected >= 5
    observed_bins = np.append(observed[frequent], observed[~frequent].sum())
    expected_bins = np.append(expected[frequent], expected[~frequent].sum())
    assert chisquare(observed_bins, expected_bins).pvalue > 1e-3
    # The same draws are nowhere near uniform: the test has power.
    assert uniform_chisquare_p(drawn, non_special_ids(wordpiece)) < 1e-12

    # The counts may come as a dict, and count_tokens reads an Arrow dataset as well.
    as_dict = {index: int(count) for index, count in enumerate(counts.tolist()) if count}
    with_dict = DataCollatorForMaskedLM(
        wordpiece, mask_replace_prob=0.0, random_replace_prob=1.0,
        random_token_distribution="unigram", token_counts=as_dict, seed=1, pad_to_multiple_of=MAX_LENGTH,
    )
    assert torch.equal(with_dict(subset[:64])["input_ids"], collator(subset[:64])["input_ids"])
    dataset = datasets.Dataset.from_list([{"input_ids": feature["input_ids"]} for feature in subset])
    assert torch.equal(count_tokens(dataset, len(wordpiece)), count_tokens(subset, len(wordpiece)))


@pytest.mark.parametrize("mode", ["whole_word", "span"])
@pytest.mark.parametrize(
    ("train", "word_marker"),
    [(roberta_tokenizer, "Ġ"), (xlm_roberta_tokenizer, "▁")],
    ids=["roberta-bpe", "xlm-roberta-sentencepiece"],
)
def test_word_masking_with_byte_level_bpe_and_sentencepiece(texts, train, word_marker, mode):
    """Whole words and spans of them come from the fast tokenizer's word ids, which follow the word-start marker of
    a byte-level BPE ("Ġ") or SentencePiece ("▁") vocabulary as they follow WordPiece's "##"."""
    tokenizer = train(texts[:60])
    features = as_features(tokenize_for_mlm({"text": texts[:250]}, tokenizer, MAX_LENGTH))
    word_ids = padded([feature["word_ids"] for feature in features], WORD_ID_SENTINEL)
    original = padded([feature["input_ids"] for feature in features], tokenizer.pad_token_id)
    # The word ids agree with the vocabulary's own word-start marker.
    vocabulary = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    starts_word = np.array([token.startswith(word_marker) for token in vocabulary])[original]
    previous_word = np.concatenate([np.full((len(word_ids), 1), WORD_ID_SENTINEL), word_ids[:, :-1]], axis=1)
    assert (word_ids[starts_word] != previous_word[starts_word]).all()

    collator = DataCollatorForMaskedLM(tokenizer, masking=mode, seed=2, pad_to_multiple_of=MAX_LENGTH)
    output = collate_all(collator, features)
    assert (original != tokenizer.pad_token_id).sum() > 200_000
    check_masking_statistics(tokenizer, output, original, word_ids, mode)


def unpadded_masks(batch: dict[str, torch.Tensor], lengths: Sequence[int], left: bool = False) -> list[tuple]:
    """Per example: (corrupted ids, labels) without the padding."""
    width = batch["input_ids"].shape[1]
    out = []
    for row, length in enumerate(lengths):
        span = slice(width - length, width) if left else slice(0, length)
        out.append((batch["input_ids"][row, span].tolist(), batch["labels"][row, span].tolist()))
    return out


@pytest.mark.parametrize("mode", MODES)
def test_seeded_masks_depend_only_on_seed_epoch_rank_and_example(corpus, wordpiece, mode, monkeypatch):
    # The last rows of reviews are shorter, so batches differ in padded length.
    features = corpus[:96]
    lengths = [len(feature["input_ids"]) for feature in features]
    assert len(set(lengths)) > 1
    collator = DataCollatorForMaskedLM(wordpiece, masking=mode, seed=11)
    reference = unpadded_masks(collator(features), lengths)

    # Another instance, another batch order and composition, other padding, left padding.
    order = np.random.default_rng(0).permutation(len(features))
    again = DataCollatorForMaskedLM(wordpiece, masking=mode, seed=11, pad_to_multiple_of=160)
    shuffled = unpadded_masks(again([features[i] for i in order]), [lengths[i] for i in order])
    assert [shuffled[list(order).index(i)] for i in range(len(features))] == reference
    assert unpadded_masks(again(features[:7]), lengths[:7]) == reference[:7]
    left_tokenizer = copy.deepcopy(wordpiece)
    left_tokenizer.padding_side = "left"
    left = DataCollatorForMaskedLM(left_tokenizer, masking=mode, seed=11)
    assert unpadded_masks(left(features), lengths, left=True) == reference

    def changed(other: list[tuple]) -> float:
        return np.mean([a[1] != b[1] for a, b in zip(other, reference)])

    # Another epoch, rank or seed gives (almost surely) different masks for every example.
    collator.set_epoch(1)
    assert changed(unpadded_masks(collator(features), lengths)) == 1.0
    collator.set_epoch(0)
    assert unpadded_masks(collator(features), lengths) == reference
    other_rank = DataCollatorForMaskedLM(wordpiece, masking=mode, seed=11, process_rank=3)
    assert changed(unpadded_masks(other_rank(features), lengths)) == 1.0
    assert changed(unpadded_masks(DataCollatorForMaskedLM(wordpiece, masking=mode, seed=12)(features), lengths)) == 1.0
    # Without an explicit rank, torchrun's RANK is used (no process group in this test).
    monkeypatch.setenv("RANK", "3")
    assert unpadded_masks(collator(features), lengths) == unpadded_masks(other_rank(features), lengths)


def test_example_index_keys_the_mask_instead_of_content(corpus, wordpiece):
    feature = corpus[0]
    collator = DataCollatorForMaskedLM(wordpiece, seed=5)
    twins = [dict(feature, example_index=0), dict(feature, example_index=1)]
    first, second = unpadded_masks(collator(twins), [len(feature["input_ids"])] * 2)
    assert first != second
    alone = unpadded_masks(collator([corpus[3], twins[1]]), [len(corpus[3]["input_ids"]), len(feature["input_ids"])])
    assert alone[1] == second
    # Without a key, identical content means identical masks.
    same = unpadded_masks(collator([feature, dict(feature)]), [len(feature["input_ids"])] * 2)
    assert same[0] == same[1]


def test_unseeded_masks_follow_the_global_torch_rng(corpus, wordpiece):
    collator = DataCollatorForMaskedLM(wordpiece, masking="span")
    torch.manual_seed(3)
    first = collator(corpus[:32])
    torch.manual_seed(3)
    second = collator(corpus[:32])
    third = collator(corpus[:32])
    assert torch.equal(first["labels"], second["labels"])
    assert not torch.equal(second["labels"], third["labels"])


def test_padding_and_passthrough_features(corpus, wordpiece):
    by_length = {len(feature["input_ids"]): feature for feature in corpus[:200]}
    features = [dict(by_length[length]) for length in sorted(by_length)[-3:]]  # three lengths
    for index, feature in enumerate(features):
        feature["position_ids"] = list(range(len(feature["input_ids"])))
        feature["next_sentence_label"] = index % 2
        feature["text"] = "a leftover column the model must not receive"
    lengths = [len(feature["input_ids"]) for feature in features]
    assert len(set(lengths)) == 3
    batch = DataCollatorForMaskedLM(wordpiece, seed=0, pad_to_multiple_of=48)(features)
    returned = {"input_ids", "attention_mask", "labels", "token_type_ids", "position_ids", "next_sentence_label"}
    assert set(batch) == returned
    width = batch["input_ids"].shape[1]
    assert width % 48 == 0 and width >= max(lengths)
    assert batch["next_sentence_label"].tolist() == [0, 1, 0]
    for row, length in enumerate(lengths):
        assert batch["attention_mask"][row].tolist() == [1] * length + [0] * (width - length)
        assert (batch["input_ids"][row, length:] == wordpiece.pad_token_id).all()
        assert (batch["labels"][row, length:] == -100).all()
        assert batch["position_ids"][row, :length].tolist() == list(range(length))
        assert (batch["token_type_ids"][row, length:] == wordpiece.pad_token_type_id).all()


def test_left_padding_and_array_features(corpus, wordpiece):
    by_length = {len(feature["input_ids"]): feature for feature in corpus[:200]}
    features = [
        dict(by_length[length], position_ids=list(range(length)), example_index=index)
        for index, length in enumerate(sorted(by_length)[-3:])
    ]
    lengths = [len(feature["input_ids"]) for feature in features]
    left_tokenizer = copy.deepcopy(wordpiece)
    left_tokenizer.padding_side = "left"
    collator = DataCollatorForMaskedLM(left_tokenizer, masking="whole_word", seed=0, pad_to_multiple_of=48)
    batch = collator(features)
    width = batch["input_ids"].shape[1]
    for row, length in enumerate(lengths):
        pads = width - length
        assert batch["attention_mask"][row].tolist() == [0] * pads + [1] * length
        assert (batch["input_ids"][row, :pads] == wordpiece.pad_token_id).all()
        assert (batch["labels"][row, :pads] == -100).all()
        assert (batch["token_type_ids"][row, :pads] == wordpiece.pad_token_type_id).all()
        assert batch["position_ids"][row].tolist() == [0] * pads + list(range(length))
    # Right padding gives each example the same mask, and so do numpy arrays and tensors as feature values.
    right = DataCollatorForMaskedLM(wordpiece, masking="whole_word", seed=0)(features)
    assert torch.equal(right["labels"][right["attention_mask"].bool()], batch["labels"][batch["attention_mask"].bool()])
    for convert in (np.asarray, torch.tensor):
        as_arrays = [{key: convert(value) for key, value in feature.items()} for feature in features]
        other = collator(as_arrays)
        assert other.keys() == batch.keys()
        assert all(torch.equal(other[key], batch[key]) for key in batch)
    short_mask = [dict(feature, attention_mask=feature["attention_mask"][:-1]) for feature in features]
    with pytest.raises(ValueError, match="attention_mask must have one entry per input id"):
        collator(short_mask)


def test_pre_padded_features_never_mask_their_padding(corpus, wordpiece):
    short = min(corpus[:200], key=lambda feature: len(feature["input_ids"]))
    length = len(short["input_ids"])
    pre_padded = {
        "input_ids": short["input_ids"] + [wordpiece.pad_token_id] * (MAX_LENGTH - length),
        "attention_mask": [1] * length + [0] * (MAX_LENGTH - length),
    }
    # A very high rate so that every maskable position is likely to be hit.
    batch = DataCollatorForMaskedLM(wordpiece, mlm_probability=0.95, seed=0)([pre_padded] * 4)
    assert (batch["labels"][:, length:] == -100).all()
    assert (batch["labels"][:, 1 : length - 1] != -100).float().mean() > 0.9


def test_tokenize_for_mlm_round_trips_through_arrow(texts, wordpiece):
    dataset = datasets.Dataset.from_dict({"text": texts[:5], "label": [0] * 5})
    tokenized = dataset.map(
        tokenize_for_mlm, batched=True, remove_columns=dataset.column_names,
        fn_kwargs={"tokenizer": wordpiece, "max_length": MAX_LENGTH},
    )
    assert len(tokenized) > 5  # long reviews become several rows
    row = tokenized[0]
    assert row["word_ids"][0] == WORD_ID_SENTINEL and row["word_ids"][-1] == WORD_ID_SENTINEL
    assert len(row["word_ids"]) == len(row["input_ids"]) == MAX_LENGTH
    batch = DataCollatorForMaskedLM(wordpiece, masking="whole_word", seed=0)(list(tokenized))
    assert batch["input_ids"].shape == (len(tokenized), MAX_LENGTH)


def test_epoch_callback_sets_the_epoch_before_each_epoch_of_a_real_trainer(texts, wordpiece, tmp_path):
    # Short rows keep the 30k-way MLM head cheap.
    rows = as_features(tokenize_for_mlm({"text": texts[:1]}, wordpiece, 16))[:16]
    collator = DataCollatorForMaskedLM(wordpiece, masking="whole_word", seed=0)
    epochs_seen: list[int] = []

    def recording_collator(features):
        epochs_seen.append(collator.epoch)
        return collator(features)

    config = BertConfig(
        vocab_size=len(wordpiece), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    args = TrainingArguments(
        output_dir=str(tmp_path), num_train_epochs=3, per_device_train_batch_size=8, use_cpu=True,
        report_to="none", save_strategy="no", remove_unused_columns=False, dataloader_num_workers=0, disable_tqdm=True,
    )
    trainer = Trainer(
        model=BertForMaskedLM(config), args=args, train_dataset=rows, data_collator=recording_collator,
        callbacks=[MaskingEpochCallback(collator)],
    )
    trainer.train()
    assert epochs_seen == [0, 0, 1, 1, 2, 2]

    # Resuming mid-epoch: the fractional epoch rounds down.
    MaskingEpochCallback(collator).on_epoch_begin(args, TrainerState(epoch=4.5), TrainerControl())
    assert collator.epoch == 4


def tokenizer_without_mask(texts: list[str]) -> PreTrainedTokenizerFast:
    tokenizer = train_byte_level_bpe(texts[:20])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, pad_token="<pad>")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mlm_probability": 0.0}, "mlm_probability"),
        ({"mlm_probability": 1.0}, "mlm_probability"),
        ({"mlm_probability": -0.1}, "mlm_probability"),
        ({"mask_replace_prob": 0.9, "random_replace_prob": 0.2}, "must not exceed 1"),
        ({"random_replace_prob": -0.1}, "random_replace_prob"),
        ({"masking": "sentence"}, "masking"),
        ({"random_token_distribution": "unigram"}, "token_counts"),
        ({"token_counts": [1] * 10}, "token_counts"),
    ],
)
def test_bad_arguments_are_rejected(wordpiece, kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataCollatorForMaskedLM(wordpiece, **kwargs)


def test_a_vocabulary_of_special_tokens_only_is_rejected_naming_the_tokenizer(wordpiece):
    tokenizer = special_tokens_only()
    with pytest.raises(ValueError, match=r"^--tokenizer_name five: the vocabulary has no token besides special tokens "
                                         r"\(\[PAD\], \[UNK\], \[CLS\], \[SEP\], \[MASK\]\)"):
        check_mlm_tokenizer(tokenizer, "--tokenizer_name five")
    with pytest.raises(ValueError, match=f"^{type(tokenizer).__name__}: the vocabulary has no token besides"):
        DataCollatorForMaskedLM(tokenizer)
    check_mlm_tokenizer(wordpiece, "--tokenizer_name minilm")


def test_missing_mask_token_slow_tokenizer_and_missing_word_ids_are_rejected(texts, wordpiece, corpus):
    with pytest.raises(ValueError, match="mask token"):
        DataCollatorForMaskedLM(tokenizer_without_mask(texts))
    slow = BertTokenizerLegacy(vocab_file=str(downloads.minilm_dir() / "vocab.txt"))
    assert not slow.is_fast
    for mode in ("whole_word", "span"):
        with pytest.raises(ValueError, match="fast"):
            DataCollatorForMaskedLM(slow, masking=mode)
    with pytest.raises(ValueError, match="fast"):
        tokenize_for_mlm({"text": texts[:1]}, slow, MAX_LENGTH)
    # Token masking needs no word ids, so a slow tokenizer is fine there.
    assert DataCollatorForMaskedLM(slow, seed=0)([corpus[0]])["labels"].shape == (1, MAX_LENGTH)
    without_word_ids = [{"input_ids": feature["input_ids"]} for feature in corpus[:2]]
    with pytest.raises(ValueError, match="word_ids"):
        DataCollatorForMaskedLM(wordpiece, masking="whole_word")(without_word_ids)
