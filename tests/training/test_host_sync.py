"""No host-device synchronisation inside a plain training step, on every job's default GPU path, checked on CPU.

Each job runs in process for a few steps with its GPU defaults forced by its own flags (flattened batches, no NaN
filter), logging, evaluation and saving off, under :class:`host_sync.HostSyncRecorder`; the fine-tuning jobs'
flattened training scores as their padded one. See docs/performance.md#no-host-synchronisation-in-a-training-step.
"""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from mlm_suite import cli
from tests.training.host_sync import HostSyncRecorder, recording_host_syncs

STEPS = 4
# What the jobs set by themselves on a GPU (--flatten_batches' default), given as flags on CPU.
GPU_DEFAULTS = ["--flatten_batches", "true"]
QUIET = ["--max_steps", str(STEPS), "--logging_steps", "1000", "--save_strategy", "no", "--eval_strategy", "no",
         "--report_to", "none", "--dataloader_num_workers", "0"]

JOBS = {
    "pretrain": lambda model, data: [
        "pretrain", "--train_file", data["text"], "--validation_file", data["text"], "--tokenizer_name", model,
        "--config_name", model, "--per_device_train_batch_size", "4", "--max_seq_length", "32", "--do_eval", "false",
    ],
    "pretrain_nsp": lambda model, data: [
        "pretrain", "--objective", "mlm_nsp", "--train_file", data["documents"], "--validation_file", data["documents"],
        "--tokenizer_name", model, "--config_name", model, "--per_device_train_batch_size", "4",
        "--max_seq_length", "32", "--do_eval", "false",
    ],
    "finetune-cls": lambda model, data: [
        "finetune-cls", "--model_name_or_path", model, "--train_file", data["csv"],
        "--per_device_train_batch_size", "4", "--do_eval", "false", "--do_predict", "false",
    ],
    "finetune-pair": lambda model, data: [
        "finetune-pair", "--model_name_or_path", model, "--train_file", data["csv"], "--sentence1_column", "text",
        "--per_device_train_batch_size", "4", "--do_eval", "false", "--do_predict", "false",
    ],
    "finetune-ner": lambda model, data: [
        "finetune-ner", "--model_name_or_path", model, "--train_file", data["conll"],
        "--per_device_train_batch_size", "2", "--do_eval", "false", "--do_predict", "false",
    ],
    "finetune-retrieval": lambda model, data: [
        "finetune-retrieval", "--model_name_or_path", model, "--train_file", data["pairs"],
        "--document_column", "passage", "--per_device_train_batch_size", "4", "--do_eval", "false",
    ],
}


@pytest.fixture
def recorder(monkeypatch) -> HostSyncRecorder:
    """A recorder attached to every Trainer the job builds."""
    recorder = HostSyncRecorder()
    build = transformers.Trainer.__init__

    def build_and_watch(trainer, *args, **kwargs):
        build(trainer, *args, **kwargs)
        trainer.add_callback(recorder)

    monkeypatch.setattr(transformers.Trainer, "__init__", build_and_watch)
    return recorder


@pytest.mark.parametrize("job", sorted(JOBS))
def test_training_step_does_not_synchronise(job, recorder, tiny_model, data_files, tmp_path):
    documents = tmp_path / "documents.txt"  # NSP draws pairs from documents of several sentences
    sentences = ("the {} saw the door .", "the {} saw the sky .", "the {} saw the tree .")
    animals = ("cat", "dog", "bird", "fox")
    documents.write_text("\n\n".join("\n".join(s.format(a) for s in sentences) for a in animals), encoding="utf-8")
    argv = [str(flag) for flag in JOBS[job](tiny_model, {**data_files, "documents": documents})]
    assert cli.main([*argv, *GPU_DEFAULTS, *QUIET, "--output_dir", str(tmp_path / "out")]) == 0
    assert recorder.steps_watched >= STEPS - 2
    assert not recorder.found, f"{job}: host synchronisations in a training step:\n{recorder.report()}"


def test_recorder_names_a_planted_scalar_read_in_a_job(recorder, monkeypatch, tiny_model, data_files, tmp_path):
    """A step that reads its loss on the host fails the check, named by the line that read it."""
    from mlm_suite.model import MlmSuiteForSequenceClassification

    loss_of = MlmSuiteForSequenceClassification._classification_loss

    def read_on_the_host(model, *args, **kwargs):
        loss = loss_of(model, *args, **kwargs)
        loss.item()
        return loss

    monkeypatch.setattr(MlmSuiteForSequenceClassification, "_classification_loss", read_on_the_host)
    argv = [str(flag) for flag in JOBS["finetune-cls"](tiny_model, data_files)]
    assert cli.main([*argv, *GPU_DEFAULTS, *QUIET, "--output_dir", str(tmp_path / "out")]) == 0
    assert recorder.found and {sync.op for sync in recorder.found} == {"aten._local_scalar_dense.default"}
    assert all(sync.frame.endswith("read_on_the_host") for sync in recorder.found), recorder.report()
    assert len(recorder.found) == recorder.steps_watched  # one read per watched step, none from the others


def test_recorder_catches_a_scalar_read():
    found = []
    loss = torch.ones(3, requires_grad=True).sum()
    with recording_host_syncs(found):
        loss.item()
        torch.arange(4)[torch.tensor([True, False, True, False])]
        torch.ones(2).tolist()
    assert [sync.op for sync in found] == ["aten._local_scalar_dense.default", "aten.index.Tensor", "Tensor.tolist"]
    assert all("test_host_sync.py" in sync.frame for sync in found)


@pytest.mark.parametrize("job, data", [("finetune-ner", "conll"), ("finetune-cls", "csv")])
def test_flattened_training_scores_as_padded_training(job, data, tiny_model, data_files, tmp_path):
    """The GPU default (flattened training batches, padded evaluation batches) trains the model padding would."""
    scores = []
    for flatten in ("true", "false"):
        output_dir = tmp_path / flatten
        argv = [job, "--model_name_or_path", str(tiny_model), "--train_file", str(data_files[data]),
                "--validation_file", str(data_files[data]), "--do_predict", "false", "--flatten_batches", flatten,
                "--max_steps", "4", "--per_device_train_batch_size", "4", "--report_to", "none",
                "--output_dir", str(output_dir)]
        assert cli.main(argv) == 0
        results = json.loads((output_dir / "all_results.json").read_text(encoding="utf-8"))
        scores.append({key: value for key, value in results.items() if key in ("eval_loss", "eval_f1", "eval_accuracy")})
    assert scores[0].keys() == scores[1].keys() and "eval_loss" in scores[0]
    assert scores[0] == pytest.approx(scores[1], rel=1e-3)
