"""Tag sets that are not entity schemes (scheme "none", e.g. POS): detection, token-level scores
counted by hand, the paired bootstrap on token accuracy, the token-classification job end to end on
a tiny POS file, the OANC reader, and data errors that name the file and its 1-based line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer

from mlm_suite import MlmSuiteConfig, MlmSuiteModel
from mlm_suite.data.inputs import downloads
from mlm_suite.data.finetuning.alignment import SentenceWindows
from mlm_suite.evaluation.tagging_metrics import ner_compute_metrics
from mlm_suite.jobs import finetune_ner
from mlm_suite.jobs.common.output_folder import release_output_folder
from mlm_suite.data.inputs.readers import read_conll, read_ner_file
from mlm_suite.evaluation.entities import entity_scores, make_compute_metrics, paired_bootstrap, tag_scores
from mlm_suite.data.finetuning.tagging import (
    NO_SCHEME,
    InvalidTagSequenceError,
    UnknownTagError,
    convert_tags,
    detect_scheme,
    line_locator,
    normalize_scheme,
    settle_scheme,
    validate_tags,
)
from tests.helpers import assert_linked_png

FAST = ["--max_steps", "2", "--report_to", "none", "--per_device_eval_batch_size", "4", "--disable_tqdm", "true"]

# (words, Penn tags); every word is in the MiniLM vocabulary.
POS = [
    ("the cat sleeps .".split(), ["DT", "NN", "VBZ", "."]),
    ("john lives in paris".split(), ["NNP", "VBZ", "IN", "NNP"]),
    ("she has two small dogs".split(), ["PRP", "VBZ", "CD", "JJ", "NNS"]),
    ("we saw her car , and it was red".split(), ["PRP", "VBD", "PRP$", "NN", ",", "CC", "PRP", "VBD", "JJ"]),
    ("they will run quickly".split(), ["PRP", "MD", "VB", "RB"]),
    ("a big house".split(), ["DT", "JJ", "NN"]),
]


def write_pos_conll(path: Path, sentences) -> Path:
    lines = []
    for words, tags in sentences:
        lines += [f"{word}\t{tag}" for word, tag in zip(words, tags)] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def results(folder: Path) -> dict:
    return json.loads((folder / "all_results.json").read_text())


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer mlm_suite encoder with the MiniLM tokenizer (as in test_finetune)."""
    folder = tmp_path_factory.mktemp("tiny_model")
    tokenizer = AutoTokenizer.from_pretrained(downloads.minilm_dir())
    config = MlmSuiteConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=128,
    )
    torch.manual_seed(0)
    MlmSuiteModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------------------------
# Scheme detection and validation
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sequences", "expected"),
    [
        ([["DT", "NN", "VBZ"], ["PRP$", ",", "."]], "none"),
        ([["NN", "O"]], "none"),  # a stray O among non-entity tags
        ([["-LRB-", "CD", "-RRB-"]], "none"),  # Penn bracket tags start with a hyphen, not a prefix
        ([["B-PER", "I-PER", "O"], ["O", "B-LOC"]], "BIO"),  # a pure BIO file is still BIO
        ([["O", "O"]], "BIO"),
        ([["I-PER", "O"]], "IO"),
    ],
)
def test_detect_scheme_none_and_entity_schemes(sequences, expected):
    assert detect_scheme(sequences) == expected


def test_detect_scheme_refuses_entity_tags_mixed_with_others():
    with pytest.raises(UnknownTagError, match=r"sentence 1, position 1: unknown tag 'NN'.*scheme is 'none'"):
        detect_scheme([["B-PER", "O"], ["O", "NN"]])
    with pytest.raises(UnknownTagError, match=r"position 1: empty or non-text tag ''"):
        detect_scheme([["NN", ""]])


def test_scheme_none_names_and_validation():
    assert normalize_scheme("None", allow_none=True) == NO_SCHEME
    with pytest.raises(ValueError, match="has no entities"):
        normalize_scheme("none")  # the entity functions refuse it
    validate_tags(["PRP$", "VBG|NN", "B-X", "I-PER", "O"], "none")  # anything but empty tags
    with pytest.raises(UnknownTagError, match="sentence 2, position 1: empty or non-text tag ''"):
        validate_tags(["NN", ""], "none", sentence_index=2)
    assert convert_tags(["NN", "VB"], "none", "NONE") == ["NN", "VB"]
    with pytest.raises(ValueError, match="cannot convert none tags to BIO"):
        convert_tags(["NN"], "none", "BIO")
    with pytest.raises(ValueError, match="no entities to score: use tag_scores"):
        entity_scores([["NN"]], [["NN"]], scheme="none")


# --------------------------------------------------------------------------------------------
# Token-level scores, counted by hand
# --------------------------------------------------------------------------------------------
GOLD = [["DT", "NN", "VBZ", "."], ["PRP", "VBD", "NN"]]
PRED = [["DT", "NN", "NN", "."], ["PRP", "VBD", "JJ"]]
# 7 tokens, 5 right (positions 2 of sentence 0 and 2 of sentence 1 are wrong).
# tag : tp, predicted, gold  →  precision, recall, F1
#  .  : 1, 1, 1  → 1,   1,   1
#  DT : 1, 1, 1  → 1,   1,   1
#  JJ : 0, 1, 0  → 0,   0,   0
#  NN : 1, 2, 2  → 1/2, 1/2, 1/2
#  PRP: 1, 1, 1  → 1,   1,   1
#  VBD: 1, 1, 1  → 1,   1,   1
#  VBZ: 0, 0, 1  → 0,   0,   0
HAND = {
    ".": (1.0, 1.0, 1.0, 1), "DT": (1.0, 1.0, 1.0, 1), "JJ": (0.0, 0.0, 0.0, 0), "NN": (0.5, 0.5, 0.5, 2),
    "PRP": (1.0, 1.0, 1.0, 1), "VBD": (1.0, 1.0, 1.0, 1), "VBZ": (0.0, 0.0, 0.0, 1),
}


def test_tag_scores_match_hand_counts():
    scores = tag_scores(GOLD, PRED)
    assert scores["accuracy"] == pytest.approx(5 / 7)
    assert scores["n_tokens"] == 7
    assert list(scores["per_tag"]) == sorted(HAND)  # every tag in gold or pred, sorted
    for tag, (precision, recall, f1, support) in HAND.items():
        assert scores["per_tag"][tag] == {
            "precision": pytest.approx(precision), "recall": pytest.approx(recall), "f1": pytest.approx(f1),
            "support": support,
        }, tag
    # Macro: unweighted means over the 7 tags.
    assert scores["macro_precision"] == pytest.approx(4.5 / 7)
    assert scores["macro_recall"] == pytest.approx(4.5 / 7)
    assert scores["macro_f1"] == pytest.approx(4.5 / 7)
    # Micro: pooled counts, tp 5 of 7 predicted and 7 gold.
    for key in ("micro_precision", "micro_recall", "micro_f1"):
        assert scores[key] == pytest.approx(5 / 7), key


def test_tag_scores_macro_f1_is_the_mean_of_f1s_not_the_f1_of_means():
    # NN: tp 1, predicted 1, gold 2 → P 1, R 1/2, F1 2/3. VB: tp 1, predicted 2, gold 1 → P 1/2, R 1, F1 2/3.
    scores = tag_scores([["NN", "NN", "VB"]], [["NN", "VB", "VB"]])
    assert scores["per_tag"]["NN"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2}
    assert scores["per_tag"]["VB"] == {"precision": 0.5, "recall": 1.0, "f1": pytest.approx(2 / 3), "support": 1}
    assert scores["macro_precision"] == pytest.approx(0.75)
    assert scores["macro_recall"] == pytest.approx(0.75)
    assert scores["macro_f1"] == pytest.approx(2 / 3)  # the F1 of the macro P and R would be 0.75
    assert scores["micro_f1"] == scores["accuracy"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="sentence 0: gold has 3 tags but pred has 2"):
        tag_scores([["NN", "NN", "NN"]], [["NN", "VB"]])


def test_compute_metrics_for_scheme_none_reports_flat_token_scores():
    labels = [".", "DT", "JJ", "NN", "PRP", "VBD", "VBZ"]
    ids = {label: index for index, label in enumerate(labels)}

    def rows(sequences):
        array = np.full((len(sequences), 6), -100)
        for row, tags in enumerate(sequences):
            array[row, 1:1 + len(tags)] = [ids[tag] for tag in tags]  # position 0 is [CLS]: not scored
        return array

    label_ids = rows(GOLD)
    predictions = rows(PRED)
    predictions[predictions == -100] = ids["JJ"]  # unscored positions predict anything
    metrics = make_compute_metrics(labels, scheme="none")((predictions, label_ids))
    assert metrics["accuracy"] == pytest.approx(5 / 7)
    assert metrics["macro_f1"] == pytest.approx(4.5 / 7)
    assert metrics["micro_f1"] == pytest.approx(5 / 7)
    assert metrics["n_tokens"] == 7
    assert metrics["tag_NN_precision"] == pytest.approx(0.5) and metrics["tag_NN_support"] == 2
    assert metrics["tag_VBZ_recall"] == 0.0 and metrics["tag_VBZ_support"] == 1
    assert metrics["tag_._f1"] == 1.0
    assert "f1" not in metrics and "precision" not in metrics  # no entity scores


def test_ner_compute_metrics_scores_the_sentence_its_windows_hold():
    """A 6-word sentence in two windows sharing words 2 and 3 (window 1 starts with word 2, which it leaves
    unlabelled): the entity over words 3-4 crosses window 0's edge, and word 3 is labelled in both windows."""
    labels = ["O", "B-PER", "I-PER"]
    word_ids = [[None, 0, 1, 2, 3, None], [None, 2, 3, 4, 5, None], [None, 0, 1, None]]
    windows = SentenceWindows([0, 0, 1], word_ids)
    # words: O O O B-PER I-PER O | B-PER O
    label_ids = np.array([[-100, 0, 0, 0, 1, -100], [-100, -100, 1, 2, 0, -100], [-100, 1, 0, -100, -100, -100]])
    predictions = np.where(label_ids == -100, 0, label_ids)
    predictions[0, 4] = 0  # window 0 misses the entity's first word, which window 1 reads with more context
    id2label = dict(enumerate(labels))
    metrics = ner_compute_metrics(id2label, "BIO", "conlleval")((predictions, label_ids), windows)
    assert (metrics["n_sentences"], metrics["gold_entities"], metrics["n_tokens"]) == (2, 2, 8)
    assert metrics["f1"] == metrics["strict_f1"] == metrics["accuracy"] == 1.0
    tags = ner_compute_metrics(id2label, "none", "conlleval")((predictions, label_ids), windows)  # as POS tags
    assert (tags["n_sentences"], tags["n_tokens"], tags["accuracy"]) == (2, 8, 1.0)


def test_paired_bootstrap_on_token_accuracy():
    gold = [["NN", "VB", "DT"], ["NN", "NN"], ["DT", "NN", "VB", "IN"]]
    a = [["NN", "VB", "DT"], ["NN", "NN"], ["DT", "NN", "VB", "NN"]]  # 8 of 9 right
    b = [["NN", "NN", "DT"], ["NN", "VB"], ["DT", "NN", "VB", "NN"]]  # 6 of 9 right
    result = paired_bootstrap(gold, a, b, n_samples=2000, seed=0, scheme="none")
    assert result["metric"] == "accuracy"
    assert result["accuracy_a"] == pytest.approx(8 / 9) and result["accuracy_b"] == pytest.approx(6 / 9)
    assert result["delta"] == pytest.approx(2 / 9)
    # Recompute the p-value with the same draws, from per-sentence [correct, tokens] counts.
    counts = np.array([[3, 2, 3], [2, 1, 2], [3, 3, 4]])  # correct_a, correct_b, tokens
    draws = np.random.default_rng(0).multinomial(3, np.full(3, 1 / 3), size=2000)
    totals = draws @ counts
    deltas = totals[:, 0] / totals[:, 2] - totals[:, 1] / totals[:, 2]
    assert result["p_value"] == pytest.approx(np.mean(deltas >= 2 * (2 / 9) - 1e-12))
    assert 0.0 < result["p_value"] < 1.0
    # Identical systems: delta 0, p 1; the other direction is not significant.
    assert paired_bootstrap(gold, a, a, scheme="none")["p_value"] == 1.0
    assert paired_bootstrap(gold, b, a, scheme="none")["delta"] == pytest.approx(-2 / 9)
    with pytest.raises(ValueError, match="no entities, so no entity F1"):
        paired_bootstrap(gold, a, b, scheme="none", metric="f1")


# --------------------------------------------------------------------------------------------
# Line numbers in data errors
# --------------------------------------------------------------------------------------------
def test_conll_errors_name_the_file_and_its_line(tiny_model, tmp_path):
    path = tmp_path / "train.txt"
    # line 1-2: a document separator and a blank line; the bad tag is on line 6
    path.write_text("-DOCSTART- O\n\nJohn B-PER\nlives O\n\nin O\nParis B-xyz\n", encoding="utf-8")
    sentences, lines = read_conll(path, with_lines=True)
    assert sentences == [(["John", "lives"], ["B-PER", "O"]), (["in", "Paris"], ["O", "B-xyz"])]
    assert lines == [[3, 4], [6, 7]]
    base = ["--model_name_or_path", str(tiny_model), "--train_file", str(path), "--output_dir", str(tmp_path / "o"),
            *FAST]
    with pytest.raises(ValueError, match=rf"^{path} line 7: tag 'B-xyz' is not in the label list"):
        finetune_ner.main([*base, "--label_list", "O", "B-PER", "I-PER"])
    with pytest.raises(InvalidTagSequenceError, match=rf"^{path} line 3: B-PER is not a IO tag"):
        finetune_ner.main([*base, "--tagging_scheme", "IO"])
    path.write_text("-DOCSTART- O\n\nJohn B-PER\nlives O\n\nin O\nParis I-LOC\n", encoding="utf-8")
    with pytest.raises(InvalidTagSequenceError, match=rf"^{path} line 7: I-LOC after O is not allowed in BIO"):
        finetune_ner.main([*base, "--tagging_scheme", "BIO"])
    path.write_text("John B-PER\nlives O\n\nin O\nParis B-\n", encoding="utf-8")
    with pytest.raises(UnknownTagError) as error:
        finetune_ner.main(base)
    message = str(error.value)
    assert f"{path} line 5: unknown tag 'B-'" in message and "\n" not in message
    path.write_text("John B-PER\nlives\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{path} line 2: expected 'token ... tag'"):
        finetune_ner.main(base)
    release_output_folder(tmp_path / "o")  # as run_job does when a job ends: the claim held nothing else
    assert not (tmp_path / "o").exists()


def test_json_lines_errors_name_line_and_token(tmp_path):
    path = tmp_path / "dev.jsonl"
    path.write_text('{"tokens": ["a", "b"], "ner_tags": ["O", "B-PER"]}\n\n'
                    '{"tokens": ["c", "d", "e"], "ner_tags": ["O", "O", "I-PER"]}\n', encoding="utf-8")
    source = read_ner_file(str(path), "tokens", "ner_tags")
    with pytest.raises(InvalidTagSequenceError, match=rf"^{path} line 3, token 3: I-PER after O is not allowed in BIO"):
        settle_scheme({"train": source}, "BIO", None)
    locate = line_locator("f.txt", [[4, 5, 6]])
    assert locate(0, 2) == "f.txt line 6"
    with pytest.raises(InvalidTagSequenceError, match=r"^f.txt line 5: I-PER after O"):
        validate_tags(["O", "I-PER", "I-PER"], "BIO", sentence_index=0, locate=locate)


# --------------------------------------------------------------------------------------------
# The job end to end on a POS file
# --------------------------------------------------------------------------------------------
def test_pos_job_reports_token_accuracy_and_per_tag_scores(tiny_model, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    out = tmp_path / "out"
    finetune_ner.main([
        "--model_name_or_path", str(tiny_model),
        "--train_file", str(write_pos_conll(data / "train.txt", POS * 3)),
        "--validation_file", str(write_pos_conll(data / "dev.txt", POS[:4])),
        "--test_file", str(write_pos_conll(data / "test.txt", POS[2:])),
        "--eval_strategy", "steps", "--eval_steps", "1", "--early_stopping_patience", "5",
        "--output_dir", str(out), *FAST,
    ])
    metrics = results(out)
    n_tokens = {"eval": sum(len(w) for w, _ in POS[:4]), "test": sum(len(w) for w, _ in POS[2:])}
    for split in ("eval", "test"):
        assert 0.0 <= metrics[f"{split}_accuracy"] <= 1.0
        assert metrics[f"{split}_micro_f1"] == pytest.approx(metrics[f"{split}_accuracy"])
        assert 0.0 <= metrics[f"{split}_macro_f1"] <= 1.0
        assert metrics[f"{split}_n_tokens"] == n_tokens[split]  # every word scored once, at word level
        assert f"{split}_f1" not in metrics and f"{split}_gold_entities" not in metrics
    # support per tag adds up to the tokens; the test split has 4 PRP tokens and 1 PRP$
    assert sum(v for k, v in metrics.items() if k.startswith("test_tag_") and k.endswith("_support")) == n_tokens["test"]
    assert metrics["test_tag_PRP_support"] == 4 and metrics["test_tag_PRP$_support"] == 1
    # early stopping watched validation accuracy, and the reported score is the best model's
    state = json.loads(next(out.glob("checkpoint-*/trainer_state.json")).read_text())
    assert state["best_metric"] == metrics["eval_accuracy"]

    config = json.loads((out / "config.json").read_text())
    assert config["tagging_scheme"] is None
    assert sorted(config["label2id"]) == sorted({tag for _, tags in POS for tag in tags})
    card = (out / "README.md").read_text()
    assert "**none**" in card and "| PRP$ | 1 |" in card and "test_accuracy" in card
    assert "test_tag_" not in card.split("Per tag")[0]  # the metric table lists averages, the per-tag table the rest
    for split, prefix in (("validation", "eval"), ("test", "test")):
        caption = assert_linked_png(out, f"per_tag_scores_{split}.png")
        assert f"per-tag token scores on the {split} split (accuracy {metrics[f'{prefix}_accuracy']:.4f})" in caption
    assert not list(out.glob("per_type_scores_*.png"))
    printed = capsys.readouterr().out
    assert "tagging scheme 'none'" in printed
    assert "test accuracy" in printed and "per tag (test split" in printed and "PRP$" in printed


def test_pos_job_with_crf_and_hf_baseline(tiny_model, tmp_path):
    """An unconstrained CRF over POS tags trains and decodes; --compare_hf bootstraps token accuracy."""
    train = write_pos_conll(tmp_path / "train.txt", POS * 3)
    test = write_pos_conll(tmp_path / "test.txt", POS[2:])
    out = tmp_path / "out"
    finetune_ner.main(["--model_name_or_path", str(tiny_model), "--train_file", str(train), "--validation_file",
                       str(test), "--test_file", str(test), "--tagging_scheme", "none", "--use_crf", "--compare_hf",
                       "--output_dir", str(out), *FAST, "--max_steps", "1"])
    metrics = results(out)
    model = AutoModelForTokenClassification.from_pretrained(out)
    assert model.config.use_crf and model.config.tagging_scheme is None
    for split in ("eval", "test"):
        assert metrics[f"{split}_accuracy_delta_vs_hf"] == pytest.approx(
            metrics[f"{split}_accuracy"] - metrics[f"hf_{split}_accuracy"])
        assert 0.0 <= metrics[f"{split}_bootstrap_p_value"] <= 1.0
        assert f"{split}_f1_delta_vs_hf" not in metrics
    assert "accuracy mlm_suite - HF" in (out / "README.md").read_text()


def test_pos_input_errors(tiny_model, tmp_path):
    train = write_pos_conll(tmp_path / "train.txt", POS)
    base = ["--model_name_or_path", str(tiny_model), "--train_file", str(train), "--output_dir", str(tmp_path / "o"),
            *FAST]
    with pytest.raises(ValueError, match="--convert_to BIO: the tags are none"):
        finetune_ner.main([*base, "--convert_to", "BIO"])
    with pytest.raises(ValueError, match="--metric_for_best_model f1: .*use accuracy"):
        finetune_ner.main([*base, "--metric_for_best_model", "f1"])
    with pytest.raises(UnknownTagError, match=rf"{train} line 1: unknown tag 'DT'.*--tagging_scheme BIO"):
        finetune_ner.main([*base, "--tagging_scheme", "BIO"])
    with pytest.raises(ValueError, match="--builtin_dataset is for runs without --train_file"):
        finetune_ner.main([*base, "--builtin_dataset", "oanc_pos"])


# --------------------------------------------------------------------------------------------
# The OANC corpus
# --------------------------------------------------------------------------------------------
def test_oanc_pos_reader():
    sentences = downloads.read_oanc_pos()
    assert len(sentences) == 20_000
    assert sum(len(words) for words, _ in sentences) == 360_524
    assert all(len(words) == len(tags) for words, tags in sentences)
    words, tags = sentences[0]
    assert words[:4] == ["Has", "the", "Internet", "abandoned"] and tags[:4] == ["VBZ", "DT", "NN", "VBD"]
    assert "PRP$" in tags and tags[-1] == "."
    assert detect_scheme(tags for _, tags in sentences) == "none"
