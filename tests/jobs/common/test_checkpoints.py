"""Resuming every training job (``mlm_suite.jobs.common.checkpoints``): a run stopped after a checkpoint and continued
ends where the uninterrupted run ends.

A stop is simulated in-process: the Trainer raises just after it saved ``checkpoint-2`` (what a process killed
then leaves behind); the same command again then continues from that checkpoint, found in ``--output_dir``
(pretraining; fine-tuning with early stopping). The other jobs resume with ``--resume_from_checkpoint true`` or a
path. The fine-tuning runs cross an epoch boundary (data order restored) with dropout on (RNG restored): the final
weights agree to 1e-6 and every logged loss, learning rate and gradient norm of the resumed steps repeats the
uninterrupted run's.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainingArguments

from mlm_suite import cli
from mlm_suite.jobs import finetune_cls, finetune_ner, finetune_pair, finetune_retrieval, pretrain
from mlm_suite.jobs.common.arguments import JobTrainingArguments
from mlm_suite.jobs.common.checkpoints import resume_checkpoint, stage_checkpoint
from mlm_suite.training.trainer import JobTrainer
from tests.helpers import SENTENCES, assert_no_pickle, polarity_rows, write_conll, write_jsonl, write_pairs
from tests.helpers import job_args as pretrain_args

QUIET = ["--report_to", "none", "--disable_tqdm", "true", "--per_device_eval_batch_size", "8", "--logging_steps", "1"]
SAVES = ["--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2"]


class Stopped(Exception):
    """Stands for the process being killed just after it saved a checkpoint."""


@contextlib.contextmanager
def stopped_after_saving(monkeypatch, step: int):
    """Within the block, a job's Trainer raises :class:`Stopped` as soon as it has saved ``checkpoint-<step>``."""
    save = JobTrainer._save_checkpoint

    def save_then_stop(self, model, trial):
        save(self, model, trial)
        if self.state.global_step == step:
            raise Stopped(f"stopped after saving checkpoint-{step}")

    with monkeypatch.context() as patch:
        patch.setattr(JobTrainer, "_save_checkpoint", save_then_stop)
        with pytest.raises(Stopped):
            yield


def keep_every_checkpoint(monkeypatch, into: Path) -> None:
    """Copy each checkpoint a job saves to ``into/<output folder name>/`` (the Trainer deletes all but the best
    one when early stopping ends a run)."""
    save = JobTrainer._save_checkpoint

    def save_and_keep(self, model, trial):
        save(self, model, trial)
        name = f"checkpoint-{self.state.global_step}"
        shutil.copytree(Path(self.args.output_dir) / name, into / Path(self.args.output_dir).name / name,
                        dirs_exist_ok=True)

    monkeypatch.setattr(JobTrainer, "_save_checkpoint", save_and_keep)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def logged_steps(state_file: Path) -> dict[int, dict]:
    """Training log entries by step: loss, learning rate and gradient norm."""
    return {entry["step"]: {key: entry[key] for key in ("loss", "learning_rate", "grad_norm")}
            for entry in read_json(state_file)["log_history"] if "loss" in entry}


def assert_same_run(full: Path, resumed: Path, state: str = "checkpoint-4/trainer_state.json", steps=(3, 4)) -> None:
    """Final weights to 1e-6; the resumed steps logged the same losses, learning rates and gradient norms."""
    first, second = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert first.keys() == second.keys()
    assert max(float((first[name] - second[name]).abs().max()) for name in first) < 1e-6
    logs = logged_steps(full / state), logged_steps(resumed / state)
    assert sorted(logs[0]) == sorted(logs[1]) == [1, 2, 3, 4]
    for step in steps:
        for key, value in logs[0][step].items():
            assert logs[1][step][key] == pytest.approx(value, rel=1e-6, abs=1e-9), (step, key)
    # train_loss covers every step, the checkpoint's too, not only those the resumed run trained.
    results = [read_json(run / "all_results.json") for run in (full, resumed)]
    assert results[1]["train_loss"] == pytest.approx(results[0]["train_loss"], rel=1e-6)


def stop_then_continue(monkeypatch, main, argv: list[str], capsys) -> str:
    """Run ``main(argv)`` stopped after checkpoint-2, then again as it was; returns the second run's stderr."""
    with stopped_after_saving(monkeypatch, 2):
        main(argv)
    capsys.readouterr()
    main(argv)
    return capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Every job, resumed
# --------------------------------------------------------------------------------------------
def test_pretrain_continues_a_stopped_run_found_in_its_output_folder(tmp_path, corpus, monkeypatch, capsys):
    common = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"]), *SAVES]
    common += ["--max_eval_samples", "4", "--eval_strategy", "no", "--train_tokenizer", "false"]
    common += ["--fill_mask_probes", "0"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert pretrain.main(pretrain_args(full, *common)) == 0
    err = stop_then_continue(monkeypatch, pretrain.main, pretrain_args(resumed, *common), capsys)
    assert f"resuming training from {resumed / 'checkpoint-2'}" in err
    assert_same_run(full, resumed, "trainer_state.json")


def test_pretrain_with_a_trained_vocabulary_resumes_with_the_checkpoint_tokenizer(tmp_path, corpus, monkeypatch, capsys):
    """The resumed run takes the vocabulary its checkpoint's weights were trained with; it trains none."""
    common = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"]), *SAVES]
    common += ["--max_eval_samples", "4", "--eval_strategy", "no", "--vocab_size", "200", "--fill_mask_probes", "0"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert pretrain.main(pretrain_args(full, *common)) == 0
    with stopped_after_saving(monkeypatch, 2):
        pretrain.main(pretrain_args(resumed, *common))

    def no_training(*args, **kwargs):
        raise AssertionError("a resumed run trained a new vocabulary")

    monkeypatch.setattr(pretrain, "train_tokenizer", no_training)
    assert pretrain.main(pretrain_args(resumed, *common)) == 0
    assert read_json(resumed / "tokenizer.json")["model"]["vocab"] == read_json(full / "tokenizer.json")["model"]["vocab"]
    assert_same_run(full, resumed, "trainer_state.json")


def test_pair_resumes_the_last_checkpoint_with_true(tiny_model, tmp_path, capsys):
    """``--resume_from_checkpoint true`` takes the highest-numbered checkpoint of --output_dir, here one copied
    from an uninterrupted run into an otherwise empty folder."""
    # 30 pairs, 24 of them for training: 3 steps of 8 per epoch
    train = write_pairs(tmp_path / "pairs.csv", ["entailment", "neutral", "contradiction"] * 10)
    common = ["--model_name_or_path", str(tiny_model), "--train_file", str(train), "--sentence1_column", "premise",
              "--sentence2_column", "hypothesis", "--per_device_train_batch_size", "8", "--max_steps", "6",
              "--save_strategy", "steps", "--save_steps", "2", "--do_predict", "false", *QUIET]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    finetune_pair.main([*common, "--output_dir", str(full)])
    for step in (2, 4):
        shutil.copytree(full / f"checkpoint-{step}", resumed / f"checkpoint-{step}")
    capsys.readouterr()
    finetune_pair.main([*common, "--output_dir", str(resumed), "--resume_from_checkpoint", "true"])
    assert f"resuming training from {resumed / 'checkpoint-4'}" in capsys.readouterr().err
    first, second = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert max(float((first[name] - second[name]).abs().max()) for name in first) < 1e-6
    logs = [logged_steps(run / "checkpoint-6" / "trainer_state.json") for run in (full, resumed)]
    for step in (5, 6):
        assert logs[1][step] == pytest.approx(logs[0][step], rel=1e-6)


def test_ner_resumes_a_checkpoint_given_by_path_into_a_new_folder(tiny_model, tmp_path):
    data = {name: write_conll(tmp_path / f"{name}.conll", sentences)
            for name, sentences in {"train": SENTENCES * 2, "dev": SENTENCES[:4]}.items()}  # 14 sentences: 3 steps of 5
    common = ["--model_name_or_path", str(tiny_model), "--train_file", str(data["train"]),
              "--validation_file", str(data["dev"]), "--per_device_train_batch_size", "5", *SAVES, *QUIET]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert finetune_ner.main([*common, "--output_dir", str(full)]) == 0
    assert finetune_ner.main([*common, "--output_dir", str(resumed),
                              "--resume_from_checkpoint", str(full / "checkpoint-2")]) == 0
    assert sorted(path.name for path in resumed.glob("checkpoint-*")) == ["checkpoint-4"]  # it started at step 2
    assert_same_run(full, resumed)


def test_retrieval_resumes_a_copied_checkpoint(tiny_model, retrieval_files, tmp_path):
    common = ["--model_name_or_path", str(tiny_model), "--train_file", str(retrieval_files["train"]),
              "--corpus_file", str(retrieval_files["corpus"]), "--queries_file", str(retrieval_files["queries"]),
              "--max_eval_samples", "8", "--per_device_train_batch_size", "12", *SAVES, *QUIET]  # 30 pairs: 3 steps
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert finetune_retrieval.main([*common, "--output_dir", str(full)]) == 0
    shutil.copytree(full / "checkpoint-2", tmp_path / "copied")
    assert finetune_retrieval.main([*common, "--output_dir", str(resumed),
                                    "--resume_from_checkpoint", str(tmp_path / "copied")]) == 0
    assert_same_run(full, resumed)


def test_early_stopping_checkpoints_resume_with_the_patience_count(tiny_model, tmp_path, monkeypatch, capsys):
    """Learning rate 0: the first evaluation stays the best, so patience 2 stops at step 3 of 50. Stopped after
    checkpoint-2 (one evaluation without improvement), the resumed run still stops at step 3: the patience count
    came back with the checkpoint, which holds optimizer, scheduler and RNG states (pickle-free) besides the weights.
    Adam's moments move with lr 0, so equal optimizer states at step 3 show the same batches were trained on."""
    train = write_jsonl(tmp_path / "train.jsonl", polarity_rows(1990, 2030))
    common = ["--model_name_or_path", str(tiny_model), "--train_file", str(train), "--text_column_name", "review",
              "--max_steps", "50", "--learning_rate", "0", "--eval_strategy", "steps", "--eval_steps", "1",
              "--early_stopping_patience", "2", "--per_device_train_batch_size", "4", "--do_predict", "false", *QUIET]
    full, resumed, kept = tmp_path / "full", tmp_path / "resumed", tmp_path / "kept"
    keep_every_checkpoint(monkeypatch, kept)
    finetune_cls.main([*common, "--output_dir", str(full)])
    err = stop_then_continue(monkeypatch, finetune_cls.main, [*common, "--output_dir", str(resumed)], capsys)
    assert f"resuming training from {resumed / 'checkpoint-2'}" in err
    for run in (full, resumed):
        assert sorted(path.name for path in run.glob("checkpoint-*")) == ["checkpoint-1"]  # the best is kept
        assert sorted(path.name for path in (kept / run.name).iterdir()) == [f"checkpoint-{step}" for step in (1, 2, 3)]
        state = read_json(kept / run.name / "checkpoint-3" / "trainer_state.json")
        assert state["global_step"] == 3 and state["best_global_step"] == 1
        assert {"optimizer.safetensors", "scheduler.json", "rng_state.safetensors"} <= set(
            assert_no_pickle(kept / run.name / "checkpoint-2"))
    optimizers = [load_file(kept / run.name / "checkpoint-3" / "optimizer.safetensors") for run in (full, resumed)]
    assert optimizers[0].keys() == optimizers[1].keys()
    for name, value in optimizers[0].items():
        torch.testing.assert_close(optimizers[1][name], value, rtol=1e-6, atol=1e-9)
    scores = [read_json(run / "all_results.json") for run in (full, resumed)]
    assert scores[1]["eval_accuracy"] == scores[0]["eval_accuracy"]
    assert scores[1]["epoch"] == scores[0]["epoch"] == 3 / 8  # 32 training rows in batches of 4: stopped after step 3


# --------------------------------------------------------------------------------------------
# Which checkpoint, if any
# --------------------------------------------------------------------------------------------
def test_true_without_a_checkpoint_is_a_one_line_error_exit_2(tiny_model, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", polarity_rows(1990, 2010))
    out = tmp_path / "out"
    expected = f"--resume_from_checkpoint true: --output_dir {out} holds no checkpoint-* folder to resume from"
    for _ in range(2):  # a missing folder, then one with files but no checkpoint: both untouched
        capsys.readouterr()
        with pytest.raises(SystemExit) as stop:
            cli.main(["finetune-cls", "--model_name_or_path", str(tiny_model), "--train_file", str(train),
                      "--text_column_name", "review", "--output_dir", str(out), "--resume_from_checkpoint", "true"])
        err = capsys.readouterr().err
        assert stop.value.code == 2
        assert err.splitlines() == [f"mlm-suite finetune-cls: error: {expected}"], err
        # The folder rule speaks first for a folder with an earlier run's files and nothing to continue.
        expected = (f"--output_dir {out} already holds an earlier run's files (checkpoint-x/, notes.txt), which this "
                    "run would mix with its own: choose another --output_dir, or pass --overwrite_output_dir to delete "
                    "them and start anew")
        if not out.exists():
            (out / "checkpoint-x").mkdir(parents=True)  # not a checkpoint-<step> name
            (out / "notes.txt").write_text("kept\n")
    assert sorted(path.name for path in out.iterdir()) == ["checkpoint-x", "notes.txt"]


def fake_checkpoint(folder: Path, step: int, state: bool = True) -> Path:
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if state:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def arguments(output_dir: Path, **values) -> TrainingArguments:
    return JobTrainingArguments(output_dir=str(output_dir), report_to="none", use_cpu=True, **values)


def test_which_checkpoint_a_run_continues_from(tmp_path, capsys):
    out = tmp_path / "out"
    assert resume_checkpoint(arguments(out)) is None  # no folder: from scratch
    out.mkdir()
    (out / "all_results.json").write_text("{}")
    assert resume_checkpoint(arguments(out)) is None  # files but no checkpoint: from scratch, no error
    fake_checkpoint(out, 2)
    last = fake_checkpoint(out, 10)
    assert resume_checkpoint(arguments(out)) == str(last)  # by step number, not by name
    assert resume_checkpoint(arguments(out, resume_from_checkpoint="True")) == str(last)
    assert resume_checkpoint(arguments(out, overwrite_output_dir=True)) is None
    assert resume_checkpoint(arguments(out, resume_from_checkpoint="true"), trains=False) is None  # --do_train false
    other = fake_checkpoint(tmp_path / "elsewhere", 3)
    assert resume_checkpoint(arguments(out, resume_from_checkpoint=str(other))) == str(other)
    with pytest.raises(ValueError, match="no such checkpoint folder"):
        resume_checkpoint(arguments(out, resume_from_checkpoint=str(tmp_path / "missing")))
    # A checkpoint cut short while being saved: named, not silently resumed from step 0.
    cut = fake_checkpoint(out, 12, state=False)
    with pytest.raises(ValueError, match="checkpoint-12 has no trainer_state.json"):
        resume_checkpoint(arguments(out))
    shutil.rmtree(cut)
    capsys.readouterr()
    assert stage_checkpoint(arguments(tmp_path / "elsewhere")) == str(other)
    assert f"resuming training from {other}" in capsys.readouterr().err
    assert stage_checkpoint(arguments(tmp_path / "elsewhere", overwrite_output_dir=True)) is None


def test_overwrite_output_dir_is_a_flag_of_every_job(tmp_path):
    _, training_args = pretrain.parse_arguments(["--output_dir", str(tmp_path), "--overwrite_output_dir"])
    assert training_args.overwrite_output_dir is True
    for arguments in (finetune_cls.ClassificationTrainingArguments, finetune_pair.PairTrainingArguments,
                      finetune_ner.NerTrainingArguments, finetune_retrieval.RetrievalTrainingArguments):
        assert issubclass(arguments, JobTrainingArguments)
