"""Several languages in one pretraining run, end to end (``mlm-suite pretrain --train_file en.txt de.txt sw.txt``,
docs/pretraining.md#several-languages): per-language results in all_results.json, the printout and the card; the shares
counted are the rows trained on; a late language draws no row before its phase; a resumed run reports the
uninterrupted run's shares; a Unigram vocabulary with word-aware masking; a new language added to a continued
checkpoint that exports as its family's own class; and the one-line refusals."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from mlm_suite.cards.pretraining import BUILTIN_DATA
from tests.helpers import (
    TINY_PRETRAIN_MODEL, assert_refused, assert_valid_model_card, make_native_model, max_difference, read_json,
    roberta_tokenizer, run_command, weights, write_text, xlm_roberta_tokenizer,
)  # fmt: skip

VOCABULARIES = {
    "en": "the cat sat on a mat and the dog ran to the park with its red ball".split(),
    "de": "der hund lief schnell über die straße und die katze schlief im warmen haus".split(),
    "sw": "mtoto anakula chakula na mama yake anapika nyumbani kila siku".split(),
}
DOCUMENTS = {"en": 60, "de": 20, "sw": 6}


def documents(language: str, count: int, seed: int = 0) -> list[str]:
    rng = random.Random(f"{language}{seed}")
    return [" ".join(rng.choices(VOCABULARIES[language], k=rng.randint(6, 14))) for _ in range(count)]


@pytest.fixture(scope="module")
def language_files(tmp_path_factory) -> dict[str, Path]:
    """One file per language, of 60, 20 and 6 documents: a big, a middle and a small language."""
    folder = tmp_path_factory.mktemp("languages")
    return {language: write_text(folder / f"{language}.txt", documents(language, count))
            for language, count in DOCUMENTS.items()}


def pretrain(output_dir: Path, files, *extra, steps: int = 8, new_model: bool = True) -> list:
    """``mlm-suite pretrain`` of a tiny model for ``steps`` steps (``new_model``: a new one with a vocabulary trained on
    the files, else the flags continue one) on ``files``, no evaluation during training; ``extra`` flags last."""
    model = ["--config_overrides", TINY_PRETRAIN_MODEL, "--vocab_size", "120"] if new_model else []
    return [
        "pretrain", "--output_dir", output_dir, "--train_file", *files, *model,
        "--max_seq_length", "32", "--per_device_train_batch_size", "4", "--max_steps", str(steps), "--logging_steps",
        "1", "--eval_strategy", "no", "--fill_mask_probes", "0", "--validation_split_percentage",
        "20", "--report_to", "none", "--disable_tqdm", "true", "--dataloader_pin_memory", "false", *extra,
    ]  # fmt: skip


def test_a_run_of_three_languages_reports_each_and_up_samples_the_small_one(language_files, tmp_path, capsys):
    """One epoch at α 0.3: every language's results; the shares are of the rows trained on (whole rows of the run),
    and the small language's is above its share of the documents."""
    output_dir = tmp_path / "out"
    outcome = run_command(pretrain(output_dir, language_files.values(), "--language_sampling_alpha", "0.3", "--max_steps",
                                   "-1", "--num_train_epochs", "1"), capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    results = read_json(output_dir / "all_results.json")
    shares = {language: results[f"train_language_share_{language}"] for language in DOCUMENTS}
    rows = results["train_samples"]
    assert sum(shares.values()) == pytest.approx(1.0)
    assert all(abs(share * rows - round(share * rows)) < 1e-6 for share in shares.values())  # whole rows
    assert shares["sw"] > DOCUMENTS["sw"] / sum(DOCUMENTS.values())
    for language in DOCUMENTS:
        for key in ("mask_accuracy", "mask_baseline_accuracy", "mask_top5_accuracy", "mlm_loss", "mask_tokens"):
            assert f"eval_{language}_{key}" in results
        assert results[f"{language}_pieces_per_word"] >= 1.0
        assert results[f"eval_{language}_mask_tokens"] > 0
    # Each language is a part of the held-out rows, scored with the same masks: the parts add up to the whole.
    assert sum(results[f"eval_{language}_mask_tokens"] for language in DOCUMENTS) == results["eval_mask_tokens"]
    assert "per language (held-out [MASK] accuracy against each language's own baseline):" in outcome.out
    card = (output_dir / "README.md").read_text()
    assert_valid_model_card(card)
    assert "### Per language" in card and "| sw | 5 |" in card  # 6 documents, one held out
    assert "| languages | 3 languages (en, de, sw), α 0.3 |" in card


def test_phases_late_languages_and_a_resumed_run(language_files, tmp_path, capsys):
    """mmBERT's annealed exponent and a language held back to the second half: no sw row before step 4 (the checkpoint's
    count), and resuming there ends with the uninterrupted run's shares and weights."""
    schedule = ["--language_sampling_alpha_schedule", "0.7,0.3@0.5", "--late_languages", "sw@0.5",
                "--learning_rate", "1e-3", "--seed", "3"]
    full = tmp_path / "full"
    outcome = run_command(pretrain(full, language_files.values(), *schedule, "--save_strategy", "steps", "--save_steps",
                                   "4"), capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    halfway = read_json(full / "checkpoint-4" / "trainer_state.json")["stateful_callbacks"]["LanguageRows"]["attributes"]
    assert halfway["rows"]["sw"] == 0 and sum(halfway["rows"].values()) == 4 * 4
    results = read_json(full / "all_results.json")
    assert 0 < results["train_language_share_sw"] <= 0.5
    resumed = tmp_path / "resumed"
    outcome = run_command(pretrain(resumed, language_files.values(), *schedule, "--resume_from_checkpoint",
                                   full / "checkpoint-4"), capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    again = read_json(resumed / "all_results.json")
    for language in DOCUMENTS:
        assert again[f"train_language_share_{language}"] == results[f"train_language_share_{language}"]
    assert max_difference(weights(full), weights(resumed)) < 1e-6


KANA = ["ねこ", "いぬ", "とり", "さかな", "たべる", "はしる", "みる", "あおい", "しろい", "ちいさい"]


@pytest.mark.parametrize("masking", ["whole_word", "span"])
def test_a_unigram_vocabulary_learns_a_language_written_without_spaces(tmp_path, capsys, masking):
    rng = random.Random(0)
    japanese = write_text(tmp_path / "ja.txt", ["".join(rng.choices(KANA, k=rng.randint(3, 7))) + "。" for _ in range(60)])
    english = write_text(tmp_path / "en.txt", documents("en", 60))
    output_dir = tmp_path / "out"
    outcome = run_command(pretrain(output_dir, [english, japanese], "--tokenizer_type", "unigram", "--masking", masking),
                          capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    model = read_json(output_dir / "tokenizer.json")["model"]
    assert model["type"] == "Unigram"
    pieces = {piece.lstrip("▁") for piece, _ in model["vocab"]}
    assert {"ねこ", "さかな", "しろい"} <= pieces  # words inside space-free text, learnt as pieces
    results = read_json(output_dir / "all_results.json")
    assert results["ja_pieces_per_word"] < 1.0  # fewer pieces than characters


def test_a_new_language_for_a_continued_model_exports_as_its_family_s_class(tiny_model, language_files, tmp_path, capsys):
    """MiniLM's vocabulary (English) extended with German pieces: the model loads through the Auto classes with the
    larger vocabulary, and export-native writes a BertForMaskedLM whose logits equal the eager model's."""
    from transformers import AutoTokenizer, BertForMaskedLM

    output_dir = continued_on_german(tiny_model, 10, tmp_path, capsys)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    old = AutoTokenizer.from_pretrained(tiny_model)
    assert len(tokenizer) == len(old) + 10 == read_json(output_dir / "config.json")["vocab_size"]
    results = read_json(output_dir / "all_results.json")
    assert results["pieces_per_word_after_extension"] < results["pieces_per_word_before_extension"]
    assert "| vocabulary extension | 10 pieces learnt from the training text by WordPiece" in (output_dir / "README.md").read_text()
    assert_exported_equals_eager(output_dir, tmp_path / "native", [], BertForMaskedLM, len(old), capsys)


def continued_on_german(source, pieces, tmp_path, capsys):
    """The folder of ``source`` continued for 2 steps on German text with ``--extend_vocabulary pieces``."""
    german = write_text(tmp_path / "de.txt", documents("de", 80))
    output_dir = tmp_path / "extended"
    outcome = run_command(pretrain(output_dir, [german], "--model_name_or_path", source, "--extend_vocabulary", str(pieces),
                                   steps=2, new_model=False), capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    return output_dir


def assert_exported_equals_eager(output_dir, native, flags, native_class, old_size, capsys):
    """export-native writes ``native_class`` with the extended vocabulary, whose logits on German text (which reads
    the new pieces, ids from ``old_size`` on) equal the eager model's, loaded through the Auto classes."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert run_command(["export-native", output_dir, native, *flags], capsys).status == 0
    exported = native_class.from_pretrained(native).eval()
    model = AutoModelForMaskedLM.from_pretrained(output_dir, trust_remote_code=True).eval()
    assert exported.config.vocab_size == len(tokenizer)
    batch = tokenizer(documents("de", 3, seed=9), padding=True, return_tensors="pt")
    assert any(index >= old_size for index in batch["input_ids"].flatten().tolist())  # the new pieces are read
    real = batch["attention_mask"].bool()  # padding's logits are nobody's answer
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits[real], exported(**batch).logits[real], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("family", "make_tokenizer", "native_class"), [
    ("roberta", roberta_tokenizer, "RobertaForMaskedLM"), ("xlm-roberta", xlm_roberta_tokenizer, "XLMRobertaForMaskedLM"),
])  # fmt: skip
def test_a_bpe_or_unigram_checkpoint_extended_exports_as_its_family_s_class(family, make_tokenizer, native_class, tmp_path,
                                                                          capsys):
    """RoBERTa's byte-level BPE (new merges after the old) and XLM-R's Unigram (new pieces with their scores): the
    continued checkpoint, converted on the fly, trains with the larger vocabulary and exports as the family's class."""
    import transformers
    from transformers import AutoTokenizer

    tokenizer = make_tokenizer(documents("en", 200))
    source = tmp_path / family
    make_native_model(family, "ForMaskedLM", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                      max_position_embeddings=66 + tokenizer.pad_token_id).save_pretrained(source)
    tokenizer.save_pretrained(source)
    output_dir = continued_on_german(source, 8, tmp_path, capsys)
    extended = AutoTokenizer.from_pretrained(output_dir)
    assert len(extended) == len(tokenizer) + 8
    assert_exported_equals_eager(output_dir, tmp_path / "native", ["--family", family], getattr(transformers, native_class),
                                 len(tokenizer), capsys)


@pytest.mark.parametrize(("extra", "message"), [
    (["--languages", "en", "en", "de"], "two --train_file(s) for the language 'en'"),
    (["--languages", "en", "de"], "--languages names 2 language(s) for 3 --train_file(s): give one per file"),
    (["--language_sampling_alpha", "0"], "--language_sampling_alpha must lie in (0, 1], got 0.0"),
    (["--language_sampling_alpha", "1.5"], "--language_sampling_alpha must lie in (0, 1], got 1.5"),
    (["--late_languages", "fr@0.5"], "'fr' is not one of the run's languages (en, de, sw)"),
    (["--language_sampling_alpha_schedule", "0.7,0.3@0.5", "--max_steps", "-1"],
     "--language_sampling_alpha_schedule / --late_languages needs --max_steps N"),
    (["--late_languages", "sw@0.5", "--max_train_minutes", "1"], "--max_train_minutes cannot be combined with"),
    (["--late_languages", "sw@20"], "--late_languages sw@20: sw would join after the run's last step (--max_steps 8)"),
    (["--extend_vocabulary", "10"], "--extend_vocabulary adds pieces to a continued checkpoint's tokenizer: it needs "
                                    "--model_name_or_path"),
    (["--builtin_dataset", "debian_reference"], "--builtin_dataset is for runs without --train_file"),
])  # fmt: skip
def test_bad_language_flags_are_refused_in_one_line_before_anything_is_written(language_files, tmp_path, capsys,
                                                                               extra, message):
    output_dir = tmp_path / "out"
    assert_refused(run_command(pretrain(output_dir, language_files.values(), *extra), capsys), "pretrain", message)
    assert not output_dir.exists()


def test_alpha_flags_need_several_languages_and_a_language_needs_rows(language_files, tmp_path, capsys):
    output_dir = tmp_path / "out"
    outcome = run_command(pretrain(output_dir, [language_files["en"]], "--language_sampling_alpha", "0.3"), capsys)
    assert_refused(outcome, "pretrain", "--language_sampling_alpha draws across languages: give one --train_file per "
                                        "language")
    empty = write_text(tmp_path / "xx.txt", ["   ", ""])
    outcome = run_command(pretrain(output_dir, [language_files["en"], empty]), capsys)
    assert_refused(outcome, "pretrain", "xx.txt")
    assert not (output_dir / "model.safetensors").exists()
    outcome = run_command(pretrain(output_dir, [language_files["en"]], "--tokenizer_type", "unigram", "--train_tokenizer",
                                   "false", new_model=False), capsys)
    assert_refused(outcome, "pretrain", "--tokenizer_type unigram is the kind of vocabulary a run trains; this run takes a "
                                        "fixed tokenizer: drop it")


def test_held_out_files_and_built_in_languages_are_checked_against_the_run_s_languages(language_files, tmp_path, capsys):
    output_dir = tmp_path / "out"
    outcome = run_command(pretrain(output_dir, language_files.values(), "--validation_file", language_files["en"]), capsys)
    assert_refused(outcome, "pretrain", "--validation_file names 1 file(s) for 3 training file(s): give one per "
                                        "--train_file (per language), or none to hold documents out of each")
    builtin = ["pretrain", "--builtin_dataset", "debian_reference", "--output_dir", output_dir]
    assert_refused(run_command([*builtin, "--languages", "en", "ru"], capsys), "pretrain",
                   "--languages en ru: the Debian Reference has no 'ru' (it has en de fr es it pt ja zh)")
    assert_refused(run_command(["pretrain", "--languages", "en", "de", "--output_dir", output_dir], capsys), "pretrain",
                   "--languages names the language of each --train_file, or picks languages of --builtin_dataset")
    assert_refused(run_command([*builtin, "--validation_file", language_files["en"]], capsys), "pretrain",
                   "--validation_file with --builtin_dataset: the built-in corpus holds out documents of each language")
    assert not output_dir.exists()


def test_the_debian_reference_is_named_in_the_card_with_its_languages():
    dataset = BUILTIN_DATA["debian_reference"]
    assert dataset.language == ["en", "de", "fr", "es", "it", "pt", "ja", "zh"] and "GPL-2+" in dataset.name


def test_streamed_languages_resume_where_they_stopped(language_files, tiny_model, tmp_path, capsys):
    """``--streaming`` of one file per language: the streams interleaved with α over the files' sizes, each process its
    part of each; a run resumed at step 4 ends with the uninterrupted run's shares and weights (the mixed stream's
    position is restored)."""
    common = ["--streaming", "--tokenizer_name", tiny_model, "--language_sampling_alpha", "0.3", "--held_out_documents",
              "3", "--learning_rate", "1e-3"]
    full = tmp_path / "full"
    outcome = run_command(pretrain(full, language_files.values(), *common, "--save_strategy", "steps", "--save_steps", "4",
                                   "--config_overrides", TINY_PRETRAIN_MODEL, new_model=False), capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    results = read_json(full / "all_results.json")
    assert all(results[f"train_language_share_{language}"] > 0 for language in DOCUMENTS)
    assert results["eval_sw_mask_tokens"] > 0 and results["train_samples"] == 8 * 4
    resumed = tmp_path / "resumed"
    outcome = run_command(pretrain(resumed, language_files.values(), *common, "--resume_from_checkpoint",
                                   full / "checkpoint-4", "--config_overrides", TINY_PRETRAIN_MODEL, new_model=False), capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    again = read_json(resumed / "all_results.json")
    assert {key: again[key] for key in results if key.startswith("train_language_share_")} == {
        key: value for key, value in results.items() if key.startswith("train_language_share_")}
    assert max_difference(weights(full), weights(resumed)) < 1e-6
