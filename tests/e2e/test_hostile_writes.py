"""Outputs the machine will not store, at every kind of save: a file-size limit (``ulimit -f``) stands in for a full
disk, which fails the same writes. Each ends in one line naming what could not be written and the OS error, exit
status 1, and leaves nothing that looks complete: no ``config.json`` without its weights, no checkpoint cut short,
no results or card cut short (docs/command_line.md). A pretraining run whose checkpoint could not be saved resumes,
once there is room, from the last whole checkpoint.

The limit is set in this process (:func:`file_size_limit`: the jobs run in it, as ``run_command`` runs them); the
last test runs a real ``mlm-suite`` process under it, as a shell's ``ulimit -f`` would start it.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import Outcome, launch_environment, run_command
from mlm_suite.model_files import STAGING_FOLDER, check_model_folder, check_weights_files
from mlm_suite.training.trainer import JobTrainer

#: Bytes a file may grow to: the tiny models' weights (~4 MB on the MiniLM vocabulary, their optimizer state twice
#: that) exceed it; their config, code, tokenizer (~0.7 MB) and every JSON file fit.
LIMIT = 2_000_000
#: What the OS says when a write goes past the limit.
TOO_LARGE = "[Errno 27] File too large"


def limit_file_sizes(size: int) -> None:
    """From now on, no file this process writes grows past ``size`` bytes: the write fails with EFBIG (CPython
    ignores the SIGXFSZ signal that would otherwise end the process)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@contextmanager
def file_size_limit(size: int) -> Iterator[None]:
    """Within the block, :func:`limit_file_sizes` (lowered again inside it: a disk filling up); lifted after it."""
    before = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    limit_file_sizes(size)
    try:
        yield
    finally:
        limit_file_sizes(before)


def assert_write_failure(outcome: Outcome, command: str, path: Path) -> None:
    """Exit status 1 and, as stderr's last line and its only error, ``could not write <path>: <the OS error>``."""
    assert "Traceback" not in outcome.err + outcome.out, outcome.err[-3000:]
    assert outcome.status == 1, (outcome.status, outcome.err[-3000:])
    errors = [line for line in outcome.err.splitlines() if ": error: " in line]
    assert errors == [outcome.err.splitlines()[-1]], outcome.err[-3000:]
    assert errors[0] == f"mlm-suite {command}: error: could not write {path}: {TOO_LARGE}"


def assert_nothing_looks_complete(folder: Path) -> None:
    """Every ``config.json`` under ``folder`` stands beside its whole weights, every checkpoint holds its
    ``trainer_state.json``, and no staging folder is left."""
    for config in folder.rglob("config.json"):
        check_weights_files(config.parent)
    for checkpoint in folder.rglob("checkpoint-*"):
        assert (checkpoint / "trainer_state.json").is_file(), checkpoint
    assert not list(folder.rglob(STAGING_FOLDER))


def pretrain(model: Path, data_files, output_dir: Path, *flags) -> list:
    return ["pretrain", "--model_name_or_path", model, "--train_file", data_files["text"], "--validation_file",
            data_files["text"], "--max_seq_length", "32", "--per_device_train_batch_size", "2", "--eval_strategy", "no",
            "--fill_mask_probes", "0", "--report_to", "none", "--disable_tqdm", "true", "--output_dir", output_dir,
            *flags]  # fmt: skip


def finetune_cls(model: Path, data_files, output_dir: Path) -> list:
    return ["finetune-cls", "--model_name_or_path", model, "--train_file", data_files["csv"], "--max_steps", "1",
            "--per_device_train_batch_size", "2", "--report_to", "none", "--disable_tqdm", "true", "--output_dir",
            output_dir]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    """A random 2-layer HF BERT on the MiniLM vocabulary (~4 MB of weights)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    folder = tmp_path_factory.mktemp("writes_tiny_bert")
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=48, max_position_embeddings=128)).save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------------------------
# Model folders: the weights go past the limit, so no config.json is left without them
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["pretrain", "finetune-cls", "quickstart", "convert"])
def test_a_model_too_large_to_save_leaves_no_config_without_weights(command, tmp_path, tiny_model, tiny_bert,
                                                                    data_files, capsys):
    output_dir = tmp_path / "out"
    argv = {
        "pretrain": lambda: pretrain(tiny_model, data_files, output_dir, "--max_steps", "2"),
        "finetune-cls": lambda: finetune_cls(tiny_model, data_files, output_dir),
        "quickstart": lambda: ["quickstart", "--preset", "tiny", "--output_dir", output_dir],
        "convert": lambda: ["convert", tiny_bert, output_dir],
    }[command]()
    with file_size_limit(LIMIT):
        outcome = run_command(argv, capsys)
    assert_write_failure(outcome, command, output_dir)
    assert not (output_dir / "config.json").exists()
    assert_nothing_looks_complete(tmp_path)


# --------------------------------------------------------------------------------------------
# Checkpoints: the one cut short goes, and the next run resumes from the last whole one
# --------------------------------------------------------------------------------------------
def test_a_checkpoint_cut_short_goes_and_the_next_run_resumes_from_the_last_whole_one(tmp_path, tiny_model,
                                                                                      data_files, capsys):
    output_dir = tmp_path / "out"
    argv = pretrain(tiny_model, data_files, output_dir, "--save_strategy", "steps", "--save_steps", "2")
    first = run_command(argv + ["--max_steps", "2"], capsys)  # stops at step 2, saved as checkpoint-2
    assert first.status == 0, first.err[-3000:]
    argv += ["--max_steps", "4"]
    with file_size_limit(LIMIT):
        outcome = run_command(argv, capsys)  # resumes from checkpoint-2, and cannot save checkpoint-4
    assert "resuming training from" in outcome.err
    assert_write_failure(outcome, "pretrain", output_dir / "checkpoint-4")
    assert sorted(path.name for path in output_dir.glob("checkpoint-*")) == ["checkpoint-2"]
    assert_nothing_looks_complete(output_dir)

    rerun = run_command(argv, capsys)  # there is room again
    assert rerun.status == 0, rerun.err[-3000:]
    assert f"resuming training from {output_dir / 'checkpoint-2'}" in rerun.err
    check_model_folder(output_dir / "checkpoint-4")
    check_model_folder(output_dir)
    assert_nothing_looks_complete(output_dir)


# --------------------------------------------------------------------------------------------
# Results and card: the disk fills up once the model is saved, or as the card is written
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fills_up_in", ["save_model", "create_model_card"])
def test_results_or_a_card_cut_short_are_removed(fills_up_in, tmp_path, tiny_model, data_files, capsys, monkeypatch):
    output_dir = tmp_path / "out"
    original = getattr(JobTrainer, fills_up_in)

    def the_disk_fills_up(self, *args, **kwargs):
        # save_model: once the model is saved (the results JSON, larger than 100 bytes, come next); create_model_card:
        # before the card is written.
        if fills_up_in == "create_model_card":
            limit_file_sizes(100)
        original(self, *args, **kwargs)
        limit_file_sizes(100)

    monkeypatch.setattr(JobTrainer, fills_up_in, the_disk_fills_up)
    with file_size_limit(10 * LIMIT):  # room for the model
        outcome = run_command(finetune_cls(tiny_model, data_files, output_dir), capsys)
    check_model_folder(output_dir)  # the model was saved whole before
    assert not (output_dir / "README.md").exists()
    if fills_up_in == "save_model":
        assert_write_failure(outcome, "finetune-cls", output_dir)
        assert not list(output_dir.glob("*results.json"))
    else:
        assert_write_failure(outcome, "finetune-cls", output_dir / "README.md")
        assert (output_dir / "all_results.json").is_file()
    assert_nothing_looks_complete(output_dir)


# --------------------------------------------------------------------------------------------
# prepare-data and export-onnx: written aside, nothing moved into place
# --------------------------------------------------------------------------------------------
def test_prepare_data_too_large_to_write_leaves_nothing(tmp_path, tiny_model, corpus, capsys):
    output_dir = tmp_path / "prepared"
    argv = ["prepare-data", "--train_file", corpus["train"], "--validation_file", corpus["validation"],
            "--tokenizer_name", tiny_model, "--max_seq_length", "32", "--output_dir", output_dir]
    with file_size_limit(300_000):  # the tokenizer's tokenizer.json (~0.7 MB) is larger
        outcome = run_command(argv, capsys)
    assert_write_failure(outcome, "prepare-data", output_dir)
    assert sorted(os.listdir(tmp_path)) == []  # no prepared folder, no staging folder beside it


@pytest.mark.compile
@pytest.mark.slow
def test_export_onnx_too_large_to_write_leaves_nothing(tmp_path, tiny_model, capsys):
    output = tmp_path / "onnx" / "model.onnx"
    with file_size_limit(1_000_000):  # its weights file, model.onnx.data (~4 MB), is larger
        outcome = run_command(["export-onnx", "--model_name_or_path", tiny_model, "--output", output], capsys)
    assert_write_failure(outcome, "export-onnx", output)
    assert not output.parent.exists()


# --------------------------------------------------------------------------------------------
# A real process under `ulimit -f`: the write fails, the process is not killed by SIGXFSZ
# --------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
@pytest.mark.slow
def test_an_mlm_suite_process_under_a_file_size_limit_reports_the_write(tmp_path, minilm_dir):
    output_dir = tmp_path / "out"  # (minilm_dir: the tokenizer quickstart reads is in the cache, not fetched here)
    # subprocess restores SIGXFSZ's default action in the child, as a shell does for the commands it starts.
    result = subprocess.run(
        [str(Path(sys.executable).with_name("mlm-suite")), "quickstart", "--preset", "tiny", "--output_dir",
         str(output_dir)],
        preexec_fn=lambda: limit_file_sizes(LIMIT),
        capture_output=True, text=True, env={**launch_environment(), "MLM_SUITE_DEBUG": "0"}, timeout=300,
    )  # fmt: skip
    assert result.returncode != -signal.SIGXFSZ
    assert_write_failure(Outcome(result.returncode, result.stdout, result.stderr), "quickstart", output_dir)
    assert not output_dir.exists()
