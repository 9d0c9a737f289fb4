"""Splits without labels (GLUE's test splits store their hidden labels as -1): predicted, not scored.

The sequence and pair jobs read a ``DatasetDict`` saved on disk through ``--dataset_name <folder>``
(the Hub's ``ClassLabel`` columns, offline) and local JSON-lines/CSV files; each run trains 2 steps
of a tiny model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from mlm_suite.errors import UsageError
from mlm_suite.jobs import finetune_cls, finetune_pair
from mlm_suite.jobs.common.running import run_job
from mlm_suite.data.finetuning.labels import hub_split_labels, hub_tag_sequences
from mlm_suite.data.inputs.readers import read_examples

FAST = ["--max_steps", "2", "--report_to", "none", "--per_device_eval_batch_size", "4", "--disable_tqdm", "true"]
WORDS = "the cat sleeps on a warm mat while the dog runs in the park near a big old tree".split()


def sentence(i: int) -> str:
    return " ".join(WORDS[(i + k) % len(WORDS)] for k in range(4 + i % 3))


def save_dataset(folder: Path, columns: dict[str, list[str]], names: list[str], labels: dict[str, list[int]]) -> Path:
    """A ``DatasetDict`` with text ``columns`` (one list per split order train/validation/test, concatenated) and
    a ``ClassLabel`` column ``label``, saved as ``save_to_disk`` does."""
    features = Features({**{name: Value("string") for name in columns}, "label": ClassLabel(names=names)})
    splits, start = {}, 0
    for split, values in labels.items():
        rows = {name: texts[start:start + len(values)] for name, texts in columns.items()}
        splits[split] = Dataset.from_dict({**rows, "label": values}, features=features)
        start += len(values)
    DatasetDict(splits).save_to_disk(str(folder))
    return folder


def predictions(path: Path) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "index\tprediction"
    return [line.split("\t") for line in lines[1:]]


def assert_predicted_not_scored(out: Path, n_test: int, classes: set[str], printed: str) -> None:
    metrics = json.loads((out / "all_results.json").read_text())
    assert "eval_accuracy" in metrics  # the labelled validation split is scored
    assert not [key for key in metrics if key.startswith(("test_", "predict_"))]
    assert not (out / "test_results.json").exists() and not (out / "confusion_matrix_test.png").exists()
    rows = predictions(out / "predict_results_test.txt")
    assert [int(index) for index, _ in rows] == list(range(n_test))
    assert {prediction for _, prediction in rows} <= classes
    card = (out / "README.md").read_text()
    assert "The test split has no labels" in card and "only predicted, not scored" in card
    assert "predict_results_test.txt" in card and "test_accuracy" not in card
    assert f"test: no labels ({n_test} examples), predicted only, not scored" in printed


def test_classification_predicts_a_hidden_label_test_split(tiny_model, tmp_path, capsys):
    texts = [sentence(i) for i in range(30)]
    data = save_dataset(tmp_path / "data", {"text": texts}, ["neg", "pos"],
                        {"train": [i % 2 for i in range(20)], "validation": [0, 1, 0, 1], "test": [-1] * 6})
    out = tmp_path / "out"
    finetune_cls.main(["--model_name_or_path", str(tiny_model), "--dataset_name", str(data),
                                  "--output_dir", str(out), *FAST])
    assert_predicted_not_scored(out, 6, {"neg", "pos"}, capsys.readouterr().out)
    assert json.loads((out / "config.json").read_text())["id2label"] == {"0": "neg", "1": "pos"}


def test_pair_job_predicts_a_hidden_label_test_split(tiny_model, tmp_path, capsys):
    first, second = [sentence(i) for i in range(27)], [sentence(i + 5) for i in range(27)]
    names = ["entailment", "neutral", "contradiction"]
    data = save_dataset(tmp_path / "data", {"sentence1": first, "sentence2": second}, names,
                        {"train": [i % 3 for i in range(18)], "validation": [0, 1, 2, 0], "test": [-1] * 5})
    out = tmp_path / "out"
    finetune_pair.main(["--model_name_or_path", str(tiny_model), "--dataset_name", str(data),
                        "--output_dir", str(out), *FAST])
    assert_predicted_not_scored(out, 5, set(names), capsys.readouterr().out)


def test_local_test_file_without_labels_is_predicted(tiny_model, tmp_path, capsys):
    """Local files: a test file whose labels are null/empty on every row, or absent, is unlabelled."""
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"{sentence(i)},{'ab'[i % 2]}\n" for i in range(12)), encoding="utf-8")
    validation = tmp_path / "dev.jsonl"
    validation.write_text("".join(json.dumps({"text": sentence(i), "label": "ab"[i % 2]}) + "\n" for i in range(4)))
    test = tmp_path / "test.csv"
    test.write_text("text,label\n" + "".join(f"{sentence(i)},\n" for i in range(3)), encoding="utf-8")
    out = tmp_path / "out"
    finetune_cls.main(["--model_name_or_path", str(tiny_model), "--train_file", str(train),
                                  "--validation_file", str(validation), "--test_file", str(test),
                                  "--output_dir", str(out), *FAST])
    assert_predicted_not_scored(out, 3, {"a", "b"}, capsys.readouterr().out)
    # null labels, and no label column at all, read as a split without labels too
    for rows in ([{"text": "the cat", "label": None}] * 2, [{"text": "the cat"}] * 2):
        path = tmp_path / "unlabelled.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        examples = read_examples(str(path), ["text"], "label", "test", labels_optional=True)
        assert [example["label"] for example in examples] == [None, None]


def run_expecting_user_error(main, argv, capsys) -> str:
    capsys.readouterr()  # save_to_disk's progress bars
    with pytest.raises(SystemExit) as exit_info:
        run_job(main, argv, prog="mlm-suite job", debug=False)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err


def test_a_split_mixing_labels_and_hidden_labels_is_a_user_error(tiny_model, tmp_path, capsys):
    texts = [sentence(i) for i in range(14)]
    data = save_dataset(tmp_path / "mixed", {"text": texts}, ["neg", "pos"],
                        {"train": [0, 1] * 4, "validation": [0, 1], "test": [0, -1, -1, 1]})
    argv = ["--model_name_or_path", str(tiny_model), "--dataset_name", str(data), "--output_dir", str(tmp_path / "o")]
    err = run_expecting_user_error(finetune_cls.main, argv, capsys)
    assert "[test]" in err and "2 of 4 rows have no label (label -1)" in err
    assert not (tmp_path / "o").exists()

    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": sentence(i), "label": ["a", None, ""][i % 3]}) + "\n" for i in range(6)))
    err = run_expecting_user_error(finetune_cls.main, ["--model_name_or_path", str(tiny_model),
                                   "--train_file", str(train), "--output_dir", str(tmp_path / "o")], capsys)
    assert "train.jsonl (the train split" in err and "4 of 6 rows have no label (label None)" in err


def test_unlabelled_train_split_and_hidden_tags_are_refused(tiny_model, tmp_path, capsys):
    texts = [sentence(i) for i in range(8)]
    data = save_dataset(tmp_path / "data", {"text": texts}, ["neg", "pos"], {"train": [-1] * 6, "test": [-1] * 2})
    argv = ["--model_name_or_path", str(tiny_model), "--dataset_name", str(data), "--output_dir", str(tmp_path / "o")]
    assert "the train split has no labels" in run_expecting_user_error(finetune_cls.main, argv, capsys)

    # The shared readers: -1 is never a class name; tags cannot be hidden.
    from datasets import Sequence as SequenceFeature

    raw = {"train": Dataset.from_dict({"label": [0, 1]}, features=Features({"label": ClassLabel(names=["x", "y"])})),
           "test": Dataset.from_dict({"label": [-1, -1]}, features=Features({"label": ClassLabel(names=["x", "y"])}))}
    assert hub_split_labels(raw, "label", "d") == {"train": ["x", "y"], "test": None}
    # a float column (GLUE's STS-B): a test split of -1 only is hidden, -1 among other scores is a score
    scores = {"train": Dataset.from_dict({"label": [0.5, 4.0]}), "test": Dataset.from_dict({"label": [-1.0, -1.0]}),
              "validation": Dataset.from_dict({"label": [-1.0, 2.0]})}
    assert hub_split_labels(scores, "label", "d") == {"train": [0.5, 4.0], "test": None, "validation": [-1.0, 2.0]}
    tags = Dataset.from_dict({"tags": [[0, 1], [-1, -1]]},
                             features=Features({"tags": SequenceFeature(ClassLabel(names=["O", "B-PER"]))}))
    with pytest.raises(UsageError, match=r"d\[test\]: 2 tags are hidden"):
        hub_tag_sequences(tags, "tags", "d[test]")


def test_regression_with_a_hidden_score_test_split(tiny_model, tmp_path, capsys):
    """GLUE's STS-B: a float column whose test split is all -1 is predicted as scores with 3 decimals."""
    first, second = [sentence(i) for i in range(22)], [sentence(i + 3) for i in range(22)]
    scores = [float(i % 5) + 0.5 for i in range(20)]
    splits = {"train": (0, 16, scores[:16]), "validation": (16, 20, scores[16:20]), "test": (20, 22, [-1.0, -1.0])}
    DatasetDict({split: Dataset.from_dict({"sentence1": first[a:b], "sentence2": second[a:b], "label": labels})
                 for split, (a, b, labels) in splits.items()}).save_to_disk(str(tmp_path / "stsb"))
    out = tmp_path / "out"
    finetune_pair.main(["--model_name_or_path", str(tiny_model), "--dataset_name", str(tmp_path / "stsb"),
                        "--output_dir", str(out), *FAST])
    metrics = json.loads((out / "all_results.json").read_text())
    assert "eval_pearson" in metrics and not [key for key in metrics if key.startswith("test_")]
    rows = predictions(out / "predict_results_test.txt")
    assert [index for index, _ in rows] == ["0", "1"] and all(len(score.split(".")[1]) == 3 for _, score in rows)
    assert "test: no labels (2 examples), predicted only, not scored" in capsys.readouterr().out


def test_the_label_set_decides_the_task_and_the_classes():
    from mlm_suite.data.finetuning.labels import (
        are_whole_numbers, check_class_set, check_label, hidden_label_splits, infer_task_type, labels_as,
    )

    # whole numbers are classes however they are written, one name per class
    assert infer_task_type([1, "0.0", 1.0], "auto") == "classification"
    assert are_whole_numbers([1, "0.0", 1.0]) and not are_whole_numbers(["1.0", "pos"])
    assert labels_as([1, "0.0", 1.0], "classification", "s", whole_numbers=True) == ["1", "0", "1"]
    assert labels_as(["1.0", "2"], "regression", "s", whole_numbers=True) == [1.0, 2.0]
    # another split holds a name: every class is named as written
    assert labels_as(["1.0", "1"], "classification", "s", whole_numbers=False) == ["1.0", "1"]
    with pytest.raises(UsageError, match=r"the train split, row 1: label 'high' is not a number"):
        labels_as(["0.5", "high"], "regression", "the train split", whole_numbers=False)
    for bad in ("nan", " NaN ", float("inf"), "-infinity"):
        with pytest.raises(UsageError, match=r"f.csv line 3: label .* is (NaN|infinite)"):
            check_label(bad, "f.csv line 3")
    check_label("nancy", "f.csv line 3")  # a class name that merely starts like nan
    # -1 everywhere outside train is hidden; -1 in train makes it a real label
    assert hidden_label_splits({"train": ["0", "1"], "test": ["-1", -1], "validation": ["-1", "0"]}) == {"test"}
    assert hidden_label_splits({"train": ["-1", "1"], "test": ["-1", "-1"]}) == set()
    with pytest.raises(UsageError, match=r"the train split has one class only \('a'\)"):
        check_class_set({"train": ["a", "a"]})
    with pytest.raises(UsageError, match=r"the test split has the label\(s\) \['c'\] that the train split never has"):
        check_class_set({"train": ["a", "b"], "test": ["a", "c"]})


def test_a_nan_score_in_a_hub_float_column_names_the_split_and_row():
    scores = {"train": Dataset.from_dict({"label": [0.5, float("nan"), 4.0]})}
    with pytest.raises(UsageError, match=r"d\[train\] \(column 'label'\), row 1: label nan is NaN"):
        hub_split_labels(scores, "label", "d")
