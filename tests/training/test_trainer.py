"""The jobs' Trainer, the adapter between ``transformers.Trainer`` and the features (mlm_suite.training.trainer): FSDP
refused on CPU processes, where accelerate would train plain DDP; the collators of training and evaluation batches,
from loader workers or not; the features run at every point of the protocol in the job's order; and every private
name of the Trainer it uses exists in the installed transformers (tests/training/test_features.py: each feature on
its own, without a Trainer).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import job_args, make_documents, make_tiny_config, write_text

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.multiprocess
@pytest.mark.slow
def test_fsdp_on_cpu_processes_is_an_error_not_silent_ddp(tmp_path, warm_python):
    """With an FSDP config, 2 CPU processes would train plain DDP (accelerate keeps MULTI_CPU): refused in one line."""
    train = write_text(tmp_path / "train.txt", make_documents(8, seed=1))
    argv = job_args(tmp_path / "out", "--train_file", str(train), "--train_tokenizer", "false", "--max_steps", "1")
    argv += ["--fsdp", "full_shard auto_wrap", "--fsdp_config", json.dumps({"fsdp_version": 2})]
    result = warm_python.launch(ROOT / "examples" / "pretrain_mlm.py", argv, 300)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert errors and all("FSDP was asked for, but accelerate runs MULTI_CPU here" in line for line in errors), result.stderr[-3000:]
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------
# Batches from loader workers
# ------------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
@pytest.mark.parametrize("workers", [0, 1])
def test_batches_from_loader_workers_reach_the_training_process_as_one_buffer(tmp_path, tokenizer, workers):
    """Training and evaluation batches alike; without workers the job's collators are used as they are."""
    from transformers import TrainingArguments

    from mlm_suite import MlmSuiteForSequenceClassification
    from mlm_suite.data.padding import DataCollatorForPadding
    from mlm_suite.training.trainer import JobTrainer

    rows = [{"input_ids": tokenizer(text)["input_ids"], "labels": index % 2}
            for index, text in enumerate(["a short one", "a somewhat longer text here", "three", "and four words"])]  # fmt: skip
    training, evaluation = DataCollatorForPadding(tokenizer), DataCollatorForPadding(tokenizer)
    args = TrainingArguments(tmp_path, use_cpu=True, report_to="none", dataloader_num_workers=workers,
                             per_device_train_batch_size=2, per_device_eval_batch_size=2)  # fmt: skip
    trainer = JobTrainer(model=MlmSuiteForSequenceClassification(make_tiny_config(vocab_size=tokenizer.vocab_size)),
                         args=args, train_dataset=rows, eval_dataset=rows, data_collator=training,
                         eval_data_collator=evaluation)  # fmt: skip
    if not workers:
        assert trainer.data_collator is training and trainer.eval_data_collator is evaluation
    for loader in (trainer.get_train_dataloader(), trainer.get_eval_dataloader()):
        batch = next(iter(loader))
        storages = {value.untyped_storage().data_ptr() for value in batch.values()}
        assert len(storages) == (1 if workers else len(batch))
    expected = evaluation(rows[:2])  # the evaluation loader keeps the rows' order
    assert all(torch.equal(batch[key], expected[key]) for key in expected) and batch.keys() == expected.keys()


# ------------------------------------------------------------------------------------------------
# The adapter: features in the job's order, private Trainer names read in one place
# ------------------------------------------------------------------------------------------------
class Recorder:
    """A feature that records, in a shared list, each point it is called at (with its name)."""

    def __init__(self, name: str, calls: list) -> None:
        from mlm_suite.training.features import TrainerFeature

        self.name, self.calls = name, calls
        for point in ("start", "restore", "batches", "loss_inputs", "after_backward", "synchronised", "log_values",
                      "checkpoint", "end"):
            setattr(self, point, self._recording(point, getattr(TrainerFeature, point)))

    def _recording(self, point, default):
        def record(*args, **kwargs):
            self.calls.append((point, self.name))
            return default(self, *args, **kwargs)
        return record

    def __getattr__(self, point):  # the protocol's other points, as TrainerFeature has them
        from mlm_suite.training.features import TrainerFeature

        return getattr(TrainerFeature(), point)


def test_the_features_run_at_each_point_in_the_job_s_order(tmp_path):
    """A run of 4 steps saving at 2, then one resumed from that checkpoint: every point of the protocol is reached,
    each time by the features in the order the job gave them."""
    from transformers import TrainingArguments

    from mlm_suite.training.trainer import JobTrainer
    from tests.helpers import ToyRegression, toy_data

    calls: list = []
    args = TrainingArguments(tmp_path, use_cpu=True, report_to="none", max_steps=4, save_strategy="steps", save_steps=2,
                             logging_steps=1, per_device_train_batch_size=8, gradient_accumulation_steps=2)
    features = [Recorder("first", calls), Recorder("second", calls)]
    JobTrainer(model=ToyRegression(), args=args, train_dataset=toy_data(), features=features).train()
    resumed = TrainingArguments(tmp_path / "resumed", use_cpu=True, report_to="none", max_steps=4,
                                per_device_train_batch_size=8, gradient_accumulation_steps=2)
    JobTrainer(model=ToyRegression(), args=resumed, train_dataset=toy_data(), features=features).train(
        str(tmp_path / "checkpoint-2"))
    points = {point for point, _ in calls}
    assert points == {"start", "restore", "batches", "loss_inputs", "after_backward", "synchronised", "log_values",
                      "checkpoint", "end"}
    for index in range(0, len(calls), 2):  # each point: the first feature, then the second
        assert calls[index][1] == "first" and calls[index + 1] == (calls[index][0], "second"), calls[index:index + 2]


def adapter_private_names() -> dict[str, set[str]]:
    """The private names of ``transformers.Trainer`` that mlm_suite's adapter overrides (``def _x``) or reads
    (``self._x``, ``super()._x``, ``getattr(self, "_x", ...)``), less those it defines or sets itself; read from its
    source, so a new one is covered."""
    import ast
    import inspect

    from mlm_suite.training import trainer as adapter

    tree = ast.parse(inspect.getsource(adapter))
    adapter_class = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "JobTrainer")
    defined = {node.name for node in adapter_class.body if isinstance(node, ast.FunctionDef)}
    assigned = {node.attr for node in ast.walk(adapter_class) if isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) and node.value.id == "self"}
    overridden = {name for name in defined if name.startswith("_") and not name.startswith("__")
                  and hasattr(transformers_trainer(), name)}
    read = set()
    for node in ast.walk(adapter_class):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            receiver = node.value
            is_self = isinstance(receiver, ast.Name) and receiver.id == "self"
            is_super = isinstance(receiver, ast.Call) and getattr(receiver.func, "id", None) == "super"
            if (is_self or is_super) and node.attr not in assigned and (node.attr not in defined or is_super):
                read.add(node.attr)
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and len(node.args) >= 2
                and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"
                and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_")):
            read.add(node.args[1].value)  # getattr(self, "_x", default)
    return {"overridden": overridden, "read": read - overridden}


def transformers_trainer():
    import transformers

    return transformers.Trainer


def test_every_private_trainer_name_the_adapter_uses_exists_in_this_transformers(tmp_path):
    """Each private hook the adapter overrides is a method of this transformers' ``Trainer`` with the parameters the
    adapter passes on, and each private attribute it reads is there after a step of training: a transformers release
    (the lowest declared or the newest) that renames or drops one fails here, by name, rather than deep in a job."""
    import inspect

    from transformers import TrainingArguments

    from mlm_suite.training.trainer import JobTrainer
    from tests.helpers import ToyRegression, toy_data

    names = adapter_private_names()
    assert {"_save_checkpoint", "_maybe_log_save_evaluate", "_load_rng_state", "_save"} <= names["overridden"]
    assert {"_total_loss_scalar", "_globalstep_last_logged", "_train_batch_size"} <= names["read"]
    stock = transformers_trainer()
    for name in sorted(names["overridden"]):
        hook = getattr(stock, name, None)
        assert callable(hook), f"transformers.Trainer has no {name} to override"
        ours = inspect.signature(getattr(JobTrainer, name)).parameters
        theirs = inspect.signature(hook).parameters
        named = [parameter for parameter in ours if parameter not in ("self", "args", "kwargs")]
        assert all(parameter in theirs for parameter in named), (name, list(theirs))
    args = TrainingArguments(tmp_path, use_cpu=True, report_to="none", max_steps=1, per_device_train_batch_size=8)
    trainer = JobTrainer(model=ToyRegression(), args=args, train_dataset=toy_data())
    trainer.train()
    missing = [name for name in sorted(names["read"]) if not hasattr(trainer, name)]
    assert not missing, f"transformers.Trainer no longer has {missing}"
