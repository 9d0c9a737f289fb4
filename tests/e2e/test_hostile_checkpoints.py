"""Hostile checkpoints and training runs: a damaged, foreign or incomplete checkpoint, a loss that becomes
non-finite, a bad ``--config_overrides``; each is one line, exit status 2, and leaves no misleading result
(docs/command_line.md). The ``slow`` kill tests stop a real ``mlm-suite`` process with SIGKILL during training and
during the final save, then resume it: the result equals the uninterrupted run's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.helpers import TINY_PRETRAIN_MODEL, assert_refused, folder_files, pretrain_argv, run_command
from tests.warm_processes import WarmPython

@pytest.fixture(scope="module")
def pretrain_checkpoint(tmp_path_factory, data_files) -> Path:
    """``checkpoint-2`` of a tiny pretraining run with a trained vocabulary (the run's output folder is its parent)."""
    output_dir = tmp_path_factory.mktemp("pretrain_run") / "out"
    from mlm_suite.cli import main

    assert main([str(arg) for arg in pretrain_argv(output_dir, data_files["text"], "--save_strategy", "steps",
                                                   "--save_steps", "2")]) == 0
    return output_dir / "checkpoint-2"


@pytest.fixture(scope="module")
def classifier_checkpoint(tmp_path_factory, tiny_model, data_files) -> Path:
    """``checkpoint-2`` of a tiny ``finetune-cls`` run."""
    output_dir = tmp_path_factory.mktemp("cls_run") / "out"
    from mlm_suite.cli import main

    argv = ["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", data_files["csv"], "--max_steps", "2",
            "--save_strategy", "steps", "--save_steps", "2", "--per_device_train_batch_size", "4", "--output_dir",
            output_dir, "--report_to", "none", "--disable_tqdm", "true"]
    assert main([str(arg) for arg in argv]) == 0
    return output_dir / "checkpoint-2"


def damaged_copy(checkpoint: Path, into: Path) -> Path:
    copy = into / checkpoint.name
    shutil.copytree(checkpoint, copy)
    return copy


MINILM_VOCABULARY = ("--train_tokenizer", "false")


def resume_pretraining(tmp_path, data_files, checkpoint: Path, capsys, *extra: str, **vocabulary):
    output_dir = tmp_path / "resumed"
    argv = pretrain_argv(output_dir, data_files["text"], "--max_steps", "3", "--resume_from_checkpoint", checkpoint,
                         *extra, **vocabulary)
    return run_command(argv, capsys), output_dir


# --------------------------------------------------------------------------------------------
# Foreign checkpoints: another architecture, hidden size or vocabulary
# --------------------------------------------------------------------------------------------
def test_a_classifier_checkpoint_is_refused_by_pretraining(tmp_path, data_files, classifier_checkpoint, capsys):
    outcome, output_dir = resume_pretraining(tmp_path, data_files, classifier_checkpoint, capsys,
                                             vocabulary=MINILM_VOCABULARY)
    assert_refused(outcome, "pretrain", str(classifier_checkpoint), "MlmSuiteForSequenceClassification",
                   "MlmSuiteForMaskedLM")
    assert not output_dir.exists()


def test_a_pretraining_checkpoint_is_refused_by_finetune_cls(tmp_path, tiny_model, data_files, pretrain_checkpoint,
                                                               capsys):
    output_dir = tmp_path / "cls"
    outcome = run_command(["finetune-cls", "--model_name_or_path", tiny_model, "--train_file", data_files["csv"],
                           "--max_steps", "3", "--resume_from_checkpoint", pretrain_checkpoint, "--output_dir",
                           output_dir, "--report_to", "none"], capsys)
    assert_refused(outcome, "finetune-cls", str(pretrain_checkpoint), "MlmSuiteForMaskedLM")
    assert not output_dir.exists()


def test_another_hidden_size_is_named(tmp_path, data_files, pretrain_checkpoint, capsys):
    outcome, output_dir = resume_pretraining(tmp_path, data_files, pretrain_checkpoint, capsys,
                                             "--config_overrides", TINY_PRETRAIN_MODEL.replace("hidden_size=32", "hidden_size=16"))
    assert_refused(outcome, "pretrain", str(pretrain_checkpoint), "hidden_size 16 here, 32 in the checkpoint")
    assert not output_dir.exists()


def test_another_vocabulary_size_is_named(tmp_path, data_files, pretrain_checkpoint, capsys):
    outcome, output_dir = resume_pretraining(tmp_path, data_files, pretrain_checkpoint, capsys,
                                             vocabulary=MINILM_VOCABULARY)
    assert_refused(outcome, "pretrain", str(pretrain_checkpoint), "vocab_size 30522 here")
    assert not output_dir.exists()


# --------------------------------------------------------------------------------------------
# Damaged or incomplete checkpoints
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, damage",
    [
        ("model.safetensors", "truncate"),
        ("optimizer.safetensors", "garbage"),
        ("rng_state.safetensors", "truncate"),
        ("optimizer.json", "garbage"),
        ("trainer_state.json", "truncate"),
    ],
)
def test_a_damaged_file_is_named(tmp_path, data_files, pretrain_checkpoint, capsys, name, damage):
    checkpoint = damaged_copy(pretrain_checkpoint, tmp_path)
    path = checkpoint / name
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[: max(8, path.stat().st_size // 2)])
    else:
        path.write_bytes(b"\x00\xffnot what it should be")
    outcome, output_dir = resume_pretraining(tmp_path, data_files, checkpoint, capsys)
    assert_refused(outcome, "pretrain", f"{path} is damaged")
    assert not output_dir.exists()
    assert folder_files(checkpoint) == folder_files(pretrain_checkpoint)  # nothing written into the checkpoint


@pytest.mark.parametrize("name", ["optimizer.safetensors", "optimizer.json", "scheduler.json"])
def test_a_missing_state_file_is_named(tmp_path, data_files, pretrain_checkpoint, capsys, name):
    checkpoint = damaged_copy(pretrain_checkpoint, tmp_path)
    (checkpoint / name).unlink()
    outcome, output_dir = resume_pretraining(tmp_path, data_files, checkpoint, capsys)
    assert_refused(outcome, "pretrain", str(checkpoint), f"has no {name}")
    assert not output_dir.exists()


def test_a_folder_without_trainer_state_is_not_a_checkpoint(tmp_path, data_files, pretrain_checkpoint, capsys):
    checkpoint = damaged_copy(pretrain_checkpoint, tmp_path)
    (checkpoint / "trainer_state.json").unlink()
    outcome, output_dir = resume_pretraining(tmp_path, data_files, checkpoint, capsys)
    assert_refused(outcome, "pretrain", str(checkpoint), "has no trainer_state.json")
    assert not output_dir.exists()


def test_a_trained_vocabulary_resumes_only_with_the_checkpoint_tokenizer(tmp_path, data_files, pretrain_checkpoint,
                                                                         capsys):
    checkpoint = damaged_copy(pretrain_checkpoint, tmp_path)
    (checkpoint / "tokenizer.json").unlink()
    outcome, output_dir = resume_pretraining(tmp_path, data_files, checkpoint, capsys)
    assert_refused(outcome, "pretrain", str(checkpoint), "has no tokenizer.json")
    assert not output_dir.exists()


# --------------------------------------------------------------------------------------------
# Flags and runs that go wrong
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "override, fragments",
    [
        ("hidden_size=abc", ("hidden_size=abc", "hidden_size is an int")),
        ("hidden_dropout_prob=lots", ("hidden_dropout_prob is a float",)),
        ("hiden_size=64", ("has no field hiden_size", "did you mean hidden_size?")),
        ("hidden_size", ("'hidden_size' is not name=value",)),
    ],
)
def test_config_overrides_are_type_checked(tmp_path, data_files, capsys, override, fragments):
    output_dir = tmp_path / "out"
    outcome = run_command(pretrain_argv(output_dir, data_files["text"], "--config_overrides", override), capsys)
    assert_refused(outcome, "pretrain", "--config_overrides", *fragments)
    assert not output_dir.exists()


def test_a_non_finite_loss_stops_the_run_without_saving_its_weights(tmp_path, data_files, capsys):
    output_dir = tmp_path / "out"
    argv = pretrain_argv(output_dir, data_files["text"], "--max_steps", "6", "--learning_rate", "1e30",
                         "--warmup_ratio", "0", "--max_grad_norm", "0", "--save_strategy", "steps", "--save_steps", "1")
    outcome = run_command(argv, capsys)
    line = assert_refused(outcome, "pretrain", "training stopped at step", "the loss became nan")
    step = int(line.split("training stopped at step ")[1].split(":")[0])
    files = folder_files(output_dir)
    assert "model.safetensors" not in files and not any(name.startswith("train_results") for name in files)
    saved = sorted(int(path.parent.name.split("-")[1]) for path in output_dir.glob("checkpoint-*/model.safetensors"))
    assert saved == list(range(1, step))  # the checkpoints before that step, intact; none after it
    for number in saved:
        assert all(tensor.isfinite().all() for tensor in load_file(output_dir / f"checkpoint-{number}/model.safetensors").values())


# --------------------------------------------------------------------------------------------
# Kill tests: SIGKILL an mlm-suite process (started warm, tests/warm_processes.py), then resume
# --------------------------------------------------------------------------------------------
KILL_STEPS = ["--max_steps", "120", "--save_strategy", "steps", "--save_steps", "20", "--logging_steps", "5"]


def mlm_suite_command(argv: list) -> list[str]:
    return [str(Path(sys.executable).with_name("mlm-suite")), *map(str, argv)]


def kill_environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MLM_SUITE_DEBUG": "0"}


def run_to_the_end(warm_python: WarmPython, argv: list) -> None:
    result = warm_python.run(mlm_suite_command(argv), env=kill_environment())
    assert result.returncode == 0, result.stderr[-3000:]


def kill_when(warm_python: WarmPython, argv: list, ready) -> None:
    """Start ``mlm-suite argv`` and SIGKILL it as soon as ``ready()`` holds (asserting it had not finished)."""
    process = warm_python.start(mlm_suite_command(argv), env=kill_environment())
    try:
        deadline = time.monotonic() + 300
        while not ready():
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    assert process.returncode == -signal.SIGKILL


def complete_checkpoints(output_dir: Path) -> list[Path]:
    return [folder for folder in output_dir.glob("checkpoint-*") if (folder / "trainer_state.json").is_file()]


def resume_after_kill(warm_python: WarmPython, argv: list, output_dir: Path) -> None:
    """Run the same command again; a checkpoint the kill cut short is refused in one line, deleted, and the run
    continues from the one before (as the refusal says)."""
    result = warm_python.run(mlm_suite_command(argv), env=kill_environment())
    if result.returncode == 2 and "was cut short while being saved" in result.stderr:
        assert "Traceback" not in result.stderr
        partial = [folder for folder in output_dir.glob("checkpoint-*") if folder not in complete_checkpoints(output_dir)]
        assert len(partial) == 1 and str(partial[0]) in result.stderr
        shutil.rmtree(partial[0])
        result = warm_python.run(mlm_suite_command(argv), env=kill_environment())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming training from" in result.stderr


def assert_same_result(full: Path, resumed: Path) -> None:
    first, second = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert first.keys() == second.keys()
    assert max(float((first[name] - second[name]).abs().max()) for name in first) < 1e-6
    results = [json.loads((run / "train_results.json").read_text(encoding="utf-8")) for run in (full, resumed)]
    assert results[1]["train_loss"] == pytest.approx(results[0]["train_loss"], rel=1e-9)
    assert results[1]["train_steps"] == results[0]["train_steps"] == 120


@pytest.fixture(scope="module")
def uninterrupted_run(tmp_path_factory, data_files, warm_python) -> Path:
    output_dir = tmp_path_factory.mktemp("kill") / "uninterrupted"
    run_to_the_end(warm_python, pretrain_argv(output_dir, data_files["text"], *KILL_STEPS))
    return output_dir


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_run_killed_while_training_resumes_to_the_same_result(tmp_path, data_files, uninterrupted_run, warm_python):
    output_dir = tmp_path / "killed"
    argv = pretrain_argv(output_dir, data_files["text"], *KILL_STEPS)
    kill_when(warm_python, argv, lambda: (output_dir / "checkpoint-20" / "trainer_state.json").is_file())
    saved = complete_checkpoints(output_dir)
    assert saved and not (output_dir / "model.safetensors").exists()
    for checkpoint in saved:  # every checkpoint the kill left is intact: each file parses
        assert load_file(checkpoint / "model.safetensors") and load_file(checkpoint / "optimizer.safetensors")
        json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    resume_after_kill(warm_python, argv, output_dir)
    assert_same_result(uninterrupted_run, output_dir)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_run_killed_during_its_final_save_resumes_to_the_same_result(tmp_path, data_files, uninterrupted_run, warm_python):
    output_dir = tmp_path / "killed"
    argv = pretrain_argv(output_dir, data_files["text"], *KILL_STEPS)
    kill_when(warm_python, argv, lambda: (output_dir / "model.safetensors").exists())  # the final save has begun
    last = output_dir / "checkpoint-120"
    assert (last / "trainer_state.json").is_file() and load_file(last / "model.safetensors")
    resume_after_kill(warm_python, argv, output_dir)
    assert_same_result(uninterrupted_run, output_dir)
