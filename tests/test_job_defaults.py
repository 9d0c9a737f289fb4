"""Defaults that the jobs choose by device: what a GPU run gets without any flag, and what a CPU run keeps."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from mlm_suite.jobs.finetuning import feed_the_device, gpu_loader_workers
from mlm_suite.jobs.pretrain import parse_arguments


def training_args(device: str) -> SimpleNamespace:
    return SimpleNamespace(
        device=torch.device(device), dataloader_num_workers=0, logging_nan_inf_filter=True,
        accelerator_config=SimpleNamespace(non_blocking=False),
    )  # fmt: skip


def test_a_gpu_run_collates_in_workers_and_never_waits_for_the_loss(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    args = training_args("cuda")
    feed_the_device(args, [])
    assert args.dataloader_num_workers == gpu_loader_workers() == 4
    assert args.logging_nan_inf_filter is False and args.accelerator_config.non_blocking is True
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # 8 processes share the node's 16 cores
    assert gpu_loader_workers() == 1


def test_flags_given_win_and_a_cpu_run_keeps_the_trainer_defaults():
    args = training_args("cuda")
    feed_the_device(args, ["--dataloader_num_workers=0", "--logging_nan_inf_filter", "true", "--accelerator_config", "{}"])
    assert args.dataloader_num_workers == 0 and args.logging_nan_inf_filter is True
    assert args.accelerator_config.non_blocking is False
    args = training_args("cpu")
    feed_the_device(args, [])
    assert args.dataloader_num_workers == 0 and args.logging_nan_inf_filter is True
    assert args.accelerator_config.non_blocking is False


def test_pretraining_flattens_batches_on_a_gpu_only_unless_told():
    args, _ = parse_arguments(["--output_dir", "unused", "--use_cpu", "true"])
    assert args.flatten_batches is False  # on CPU flattening buys nothing (README, Performance)
    args, _ = parse_arguments(["--output_dir", "unused", "--use_cpu", "true", "--flatten_batches"])
    assert args.flatten_batches is True


def test_the_trainer_counts_flops_as_the_stock_one_without_walking_the_model_each_step(tmp_path):
    import accelerate.optimizer
    import transformers

    from conftest import make_random_batch, make_tiny_config
    from mlm_suite import MlmSuiteForMaskedLM
    from mlm_suite.trainer import PickleFreeTrainer

    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    trainer = PickleFreeTrainer(model=MlmSuiteForMaskedLM(make_tiny_config()), args=args)
    batch = make_random_batch()
    stock = transformers.Trainer.floating_point_ops(trainer, batch)
    assert stock > 0 and trainer.floating_point_ops(batch) == stock == trainer.floating_point_ops(batch)
    assert hasattr(accelerate.optimizer.is_lomo_available, "cache_info")  # asked once per process, not per step
