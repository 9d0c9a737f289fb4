"""Modern pretraining controls of ``mlm-suite pretrain`` (issue 27): what changes over a run, and context extension.

* **Masking-rate schedules** (``--mlm_probability_schedule``, :class:`mlm_suite.data.schedules.MaskRateSchedule`)
  and a configurable replacement split (``--mask_replace_prob``, ``--random_replace_prob``; evaluation keeps
  80/10/10 at ``--eval_mlm_probability``). The rate of each optimizer step travels with the rows of that step
  (:class:`mlm_suite.data.schedules.ScheduledBatchSampler`), so every process and every dataloader worker masks a
  batch at the rate of the step it is trained in, and a resumed run repeats the uninterrupted one. The rate is logged
  (``mlm_probability``) with every training loss.
* **Batch-size warmup** (``--batch_size_warmup_tokens``): rows per step growing over the first N tokens; the loss
  stays the mean over each step's labelled tokens (the Trainer's ``num_items_in_batch``), gradient accumulation
  stays exact, and resuming lands on the same rows. The rows per step are logged (``train_rows_per_step``).
* **Warmup-stable-decay learning rates**: transformers' ``--lr_scheduler_type warmup_stable_decay`` with the decay
  length and shape as flags (``--lr_decay_steps``, ``--lr_decay_type``); under ``--max_train_minutes`` the decay is
  re-planned with the budget so that it still ends there (:class:`WsdTimeBudgetCallback`);
  ``--decay_from_checkpoint`` runs only the decay phase from a checkpoint saved in the stable phase (its weights,
  optimizer state and step), as ModernBERT and MiniCPM decay several checkpoints of one stable run.
* **Context extension** (``--rope_theta``): a rotary checkpoint continued at longer rows gets a new RoPE base and a
  ``max_position_embeddings`` that follows the rows (:func:`extend_context`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from transformers import TrainerCallback, TrainingArguments

from mlm_suite.data.schedules import BatchSizeWarmup, MaskRateSchedule, ScheduledBatchSampler, TaggedRows
from mlm_suite.errors import UsageError
from mlm_suite.training.controls import TimeBudgetCallback

__all__ = [
    "DEFAULT_LR_DECAY",
    "RowSchedule",
    "ScheduledRowsMixin",
    "UNBOUNDED_STEPS",
    "WsdTimeBudgetCallback",
    "control_card_rows",
    "describe_controls",
    "extend_context",
    "lr_schedule_summary",
    "resolve_controls",
    "row_schedule",
    "time_budget_callback",
]

WSD = "warmup_stable_decay"
DEFAULT_LR_DECAY = 0.2  # the share of the steps a warmup-stable-decay run spends decaying (Hägele et al., 2024)
DECAY_TYPES = ("linear", "cosine", "1-sqrt")
UNBOUNDED_STEPS = 10**9  # the pretraining job's --max_steps under --max_train_minutes when none is given


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------
# Arguments
# ------------------------------------------------------------------------------------------------
def resolve_controls(args: Any, training_args: TrainingArguments, given: frozenset[str]) -> None:
    """Check the controls' flags and fill in what they imply (before anything is read or written).

    Sets the learning-rate schedule's arguments (``lr_scheduler_kwargs`` of a warmup-stable-decay run; for
    ``--decay_from_checkpoint`` also ``--max_steps``, ``--learning_rate``, ``--warmup_steps`` and the tokenizer), and
    records what applies in ``args.schedules_applied`` (name -> one line), which the job prints and the card shows.

    Raises:
        UsageError: a value out of range or flags that contradict each other (one line naming them).
    """
    applied: dict[str, str] = args.schedules_applied
    schedule = MaskRateSchedule.parse(args.mlm_probability_schedule, args.mlm_probability, args.mlm_probability_end)
    if schedule.varies:
        if args.streaming:
            raise UsageError("--mlm_probability_schedule needs rows the job can index: it does not work with --streaming")
        if schedule.kind == "phases":
            args.mlm_probability = schedule.start  # what the card and the printed configuration call the training rate
            if isinstance(getattr(args, "defaults_applied", None), dict):
                args.defaults_applied["mlm_probability"] = "first phase of --mlm_probability_schedule"
        applied["masking-rate schedule"] = schedule.describe() + " (per optimizer step, logged as mlm_probability)"
    for name in ("mask_replace_prob", "random_replace_prob"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise UsageError(f"--{name} must lie in [0, 1], got {getattr(args, name)}")
    if args.mask_replace_prob + args.random_replace_prob > 1.0 + 1e-9:
        raise UsageError(
            f"--mask_replace_prob + --random_replace_prob must not exceed 1, got {args.mask_replace_prob} + "
            f"{args.random_replace_prob}"
        )
    if (args.mask_replace_prob, args.random_replace_prob) != (0.8, 0.1):
        applied["masked-token replacement (training)"] = replacement_split(args)

    if args.batch_size_warmup_min_rows is not None and not args.batch_size_warmup_tokens:
        raise UsageError("--batch_size_warmup_min_rows needs --batch_size_warmup_tokens")
    if args.batch_size_warmup_tokens:
        if args.batch_size_warmup_tokens < 0:
            raise UsageError(f"--batch_size_warmup_tokens must not be negative, got {args.batch_size_warmup_tokens}")
        if args.streaming:
            raise UsageError("--batch_size_warmup_tokens needs rows the job can index: it does not work with --streaming")
        if training_args.max_steps <= 0:
            raise UsageError("--batch_size_warmup_tokens needs --max_steps (or --max_train_minutes): the run is one stream")
        applied["batch-size warmup"] = batch_size_warmup(args, training_args).describe()

    if schedule.varies or args.batch_size_warmup_tokens:
        check_row_sampling(training_args)
    _resolve_lr_schedule(args, training_args, given)
    if args.rope_theta is not None and not args.rope_theta > 0:
        raise UsageError(f"--rope_theta must be positive, got {args.rope_theta}")


def check_row_sampling(training_args: TrainingArguments) -> None:
    """Raise UsageError for loader settings the scheduled rows cannot follow (they are dealt per process, at random)."""
    config = training_args.accelerator_config
    if getattr(config, "split_batches", False) or getattr(config, "dispatch_batches", None):
        raise UsageError(
            "masking-rate schedules and batch-size warmup deal rows to each process themselves: drop split_batches "
            "and dispatch_batches from --accelerator_config"
        )
    strategy = getattr(training_args, "train_sampling_strategy", "random")
    if getattr(training_args, "group_by_length", False) or strategy != "random":
        raise UsageError(
            "masking-rate schedules and batch-size warmup draw the rows in a seeded random order: drop "
            "--group_by_length / --train_sampling_strategy"
        )


def replacement_split(args: Any) -> str:
    kept = max(0.0, 1.0 - args.mask_replace_prob - args.random_replace_prob)
    return f"{args.mask_replace_prob:.0%} [MASK] / {args.random_replace_prob:.0%} random / {kept:.0%} kept"


def batch_size_warmup(args: Any, training_args: TrainingArguments) -> BatchSizeWarmup:
    rows = training_args.per_device_train_batch_size
    minimum = args.batch_size_warmup_min_rows or max(1, rows // 4)
    return BatchSizeWarmup(
        tokens=args.batch_size_warmup_tokens,
        min_rows=minimum,
        max_rows=rows,
        row_tokens=args.max_seq_length,
        rows_multiplier=training_args.world_size * training_args.gradient_accumulation_steps,
    )


def _resolve_lr_schedule(args: Any, training_args: TrainingArguments, given: frozenset[str]) -> None:
    if args.lr_decay_type not in DECAY_TYPES:
        raise UsageError(f"--lr_decay_type must be one of {', '.join(DECAY_TYPES)}, got {args.lr_decay_type!r}")
    if args.lr_decay_steps is not None and not args.lr_decay_steps > 0:
        raise UsageError(f"--lr_decay_steps must be positive, got {args.lr_decay_steps:g}")
    if args.decay_from_checkpoint:
        _resolve_decay_run(args, training_args, given)
        return
    kwargs = dict(training_args.lr_scheduler_kwargs or {})
    if training_args.lr_scheduler_type != WSD:
        if args.lr_decay_steps is not None or "lr_decay_type" in given:
            raise UsageError("--lr_decay_steps and --lr_decay_type shape a --lr_scheduler_type warmup_stable_decay run")
        return
    if "num_decay_steps" in kwargs and args.lr_decay_steps is not None:
        raise UsageError("give the decay length once: --lr_decay_steps or num_decay_steps in --lr_scheduler_kwargs")
    decay = args.lr_decay_steps if args.lr_decay_steps is not None else DEFAULT_LR_DECAY
    if "num_decay_steps" not in kwargs:
        if decay >= 1 and not float(decay).is_integer():
            raise UsageError(f"--lr_decay_steps is a fraction below 1 or a whole number of steps, got {decay:g}")
        steps = training_args.max_steps
        if args.max_train_minutes is None:
            if steps <= 0:
                raise UsageError("--lr_scheduler_type warmup_stable_decay needs --max_steps (or --max_train_minutes)")
            count = max(1, round(decay * steps)) if decay < 1 else int(decay)
            warmup = training_args.get_warmup_steps(steps)
            if count > steps - warmup:
                raise UsageError(
                    f"--lr_decay_steps {decay:g}: {count} decay steps do not fit in {steps} steps after {warmup} of warmup"
                )
            kwargs["num_decay_steps"] = count
        else:
            kwargs["num_decay_steps"] = 1  # WsdTimeBudgetCallback replaces the schedule: the decay follows the plan
        args.lr_decay_steps = decay
    kwargs.setdefault("decay_type", args.lr_decay_type)
    args.lr_decay_type = kwargs["decay_type"]
    training_args.lr_scheduler_kwargs = kwargs
    args.schedules_applied["learning-rate schedule"] = lr_schedule_summary(training_args, args)


def _resolve_decay_run(args: Any, training_args: TrainingArguments, given: frozenset[str]) -> None:
    folder = Path(args.decay_from_checkpoint)
    state_file = folder / "trainer_state.json"
    if not state_file.is_file():
        raise UsageError(f"--decay_from_checkpoint {folder}: no trainer_state.json there (give a checkpoint-* folder)")
    if args.model_name_or_path:
        raise UsageError("--decay_from_checkpoint continues a checkpoint itself; drop --model_name_or_path")
    if training_args.resume_from_checkpoint:
        raise UsageError("--decay_from_checkpoint continues a checkpoint itself; drop --resume_from_checkpoint")
    if args.max_train_minutes is not None:
        raise UsageError("--decay_from_checkpoint runs a fixed number of decay steps (--lr_decay_steps), not a time budget")
    if args.lr_decay_steps is None or args.lr_decay_steps < 1 or not float(args.lr_decay_steps).is_integer():
        raise UsageError("--decay_from_checkpoint needs --lr_decay_steps N, the whole number of steps of the decay")
    if "lr_scheduler_type" in given and training_args.lr_scheduler_type != WSD:
        raise UsageError("--decay_from_checkpoint runs the decay of a warmup_stable_decay schedule; drop --lr_scheduler_type")
    step = int(_read_json(state_file)["global_step"])
    decay = int(args.lr_decay_steps)
    if "max_steps" in given and training_args.max_steps != step + decay:
        raise UsageError(
            f"--decay_from_checkpoint at step {step} with --lr_decay_steps {decay} ends at step {step + decay}; "
            f"drop --max_steps {training_args.max_steps}"
        )
    scheduler_file = folder / "scheduler.json"
    peak = None
    if scheduler_file.is_file():  # never the stock scheduler.pt: that is a pickle
        scheduler = _read_json(scheduler_file)
        peak, last = max(scheduler.get("base_lrs") or [0.0]), max(scheduler.get("_last_lr") or [0.0])
        if last < 0.999 * peak:
            raise UsageError(
                f"--decay_from_checkpoint {folder}: its learning rate {last:.3g} is below its peak {peak:.3g} (a warmup "
                "or decay phase); decay from a checkpoint saved in the stable phase"
            )
    arguments_file = folder / "training_args.json"
    if arguments_file.is_file():
        peak = _read_json(arguments_file).get("learning_rate", peak)
    if peak is not None:
        if "learning_rate" in given and not math.isclose(training_args.learning_rate, peak, rel_tol=1e-6):
            raise UsageError(
                f"--decay_from_checkpoint decays from the checkpoint's learning rate {peak:g}; drop --learning_rate"
            )
        training_args.learning_rate = peak
    training_args.max_steps = step + decay
    training_args.warmup_steps = 0  # warm-up is over: steps 0..step are the checkpoint's
    training_args.lr_scheduler_type = WSD
    # With no warmup the stable phase is num_training_steps - num_decay_steps = the checkpoint's steps.
    training_args.lr_scheduler_kwargs = {"num_decay_steps": decay, "decay_type": args.lr_decay_type}
    if not (args.tokenizer_name or args.train_tokenizer or args.vocab_size):
        args.tokenizer_name = str(folder)  # the stable run's vocabulary, saved with the checkpoint
    args.schedules_applied["learning-rate schedule"] = lr_schedule_summary(training_args, args)


def lr_schedule_summary(training_args: TrainingArguments, args: Any = None) -> str:
    """The learning-rate schedule in words, for the card and the printed configuration."""
    warmup = training_args.warmup_steps
    warmup_text = f"{warmup:g} of the steps" if 0 < warmup < 1 else f"{warmup:g} steps"
    budget = getattr(args, "max_train_minutes", None)
    end = " (re-planned after every step to end at the time budget)" if budget else ""
    kind = str(getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type))
    if kind == "linear":
        return f"linear warmup {warmup_text} + decay to 0{end}"
    if kind != WSD:
        return f"{kind}, warmup {warmup_text}"
    kwargs = training_args.lr_scheduler_kwargs or {}
    shape = kwargs.get("decay_type", "cosine")
    floor = kwargs.get("min_lr_ratio", 0)
    to = f"{floor:g}× the peak" if floor else "0"
    if getattr(args, "decay_from_checkpoint", None):
        step = training_args.max_steps - kwargs["num_decay_steps"]
        return (
            f"decay phase only: from `{args.decay_from_checkpoint}` (step {step}, stable phase), {shape} decay over "
            f"{kwargs['num_decay_steps']} steps to {to}"
        )
    decay = getattr(args, "lr_decay_steps", None)
    if budget and decay is not None:
        length = f"the last {decay:.0%} of the steps" if decay < 1 else f"the last {decay:g} steps"
    else:
        length = f"the last {kwargs['num_decay_steps']} steps"
    return f"warmup-stable-decay: warmup {warmup_text}, constant, then {shape} decay over {length} to {to}{end}"


def describe_controls(args: Any) -> str:
    """Lines the job prints after its configuration when a control is on (empty otherwise)."""
    if not args.schedules_applied:
        return ""
    return "\n".join(["pretraining controls:", *(f"  {name}: {value}" for name, value in args.schedules_applied.items())])


def control_card_rows(args: Any) -> dict[str, str]:
    """Rows of the model card's training table for the controls that are on (the learning-rate schedule has its
    own row)."""
    return {name: value for name, value in args.schedules_applied.items() if name != "learning-rate schedule"}


# ------------------------------------------------------------------------------------------------
# Context extension
# ------------------------------------------------------------------------------------------------
def extend_context(config: Any, tokenizer: Any, args: Any, checkpoint: str | None) -> None:
    """``--rope_theta`` and longer rows for a rotary model (see the module); changes ``config`` (and, when a
    checkpoint is continued at longer rows, ``tokenizer.model_max_length``) in place.

    A new model's positions are checked as before; a continued rotary checkpoint's ``max_position_embeddings``
    follows ``--max_seq_length`` when the rows are longer (rotary positions have no table to outgrow).

    Raises:
        UsageError: ``--rope_theta`` for a model with absolute positions.
    """
    rotary = config.position_embedding_type == "rotary"
    changes = []
    if args.rope_theta is not None:
        if not rotary:
            raise UsageError(
                f"--rope_theta sets the base of rotary positions; this model's positions are {config.position_embedding_type}"
            )
        if args.rope_theta != config.rope_theta:
            changes.append(f"RoPE base {config.rope_theta:g} → {args.rope_theta:g}")
            config.rope_theta = float(args.rope_theta)
    if checkpoint and rotary and args.max_seq_length > config.max_position_embeddings:
        changes.append(f"max_position_embeddings {config.max_position_embeddings} → {args.max_seq_length}")
        config.max_position_embeddings = args.max_seq_length
        if tokenizer.model_max_length < args.max_seq_length:
            tokenizer.model_max_length = args.max_seq_length
    if changes:
        what = "context extension" if checkpoint else "positions"
        args.schedules_applied[what] = ", ".join(changes) + f" (rows of {args.max_seq_length} tokens)"


# ------------------------------------------------------------------------------------------------
# Time budget
# ------------------------------------------------------------------------------------------------
class WsdTimeBudgetCallback(TimeBudgetCallback):
    """:class:`~mlm_suite.training.controls.TimeBudgetCallback` for a warmup-stable-decay schedule.

    The plan is re-made after every step as for the linear schedule; the warmup, then a constant rate, then the
    decay over ``decay`` of the planned steps (a fraction below 1, else a step count), so that the decay ends at the
    budget.
    """

    def __init__(
        self,
        budget_seconds: float,
        decay: float = DEFAULT_LR_DECAY,
        decay_type: str = "1-sqrt",
        min_lr_ratio: float = 0.0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(budget_seconds, clock=clock)
        if decay_type not in DECAY_TYPES:
            raise ValueError(f"decay_type must be one of {DECAY_TYPES}, got {decay_type!r}")
        self.decay, self.decay_type, self.min_lr_ratio = decay, decay_type, min_lr_ratio

    def decay_steps(self) -> int:
        room = max(1, self.planned_steps - self.warmup_steps)
        return max(1, min(room, round(self.decay * self.planned_steps) if self.decay < 1 else int(self.decay)))

    def multiplier(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / self.warmup_steps
        decay = self.decay_steps()
        start = self.planned_steps - decay
        if step < start:
            return 1.0
        progress = min(1.0, (step - start) / decay)
        if self.decay_type == "linear":
            factor = 1.0 - progress
        elif self.decay_type == "cosine":
            factor = 0.5 * (1.0 + math.cos(math.pi * progress))
        else:
            factor = 1.0 - math.sqrt(progress)
        return max(0.0, factor * (1.0 - self.min_lr_ratio) + self.min_lr_ratio)

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        if args.lr_scheduler_type != WSD or not hasattr(lr_scheduler, "lr_lambdas"):
            raise ValueError(
                f"WsdTimeBudgetCallback schedules a warmup_stable_decay LambdaLR; got lr_scheduler_type="
                f"{args.lr_scheduler_type!r} ({type(lr_scheduler).__name__})"
            )
        lr_scheduler.lr_lambdas = [self.multiplier] * len(lr_scheduler.lr_lambdas)
        self._max_steps = state.max_steps
        self._set_plan(args, state, state.max_steps)
        self.training_seconds = 0.0
        self._speed_anchor = None
        self._step_started = self.clock()


def time_budget_callback(args: Any, training_args: TrainingArguments) -> TimeBudgetCallback:
    """The callback ending ``--max_train_minutes``'s schedule at the budget: linear, or warmup-stable-decay."""
    seconds = 60.0 * args.max_train_minutes
    if training_args.lr_scheduler_type == WSD:
        kwargs = training_args.lr_scheduler_kwargs or {}
        return WsdTimeBudgetCallback(
            seconds,
            decay=args.lr_decay_steps if args.lr_decay_steps is not None else DEFAULT_LR_DECAY,
            decay_type=kwargs.get("decay_type", args.lr_decay_type),
            min_lr_ratio=kwargs.get("min_lr_ratio", 0.0),
        )
    return TimeBudgetCallback(seconds)


# ------------------------------------------------------------------------------------------------
# Trainer side
# ------------------------------------------------------------------------------------------------
@dataclass
class RowSchedule:
    """What the training loader needs to tag rows: the masking-rate schedule (None: the collator's constant rate),
    the batch-size warmup (None: none) and where the schedule's total steps come from (a time budget's plan)."""

    mask_schedule: MaskRateSchedule | None = None
    warmup: BatchSizeWarmup | None = None
    total_steps: Callable[[], int] | None = None


def row_schedule(args: Any, training_args: TrainingArguments, budget: TimeBudgetCallback | None = None) -> RowSchedule | None:
    """The job's :class:`RowSchedule`, or None when neither a varying masking rate nor a batch-size warmup is asked for."""
    schedule = MaskRateSchedule.parse(args.mlm_probability_schedule, args.mlm_probability, args.mlm_probability_end)
    warmup = batch_size_warmup(args, training_args) if args.batch_size_warmup_tokens else None
    if not schedule.varies and warmup is None:
        return None
    total = (lambda: budget.planned_steps or training_args.max_steps) if budget is not None else None
    return RowSchedule(schedule if schedule.varies else None, warmup, total)


class _RowProgress(TrainerCallback):
    """Keeps the sampler on the Trainer's epoch (the per-epoch layout) and, for the stream layout, ``state.epoch``
    at the passes over the data made (the Trainer would count the whole run as one epoch)."""

    def __init__(self, trainer: ScheduledRowsMixin) -> None:
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs):
        sampler = self.trainer.row_sampler
        if sampler is not None and sampler.warmup is None:
            sampler.set_epoch(math.floor(state.epoch or 0.0))

    def on_step_end(self, args, state, control, **kwargs):
        sampler = self.trainer.row_sampler
        if sampler is not None and sampler.warmup is not None:
            state.epoch = sampler.rows_before(state.global_step) / sampler.num_rows


class ScheduledRowsMixin:
    """A ``Trainer`` mix-in whose training loader follows a :class:`RowSchedule` (``row_schedule=``).

    Without one (or with nothing that varies) the Trainer's own loader is used unchanged. With one, the loader reads
    :class:`~mlm_suite.data.schedules.TaggedRows` through a :class:`~mlm_suite.data.schedules.ScheduledBatchSampler`
    built for this process (accelerate does not deal its batches again), and every training log gets the masking
    rate (``mlm_probability``) and, during a batch-size warmup, the rows (``train_rows_per_step``) of the last step.
    """

    def __init__(self, *args: Any, row_schedule: RowSchedule | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.row_schedule = row_schedule
        self.row_sampler: ScheduledBatchSampler | None = None
        if row_schedule is not None:
            self.add_callback(_RowProgress(self))

    def get_train_dataloader(self) -> DataLoader:
        if self.row_schedule is None:
            return super().get_train_dataloader()
        from accelerate.data_loader import prepare_data_loader
        from transformers.trainer_utils import seed_worker

        args = self.args
        check_row_sampling(args)
        dataset = self.train_dataset
        if hasattr(dataset, "column_names") and hasattr(self, "_remove_unused_columns"):
            dataset = self._remove_unused_columns(dataset, description="training")
        schedule = self.row_schedule
        total = schedule.total_steps or (lambda: self.state.max_steps)
        self.row_sampler = ScheduledBatchSampler(
            len(dataset),
            self._train_batch_size,
            gradient_accumulation_steps=args.gradient_accumulation_steps,
            num_processes=args.world_size,
            process_index=args.process_index,
            seed=args.data_seed if args.data_seed is not None else torch.random.initial_seed(),
            mask_schedule=schedule.mask_schedule,
            total_steps=total,
            warmup=schedule.warmup,
            max_steps=args.max_steps,
            drop_last=args.dataloader_drop_last,
            even_batches=args.accelerator_config.even_batches,
        )
        workers = args.dataloader_num_workers
        loader = DataLoader(
            TaggedRows(dataset),
            batch_sampler=self.row_sampler,
            collate_fn=self.data_collator,
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

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        sampler = self.row_sampler
        if sampler is not None and "loss" in logs:
            step = max(0, self.state.global_step - 1)  # the step just trained
            rate = sampler.rate(step)
            if rate is not None:
                logs["mlm_probability"] = round(rate, 6)
            if sampler.warmup is not None:
                logs["train_rows_per_step"] = sampler.rows_per_step(step)
        super().log(logs, *args, **kwargs)
