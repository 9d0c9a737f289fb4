"""The ``Trainer`` side of scheduled rows (``mlm-suite pretrain``'s masking-rate schedules, batch-size warmup and
token-budget batches): a training loader that deals each optimizer step its rows, tagged with the step's masking rate.
The schedules themselves are in :mod:`mlm_suite.data.pretraining.schedules`; see docs/pretraining.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch.utils.data import DataLoader
from transformers import TrainingArguments

from mlm_suite.data.pretraining.schedules import BatchSizeWarmup, MaskRateSchedule, ScheduledBatchSampler, TaggedRows
from mlm_suite.data.pretraining.token_budget import row_lengths
from mlm_suite.errors import UsageError
from mlm_suite.training.controls import RowProgressCallback, TimeBudgetCallback
from mlm_suite.training.features import LoaderRequest, Progress, TrainerFeature

__all__ = ["RowSchedule", "ScheduledRows", "check_row_sampling", "row_schedule"]


def check_row_sampling(training_args: TrainingArguments) -> None:
    """Raise UsageError for loader settings the scheduled rows cannot follow (they are dealt per process, at random)."""
    config = training_args.accelerator_config
    if getattr(config, "split_batches", False) or getattr(config, "dispatch_batches", None):
        raise UsageError(
            "masking-rate schedules, batch-size warmup and --max_tokens_per_batch deal rows to each process themselves: "
            "drop split_batches "
            "and dispatch_batches from --accelerator_config"
        )
    strategy = getattr(training_args, "train_sampling_strategy", "random")
    if getattr(training_args, "group_by_length", False) or strategy != "random":
        raise UsageError(
            "masking-rate schedules, batch-size warmup and --max_tokens_per_batch draw the rows in a seeded random "
            "order: drop "
            "--group_by_length / --train_sampling_strategy"
        )


@dataclass
class RowSchedule:
    """What the training loader needs to tag rows: the masking-rate schedule (None: the collator's constant rate),
    the batch-size warmup (None: none), where the schedule's total steps come from (a time budget's plan), the
    token budget of a micro-batch (None: ``per_device_train_batch_size`` rows) and whether the rows are read in their
    order (drawn in training order already: a multilingual run's phases) rather than shuffled."""

    mask_schedule: MaskRateSchedule | None = None
    warmup: BatchSizeWarmup | None = None
    total_steps: Callable[[], int] | None = None
    max_tokens_per_batch: int | None = None
    in_order: bool = False


def row_schedule(
    mask_schedule: MaskRateSchedule,
    warmup: BatchSizeWarmup | None,
    budget: TimeBudgetCallback | None = None,
    max_steps: int = -1,
    max_tokens_per_batch: int | None = None,
    in_order: bool = False,
) -> RowSchedule | None:
    """The :class:`RowSchedule` of a run, or None when the masking rate does not vary, the batch size does not warm
    up, no token budget is set and the rows are shuffled. With a time ``budget`` the schedule's total steps are its
    plan (``max_steps`` until there is one)."""
    if not mask_schedule.varies and warmup is None and max_tokens_per_batch is None and not in_order:
        return None
    total = (lambda: budget.planned_steps or max_steps) if budget is not None else None
    return RowSchedule(mask_schedule if mask_schedule.varies else None, warmup, total, max_tokens_per_batch, in_order)


class ScheduledRows(TrainerFeature):
    """A training loader that follows a :class:`RowSchedule`, a feature of :class:`~mlm_suite.training.trainer.JobTrainer`.

    The loader reads :class:`~mlm_suite.data.pretraining.schedules.TaggedRows` through a
    :class:`~mlm_suite.data.pretraining.schedules.ScheduledBatchSampler` built for this process (accelerate does not deal
    its batches again; :attr:`sampler`), and every training log gets the masking rate (``mlm_probability``) and,
    during a batch-size warmup, the rows (``train_rows_per_step``) of the last step.
    """

    def __init__(self, schedule: RowSchedule) -> None:
        self.schedule = schedule
        self.sampler: ScheduledBatchSampler | None = None

    def attach(self, args: TrainingArguments) -> list:
        return [RowProgressCallback(self)]

    def train_dataloader(self, request: LoaderRequest) -> DataLoader:
        from accelerate.data_loader import prepare_data_loader
        from transformers.trainer_utils import seed_worker

        args = request.args
        check_row_sampling(args)
        dataset = request.model_columns(request.dataset)
        schedule = self.schedule
        self.sampler = ScheduledBatchSampler(
            len(dataset),
            request.batch_size,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
            num_processes=args.world_size,
            process_index=args.process_index,
            seed=args.data_seed if args.data_seed is not None else torch.random.initial_seed(),
            mask_schedule=schedule.mask_schedule,
            total_steps=schedule.total_steps or request.max_steps,
            warmup=schedule.warmup,
            max_steps=args.max_steps,
            drop_last=args.dataloader_drop_last,
            even_batches=args.accelerator_config.even_batches,
            max_tokens=schedule.max_tokens_per_batch,
            lengths=row_lengths(dataset) if schedule.max_tokens_per_batch else None,
            shuffle=not schedule.in_order,
        )
        workers = args.dataloader_num_workers
        loader = DataLoader(
            TaggedRows(dataset),
            batch_sampler=self.sampler,
            collate_fn=request.collate_fn,
            num_workers=workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers if workers else False,
            prefetch_factor=args.dataloader_prefetch_factor if workers else None,
            worker_init_fn=partial(seed_worker, num_workers=workers, rank=args.process_index),
        )
        # Rows are already this process's: as one process, so that accelerate does not split them again.
        return prepare_data_loader(
            loader,
            device=args.device,
            num_processes=1,
            process_index=0,
            put_on_device=True,
            non_blocking=args.accelerator_config.non_blocking,
        )

    def log_values(self, logs: dict[str, Any], progress: Progress) -> dict[str, Any]:
        values: dict[str, Any] = {}
        if self.sampler is not None and "loss" in logs:
            step = max(0, progress.step - 1)  # the step just trained
            rate = self.sampler.rate(step)
            if rate is not None:
                values["mlm_probability"] = round(rate, 6)
            if self.sampler.warmup is not None:
                values["train_rows_per_step"] = self.sampler.rows_per_step(step)
        return values
