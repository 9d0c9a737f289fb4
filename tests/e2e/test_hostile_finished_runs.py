"""A folder's state decides what a rerun may do (issue 54, item 2; docs/command_line.md): a finished run (a checkpoint
at ``--max_steps``) rerun with other data or labels is refused in one line, nothing deleted; the same command again
trains nothing and writes the same model and results; a checkpoint at ``--max_steps`` trains no step more."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.helpers import assert_refused, folder_files, pretrain_argv, run_command, write_csv

ROWS = [("a good film", "1"), ("a dull film", "0"), ("the plot works", "1"), ("nothing happens", "0")] * 3
FLAGS = ["--save_strategy", "steps", "--save_steps", "2", "--max_steps", "4", "--per_device_train_batch_size", "2",
         "--max_seq_length", "16", "--report_to", "none", "--disable_tqdm", "true", "--dataloader_pin_memory", "false"]


def classify(tiny_model: Path, train: Path, output_dir: Path, *extra: str) -> list:
    return ["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", train, "--output_dir", output_dir,
            *FLAGS, *extra]


def contents(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in folder_files(folder)}


def lasting_results(folder: Path) -> dict:
    """all_results.json less what times the machine."""
    results = json.loads((folder / "all_results.json").read_text())
    return {key: value for key, value in results.items()
            if not any(part in key for part in ("runtime", "per_second", "preparation_time"))}


@pytest.fixture
def finished(tiny_model, tmp_path, capsys) -> tuple[Path, Path]:
    """A finished finetune-cls run (checkpoints at steps 2 and 4 = --max_steps) on labels {0, 1}: (its data, its folder)."""
    train, output_dir = write_csv(tmp_path / "train.csv", ["text", "label"], ROWS), tmp_path / "out"
    outcome = run_command(classify(tiny_model, train, output_dir), capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert (output_dir / "checkpoint-4").is_dir()
    return train, output_dir


def test_a_finished_run_rerun_on_other_labels_is_refused_and_nothing_is_deleted(tiny_model, finished, tmp_path, capsys):
    """The report's case: the same command on a file with labels {0, 7}. Before, the first run's results, card and
    model were deleted, nothing was trained, and the old model was saved with id2label saying "7" where it learned
    "1"."""
    _, output_dir = finished
    before = contents(output_dir)
    relabelled = write_csv(tmp_path / "relabelled.csv", ["text", "label"],
                           [(text, "7" if label == "1" else label) for text, label in ROWS])
    outcome = run_command(classify(tiny_model, relabelled, output_dir), capsys)
    assert_refused(outcome, "finetune-cls", f"--output_dir {output_dir} holds a finished run",
                   f"at --max_steps 4) trained on other data: --train_file {relabelled.resolve()}",
                   "pass --overwrite_output_dir to train anew on these data")
    assert contents(output_dir) == before


def test_a_finished_run_whose_data_file_was_edited_in_place_is_refused(tiny_model, finished, capsys):
    train, output_dir = finished
    before = contents(output_dir)
    write_csv(train, ["text", "label"], [(text, "7" if label == "1" else label) for text, label in ROWS])
    outcome = run_command(classify(tiny_model, train, output_dir), capsys)
    assert_refused(outcome, "finetune-cls", f"--train_file {train.resolve()} (its contents changed since that run)")
    assert contents(output_dir) == before


def test_the_same_command_again_trains_nothing_and_writes_the_same_model_and_results(tiny_model, finished, capsys):
    train, output_dir = finished
    weights, results = load_file(output_dir / "model.safetensors"), lasting_results(output_dir)
    config = json.loads((output_dir / "config.json").read_text())
    outcome = run_command(classify(tiny_model, train, output_dir), capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert f"nothing to train: {output_dir / 'checkpoint-4'} is at --max_steps 4, the end of this run" in outcome.err
    assert sorted(path.name for path in output_dir.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    again = load_file(output_dir / "model.safetensors")
    assert again.keys() == weights.keys() and all((again[name] == weights[name]).all() for name in weights)
    assert json.loads((output_dir / "config.json").read_text())["id2label"] == config["id2label"]
    assert lasting_results(output_dir) == results  # train_loss and epoch included: the whole run's, from the checkpoint


def test_a_checkpoint_at_max_steps_trains_no_step_more(tmp_path, data_files, capsys):
    """The stock loop trains and saves one more step from a checkpoint at exactly ``--max_steps``."""
    first = tmp_path / "first"
    argv = pretrain_argv(first, data_files["text"], "--save_strategy", "steps", "--save_steps", "2", steps=4)
    assert run_command(argv, capsys).status == 0
    resumed = tmp_path / "resumed"
    outcome = run_command(pretrain_argv(resumed, data_files["text"], "--resume_from_checkpoint",
                                        first / "checkpoint-4", steps=4), capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert "nothing to train" in outcome.err
    assert json.loads((resumed / "trainer_state.json").read_text())["global_step"] == 4
    saved, trained = load_file(resumed / "model.safetensors"), load_file(first / "checkpoint-4" / "model.safetensors")
    assert all((saved[name] == trained[name]).all() for name in trained)


def test_a_finished_checkpoint_named_with_other_data_is_refused(tiny_model, finished, tmp_path, capsys):
    """Named by --resume_from_checkpoint into another folder: nothing would be trained on the data given, whose
    results would be reported as if it had been."""
    _, output_dir = finished
    other = write_csv(tmp_path / "other.csv", ["text", "label"], ROWS[::-1])
    outcome = run_command(classify(tiny_model, other, tmp_path / "elsewhere", "--resume_from_checkpoint",
                                   output_dir / "checkpoint-4"), capsys)
    assert_refused(outcome, "finetune-cls", f"--resume_from_checkpoint {output_dir / 'checkpoint-4'} is at --max_steps 4,"
                   " the end of a run on other data", "give a larger --max_steps to train on them from it")
    assert not (tmp_path / "elsewhere").exists()


def test_a_checkpoint_of_other_labels_is_refused_naming_both(tiny_model, finished, tmp_path, capsys):
    """Continued elsewhere on data of other labels (a larger --max_steps: the run goes on), the checkpoint's classifier
    would read the new labels with the old label's weights."""
    _, output_dir = finished
    relabelled = write_csv(tmp_path / "relabelled.csv", ["text", "label"],
                           [(text, "7" if label == "1" else label) for text, label in ROWS])
    outcome = run_command(classify(tiny_model, relabelled, tmp_path / "elsewhere", "--resume_from_checkpoint",
                                   output_dir / "checkpoint-4", "--max_steps", "6"), capsys)
    assert_refused(outcome, "finetune-cls", f"checkpoint {output_dir / 'checkpoint-4'} was trained on the labels ['0', '1'],"
                   " but this run's are ['0', '7']")
