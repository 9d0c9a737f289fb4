"""The jobs' Trainer as composed (mlm_suite.training.trainer): FSDP refused on CPU processes, where accelerate
would train plain DDP, and the collators of training and evaluation batches, from loader workers or not.
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
# Composition
# ------------------------------------------------------------------------------------------------
def test_the_mixins_run_in_the_orders_the_concerns_need():
    """The three orders of the module docstring: a resumed checkpoint is resolved and checked before its loss total
    is read; the stream position is saved inside the checkpoint written whole; the stream's resumed RNG states are
    deferred before the pickle-free ones load."""
    from mlm_suite.training.checkpoint_format import PickleFreeCheckpointsMixin
    from mlm_suite.training.loss_accounting import LossAccountingMixin
    from mlm_suite.training.resuming import ResumingMixin
    from mlm_suite.training.stream_position import StreamPositionMixin
    from mlm_suite.training.trainer import JobTrainer

    order = JobTrainer.__mro__.index
    assert order(ResumingMixin) < order(LossAccountingMixin)
    assert order(ResumingMixin) < order(StreamPositionMixin) < order(PickleFreeCheckpointsMixin)
