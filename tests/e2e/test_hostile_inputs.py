"""Hostile data files and labels where they enter: one line naming the file, line and value, exit status 2, no output
folder (docs/command_line.md); and the inputs that look odd but are right (a BOM, labels written 1.0, a hidden-label
test file), which train."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import Outcome, assert_refused, folder_files, run_command, write_csv
from mlm_suite.cli import main

FAST = ["--max_steps", "2", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "4",
        "--report_to", "none", "--disable_tqdm", "true"]
LATIN1 = "un café noir,1\n".encode("latin-1")  # é is 0xe9, not UTF-8
#: finetune-pair reads the text column of the CSVs here as its first sentence.
COLUMNS = {"finetune-cls": [], "finetune-pair": ["--sentence1_column", "text"]}


def finetune(command: str, model: Path, output_dir: Path, *flags, capsys) -> Outcome:
    return run_command([command, "--model_name_or_path", model, "--output_dir", output_dir, *FAST, *flags], capsys)


def labelled_rows(labels: list[str], text: str = "a good film") -> list[tuple]:
    return [(f"{text} {index}", f"it is {index}", label) for index, label in enumerate(labels)]


def two_classes(count: int = 12, zero: str = "0", one: str = "1") -> list[str]:
    return [one if index % 2 else zero for index in range(count)]


# --------------------------------------------------------------------------------------------
# Labels: validated as a set before training
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["finetune-cls", "finetune-pair"])
@pytest.mark.parametrize("bad", ["nan", "inf", "-Infinity"])
def test_a_non_finite_label_is_refused_with_its_file_line_and_value(tmp_path, tiny_model, command, bad, capsys):
    labels = two_classes()
    labels[6] = bad
    train = write_csv(tmp_path / "train.csv", ["text", "sentence2", "label"], labelled_rows(labels))
    outcome = finetune(command, tiny_model, tmp_path / "out", "--train_file", train, *COLUMNS[command], capsys=capsys)
    assert_refused(outcome, command, str(train), "line 8", repr(bad))
    assert not (tmp_path / "out").exists()


def test_nan_regression_targets_are_refused_before_training(tmp_path, tiny_model, capsys):
    train = tmp_path / "train.jsonl"
    scores = [0.5, 1.5, 2.5, float("nan")] * 3
    train.write_text("".join(json.dumps({"text": f"text {i}", "label": score}) + "\n" for i, score in enumerate(scores)),
                     encoding="utf-8")  # json writes NaN, which json reads back as a float NaN
    outcome = finetune("finetune-cls", tiny_model, tmp_path / "out", "--train_file", train, "--task_type",
                       "regression", capsys=capsys)
    assert_refused(outcome, "finetune-cls", str(train), "line 4", "NaN")
    assert not (tmp_path / "out").exists()


def test_an_empty_label_among_labels_names_its_line(tmp_path, tiny_model, capsys):
    labels = two_classes()
    labels[3] = ""
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [(text, label) for text, _, label in labelled_rows(labels)])
    outcome = finetune("finetune-cls", tiny_model, tmp_path / "out", "--train_file", train, capsys=capsys)
    assert_refused(outcome, "finetune-cls", str(train), "line 5", "no label")
    assert not (tmp_path / "out").exists()


def test_a_regression_label_that_is_not_a_number_is_refused(tmp_path, tiny_model, capsys):
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [(f"t {i}", label) for i, label in
                                                                  enumerate(["0.5", "1.5", "high", "2.0"] * 3)])
    outcome = finetune("finetune-cls", tiny_model, tmp_path / "out", "--train_file", train, "--task_type",
                       "regression", capsys=capsys)
    assert_refused(outcome, "finetune-cls", "'high'", "not a number")
    assert not (tmp_path / "out").exists()


def test_a_class_seen_only_in_validation_is_refused_naming_it(tmp_path, tiny_model, capsys):
    header = ["text", "label"]
    train = write_csv(tmp_path / "train.csv", header, [(f"t {i}", label) for i, label in enumerate(two_classes())])
    validation = write_csv(tmp_path / "dev.csv", header, [("t a", "0"), ("t b", "2")])
    outcome = finetune("finetune-cls", tiny_model, tmp_path / "out", "--train_file", train, "--validation_file",
                       validation, capsys=capsys)
    assert_refused(outcome, "finetune-cls", "validation split", "'2'")
    assert not (tmp_path / "out").exists()


def test_a_single_class_training_split_is_refused(tmp_path, tiny_model, capsys):
    train = write_csv(tmp_path / "train.csv", ["text", "label"], [(f"t {i}", "pos") for i in range(10)])
    outcome = finetune("finetune-cls", tiny_model, tmp_path / "out", "--train_file", train, capsys=capsys)
    assert_refused(outcome, "finetune-cls", "one class", "'pos'")
    assert not (tmp_path / "out").exists()


def test_labels_written_as_whole_floats_are_classes(tmp_path, tiny_model, capsys):
    train = write_csv(tmp_path / "train.csv", ["text", "label"],
                      [(f"t {i}", label) for i, label in enumerate(two_classes(zero="0.0", one="1.0"))])
    output_dir = tmp_path / "out"
    outcome = finetune("finetune-cls", tiny_model, output_dir, "--train_file", train, capsys=capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    config = json.loads((output_dir / "config.json").read_text())
    assert config["problem_type"] == "single_label_classification"
    assert config["id2label"] == {"0": "0", "1": "1"}
    assert "eval_accuracy" in json.loads((output_dir / "all_results.json").read_text())


def test_an_all_minus_one_local_test_file_is_predicted_not_scored(tmp_path, tiny_model, capsys):
    header = ["text", "label"]
    train = write_csv(tmp_path / "train.csv", header, [(f"t {i}", label) for i, label in enumerate(two_classes())])
    test = write_csv(tmp_path / "test.csv", header, [(f"q {i}", "-1") for i in range(4)])
    output_dir = tmp_path / "out"
    outcome = finetune("finetune-cls", tiny_model, output_dir, "--train_file", train, "--test_file", test,
                       "--do_predict", capsys=capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    results = json.loads((output_dir / "all_results.json").read_text())
    assert not any(key.startswith("test_accuracy") for key in results)
    predictions = (output_dir / "predict_results_test.txt").read_text().splitlines()
    assert len(predictions) == 5 and all(line.split("\t")[-1] in ("0", "1") for line in predictions[1:])
    config = json.loads((output_dir / "config.json").read_text())
    assert sorted(config["label2id"]) == ["0", "1"]


# --------------------------------------------------------------------------------------------
# CSV rows, BOM, empty files
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command, name, columns, bad_row, found", [
    ("finetune-cls", "train.csv", ["text", "label"], "a good, long film,1", "3 fields"),  # an unquoted comma
    ("finetune-pair", "train.tsv", ["sentence1", "sentence2", "label"], "film two\t1", "2 fields"),  # a field missing
])
def test_a_row_whose_fields_do_not_match_the_header_is_refused_with_its_line(tmp_path, tiny_model, command, name,
                                                                           columns, bad_row, found, capsys):
    train = tmp_path / name
    delimiter = "\t" if name.endswith(".tsv") else ","
    rows = [[f"film {i}", "it is", str(i % 2)][-len(columns):] for i in range(10)]
    lines = [delimiter.join(row) for row in [columns, *rows]]
    lines[5] = bad_row
    train.write_text("\n".join(lines) + "\n", encoding="utf-8")
    outcome = finetune(command, tiny_model, tmp_path / "out", "--train_file", train, capsys=capsys)
    assert_refused(outcome, command, str(train), "line 6", found, f"header has {len(columns)}")
    assert not (tmp_path / "out").exists()


def test_a_bom_csv_trains(tmp_path, tiny_model, capsys):
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"film {i},{i % 2}\n" for i in range(12)), encoding="utf-8-sig")
    assert train.read_bytes().startswith(b"\xef\xbb\xbf")
    output_dir = tmp_path / "out"
    outcome = finetune("finetune-cls", tiny_model, output_dir, "--train_file", train, capsys=capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert (output_dir / "model.safetensors").is_file()


def test_a_bom_json_lines_file_trains_ner(tmp_path, tiny_model, capsys):
    train = tmp_path / "train.jsonl"
    sentence = {"tokens": ["john", "lives", "in", "paris"], "ner_tags": ["B-PER", "O", "O", "B-LOC"]}
    train.write_text("".join(json.dumps(sentence) + "\n" for _ in range(10)), encoding="utf-8-sig")
    output_dir = tmp_path / "out"
    outcome = finetune("finetune-ner", tiny_model, output_dir, "--train_file", train, capsys=capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert (output_dir / "model.safetensors").is_file()


@pytest.mark.parametrize("content", ["", "text,label\n"], ids=["empty", "header-only"])
def test_an_empty_csv_is_no_examples(tmp_path, tiny_model, content, capsys):
    train = tmp_path / "train.csv"
    train.write_text(content, encoding="utf-8")
    outcome = finetune("finetune-cls", tiny_model, tmp_path / "out", "--train_file", train, capsys=capsys)
    assert_refused(outcome, "finetune-cls", str(train), "no examples")
    assert not (tmp_path / "out").exists()


def test_an_empty_conll_file_is_no_examples_and_leaves_no_folder(tmp_path, tiny_model, capsys):
    train = tmp_path / "train.conll"
    train.write_text("\n\n", encoding="utf-8")
    outcome = finetune("finetune-ner", tiny_model, tmp_path / "out", "--train_file", train, capsys=capsys)
    assert_refused(outcome, "finetune-ner", str(train), "no examples")
    assert not (tmp_path / "out").exists()


def test_an_empty_wsd_file_is_refused(tmp_path, tiny_model, data_files, capsys):
    empty = tmp_path / "test.jsonl"
    empty.write_text("", encoding="utf-8")
    outcome = run_command(["wsd", "--model_name_or_path", tiny_model, "--train_file", data_files["wsd"],
                           "--test_file", empty, "--output_dir", tmp_path / "out"], capsys)
    assert_refused(outcome, "wsd", str(empty), "no instances")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------
# Not UTF-8: one line naming the file and where, in every job that reads text
# --------------------------------------------------------------------------------------------
def latin1_file(path: Path, head: str) -> Path:
    path.write_bytes(head.encode("utf-8") + LATIN1)
    return path


def test_a_latin1_csv_names_the_file_line_and_byte(tmp_path, tiny_model, capsys):
    head = "text,label\nfine,0\n"
    train = latin1_file(tmp_path / "train.csv", head)
    outcome = finetune("finetune-cls", tiny_model, tmp_path / "out", "--train_file", train, capsys=capsys)
    byte = len(head.encode("utf-8")) + LATIN1.index(b"\xe9")
    assert_refused(outcome, "finetune-cls", str(train), "line 3", f"byte {byte}", "0xe9", "not UTF-8")
    assert not (tmp_path / "out").exists()


def test_a_binary_validation_file_for_the_pair_job(tmp_path, tiny_model, data_files, capsys):
    binary = tmp_path / "dev.jsonl"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 8)
    outcome = finetune("finetune-pair", tiny_model, tmp_path / "out", "--train_file", data_files["csv"],
                       "--sentence1_column", "text", "--validation_file", binary, capsys=capsys)
    assert_refused(outcome, "finetune-pair", str(binary), "line 1", "byte 0", "not UTF-8")
    assert not (tmp_path / "out").exists()


def test_a_utf16_conll_file(tmp_path, tiny_model, capsys):
    train = tmp_path / "train.conll"
    train.write_text("john B-PER\nsleeps O\n\n", encoding="utf-16")
    outcome = finetune("finetune-ner", tiny_model, tmp_path / "out", "--train_file", train, capsys=capsys)
    assert_refused(outcome, "finetune-ner", str(train), "line 1", "byte 0", "0xff", "not UTF-8")
    assert not (tmp_path / "out").exists()


def test_a_latin1_wsd_file(tmp_path, tiny_model, data_files, capsys):
    test = tmp_path / "test.jsonl"
    test.write_bytes(data_files["wsd"].read_bytes() + '{"tokens": ["caf\xe9"], "target": 0, "sense": "x"}\n'.encode("latin-1"))
    outcome = run_command(["wsd", "--model_name_or_path", tiny_model, "--train_file", data_files["wsd"],
                           "--test_file", test, "--output_dir", tmp_path / "out"], capsys)
    assert_refused(outcome, "wsd", str(test), "line 9", "not UTF-8")
    assert not (tmp_path / "out").exists()


def test_a_latin1_corpus_for_pretrain(tmp_path, tiny_model, data_files, capsys):
    corpus = latin1_file(tmp_path / "corpus.txt", data_files["text"].read_text(encoding="utf-8"))
    outcome = run_command(["pretrain", "--model_name_or_path", tiny_model, "--train_file", corpus,
                           "--output_dir", tmp_path / "out", *FAST], capsys)
    assert_refused(outcome, "pretrain", str(corpus), "line 13", "not UTF-8")
    assert not (tmp_path / "out").exists()


@pytest.mark.multiprocess
@pytest.mark.parametrize("workers", ["1", "2"])
def test_prepare_data_reports_a_latin1_file_as_pretrain_does(tmp_path, tiny_model, data_files, workers, capsys):
    corpus = latin1_file(tmp_path / "corpus.txt", data_files["text"].read_text(encoding="utf-8"))
    output_dir = tmp_path / "prepared"
    outcome = run_command(["prepare-data", "--train_file", data_files["text"], corpus, "--tokenizer_name", tiny_model,
                           "--output_dir", output_dir, "--preprocessing_num_workers", workers], capsys)
    assert_refused(outcome, "prepare-data", str(corpus), "line 13", "not UTF-8")
    assert not output_dir.exists()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt"]  # no partial folder beside it


def test_prepare_data_names_a_malformed_json_line(tmp_path, tiny_model, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "a document"}\n{"text": "another"}\nnot json\n', encoding="utf-8")
    outcome = run_command(["prepare-data", "--train_file", corpus, "--tokenizer_name", tiny_model,
                           "--output_dir", tmp_path / "prepared"], capsys)
    assert_refused(outcome, "prepare-data", str(corpus), "line 3")
    assert not (tmp_path / "prepared").exists()


# --------------------------------------------------------------------------------------------
# A damaged prepared folder
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tiny_model) -> Path:
    """A prepared folder of 20 short documents."""
    folder = tmp_path_factory.mktemp("hostile_prepared")
    corpus = folder / "corpus.txt"
    corpus.write_text("".join(f"the cat number {i} sat on the mat .\n\n" for i in range(20)), encoding="utf-8")
    assert main(["prepare-data", "--train_file", str(corpus), "--tokenizer_name", str(tiny_model),
                 "--output_dir", str(folder / "prepared"), "--validation_split_percentage", "20"]) == 0
    return folder / "prepared"


def damage(prepared: Path, tmp_path: Path, how: str) -> Path:
    """A copy of ``prepared`` with half its training shard cut off, the shard gone, or its metadata broken."""
    copy = tmp_path / "prepared"
    shutil.copytree(prepared, copy)
    shard = next((copy / "train").glob("*.arrow"))
    if how == "truncated":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    elif how == "missing":
        shard.unlink()
    else:
        (copy / "mlm_suite_data.json").write_text("{", encoding="utf-8")
    return copy


@pytest.mark.parametrize("how", ["truncated", "missing", "metadata"])
def test_a_damaged_prepared_folder_says_to_prepare_again(tmp_path, tiny_model, prepared, how, capsys):
    folder = damage(prepared, tmp_path, how)
    outcome = run_command(["pretrain", "--prepared_data", folder, "--model_name_or_path", tiny_model,
                           "--output_dir", tmp_path / "out", *FAST], capsys)
    part = "mlm_suite_data.json" if how == "metadata" else "train"
    assert_refused(outcome, "pretrain", str(folder / part), "damaged", "prepare-data again")
    assert folder_files(tmp_path / "out") == [] and not (tmp_path / "out").exists()
