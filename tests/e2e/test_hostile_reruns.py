"""A run's folder holds that run alone (docs/command_line.md): a rerun into a used folder is refused, continues its
stopped run without the earlier results, or (``--overwrite_output_dir``) starts anew in an emptied folder, for every
command; the lock lives inside the folder, so a writable folder under a read-only parent works; and the output flags'
odd values (a dangling link, a folder as a file) are one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlm_suite.jobs.common.output_folder import LOCK_NAME, claim_output_folder, release_output_folder
from tests.helpers import assert_refused, folder_files, run_command, write_csv

FAST = ["--max_steps", "2", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
        "--report_to", "none", "--disable_tqdm", "true"]

#: What an earlier run left: results with a test score, a plot and a trained model's weights.
EARLIER_RUN = {
    "all_results.json": json.dumps({"test_accuracy": 0.5, "eval_accuracy": 0.25}),
    "test_results.json": json.dumps({"test_accuracy": 0.5}),
    "confusion_matrix_test.png": "not a picture",
    "model.safetensors": "trained weights",
    "stage/results.json": "{}",
}


def command_line(command: str, model: Path, data_files: dict[str, Path], bert_folder: Path, output_dir: Path,
                 *flags: str) -> list:
    """A command line of ``command`` that succeeds, writing ``output_dir``, with ``flags`` of the command's own."""
    if command == "convert":
        return ["convert", bert_folder, output_dir, *flags]
    if command == "export-native":
        return ["export-native", model, output_dir, *flags]
    if command == "seeds":
        return ["seeds", "finetune-cls", "--seeds", "1", "--output_dir", output_dir, *flags, "--",
                "--model_name_or_path", model, "--train_file", data_files["csv"], *FAST]
    return [*{
        "finetune-cls": ["finetune-cls", "--model_name_or_path", model, "--train_file", data_files["csv"], *FAST],
        "finetune-pair": ["finetune-pair", "--model_name_or_path", model, "--train_file", data_files["csv"],
                          "--sentence1_column", "text", *FAST],
        "finetune-ner": ["finetune-ner", "--model_name_or_path", model, "--train_file", data_files["conll"],
                         "--compare_hf", "false", *FAST],
        "finetune-retrieval": ["finetune-retrieval", "--model_name_or_path", model, "--train_file",
                               data_files["pairs"], "--document_column", "passage", *FAST],
        "pretrain": ["pretrain", "--model_name_or_path", model, "--train_file", data_files["corpus"], *FAST,
                     "--eval_strategy", "no", "--fill_mask_probes", "0"],
        "wsd": ["wsd", "--model_name_or_path", model, "--train_file", data_files["wsd"], "--test_file",
                data_files["wsd"]],
        "anisotropy": ["anisotropy", "--model_name_or_path", model, "--num_sentences", "4", "--n_pairs", "10"],
        "quickstart": ["quickstart", "--preset", "tiny"],
        "prepare-data": ["prepare-data", "--train_file", data_files["corpus"], "--tokenizer_name", model],
    }[command], "--output_dir", output_dir, *flags]


@pytest.fixture
def bert_folder(tmp_path, random_bert) -> Path:
    from transformers import BertForMaskedLM

    folder = tmp_path / "bert"
    random_bert(BertForMaskedLM).save_pretrained(folder)
    return folder


def leave_an_earlier_run(folder: Path) -> dict[str, bytes]:
    """Write ``EARLIER_RUN`` into ``folder``, dated 1970 so that a file the next run does not write stands out."""
    for name, text in EARLIER_RUN.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (0, 0))
    return {name: (folder / name).read_bytes() for name in folder_files(folder)}


COMMANDS = ["finetune-cls", "finetune-pair", "finetune-ner", "finetune-retrieval", "pretrain", "wsd", "anisotropy",
            "quickstart", "prepare-data", "convert", "export-native", "seeds"]


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_a_rerun_into_a_used_folder_is_refused_and_overwrite_leaves_only_its_own_files(
        command, tmp_path, tiny_model, data_files, corpus, bert_folder, capsys):
    output_dir = tmp_path / "out"
    before = leave_an_earlier_run(output_dir)
    data_files = {**data_files, "corpus": corpus["train"]}

    refused = run_command(command_line(command, tiny_model, data_files, bert_folder, output_dir), capsys)
    flag = "dst" if command in ("convert", "export-native") else "--output_dir"
    assert_refused(refused, command, f"{flag} {output_dir} already holds an earlier run's files",
                   "all_results.json", "--overwrite_output_dir")
    assert {name: (output_dir / name).read_bytes() for name in folder_files(output_dir)} == before

    fresh = run_command(command_line(command, tiny_model, data_files, bert_folder, output_dir, "--overwrite_output_dir"),
                        capsys)
    assert fresh.status == 0, fresh.err[-3000:]
    assert "removed the earlier run's" in fresh.err
    left = [name for name in folder_files(output_dir) if (output_dir / name).stat().st_mtime == 0]
    assert left == [], left  # nothing the run did not write
    assert LOCK_NAME not in os.listdir(output_dir)


@pytest.mark.slow
def test_a_continued_run_leaves_none_of_the_earlier_results(tmp_path, tiny_model, data_files, capsys):
    """The rerun (another test file) continues the finished run's last checkpoint: every result, plot and model file
    at the top of the folder is its own, the checkpoints stay."""
    output_dir = tmp_path / "out"
    other_test = write_csv(tmp_path / "test.csv", ["text", "label"], [("a good film", "positive")] * 3)
    argv = ["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", data_files["csv"], "--output_dir",
            output_dir, "--save_strategy", "steps", "--save_steps", "2", *FAST]
    first = run_command([*argv, "--test_file", data_files["csv"]], capsys)
    assert first.status == 0, first.err[-3000:]
    earlier = [path for path in output_dir.iterdir() if path.is_file()]
    for path in earlier:
        os.utime(path, (0, 0))

    again = run_command([*argv, "--test_file", other_test], capsys)
    assert again.status == 0, again.err[-3000:]
    assert "resuming training from" in again.err and "removed the earlier run's" in again.err
    assert [path.name for path in earlier if path.exists() and path.stat().st_mtime == 0] == []
    assert json.loads((output_dir / "all_results.json").read_text())["test_n_examples"] == 3
    assert (output_dir / "checkpoint-2" / "trainer_state.json").is_file()


def test_seeds_summarise_only_the_runs_they_started(tmp_path, tiny_model, data_files, capsys):
    """An earlier seed's folder with a test score inside the seeds folder: refused, never averaged in."""
    output_dir = tmp_path / "sweep"
    (output_dir / "seed_1").mkdir(parents=True)
    (output_dir / "seed_1" / "all_results.json").write_text(json.dumps({"test_accuracy": 0.5}))
    outcome = run_command(["seeds", "finetune-cls", "--seeds", "1", "--output_dir", output_dir, "--",
                           "--model_name_or_path", tiny_model, "--train_file", data_files["csv"], *FAST], capsys)
    assert_refused(outcome, "seeds", f"--output_dir {output_dir} already holds an earlier run's files (seed_1/)")
    assert not (output_dir / "seed_summary.json").exists()


def test_seeds_take_overwrite_for_the_whole_sweep_only(tmp_path, tiny_model, data_files, capsys):
    outcome = run_command(["seeds", "finetune-cls", "--seeds", "1", "--output_dir", tmp_path / "sweep", "--",
                           "--model_name_or_path", tiny_model, "--train_file", data_files["csv"],
                           "--overwrite_output_dir", *FAST], capsys)
    assert_refused(outcome, "seeds", "--overwrite_output_dir empties the whole sweep: give it to mlm-suite seeds")
    assert not (tmp_path / "sweep").exists()


def test_quickstart_never_writes_over_a_trained_model(tmp_path, capsys):
    output_dir = tmp_path / "trained"
    before = leave_an_earlier_run(output_dir)
    outcome = run_command(["quickstart", "--preset", "tiny", "--output_dir", output_dir], capsys)
    assert_refused(outcome, "quickstart", "model.safetensors", "--overwrite_output_dir")
    assert {name: (output_dir / name).read_bytes() for name in folder_files(output_dir)} == before


def test_overwrite_never_removes_what_the_run_reads(tmp_path, tiny_model, data_files, capsys):
    output_dir = tmp_path / "out"
    leave_an_earlier_run(output_dir)
    train = write_csv(output_dir / "train.csv", ["text", "label"], [("a good film", "1"), ("a dull film", "0")] * 4)
    outcome = run_command(["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", train,
                           "--output_dir", output_dir, "--overwrite_output_dir", *FAST], capsys)
    assert_refused(outcome, "finetune-cls", f"--train_file {train} lies inside --output_dir {output_dir}")
    assert train.is_file() and (output_dir / "all_results.json").is_file()


def test_overwrite_never_empties_the_folder_the_user_works_in(tmp_path, monkeypatch, capsys):
    """``--output_dir . --overwrite_output_dir`` in a project folder would delete the project."""
    project = tmp_path / "project"
    leave_an_earlier_run(project)
    monkeypatch.chdir(project)
    outcome = run_command(["quickstart", "--preset", "tiny", "--output_dir", ".", "--overwrite_output_dir"], capsys)
    assert_refused(outcome, "quickstart", "--output_dir . holds the current folder")
    assert (project / "model.safetensors").read_text() == "trained weights"


@pytest.mark.parametrize("resume", ["true", "checkpoint-2"])
def test_overwrite_and_a_checkpoint_of_the_same_folder_are_refused_together(tmp_path, tiny_model, data_files, resume,
                                                                            capsys):
    output_dir = tmp_path / "out"
    checkpoint = output_dir / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    value = "true" if resume == "true" else str(checkpoint)
    outcome = run_command(["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", data_files["csv"],
                           "--output_dir", output_dir, "--overwrite_output_dir", "--resume_from_checkpoint", value,
                           *FAST], capsys)
    assert_refused(outcome, "finetune-cls", f"--resume_from_checkpoint {value}", "--overwrite_output_dir deletes")
    assert checkpoint.is_dir()


def test_the_lock_lives_inside_the_output_folder(tmp_path):
    """Nothing is written beside the folder, so a writable folder under a read-only parent (a shared scratch area
    with one folder per user) can be claimed; two claims of it still exclude each other (tests/e2e/test_hostile_flags)."""
    shared = tmp_path / "shared"
    mine = shared / "mine"
    mine.mkdir(parents=True)
    shared.chmod(0o555)
    try:
        claim_output_folder(mine)
        try:
            assert os.listdir(shared) == ["mine"]
            assert os.listdir(mine) == [LOCK_NAME]
        finally:
            release_output_folder(mine)
    finally:
        shared.chmod(0o755)
    assert os.listdir(mine) == []


def test_a_dangling_link_as_output_dir_is_one_line(tmp_path, tiny_model, data_files, capsys):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    outcome = run_command(["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", data_files["csv"],
                           "--output_dir", link, *FAST], capsys)
    assert_refused(outcome, "finetune-cls", f"--output_dir {link} is a link to {tmp_path / 'gone'}, which does not exist")
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_an_onnx_output_that_is_a_folder_is_one_line(tmp_path, tiny_model, capsys):
    folder = tmp_path / "model.onnx"
    folder.mkdir()
    outcome = run_command(["export-onnx", "--model_name_or_path", tiny_model, "--output", folder], capsys)
    assert_refused(outcome, "export-onnx", f"--output {folder} is a folder")
    assert os.listdir(folder) == []


def test_a_sigterm_just_after_the_lock_was_taken_leaves_no_lock_nor_folder(tmp_path, monkeypatch):
    """SIGTERM raises in the main thread at whatever bytecode it comes: just after the link that made the lock this
    run's, before the run recorded it, the lock and the folders made for it are still removed."""
    from mlm_suite.jobs.common import output_folder
    from mlm_suite.jobs.common.running import Terminated

    real_link = os.link

    def link_then_signal(source, destination):
        real_link(source, destination)
        raise Terminated()

    monkeypatch.setattr(output_folder.os, "link", link_then_signal)
    with pytest.raises(Terminated):
        claim_output_folder(tmp_path / "made" / "out")
    assert os.listdir(tmp_path) == []
