"""Several languages in one pretraining run (mlm_suite.data.pretraining.languages): XLM-R's smoothed sampling, the
tokenizer-training sample, the languages' names, the mix's phases, the mix of a run's rows by ``interleave_datasets``
(one phase, and phases of exactly their steps' rows), words and pieces per word, and the one-line refusals."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest
from datasets import Dataset

from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining.languages import (
    LanguageMix,
    MixPhase,
    count_words,
    language_names,
    language_sampling_probs,
    mix_rows,
    pieces_per_word,
    sample_multilingual_corpus,
)
from mlm_suite.errors import UsageError
from tests.helpers import polarity_texts


def test_language_sampling_probs_by_hand():
    # p = (0.9, 0.1); p^0.3 = (exp(0.3 ln 0.9), exp(0.3 ln 0.1)) = (0.968886, 0.501187), sum 1.470073.
    q = language_sampling_probs({"en": 90, "sw": 10}, alpha=0.3)
    assert list(q) == ["en", "sw"]
    assert q["en"] == pytest.approx(0.968886 / 1.470073, abs=1e-6)
    assert q["sw"] == pytest.approx(0.501187 / 1.470073, abs=1e-6)
    assert q["sw"] == pytest.approx(0.340927, abs=1e-6)
    assert language_sampling_probs([90, 10], alpha=0.3) == pytest.approx([q["en"], q["sw"]])


def test_language_sampling_probs_limits():
    counts = [500, 300, 150, 50]
    assert language_sampling_probs(counts, alpha=1.0) == pytest.approx([0.5, 0.3, 0.15, 0.05])
    assert language_sampling_probs(counts, alpha=1e-6) == pytest.approx([0.25] * 4, abs=1e-5)
    smoothed = language_sampling_probs(counts, alpha=0.5)
    assert sum(smoothed) == pytest.approx(1.0)
    assert smoothed == sorted(smoothed, reverse=True) and smoothed[-1] > 0.05  # order kept, small up-sampled


@pytest.mark.parametrize(
    ("counts", "alpha", "message"),
    [
        ([10, 0], 0.3, "every count must be > 0"),
        ({"a": -1}, 0.3, "every count must be > 0"),
        ([1, 2], 0.0, "alpha must be > 0"),
        ([1, 2], -1.0, "alpha must be > 0"),
        ([], 0.3, "empty"),
    ],
)
def test_language_sampling_probs_errors(counts, alpha, message):
    with pytest.raises(ValueError, match=message):
        language_sampling_probs(counts, alpha)


def test_multilingual_sample_follows_q():
    corpora = {
        "en": [text for _, text in downloads.pang_lee_sentences()],
        "de": polarity_texts("polarity-de-amazon.csv"),
        "fr": polarity_texts("polarity-fr-amazon.csv"),
        "nl": polarity_texts("polarity-nl-bol.com.csv"),
    }
    n = 20_000
    texts, languages = sample_multilingual_corpus(corpora, n, alpha=0.3, seed=0)
    assert len(texts) == len(languages) == n
    q = language_sampling_probs({language: len(corpus) for language, corpus in corpora.items()}, 0.3)
    drawn = Counter(languages)
    for language, probability in q.items():
        sigma = math.sqrt(probability * (1 - probability) / n)
        assert abs(drawn[language] / n - probability) < 3 * sigma
    members = {language: set(corpus) for language, corpus in corpora.items()}
    assert all(text in members[language] for text, language in zip(texts, languages))
    assert sample_multilingual_corpus(corpora, 500, seed=1) == sample_multilingual_corpus(corpora, 500, seed=1)
    assert sample_multilingual_corpus(corpora, 500, seed=1) != sample_multilingual_corpus(corpora, 500, seed=2)


def test_small_languages_repeat_only_after_a_full_pass():
    corpora = {"big": [f"big {i}" for i in range(1000)], "small": [f"small {i}" for i in range(10)]}
    texts, languages = sample_multilingual_corpus(corpora, 3000, alpha=0.3, seed=0)
    drawn = Counter(languages)
    assert drawn["small"] > 10 * len(corpora["small"])  # up-sampled far beyond its size
    for language, corpus in corpora.items():
        uses = Counter(text for text, lang in zip(texts, languages) if lang == language)
        full_passes = drawn[language] // len(corpus)
        # Every text is used full_passes or full_passes + 1 times: permutation after permutation.
        assert set(uses[text] for text in corpus) <= {full_passes, full_passes + 1}



def test_a_multilingual_sample_reads_dataset_columns_as_it_reads_lists():
    """The job samples the text columns of its datasets, which (datasets 4.0) take Python ints only, not numpy's."""
    lists = {"en": [f"en {i}" for i in range(30)], "de": [f"de {i}" for i in range(5)]}
    columns = {language: Dataset.from_dict({"text": texts})["text"] for language, texts in lists.items()}
    assert sample_multilingual_corpus(columns, 50, alpha=0.5, seed=3) == sample_multilingual_corpus(lists, 50, alpha=0.5,
                                                                                                     seed=3)


def test_multilingual_sample_errors():
    with pytest.raises(ValueError, match="n_samples must be >= 1"):
        sample_multilingual_corpus({"en": ["a"]}, 0)
    with pytest.raises(ValueError, match=r"empty: \['de'\]"):
        sample_multilingual_corpus({"en": ["a"], "de": []}, 10)




# ------------------------------------------------------------------------------------------------
# The languages of a run, and its phases
# ------------------------------------------------------------------------------------------------
def test_languages_are_named_by_the_files_stems_or_by_languages():
    assert language_names(["data/en.txt", "corpora/de.jsonl", "sw.txt"], None) == ["en", "de", "sw"]
    assert language_names(["a.txt", "b.txt"], ["fr", "zh-cn"]) == ["fr", "zh-cn"]


@pytest.mark.parametrize(("files", "given", "message"), [
    (["a.txt", "b.txt"], ["en"], "--languages names 1 language(s) for 2 --train_file(s): give one per file"),
    (["x/en.txt", "y/en.txt"], None, "two --train_file(s) for the language 'en' (x/en.txt, y/en.txt)"),
    (["a.txt", "b.txt"], ["de", "de"], "two --train_file(s) for the language 'de' (a.txt, b.txt)"),
    (["a.txt"], ["en us"], "language name 'en us': use letters, digits, - and _"),
])  # fmt: skip
def test_language_names_refuse_what_cannot_name_one_language_each(files, given, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        language_names(files, given)


def test_a_constant_mix_has_one_phase_of_every_language():
    mix = LanguageMix.parse(["en", "de"], 0.3)
    assert not mix.phased and mix.final_alpha == 0.3
    assert mix.phases(100) == [MixPhase(0, 100, 0.3, ("en", "de"))]
    assert mix.describe() == "2 languages (en, de), α 0.3"


def test_mmbert_s_annealed_schedule_and_late_languages_make_phases_at_their_steps():
    mix = LanguageMix.parse(["en", "de", "sw"], 1.0, "0.7,0.5@0.3,0.3@0.7", "sw@0.7")
    assert mix.phased and mix.final_alpha == 0.3
    assert mix.phases(100) == [
        MixPhase(0, 30, 0.7, ("en", "de")), MixPhase(30, 70, 0.5, ("en", "de")), MixPhase(70, 100, 0.3, ("en", "de", "sw")),
    ]  # fmt: skip
    assert mix.describe() == ("3 languages (en, de, sw), α 0.7, 0.5 from 30% of the steps, 0.3 from 70% of the steps; "
                              "joining late: sw from 70% of the steps")
    # Steps instead of fractions; a language joining where α does not change starts a phase of its own.
    steps = LanguageMix.parse(["en", "sw"], 1.0, "0.7,0.3@50", "sw@20")
    assert steps.phases(80) == [MixPhase(0, 20, 0.7, ("en",)), MixPhase(20, 50, 0.7, ("en", "sw")),
                                MixPhase(50, 80, 0.3, ("en", "sw"))]


@pytest.mark.parametrize(("alpha", "schedule", "late", "message"), [
    (0.0, "constant", None, "--language_sampling_alpha must lie in (0, 1]"),
    (1.5, "constant", None, "--language_sampling_alpha must lie in (0, 1]"),
    (1.0, "0.7,0@0.5", None, "--language_sampling_alpha_schedule alpha must lie in (0, 1]"),
    (1.0, "0.7,0.3", None, "every phase after the first starts @AT"),
    (1.0, "0.7@0.2,0.3@0.5", None, "the first phase starts at step 0"),
    (1.0, "0.7,0.5@0.6,0.3@0.4", None, "the phases must start in increasing order"),
    (1.0, "fast", None, "give constant, or phases ALPHA[@AT]"),
    (1.0, "0.7,0.3@1.5", None, "@1.5 is neither a fraction of the steps (below 1) nor a step"),
    (1.0, "constant", "fr@0.5", "'fr' is not one of the run's languages (en, sw)"),
    (1.0, "constant", "sw", "give the phase sw joins from, sw@AT"),
    (1.0, "constant", "sw@0", "sw@0 is no late language"),
    (1.0, "constant", "en@0.2,sw@0.5", "every language is late"),
    (1.0, "0.7,0.3@0.5", "sw@100", "give every @ as a fraction of the steps or every one as a step"),
])  # fmt: skip
def test_malformed_mixes_are_refused_in_one_line(alpha, schedule, late, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        LanguageMix.parse(["en", "sw"], alpha, schedule, late)


# ------------------------------------------------------------------------------------------------
# The rows of a run
# ------------------------------------------------------------------------------------------------
def _rows(language: str, count: int) -> Dataset:
    return Dataset.from_dict({"input_ids": [[index] for index in range(count)], "text": [f"{language} {index}" for index in range(count)],
                              "example_index": list(range(count))})


def _language_counts(rows: Dataset, languages: tuple[str, ...]) -> Counter:
    return Counter(languages[index] for index in rows["language_id"])


def test_one_phase_draws_every_row_at_least_once_and_small_languages_as_often_as_q_asks():
    rows = {"en": _rows("en", 900), "sw": _rows("sw", 100)}
    mixed = mix_rows(rows, LanguageMix.parse(["en", "sw"], 0.3), seed=0)
    assert not mixed.in_order and mixed.languages == ("en", "sw")
    texts = mixed.rows["text"]
    assert all(text.startswith(mixed.languages[index]) for text, index in zip(texts, mixed.rows["language_id"]))
    assert {*texts} == {f"en {index}" for index in range(900)} | {f"sw {index}" for index in range(100)}
    # interleave_datasets' "all_exhausted" ends once the largest share is used up: en's 900 rows at q_en.
    q = language_sampling_probs({"en": 900, "sw": 100}, 0.3)
    counts = _language_counts(mixed.rows, mixed.languages)
    assert counts["en"] == 900
    assert counts["sw"] / len(mixed.rows) == pytest.approx(q["sw"], abs=4 * math.sqrt(q["sw"] * q["en"] / len(mixed.rows)))
    # A repeated row gets masks of its own: the rows are numbered anew.
    assert mixed.rows["example_index"] == list(range(len(mixed.rows)))
    again = mix_rows(rows, LanguageMix.parse(["en", "sw"], 0.3), seed=0)
    assert again.rows["text"] == texts  # seeded
    assert mix_rows(rows, LanguageMix.parse(["en", "sw"], 0.3), seed=1).rows["text"] != texts


def test_each_phase_draws_exactly_the_rows_of_its_steps_in_training_order():
    rows = {"en": _rows("en", 300), "de": _rows("de", 100), "sw": _rows("sw", 10)}
    mix = LanguageMix.parse(["en", "de", "sw"], 1.0, "1.0,0.3@0.5", "sw@0.75")
    per_step = 8
    mixed = mix_rows(rows, mix, seed=0, total_steps=40, rows_before=lambda step: step * per_step)
    assert mixed.in_order and len(mixed.rows) == 40 * per_step
    phases = [mixed.rows.select(range(start * per_step, end * per_step)) for start, end in ((0, 20), (20, 30), (30, 40))]
    first, second, third = (_language_counts(part, mixed.languages) for part in phases)
    assert first["sw"] == second["sw"] == 0 and third["sw"] > 0  # sw only from its phase on
    assert second["de"] / 80 > first["de"] / 160  # α 0.3 draws the smaller language more than α 1 does
    assert mixed.rows["example_index"] == list(range(40 * per_step))


def test_a_language_without_rows_is_refused_in_one_line():
    with pytest.raises(UsageError, match=re.escape("the language 'sw' has no training rows")):
        mix_rows({"en": _rows("en", 5), "sw": _rows("sw", 0)}, LanguageMix.parse(["en", "sw"], 0.3), seed=0)


# ------------------------------------------------------------------------------------------------
# Words and pieces
# ------------------------------------------------------------------------------------------------
def test_words_are_runs_between_spaces_and_each_character_of_unspaced_scripts():
    assert count_words("the cat, sat") == 3
    assert count_words("これはペンです。") == 7 + 1  # seven kana, and the full stop as a run of its own
    assert count_words("Debian リファレンス 2.100") == 1 + 6 + 1
    assert count_words("中文 text") == 3


def test_pieces_per_word_counts_the_tokenizer_s_pieces_without_special_tokens(tokenizer):
    texts = ["the film was good", "unbelievably"]
    pieces = sum(len(tokenizer.tokenize(text)) for text in texts)
    assert pieces_per_word(tokenizer, texts) == pytest.approx(pieces / 5)
    assert pieces > 5  # "unbelievably" is more than one piece of MiniLM's vocabulary
    assert math.isnan(pieces_per_word(tokenizer, ["   "]))
