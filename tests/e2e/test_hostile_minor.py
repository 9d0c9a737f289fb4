"""Minor hostile cases (issue 45, item 8), whole commands: a corpus or a vocabulary without a word to train on is
refused where it enters; a checkpoint past ``--max_steps`` is refused; a run resumed with other data flags says so,
and no run resumed from a tied MLM head reports its decoder missing; a SIGTERM'd ``prepare-data`` leaves no staging
folder (docs/command_line.md)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging

from mlm_suite.cli import main
from tests.helpers import assert_refused, make_documents, pretrain_argv, run_command, special_tokens_only, write_text



# --------------------------------------------------------------------------------------------
# Nothing to train on
# --------------------------------------------------------------------------------------------
# A vocabulary trained on the corpus (which ended in an internal error), and MiniLM's (which trained, with a loss of 0).
@pytest.mark.parametrize("vocabulary", [("--vocab_size", "120"), ("--train_tokenizer", "false")],
                         ids=["trained", "minilm"])
def test_a_corpus_of_zero_width_characters_is_refused_naming_it(tmp_path, vocabulary, capsys):
    corpus = tmp_path / "invisible.txt"
    corpus.write_text("\u200b\u200b\n\n\u200c \u200d\u2060\n\n\u200b\n", encoding="utf-8")
    outcome = run_command(pretrain_argv(tmp_path / "out", corpus, steps=4, vocabulary=vocabulary), capsys)
    assert_refused(outcome, "pretrain", f"--train_file {corpus}: no word to train on after normalisation")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["pretrain", "prepare-data"])
def test_a_vocabulary_of_special_tokens_only_is_refused_naming_it(tmp_path, command, capsys):
    tokenizer = tmp_path / "five_tokens"
    special_tokens_only().save_pretrained(tokenizer)
    corpus, output_dir = write_text(tmp_path / "corpus.txt", make_documents(12)), tmp_path / "out"
    if command == "pretrain":
        argv = pretrain_argv(output_dir, corpus, steps=4, vocabulary=("--tokenizer_name", tokenizer))
    else:
        argv = ["prepare-data", "--train_file", corpus, "--tokenizer_name", tokenizer, "--output_dir", output_dir]
    outcome = run_command(argv, capsys)
    assert_refused(outcome, command, f"--tokenizer_name {tokenizer}: the vocabulary has no token besides special "
                   "tokens ([PAD], [UNK], [CLS], [SEP], [MASK])")
    assert not output_dir.exists()


# --------------------------------------------------------------------------------------------
# Resuming
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, data_files) -> Path:
    """A tiny pretraining run of 4 steps that saved ``checkpoint-2`` and ``checkpoint-4``."""
    output_dir = tmp_path_factory.mktemp("minor_run") / "out"
    argv = pretrain_argv(output_dir, data_files["text"], "--save_strategy", "steps", "--save_steps", "2", steps=4)
    assert main([str(arg) for arg in argv]) == 0
    return output_dir


def resume(tmp_path, corpus: Path, checkpoint: Path, max_steps: int, capsys):
    argv = pretrain_argv(tmp_path / "resumed", corpus, "--max_steps", str(max_steps), "--resume_from_checkpoint",
                         checkpoint)
    with CaptureLogger(logging.get_logger("transformers.trainer")) as trainer_log:
        outcome = run_command(argv, capsys)
    return outcome, trainer_log.out


def test_a_checkpoint_past_max_steps_is_refused_naming_both(tmp_path, data_files, finished_run, capsys):
    checkpoint = finished_run / "checkpoint-4"
    outcome, _ = resume(tmp_path, data_files["text"], checkpoint, 3, capsys)
    assert_refused(outcome, "pretrain", f"checkpoint {checkpoint} is at step 4, already past --max_steps 3")
    assert not (tmp_path / "resumed").exists()


def test_a_run_resumed_on_another_train_file_says_so_in_one_line(tmp_path, data_files, finished_run, capsys):
    other = write_text(tmp_path / "other.txt", make_documents(12, seed=1))
    checkpoint = finished_run / "checkpoint-2"
    outcome, _ = resume(tmp_path, other, checkpoint, 3, capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    warnings = [line for line in outcome.err.splitlines() if line.startswith("warning: resuming")]
    assert warnings == [
        f"warning: resuming {checkpoint}, saved by a run with other data flags: --train_file {other.resolve()} (its "
        f"run: {data_files['text'].resolve()}); training continues with the values given now"
    ]


def test_a_resumed_run_reports_no_missing_decoder_nor_other_data(tmp_path, data_files, finished_run, capsys):
    outcome, trainer_log = resume(tmp_path, data_files["text"], finished_run / "checkpoint-2", 3, capsys)
    assert outcome.status == 0, outcome.err[-3000:]
    assert "missing keys" not in trainer_log  # the decoder is tied to the word embeddings, which the checkpoint has
    assert "warning: resuming" not in outcome.err  # the same data flags


# --------------------------------------------------------------------------------------------
# Signals
# --------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
def test_a_sigterm_during_prepare_data_removes_its_staging_folder(tmp_path, tiny_model, warm_python):
    corpus = write_text(tmp_path / "corpus.txt", make_documents(20000, sentences=4))
    output_dir = tmp_path / "prepared"
    argv = [Path(sys.executable).with_name("mlm-suite"), "prepare-data", "--train_file", corpus, "--tokenizer_name",
            tiny_model, "--output_dir", output_dir]
    process = warm_python.start(argv)
    try:
        deadline = time.monotonic() + 120
        while not list(output_dir.glob(".partial-*")):  # its staging folder, inside the output folder
            assert process.poll() is None, "prepare-data ended before it could be stopped"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
    finally:
        try:
            process.wait(120)  # while it cleans up
        finally:
            process.send_signal(signal.SIGKILL)  # when it hangs (nothing once it ended)
            process.wait()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt"]  # no staging folder, output or lock
    result = process.completed()
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == "mlm-suite prepare-data: terminated"
