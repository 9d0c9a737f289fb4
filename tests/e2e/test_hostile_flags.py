"""Hostile flags for every command: one line, exit status 2, the output folder as it was (docs/command_line.md).

Three groups: flag values that cannot work, input files or folders given as flags that are missing, and the rules of
output folders (not an input folder, nor inside or around one; one run at a time; a stale lock taken over).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path

import pytest

from tests.helpers import assert_refused, finished_process_id, folder_files, held_by_another_process, run_command
from mlm_suite.jobs.common.output_folder import claim_output_folder, lock_path, release_output_folder

FAST = ["--max_steps", "2", "--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "2",
        "--report_to", "none"]


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes, to assert that a refused run changed nothing there."""
    return {name: (folder / name).read_bytes() for name in folder_files(folder)}


def job_argv(command: str, model: Path, data_files: dict[str, Path]) -> list:
    """A command line of ``command`` that would run (before the flag a case adds), without ``--output_dir``."""
    data = {
        "finetune-cls": ["--train_file", data_files["csv"], *FAST],
        "finetune-pair": ["--train_file", data_files["csv"], "--sentence1_column", "text", *FAST],
        "finetune-ner": ["--train_file", data_files["conll"], "--compare_hf", "false", *FAST],
        "finetune-retrieval": ["--train_file", data_files["pairs"], *FAST],
        "pretrain": ["--train_file", data_files["text"], *FAST, "--eval_strategy", "no", "--fill_mask_probes", "0"],
        "wsd": ["--train_file", data_files["wsd"], "--test_file", data_files["wsd"]],
        "anisotropy": ["--num_sentences", "4", "--n_pairs", "10"],
    }[command]
    return [command, "--model_name_or_path", model, *data]


# --------------------------------------------------------------------------------------------
# Flag values that cannot work: refused while the flags are parsed, before the folder exists
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("command", "flags", "fragments"),
    [
        ("finetune-cls", ["--max_steps", "0"], ["--max_steps"]),
        ("finetune-cls", ["--seed", "-1"], ["--seed must lie in [0, 2**32)", "-1"]),
        ("finetune-cls", ["--learning_rate", "inf"], ["--learning_rate must be a finite number", "inf"]),
        ("finetune-cls", ["--dataloader_num_workers", "-1"], ["--dataloader_num_workers must not be negative"]),
        ("finetune-cls", ["--eval_accumulation_steps", "0"], ["--eval_accumulation_steps must be at least 1"]),
        ("finetune-pair", ["--weight_decay", "nan"], ["--weight_decay must be a finite number", "nan"]),
        ("finetune-pair", ["--save_steps", "-1"], ["--save_steps must be positive", "-1"]),
        ("finetune-ner", ["--data_seed", "-1"], ["--data_seed must lie in [0, 2**32)"]),
        ("finetune-ner", ["--gradient_accumulation_steps", "0"], ["--gradient_accumulation_steps must be at least 1"]),
        ("finetune-retrieval", ["--warmup_steps", "-1"], ["--warmup_steps must not be negative"]),
        ("finetune-retrieval", ["--max_grad_norm", "nan"], ["--max_grad_norm must be a finite number"]),
        ("pretrain", ["--learning_rate", "nan"], ["--learning_rate must be a finite number"]),
        ("pretrain", ["--eval_steps", "0"], ["--eval_steps must be positive"]),
        ("wsd", ["--batch_size", "0"], ["--batch_size must be at least 1"]),
        ("anisotropy", ["--num_sentences", "1"], ["--num_sentences must be at least 2"]),
    ],
)
def test_a_flag_value_that_cannot_work_is_refused_before_the_folder_exists(
    command, flags, fragments, tmp_path, data_files, tiny_model, capsys
):
    output_dir = tmp_path / "out"
    outcome = run_command([*job_argv(command, tiny_model, data_files), *flags, "--output_dir", output_dir], capsys)
    assert_refused(outcome, command, *fragments)
    assert not output_dir.exists() and not lock_path(output_dir).exists()


def test_quickstart_names_the_presets(tmp_path, capsys):
    output_dir = tmp_path / "out"
    outcome = run_command(["quickstart", "--preset", "huge", "--output_dir", output_dir], capsys)
    assert_refused(outcome, "quickstart", "--preset", "huge", "mini")
    assert not output_dir.exists()


def test_seeds_passes_each_run_s_seed_through_the_job_s_checks(tmp_path, data_files, tiny_model, capsys):
    output_dir = tmp_path / "seeds"
    outcome = run_command(["seeds", "finetune-cls", "--seeds", "-1", "--output_dir", output_dir, "--",
                           *job_argv("finetune-cls", tiny_model, data_files)[1:]], capsys)
    assert_refused(outcome, "seeds", "--seed must lie in [0, 2**32)", "-1")
    assert not output_dir.exists() and not lock_path(output_dir).exists()


# --------------------------------------------------------------------------------------------
# Input files and folders given as flags that are not there
# --------------------------------------------------------------------------------------------
def test_prepare_data_names_a_missing_train_file(tmp_path, tiny_model, capsys):
    output_dir = tmp_path / "prepared"
    outcome = run_command(["prepare-data", "--train_file", tmp_path / "missing.txt", "--tokenizer_name", tiny_model,
                           "--output_dir", output_dir], capsys)
    assert_refused(outcome, "prepare-data", "--train_file", "missing.txt", "no such file")
    assert not output_dir.exists()


def test_convert_names_a_source_that_is_not_a_checkpoint_folder(tmp_path, capsys):
    destination = tmp_path / "converted"
    outcome = run_command(["convert", tmp_path / "missing", destination], capsys)
    assert_refused(outcome, "convert", "missing", "config.json")
    assert not destination.exists() and not lock_path(destination).exists()


def test_export_onnx_names_a_folder_without_a_checkpoint(tmp_path, capsys):
    output = tmp_path / "onnx" / "model.onnx"
    outcome = run_command(["export-onnx", "--model_name_or_path", tmp_path / "missing", "--output", output], capsys)
    assert_refused(outcome, "export-onnx", "--model_name_or_path", "missing", "no config.json")
    assert not output.parent.exists()


def test_export_onnx_wants_an_onnx_file_name(tmp_path, tiny_model, capsys):
    output = tmp_path / "onnx" / "model.txt"
    outcome = run_command(["export-onnx", "--model_name_or_path", tiny_model, "--output", output], capsys)
    assert_refused(outcome, "export-onnx", "--output", "model.txt", ".onnx")
    assert not output.parent.exists()


# --------------------------------------------------------------------------------------------
# Output folders: never an input folder, nor inside or around one
# --------------------------------------------------------------------------------------------
@pytest.fixture
def model_copy(tmp_path, tiny_model) -> Path:
    """A copy of the tiny model that a case may try to overwrite."""
    return Path(shutil.copytree(tiny_model, tmp_path / "model"))


@pytest.mark.parametrize(
    ("command", "where", "relation"),
    [
        ("finetune-cls", "inside", "lies inside"),
        ("finetune-pair", "same", "is"),
        ("finetune-ner", "same", "is"),
        ("finetune-retrieval", "around", "contains"),
        ("pretrain", "same", "is"),
        ("pretrain", "inside", "lies inside"),
        ("wsd", "same", "is"),
        ("anisotropy", "same", "is"),
    ],
)
def test_an_output_folder_that_overlaps_the_model_is_refused(
    command, where, relation, tmp_path, model_copy, data_files, capsys
):
    model = model_copy
    if where == "around":  # the model is a folder of the output folder, e.g. a checkpoint of an earlier run
        model = Path(shutil.move(model_copy, tmp_path / "run" / "checkpoint-2"))
    output_dir = {"same": model, "inside": model / "finetuned", "around": tmp_path / "run"}[where]
    before = contents(tmp_path)
    outcome = run_command([*job_argv(command, model, data_files), "--output_dir", output_dir], capsys)
    assert_refused(outcome, command, f"--output_dir {output_dir} {relation} --model_name_or_path {model}",
                   "choose another --output_dir")
    assert contents(tmp_path) == before  # nothing written, the model untouched, no lock left


def test_an_output_folder_given_through_another_spelling_is_the_same_folder(tmp_path, model_copy, data_files, capsys):
    link = tmp_path / "link"
    link.symlink_to(model_copy)
    before = contents(model_copy)
    outcome = run_command([*job_argv("finetune-cls", model_copy, data_files), "--output_dir", link], capsys)
    assert_refused(outcome, "finetune-cls", f"--output_dir {link} is --model_name_or_path {model_copy}")
    assert contents(model_copy) == before


def test_convert_refuses_to_write_over_its_source(tmp_path, capsys):
    source = tmp_path / "bert"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"model_type": "bert"}))
    outcome = run_command(["convert", source, source], capsys)
    assert_refused(outcome, "convert", f"dst {source} is src {source}")
    assert folder_files(source) == ["config.json"]


def test_seeds_refuses_runs_inside_the_model(tmp_path, model_copy, data_files, capsys):
    before = contents(tmp_path)
    outcome = run_command(["seeds", "finetune-cls", "--seeds", "1", "--output_dir", model_copy / "seeds", "--",
                           *job_argv("finetune-cls", model_copy, data_files)[1:]], capsys)
    assert_refused(outcome, "seeds", "lies inside --model_name_or_path")
    assert contents(tmp_path) == before


def test_an_output_folder_that_is_a_file_is_refused(tmp_path, data_files, tiny_model, capsys):
    output_file = tmp_path / "out.txt"
    output_file.write_text("notes\n")
    outcome = run_command([*job_argv("finetune-pair", tiny_model, data_files), "--output_dir", output_file], capsys)
    assert_refused(outcome, "finetune-pair", f"--output_dir {output_file} is a file")
    assert output_file.read_text() == "notes\n"


# --------------------------------------------------------------------------------------------
# One run per output folder
# --------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
@pytest.mark.parametrize("command", ["finetune-cls", "finetune-ner", "pretrain", "wsd", "anisotropy"])
def test_a_folder_another_run_writes_is_refused(command, tmp_path, data_files, tiny_model, capsys):
    output_dir = tmp_path / "out"
    with held_by_another_process(output_dir) as owner:
        outcome = run_command([*job_argv(command, tiny_model, data_files), "--output_dir", output_dir], capsys)
        assert_refused(outcome, command, f"--output_dir {output_dir} is in use by process {owner}",
                       socket.gethostname())
        assert lock_path(output_dir).exists()  # the owner's lock stays
    assert not output_dir.exists()


@pytest.mark.multiprocess
def test_quickstart_prepare_data_and_seeds_respect_a_busy_folder(tmp_path, data_files, tiny_model, capsys):
    output_dir = tmp_path / "out"
    commands = {
        "quickstart": ["quickstart", "--preset", "tiny"],
        "prepare-data": ["prepare-data", "--train_file", data_files["text"], "--tokenizer_name", tiny_model],
        "seeds": ["seeds", "finetune-cls", "--seeds", "1"],
    }
    with held_by_another_process(output_dir) as owner:
        for command, argv in commands.items():
            outcome = run_command([*argv, "--output_dir", output_dir], capsys)
            assert_refused(outcome, command, f"is in use by process {owner}")
    assert not output_dir.exists()


@pytest.mark.multiprocess
def test_a_run_inside_a_folder_another_run_writes_is_refused(tmp_path, data_files, tiny_model, capsys):
    """``mlm-suite seeds`` writing ``sweep`` owns ``sweep/seed_1`` too."""
    with held_by_another_process(tmp_path / "sweep") as owner:
        outcome = run_command([*job_argv("finetune-cls", tiny_model, data_files),
                               "--output_dir", tmp_path / "sweep" / "seed_1"], capsys)
        assert_refused(outcome, "finetune-cls", f"--output_dir {tmp_path / 'sweep'} is in use by process {owner}")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.multiprocess
def test_a_second_mlm_suite_process_is_refused_while_the_first_holds_the_folder(tmp_path, data_files, tiny_model,
                                                                                 warm_python):
    """Two real processes: this one claims the folder as a running job does, a second ``mlm-suite`` is refused."""
    output_dir = tmp_path / "out"
    claim_output_folder(output_dir)
    try:
        command = [Path(sys.executable).parent / "mlm-suite",
                   *job_argv("finetune-retrieval", tiny_model, data_files), "--output_dir", output_dir]
        second = warm_python.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert second.returncode == 2, second.stderr[-3000:]
        assert "Traceback" not in second.stderr
        errors = [line for line in second.stderr.splitlines() if ": error: " in line]
        assert errors == [f"mlm-suite finetune-retrieval: error: --output_dir {output_dir} is in use by process "
                          f"{os.getpid()} on {socket.gethostname()} (lock {lock_path(output_dir)}): wait for that "
                          "run to end, or choose another --output_dir"]
        assert json.loads(lock_path(output_dir).read_text())["pid"] == os.getpid()  # still this process's
    finally:
        release_output_folder(output_dir)
    assert not lock_path(output_dir).exists() and not output_dir.exists()


@pytest.mark.multiprocess
def test_a_stale_lock_is_taken_over_and_the_run_ends_without_one(tmp_path, data_files, tiny_model, capsys):
    output_dir = tmp_path / "out"
    lock = lock_path(output_dir)
    output_dir.mkdir()
    dead = finished_process_id()
    lock.write_text(json.dumps({"pid": dead, "host": socket.gethostname(), "command": ["mlm-suite"]}))
    outcome = run_command([*job_argv("finetune-cls", tiny_model, data_files), "--output_dir", output_dir], capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert f"taking over the lock of --output_dir {output_dir} ({lock}): its process {dead} is no longer running" \
        in outcome.err
    assert "model.safetensors" in folder_files(output_dir)
    assert not lock.exists()


def test_a_run_refused_after_its_claim_leaves_no_folder_and_no_lock(tmp_path, data_files, tiny_model, capsys):
    """--max_seq_length is checked against the model after the claim: the lock and the parents made for it go."""
    output_dir = tmp_path / "runs" / "2026" / "out"
    outcome = run_command([*job_argv("finetune-cls", tiny_model, data_files), "--max_seq_length", "4096",
                           "--output_dir", output_dir], capsys)
    assert_refused(outcome, "finetune-cls", "--max_seq_length", "4096")
    assert not (tmp_path / "runs").exists()
