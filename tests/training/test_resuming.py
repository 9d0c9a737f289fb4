"""Resuming only from whole checkpoints that fit the run (mlm_suite.training.resuming): tied weights are not
reported missing, a checkpoint past ``--max_steps`` is refused, and the data flags of a checkpoint's run are
recorded and compared with a resumed run's. Damaged and incomplete checkpoints: tests/e2e/test_hostile_checkpoints.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import make_tiny_config, read_json


def test_resuming_reports_a_missing_weight_but_not_the_tied_decoder(tmp_path):
    from safetensors.torch import load_file, save_file
    from transformers import TrainingArguments
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging

    from mlm_suite import MlmSuiteForMaskedLM
    from mlm_suite.training.trainer import JobTrainer

    model = MlmSuiteForMaskedLM(make_tiny_config())
    checkpoint = tmp_path / "checkpoint-1"
    model.save_pretrained(checkpoint)  # the decoder, tied to the word embeddings, is saved once, under their name
    trainer = JobTrainer(model=model, args=TrainingArguments(tmp_path / "out", use_cpu=True, report_to="none"))

    def warnings_of_loading() -> str:
        with CaptureLogger(logging.get_logger("transformers.trainer")) as captured:
            trainer._load_from_checkpoint(str(checkpoint))
        return captured.out

    assert "missing keys" not in warnings_of_loading()
    saved = load_file(checkpoint / "model.safetensors")
    del saved["lm_head.dense.weight"]
    save_file(saved, checkpoint / "model.safetensors", metadata={"format": "pt"})
    assert "missing keys in the checkpoint model loaded: ['lm_head.dense.weight']" in warnings_of_loading()


def saved_state(folder: Path, step: int, data_flags: dict | None = None) -> Path:
    """A checkpoint folder's trainer_state.json at ``step``, with ``data_flags`` (None: a run that records none)."""
    from mlm_suite.training.resuming import DATA_FLAGS_STATE

    folder.mkdir()
    callbacks = {} if data_flags is None else {DATA_FLAGS_STATE: {"args": {}, "attributes": data_flags}}
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "stateful_callbacks": callbacks}))
    return folder


def test_a_checkpoint_past_max_steps_is_refused_and_one_at_it_is_not(tmp_path):
    from types import SimpleNamespace

    from mlm_suite.errors import UsageError
    from mlm_suite.training.resuming import check_resumed_run

    checkpoint = saved_state(tmp_path / "checkpoint-4", 4)
    with pytest.raises(UsageError, match=f"checkpoint {checkpoint} is at step 4, already past --max_steps 3"):
        check_resumed_run(checkpoint, SimpleNamespace(max_steps=3, process_index=0))
    for max_steps in (4, 10, -1):  # -1: the epochs decide
        check_resumed_run(checkpoint, SimpleNamespace(max_steps=max_steps, process_index=0))


def test_a_resumed_run_names_the_data_flags_its_checkpoint_ran_with_otherwise(tmp_path, capsys):
    from types import SimpleNamespace

    from mlm_suite.training.resuming import check_resumed_run

    flags = {"train_file": "/data/a.txt", "seed": 42, "dataset_name": None, "train_files": ["x", "y"]}
    checkpoint = saved_state(tmp_path / "checkpoint-2", 2, flags)
    silent = saved_state(tmp_path / "checkpoint-1", 1)  # saved by a run that recorded no data flags

    def resumed(folder: Path, process_index: int = 0, **changes) -> str:
        args = SimpleNamespace(max_steps=8, process_index=process_index, data_flags={**flags, **changes})
        check_resumed_run(folder, args)
        return capsys.readouterr().err

    assert resumed(checkpoint) == "" and resumed(silent, seed=1) == ""
    assert resumed(checkpoint, process_index=1, seed=1) == ""  # the main process says it
    assert resumed(checkpoint, train_file="/data/b.txt", seed=1, dataset_name="wiki", train_files=["x"]) == (
        f"warning: resuming {checkpoint}, saved by a run with other data flags: --train_file /data/b.txt (its run: "
        "/data/a.txt), --seed 1 (its run: 42), --dataset_name wiki (its run: unset), --train_files x (its run: x y); "
        "training continues with the values given now\n"
    )


def test_every_checkpoint_records_the_data_flags_of_its_run(tmp_path):
    from types import MappingProxyType

    from transformers import TrainingArguments

    from mlm_suite.training.resuming import DATA_FLAGS_STATE
    from mlm_suite.training.trainer import JobTrainer
    from tests.helpers import ToyRegression, toy_data

    args = TrainingArguments(tmp_path, use_cpu=True, report_to="none", max_steps=2, save_steps=1, save_strategy="steps",
                             per_device_train_batch_size=8)
    args.data_flags = MappingProxyType({"train_file": "/data/a.txt", "seed": 42})  # what parse_arguments sets
    JobTrainer(model=ToyRegression(), args=args, train_dataset=toy_data()).train()
    for step in (1, 2):
        state = read_json(tmp_path / f"checkpoint-{step}" / "trainer_state.json")
        # the flags as given, and the digests of what they name here (no file: none)
        assert state["stateful_callbacks"][DATA_FLAGS_STATE]["attributes"] == {"train_file": "/data/a.txt", "seed": 42,
                                                                               "contents": {}}


def test_the_data_a_run_trained_on_is_told_apart_by_flag_values_and_file_contents(tmp_path):
    from mlm_suite.training.resuming import DATA_FLAGS_STATE, data_contents, data_differences, recorded_data

    train, prepared = tmp_path / "train.csv", tmp_path / "prepared"
    train.write_text("text,label\na,0\n")
    prepared.mkdir()
    (prepared / "shard.arrow").write_bytes(b"0" * 10)
    flags = {"train_file": str(train), "prepared_data": str(prepared), "dataset_name": "user/hub-dataset", "seed": 1}
    contents = data_contents(flags)
    assert set(contents) == {"train_file", "prepared_data"}  # a Hub id names no local file
    state = {"stateful_callbacks": {DATA_FLAGS_STATE: {"args": {}, "attributes": recorded_data(flags)}}}
    assert data_differences(state, flags) == []
    assert data_differences({}, {**flags, "seed": 2}) == []  # a checkpoint that records nothing says nothing
    assert data_differences(state, {**flags, "seed": 2}) == ["--seed 2 (its run: 1)"]
    train.write_text("text,label\na,7\n")  # the same path, other contents
    (prepared / "shard.arrow").write_bytes(b"0" * 11)
    assert data_differences(state, flags) == [f"--train_file {train} (its contents changed since that run)",
                                              f"--prepared_data {prepared} (its contents changed since that run)"]


def test_a_checkpoint_ends_its_run_at_max_steps_or_at_the_last_step_of_as_many_epochs():
    from types import SimpleNamespace

    from mlm_suite.training.resuming import finished_run

    assert finished_run({"global_step": 4}, SimpleNamespace(max_steps=4, num_train_epochs=3))
    assert not finished_run({"global_step": 4}, SimpleNamespace(max_steps=6, num_train_epochs=3))
    epochs = {"global_step": 30, "max_steps": 30, "num_train_epochs": 3}
    assert finished_run(epochs, SimpleNamespace(max_steps=-1, num_train_epochs=3))
    assert not finished_run(epochs, SimpleNamespace(max_steps=-1, num_train_epochs=4))
    assert not finished_run({**epochs, "global_step": 20}, SimpleNamespace(max_steps=-1, num_train_epochs=3))
