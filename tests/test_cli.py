"""The ``mlm-suite`` command line: one-line user errors (exit status 2), ``--debug`` tracebacks,
``usage:`` lines naming the subcommand, ``--version``, flags checked against the model before the
output folder exists, and what resource downloads report.

In-process through ``mlm_suite.cli.main`` (what the console script calls), plus processes for what only a process
shows (the traceback, the exit status, ``python -m`` names, the libraries a command imports): started warm
(``tests/warm_processes.py``), and one real ``python -m``.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from mlm_suite.data.inputs import downloads
from mlm_suite.cli import SUBCOMMANDS, main
from mlm_suite.errors import FetchError, UsageError, is_user_error
from mlm_suite.jobs.common.running import command_prog, run_job
from mlm_suite.jobs.common.output_folder import LOCK_NAME, claim_output_folder, lock_path, release_output_folder
from tests.helpers import assert_one_line_error, job_dataclasses, launch_two_processes, run_cli
from mlm_suite.jobs.common import arguments


# --------------------------------------------------------------------------------------------
# --version, --help and usage lines
# --------------------------------------------------------------------------------------------
def test_version_prints_the_installed_versions(capsys):
    status, out, err = run_cli(["--version"], capsys)
    assert status == 0 and err == ""
    expected = (f"mlm-suite {metadata.version('mlm-suite')} (torch {metadata.version('torch')}, "
                f"transformers {metadata.version('transformers')}, Python ")
    assert out.startswith(expected), out
    assert len(out.splitlines()) == 1


def test_top_level_help_lists_every_subcommand_and_the_global_options(capsys):
    status, out, _ = run_cli(["--help"], capsys)
    assert status == 0
    for name in SUBCOMMANDS:
        assert f"\n  {name} " in out
    assert "--debug" in out and "MLM_SUITE_DEBUG" in out and "--version" in out


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_usage_line_names_the_subcommand(command, capsys):
    status, out, _ = run_cli([command, "--help"], capsys)
    assert status == 0
    assert out.startswith(f"usage: mlm-suite {command} ["), out[:200]


def test_unknown_command_and_option_exit_2(capsys):
    status, _, err = run_cli(["finetune-xyz"], capsys)
    assert status == 2 and err.splitlines()[-1] == "mlm-suite: error: unknown command 'finetune-xyz'"
    status, _, err = run_cli(["--verbose", "wsd"], capsys)
    assert status == 2 and err.splitlines()[-1] == "mlm-suite: error: unknown option '--verbose'"


def test_unknown_flag_shows_a_one_line_usage_not_every_trainer_flag(capsys, tmp_path):
    status, _, err = run_cli(["finetune-ner", "--no_such_flag", "1", "--output_dir", str(tmp_path / "out")], capsys)
    assert status == 2
    assert err.splitlines() == [
        "usage: mlm-suite finetune-ner [options]  (mlm-suite finetune-ner --help lists them)",
        "mlm-suite finetune-ner: error: unrecognized arguments: --no_such_flag 1",
    ]
    status, _, err = run_cli(["pretrain", "--max_seq_length", "long"], capsys)
    assert status == 2 and len(err.splitlines()) == 2 and "invalid int value: 'long'" in err


# --------------------------------------------------------------------------------------------
# One-line user errors, before anything is written
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command, flags, fragments",
    [
        ("finetune-cls", ["--per_device_train_batch_size", "0"], ["--per_device_train_batch_size must be at least 1, got 0"]),
        ("finetune-pair", ["--learning_rate=-1e-5"], ["--learning_rate must not be negative"]),
        ("finetune-ner", ["--num_train_epochs", "0"], ["--num_train_epochs must be positive"]),
        ("finetune-ner", ["--label_smoothing_factor", "1.5"], ["--label_smoothing_factor must lie in [0, 1)"]),
        ("finetune-ner", ["--train_file", "{missing}"], ["--train_file", "missing.conll: no such file"]),
        ("finetune-cls", ["--train_file", "{data}", "--validation_file", "{missing}"], ["--validation_file", "no such file"]),
        ("finetune-cls", ["--model_name_or_path", "{no_model}"], ["--model_name_or_path", "no_model: no such folder"]),
        ("pretrain", ["--tokenizer_name", "./no/such/tokenizer"], ["--tokenizer_name ./no/such/tokenizer: no such folder"]),
        ("finetune-cls", ["--config_name", "./no/such/config"], ["--config_name ./no/such/config: no such folder"]),
        ("wsd", ["--train_file", "{missing}", "--test_file", "{missing}"], ["--train_file", "no such file"]),
        ("wsd", ["--test_fraction", "1.5"], ["--test_fraction must lie in (0, 1)"]),
        ("pretrain", ["--nsp_probability", "-0.1"], ["--nsp_probability must lie in [0, 1]"]),
        ("wsd", ["--train_file", "{missing}"], ["give both --train_file and --test_file"]),
        ("anisotropy", ["--num_sentences", "1"], ["--num_sentences must be at least 2, got 1"]),
        ("anisotropy", ["--batch_size", "0"], ["--batch_size must be at least 1"]),
        ("finetune-ner", ["--use_crf", "--flatten_batches"], ["--flatten_batches cannot be combined with --use_crf"]),
    ],
)
def test_bad_flag_is_one_line_exit_2_and_writes_nothing(command, flags, fragments, tmp_path, data_files, capsys):
    paths = {"missing": tmp_path / "missing.conll", "data": data_files["csv"], "no_model": tmp_path / "no_model"}
    output_dir = tmp_path / "out"
    argv = [command, *[flag.format(**paths) for flag in flags], "--output_dir", str(output_dir)]
    status, out, err = run_cli(argv, capsys)
    assert status == 2
    assert_one_line_error(err, command, *fragments)
    assert "Traceback" not in err + out
    assert not output_dir.exists()


@pytest.mark.parametrize(
    "command, data_flags",
    [
        ("finetune-ner", ["--train_file", "{conll}"]),
        ("finetune-cls", ["--train_file", "{csv}"]),
        ("finetune-pair", ["--train_file", "{csv}", "--sentence1_column", "text"]),
    ],
)
def test_max_seq_length_beyond_the_models_positions_is_rejected_before_writing(
    command, data_flags, tiny_model, data_files, tmp_path, capsys
):
    """Checked before training: a value beyond the positions would fail in the model after the folder exists."""
    output_dir = tmp_path / "out"
    flags = [flag.format(**data_files) for flag in data_flags]
    argv = [command, "--model_name_or_path", str(tiny_model), *flags, "--max_seq_length", "100000",
            "--output_dir", str(output_dir), "--max_steps", "1", "--report_to", "none"]
    status, _, err = run_cli(argv, capsys)
    assert status == 2
    assert_one_line_error(err, command, "--max_seq_length 100000", "128 positions", "max_position_embeddings")
    assert not output_dir.exists()


def test_max_seq_length_must_leave_room_for_text(tiny_model, data_files, tmp_path, capsys):
    argv = ["finetune-pair", "--model_name_or_path", str(tiny_model), "--train_file", str(data_files["csv"]),
            "--sentence1_column", "text", "--max_seq_length", "3", "--output_dir", str(tmp_path / "out")]
    status, _, err = run_cli(argv, capsys)
    assert status == 2
    assert_one_line_error(err, "finetune-pair", "--max_seq_length 3", "3 special tokens")
    assert not (tmp_path / "out").exists()


def test_wsd_layers_are_checked_against_the_model(tiny_model, data_files, tmp_path, capsys):
    argv = ["wsd", "--model_name_or_path", str(tiny_model), "--train_file", str(data_files["wsd"]),
            "--test_file", str(data_files["wsd"]), "--layers", "0,5", "--output_dir", str(tmp_path / "out")]
    status, _, err = run_cli(argv, capsys)
    assert status == 2
    assert_one_line_error(err, "wsd", "--layers: index 5 is out of range", "3 hidden states")
    assert not (tmp_path / "out").exists()


def test_seeds_names_the_job_in_its_errors(tmp_path, capsys):
    output_dir = tmp_path / "seeds"
    argv = ["seeds", "finetune-cls", "--seeds", "1", "2", "--output_dir", str(output_dir), "--", "--bogus"]
    status, _, err = run_cli(argv, capsys)
    assert status == 2
    assert err.splitlines()[-1] == "mlm-suite seeds finetune-cls: error: unrecognized arguments: --bogus"
    assert not output_dir.exists()
    status, _, err = run_cli(["seeds", "finetune-cls", "--seeds", "1", "1", "--output_dir", str(output_dir)], capsys)
    assert status == 2
    assert_one_line_error(err, "seeds", "--seeds has repeats")


# --------------------------------------------------------------------------------------------
# --debug / MLM_SUITE_DEBUG, and what is not a user error
# --------------------------------------------------------------------------------------------
def test_debug_flag_and_environment_variable_let_the_error_through(tmp_path, monkeypatch, capsys):
    argv = ["finetune-ner", "--train_file", str(tmp_path / "missing.conll")]
    with pytest.raises(UsageError, match="--train_file .*missing.conll: no such file"):
        main(["--debug", *argv])
    monkeypatch.setenv("MLM_SUITE_DEBUG", "1")
    with pytest.raises(UsageError, match="no such file"):
        main(argv)
    monkeypatch.setenv("MLM_SUITE_DEBUG", "0")
    status, _, err = run_cli(argv, capsys)
    assert status == 2 and len(err.splitlines()) == 1


def test_run_job_sorts_user_errors_from_bugs(capsys):
    def failing(error: BaseException):
        def job(argv):
            assert command_prog() == "mlm-suite demo"  # what the job's parser is named after
            raise error
        return job

    for error in (UsageError("bad --flag"), ValueError("bad value"), FileNotFoundError(2, "No such file", "x.txt"),
                  FetchError("could not download")):
        with pytest.raises(SystemExit) as exit_info:
            run_job(failing(error), [], prog="mlm-suite demo")
        assert exit_info.value.code == 2
        assert capsys.readouterr().err == f"mlm-suite demo: error: {error}\n"
    with pytest.raises(SystemExit) as exit_info:
        run_job(failing(KeyboardInterrupt()), [], prog="mlm-suite demo")
    assert exit_info.value.code == 130 and capsys.readouterr().err == "mlm-suite demo: interrupted\n"
    for bug in (RuntimeError("CUDA error: device-side assert"), KeyError("labels"), TypeError("oops")):
        with pytest.raises(type(bug)):
            run_job(failing(bug), [], prog="mlm-suite demo")
        assert not is_user_error(bug)
    assert command_prog() is None  # reset after the job
    assert run_job(lambda argv: argv, ["x"], prog="mlm-suite demo") == ["x"]


@pytest.mark.multiprocess
def test_a_process_prints_one_line_or_with_debug_the_traceback(tmp_path, warm_python):
    """Exit statuses and streams as a shell sees them (``python -m mlm_suite.cli`` = the console script)."""
    argv = [sys.executable, "-m", "mlm_suite.cli", "finetune-ner", "--train_file", str(tmp_path / "missing.conll"),
            "--output_dir", str(tmp_path / "out")]
    plain = warm_python.run(argv, cwd=tmp_path)
    assert plain.returncode == 2, plain.stderr[-2000:]
    assert plain.stderr.splitlines() == [
        f"mlm-suite finetune-ner: error: --train_file {tmp_path / 'missing.conll'}: no such file"
    ]
    debug = warm_python.run([*argv[:3], "--debug", *argv[3:]], cwd=tmp_path)
    assert debug.returncode == 1
    assert "Traceback (most recent call last):" in debug.stderr
    assert debug.stderr.splitlines()[-1].startswith("mlm_suite.errors.UsageError: --train_file ")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_python_dash_m_names_the_module(tmp_path, warm_python):
    """A real ``python -m`` (start-up included), and the same command started warm (``tests/warm_processes.py``, which
    the other process tests use) with the same streams and status."""
    argv = [sys.executable, "-m", "mlm_suite.jobs.finetune_pair", "--learning_rate", "-1"]
    real = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert real.returncode == 2
    assert real.stderr.splitlines() == [
        "python -m mlm_suite.jobs.finetune_pair: error: --learning_rate must not be negative, got -1.0"
    ]
    warm = warm_python.run(argv, cwd=tmp_path)
    assert (warm.returncode, warm.stdout, warm.stderr) == (real.returncode, real.stdout, real.stderr)


@pytest.mark.multiprocess
def test_the_commands_start_without_the_libraries_only_some_steps_need(tmp_path, warm_python):
    """A job's process imports scikit-learn, seqeval and matplotlib only when it scores or draws (~2.5 s of start-up
    together): a command that stops at a flag error, and every pretraining process, never pays for them."""
    modules = sorted({module for module, _ in SUBCOMMANDS.values()})
    script = tmp_path / "imports.py"
    script.write_text(f"import sys; import {', '.join(['mlm_suite.cli', *modules])}; "
                      "print(sorted(m for m in ('sklearn', 'seqeval', 'matplotlib') if m in sys.modules))")
    done = warm_python.run([sys.executable, script])
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------
# Flag checks, where each job declares its flags
# --------------------------------------------------------------------------------------------
def parse_job(command: str, argv: list[str]) -> None:
    """``argv`` through ``command``'s parser and the checks of its flags, as the job runs them before reading data."""
    module = importlib.import_module(SUBCOMMANDS[command][0])
    arguments.parse_arguments(job_dataclasses(module), argv)


@pytest.mark.parametrize(
    "command, flags, message",
    [
        ("finetune-cls", ["--per_device_eval_batch_size", "0"], "--per_device_eval_batch_size must be at least 1"),
        ("finetune-ner", ["--gradient_accumulation_steps", "-2"], "--gradient_accumulation_steps must be at least 1"),
        ("finetune-retrieval", ["--max_train_samples", "0"], "--max_train_samples must be at least 1"),
        ("finetune-ner", ["--max_eval_samples", "0"], "--max_eval_samples must be at least 1"),
        ("finetune-cls", ["--max_seq_length", "0"], "--max_seq_length must be at least 1"),
        ("finetune-pair", ["--preprocessing_num_workers", "0"], "--preprocessing_num_workers must be at least 1"),
        ("finetune-cls", ["--train_last_k_layers", "-2"], "--train_last_k_layers must be at least -1"),
        ("finetune-pair", ["--coherence_eval_pairs", "1"], "--coherence_eval_pairs must be at least 2"),
        ("finetune-ner", ["--early_stopping_patience", "0"], "--early_stopping_patience must be at least 1"),
        ("finetune-retrieval", ["--mini_batch_size", "0"], "--mini_batch_size must be at least 1"),
        ("finetune-retrieval", ["--flatten_batches", "false"], "finetune-retrieval always trains on flattened batches"),
        ("finetune-retrieval", ["--temperature", "0"], "--temperature must be positive"),
        ("finetune-retrieval", ["--classifier_pooling", "cls"], "--classifier_pooling is for classification heads"),
        ("finetune-retrieval", ["--corpus_file", "{existing}"], "--corpus_file and --queries_file go together"),
        ("finetune-cls", ["--classifier_pooling", "max"], "--classifier_pooling must be cls or mean, got 'max'"),
        ("finetune-cls", ["--num_train_epochs", "0", "--max_steps", "-1"], "--num_train_epochs must be positive"),
        ("finetune-ner", ["--adam_beta2", "1.0"], r"--adam_beta2 must lie in \[0, 1\)"),
        ("wsd", ["--test_fraction", "0.0"], r"--test_fraction must lie in \(0, 1\)"),
        ("wsd", ["--max_lemmas", "0"], "--max_lemmas must be at least 1"),
        ("wsd", ["--layers", "0,x"], "--layers must be last, last4_mean, last4_sum or comma-separated integers"),
        ("anisotropy", ["--n_pairs", "0"], "--n_pairs must be at least 1"),
        ("finetune-pair", ["--weight_decay=-0.01"], "--weight_decay must not be negative"),
        ("finetune-ner", ["--early_stopping_threshold=-1"], "--early_stopping_threshold must not be negative"),
        ("finetune-cls", ["--intermediate_num_train_epochs", "0"], "--intermediate_num_train_epochs must be positive"),
        ("finetune-pair", ["--intermediate_train_file", "{folder}"], "--intermediate_train_file .* is not a file"),
        ("finetune-retrieval", ["--train_file", "{existing}", "--test_queries_file", "{missing}"],
         "--test_queries_file .*missing.jsonl: no such file"),
        ("wsd", ["--model_name_or_path", "./no/such/model"], "--model_name_or_path ./no/such/model: no such folder"),
    ],
)
def test_each_job_checks_its_flags_as_it_parses_them(command, flags, message, tmp_path):
    existing = tmp_path / "data.jsonl"
    existing.write_text("{}\n")
    paths = {"existing": existing, "missing": tmp_path / "missing.jsonl", "folder": tmp_path}
    with pytest.raises(UsageError, match=message):
        parse_job(command, [flag.format(**paths) for flag in flags])


def test_edge_values_pass_the_checks(tmp_path):
    existing = tmp_path / "train.csv"
    existing.write_text("text,label\n")
    parse_job("finetune-cls", ["--learning_rate", "0", "--num_train_epochs", "0", "--max_steps", "5",
                               "--train_last_k_layers", "-1", "--label_smoothing_factor", "0",
                               "--train_file", str(existing), "--model_name_or_path", "google-bert/bert-base-uncased",
                               "--tokenizer_name", "bert-base-uncased", "--config_name", str(tmp_path)])
    parse_job("finetune-pair", ["--coherence_train_pairs", "2", "--intermediate_num_train_epochs", "0.5"])
    parse_job("finetune-retrieval", ["--train_file", str(existing), "--corpus_file", str(existing),
                                     "--queries_file", str(existing), "--temperature", "0.01"])
    parse_job("wsd", ["--test_fraction", "0.99", "--max_lemmas", "1"])
    parse_job("anisotropy", ["--num_sentences", "2", "--n_pairs", "1"])
    parse_job("finetune-ner", ["--max_grad_norm", "0", "--num_train_epochs", "-1", "--max_steps", "3", "--seed", "0",
                               "--data_seed", str(2**32 - 1), "--warmup_steps", "0", "--dataloader_num_workers", "0"])


# --------------------------------------------------------------------------------------------
# Output folders: claimed by one run at a time, released however the job ends
# --------------------------------------------------------------------------------------------
def test_run_job_releases_the_output_folder_however_the_job_ends(tmp_path, capsys):
    folder = tmp_path / "made" / "for" / "out"

    def job(outcome: BaseException | None):
        def main(argv):
            claim_output_folder(folder)
            record = json.loads(lock_path(folder).read_text())
            assert (record["pid"], record["host"]) == (os.getpid(), socket.gethostname())
            if outcome is not None:
                raise outcome
            (folder / "results.json").write_text("{}")
            return 0
        return main

    for outcome, status in ((UsageError("bad --flag"), 2), (KeyboardInterrupt(), 130)):
        with pytest.raises(SystemExit) as exit_info:
            run_job(job(outcome), [], prog="mlm-suite demo")
        assert exit_info.value.code == status
        assert not (tmp_path / "made").exists()  # the lock, and the parents made for it, are gone
    with pytest.raises(RuntimeError):
        run_job(job(RuntimeError("a bug")), [], prog="mlm-suite demo")
    assert not (tmp_path / "made").exists()
    assert run_job(job(None), [], prog="mlm-suite demo") == 0
    assert [path.name for path in folder.iterdir()] == ["results.json"]  # the run's output, without the lock
    capsys.readouterr()


def test_sigterm_ends_a_job_as_ctrl_c_does_once_it_cleaned_up(tmp_path, capsys):
    staging = tmp_path / ".out.partial"

    def main(argv):
        claim_output_folder(tmp_path / "out")
        staging.mkdir()
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # what `kill <pid>` sends
            time.sleep(3)  # interrupted by the handler
        finally:
            staging.rmdir()

    def own_handler(signum, frame):  # this process's own, which a job replaces only while it runs
        pass

    previous = signal.signal(signal.SIGTERM, own_handler)
    try:
        with pytest.raises(SystemExit) as exit_info:
            run_job(main, [], prog="mlm-suite demo")
        assert exit_info.value.code == 143 and capsys.readouterr().err == "mlm-suite demo: terminated\n"
        assert list(tmp_path.iterdir()) == []  # the staging folder and the lock are gone
        assert signal.getsignal(signal.SIGTERM) is own_handler
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.multiprocess
def test_a_worker_forked_by_a_job_dies_of_a_sigterm_sent_before_it_first_ran(capsys):
    """A datasets pool's parent stops its workers with SIGTERM as soon as a task failed, and then waits for them: a
    worker that had not run yet must still die of it. Python's handler, inherited by the fork, would lose the signal
    (the interpreter clears the signals caught before its after-fork set-up), and the pool would wait forever.
    Parent and child share one core, so the parent signals the child before the child first runs."""
    codes = []

    def main(argv):
        for _ in range(10):
            pid = os.fork()
            if pid == 0:
                try:
                    time.sleep(5)  # a lost signal: the child ends by itself, with status 3
                finally:
                    os._exit(3)
            os.kill(pid, signal.SIGTERM)
            codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    try:
        run_job(main, [], prog="mlm-suite demo")
    finally:
        os.sched_setaffinity(0, cores)
    assert codes == [-signal.SIGTERM] * 10
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and signal.SIGTERM not in signal.pthread_sigmask(
        signal.SIG_BLOCK, set())


def test_an_error_of_a_clean_up_cut_short_by_ctrl_c_is_the_interruption(capsys):
    def main(argv):
        try:
            raise KeyboardInterrupt
        finally:  # as datasets' worker pool does, waiting for workers that were stopped
            raise RuntimeError("the workers did not answer")

    with pytest.raises(SystemExit) as exit_info:
        run_job(main, [], prog="mlm-suite demo")
    assert exit_info.value.code == 130 and capsys.readouterr().err == "mlm-suite demo: interrupted\n"


def test_claims_are_re_entrant_and_only_the_main_process_locks(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    claim_output_folder(sweep)
    try:
        claim_output_folder(sweep)  # the same process again: a job of mlm-suite seeds, the NER baseline
        claim_output_folder(sweep / "seed_1")
        assert [path.relative_to(tmp_path).as_posix() for path in sorted(tmp_path.rglob("*"))] == [
            "sweep", f"sweep/{LOCK_NAME}"]
    finally:
        release_output_folder(sweep)
    assert not any(tmp_path.iterdir())
    monkeypatch.setenv("RANK", "1")  # a torchrun or accelerate process other than the main one
    claim_output_folder(tmp_path / "out")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("record", "taken_over"),
    [
        ("", True),  # the owner died between creating and writing its lock
        ("{not json", True),
        ("[4242]", True),
        (json.dumps({"pid": 1, "host": "another-host"}), False),  # its pid cannot be checked from here
        ("this host, a pid beyond any", True),  # the owner ended (the record is made in the test: pids differ)
    ],
)
def test_which_locks_are_stale(record, taken_over, tmp_path, capsys):
    if record == "this host, a pid beyond any":
        record = json.dumps({"pid": os.getpid() + 10**7, "host": socket.gethostname()})
    folder = tmp_path / "out"
    folder.mkdir()
    lock_path(folder).write_text(record)
    if not taken_over:
        with pytest.raises(UsageError, match="is in use by process 1 on another-host"):
            claim_output_folder(folder)
        assert lock_path(folder).read_text() == record
        return
    claim_output_folder(folder)
    try:
        assert json.loads(lock_path(folder).read_text())["pid"] == os.getpid()
        assert "taking over the lock of --output_dir" in capsys.readouterr().err
    finally:
        release_output_folder(folder)


# --------------------------------------------------------------------------------------------
# Downloads say what they fetch
# --------------------------------------------------------------------------------------------
def test_fetch_distribution_reports_what_it_fetches_and_its_size(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLM_SUITE_CACHE", str(tmp_path / "cache"))
    commands = []

    def fake_pip(command, **kwargs):
        commands.append(command)
        if "broken-pkg==1.0" in command:
            return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found for broken-pkg==1.0\n")
        folder = Path(command[command.index("-d") + 1])
        with zipfile.ZipFile(folder / "fake_pkg-1.0-py3-none-any.whl", "w") as wheel:  # a wheel is a zip archive
            wheel.writestr("fake_pkg/data.bin", b"\0" * 2_500_000)
        return subprocess.CompletedProcess(command, 0, "  Downloading fake_pkg-1.0-py3-none-any.whl (2.5 MB)\n", "")

    monkeypatch.setattr(downloads.subprocess, "run", fake_pip)
    path = downloads.fetch_distribution("fake-pkg==1.0")
    out, err = capsys.readouterr()
    assert out == ""  # the job's stdout stays for its results
    assert err.splitlines() == [
        f"mlm_suite: fetching fake-pkg==1.0 (wheel) from the package index into {path.parent} (once; cached)",
        "  Downloading fake_pkg-1.0-py3-none-any.whl (2.5 MB)",  # pip's own report, progress bar included
        "mlm_suite: fetched fake_pkg-1.0-py3-none-any.whl (2.5 MB)",
    ]
    assert "--quiet" not in commands[0] and "-q" not in commands[0]
    assert downloads.fetch_distribution("fake-pkg==1.0") == path and len(commands) == 1  # cached: silent
    assert capsys.readouterr().err == ""
    with pytest.raises(FetchError, match="could not download 'broken-pkg==1.0'.*\n.*No matching distribution") as info:
        downloads.fetch_distribution("broken-pkg==1.0")
    assert is_user_error(info.value) and isinstance(info.value, RuntimeError)


FAILING_JOB = """
import sys
import torch
import torch.distributed as dist
from accelerate import PartialState

from mlm_suite.jobs.common.running import run_job

state = PartialState(cpu=True)  # a gloo group of the launched processes, as the Trainer sets up


def main(argv):
    for _ in range(20):  # collectives in gloo's worker threads, as training and evaluation run them
        gathered = [torch.empty(8) for _ in range(state.num_processes)]
        dist.all_gather(gathered, torch.ones(8))
    if state.process_index == 1:
        raise ValueError("bad value on rank 1")
    return 0


raise SystemExit(run_job(main, prog="failing-job"))
"""


@pytest.mark.multiprocess
@pytest.mark.slow  # over 10 s on 2 cores
def test_a_user_error_in_one_of_two_processes_ends_the_run_cleanly(tmp_path):
    """The failing process prints its line and exits with 2 (not SIGABRT while freeing the group); the
    launcher stops the other one, which waits in the final barrier, instead of hanging."""

    script = tmp_path / "failing_job.py"
    script.write_text(FAILING_JOB)
    result = launch_two_processes(script, [], 120)
    assert result.returncode != 0
    assert result.stderr.count("failing-job: error: bad value on rank 1\n") == 1, result.stderr[-3000:]
    assert "terminate called" not in result.stderr
    assert re.search(r"exitcode\s*: 2 ", result.stderr), result.stderr[-3000:]
