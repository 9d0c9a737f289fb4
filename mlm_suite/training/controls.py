"""Training controls shared by the jobs and benchmarks: a wall-clock budget (linear or warmup-stable-decay), early
stopping, the steady step rate, and the callback that keeps scheduled rows on the Trainer's epochs.

``TimeBudgetCallback`` turns any ``Trainer`` run into a fixed-time run whose learning-rate schedule
ends exactly at the budget. It works by **re-planning the step count**: after every optimizer step it
measures the training time so far (evaluation and checkpointing excluded), estimates how many steps
fit in the budget at the speed measured since step 1, and makes the linear warmup + linear decay
schedule aim at that step count. The estimate settles within a few dozen steps, so the learning rate
follows the usual linear schedule over the planned steps and reaches 0 when the budget is used; the
last plan is logged (``time_budget_planned_steps``), so ``--max_steps`` with that number repeats the
run step for step. With several processes rank 0's plan is broadcast, so every rank stops together.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import EarlyStoppingCallback, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

__all__ = [
    "DECAY_TYPES",
    "DEFAULT_LR_DECAY",
    "UNBOUNDED_STEPS",
    "WSD",
    "RowProgressCallback",
    "StepRateCallback",
    "TimeBudgetCallback",
    "WsdTimeBudgetCallback",
    "early_stopping_arguments",
    "early_stopping_callback",
    "lr_schedule_summary",
    "rows_per_step",
    "time_budget_callback",
]

WSD = "warmup_stable_decay"
DEFAULT_LR_DECAY = 0.2  # the share of the steps a warmup-stable-decay run spends decaying (Hägele et al., 2024)
DECAY_TYPES = ("linear", "cosine", "1-sqrt")
UNBOUNDED_STEPS = 10**9  # --max_steps under a time budget when none is given: the budget decides


class TimeBudgetCallback(TrainerCallback):
    """Stop training when ``budget_seconds`` of training time are used; the schedule ends there.

    Replaces the lambdas of the Trainer's ``LambdaLR`` (the ``linear`` scheduler, the Trainer's
    default) by a linear warmup over ``warmup fraction × planned steps`` (from ``args.warmup_steps``:
    a value below 1 is a fraction, a larger one a step count) followed by a linear decay to 0 at the
    planned step. ``args.max_steps`` stays an upper bound. Logging, evaluation and save intervals
    given as fractions (``eval_steps=0.5``) are fractions of the planned steps.

    Args:
        budget_seconds: training time allowed, evaluation and saving excluded.
        clock: seconds from an arbitrary origin (``time.perf_counter``; tests pass a fake clock).
    """

    def __init__(self, budget_seconds: float, clock: Callable[[], float] = time.perf_counter) -> None:
        if not budget_seconds > 0:
            raise ValueError(f"the time budget must be positive, got {budget_seconds} s")
        self.budget_seconds = float(budget_seconds)
        self.clock = clock
        self.planned_steps = 0
        self.warmup_steps = 0
        self.training_seconds = 0.0
        self._max_steps = 0  # the Trainer's own step count: an upper bound
        self._step_started = 0.0
        self._speed_anchor: tuple[int, float] | None = None  # (step, training seconds) after the first step

    # -------------------------------------------------------------- schedule
    def multiplier(self, step: int) -> float:
        """Learning-rate factor after ``step`` optimizer steps under the current plan."""
        if step < self.warmup_steps:
            return step / self.warmup_steps
        return max(0.0, (self.planned_steps - step) / max(1, self.planned_steps - self.warmup_steps))

    def _set_plan(self, args: TrainingArguments, state: TrainerState, planned_steps: int) -> None:
        # state.max_steps stays the Trainer's upper bound: the default flow callback, which runs before this
        # one, must never stop the run on an earlier plan. Intervals given as fractions follow the plan.
        self.planned_steps = min(planned_steps, self._max_steps)
        self.warmup_steps = args.get_warmup_steps(self.planned_steps)
        state.compute_steps(args, self.planned_steps)

    def _replan(self, args: TrainingArguments, state: TrainerState) -> None:
        step = state.global_step
        if self._speed_anchor is None:  # just after the first step, which pays for warm-up allocations
            self._speed_anchor = (step, self.training_seconds)
            seconds_per_step = self.training_seconds
        else:
            anchor_step, anchor_seconds = self._speed_anchor
            seconds_per_step = (self.training_seconds - anchor_seconds) / max(1, step - anchor_step)
        remaining = max(0.0, self.budget_seconds - self.training_seconds)
        planned = step + math.floor(remaining / max(seconds_per_step, 1e-9))
        self._set_plan(args, state, max(step, _broadcast_from_rank_zero(planned, args)))

    # -------------------------------------------------------------- events
    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        if args.lr_scheduler_type != "linear" or not hasattr(lr_scheduler, "lr_lambdas"):
            raise ValueError(
                "a time budget schedules a linear warmup and decay on the Trainer's LambdaLR; got "
                f"lr_scheduler_type={args.lr_scheduler_type!r} ({type(lr_scheduler).__name__})"
            )
        lr_scheduler.lr_lambdas = [self.multiplier] * len(lr_scheduler.lr_lambdas)
        self._max_steps = state.max_steps
        self._set_plan(args, state, state.max_steps)  # until the first step has been timed
        self.training_seconds = 0.0
        self._speed_anchor = None
        self._step_started = self.clock()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        now = self.clock()
        self.training_seconds += now - self._step_started
        self._step_started = now
        speed_measured = self._speed_anchor is not None  # a plan from the first step alone is too pessimistic
        self._replan(args, state)
        step = state.global_step
        # Only the plan, rank 0's on every rank, decides: processes must stop at the same step. Once the
        # budget is used the plan is the current step.
        if speed_measured and step >= self.planned_steps:
            self.planned_steps = step
            state.max_steps = step
            control.should_training_stop = True
            # What the default flow callback does at max_steps: evaluate and save the final model.
            if args.eval_strategy == "steps" and step % state.eval_steps != 0 and args.eval_delay <= step:
                control.should_evaluate = True
            if args.save_strategy == "steps":
                control.should_save = True
        return control

    def _pause(self) -> None:
        # Evaluation and saving run between on_step_end and these events: restart the clock after them.
        self._step_started = self.clock()

    def on_evaluate(self, args, state, control, **kwargs):
        self._pause()

    def on_save(self, args, state, control, **kwargs):
        self._pause()

    def on_train_end(self, args, state, control, **kwargs):
        state.log_history.append(
            {
                "time_budget_seconds": self.budget_seconds,
                "time_budget_training_seconds": round(self.training_seconds, 3),
                "time_budget_planned_steps": self.planned_steps,
                "step": state.global_step,
            }
        )


class WsdTimeBudgetCallback(TimeBudgetCallback):
    """:class:`TimeBudgetCallback` for a warmup-stable-decay schedule.

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


def time_budget_callback(
    budget_seconds: float,
    lr_scheduler_type: str,
    lr_scheduler_kwargs: dict | None = None,
    *,
    decay: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> TimeBudgetCallback:
    """The callback ending a time budget's learning-rate schedule at the budget: linear, or warmup-stable-decay
    (``decay``: its length, a fraction below 1 or a step count; the shape from ``lr_scheduler_kwargs``)."""
    if lr_scheduler_type == WSD:
        kwargs = lr_scheduler_kwargs or {}
        return WsdTimeBudgetCallback(
            budget_seconds,
            decay=decay if decay is not None else DEFAULT_LR_DECAY,
            decay_type=kwargs.get("decay_type", "1-sqrt"),
            min_lr_ratio=kwargs.get("min_lr_ratio", 0.0),
            clock=clock,
        )
    return TimeBudgetCallback(budget_seconds, clock=clock)


def lr_schedule_summary(
    training_args: TrainingArguments,
    *,
    time_budget: bool = False,
    decay: float | None = None,
    decay_from_checkpoint: str | None = None,
) -> str:
    """The learning-rate schedule in words, for the card and the printed configuration.

    Args:
        time_budget: the run has a time budget (the schedule is re-planned to end there).
        decay: a warmup-stable-decay run's decay length as given (a fraction below 1, or steps).
        decay_from_checkpoint: the stable-phase checkpoint a decay-only run starts from.
    """
    warmup = training_args.warmup_steps
    warmup_text = f"{warmup:g} of the steps" if 0 < warmup < 1 else f"{warmup:g} steps"
    end = " (re-planned after every step to end at the time budget)" if time_budget else ""
    kind = str(getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type))
    if kind == "linear":
        return f"linear warmup {warmup_text} + decay to 0{end}"
    if kind != WSD:
        return f"{kind}, warmup {warmup_text}"
    kwargs = training_args.lr_scheduler_kwargs or {}
    shape = kwargs.get("decay_type", "cosine")
    floor = kwargs.get("min_lr_ratio", 0)
    to = f"{floor:g}× the peak" if floor else "0"
    if decay_from_checkpoint:
        step = training_args.max_steps - kwargs["num_decay_steps"]
        return (
            f"decay phase only: from `{decay_from_checkpoint}` (step {step}, stable phase), {shape} decay over "
            f"{kwargs['num_decay_steps']} steps to {to}"
        )
    if time_budget and decay is not None:
        length = f"the last {decay:.0%} of the steps" if decay < 1 else f"the last {decay:g} steps"
    else:
        length = f"the last {kwargs['num_decay_steps']} steps"
    return f"warmup-stable-decay: warmup {warmup_text}, constant, then {shape} decay over {length} to {to}{end}"


class RowProgressCallback(TrainerCallback):
    """Keeps the sampler of a :class:`~mlm_suite.training.schedules.ScheduledRows` feature (its ``sampler``) on the
    Trainer's epoch (the per-epoch layout) and, for the stream layout, ``state.epoch`` at the passes over the data
    made (the Trainer would count the whole run as one epoch)."""

    def __init__(self, rows: Any) -> None:
        self.rows = rows

    def on_epoch_begin(self, args, state, control, **kwargs):
        sampler = self.rows.sampler
        if sampler is not None and sampler.warmup is None:
            sampler.set_epoch(math.floor(state.epoch or 0.0))

    def on_step_end(self, args, state, control, **kwargs):
        sampler = self.rows.sampler
        if sampler is not None and sampler.warmup is not None:
            state.epoch = sampler.rows_before(state.global_step) / sampler.num_rows


def rows_per_step(args: TrainingArguments) -> int:
    """Training rows per optimizer step, all processes and accumulated micro-batches together."""
    return args.train_batch_size * args.gradient_accumulation_steps * args.world_size


class StepRateCallback(TrainerCallback):
    """The steady-state optimizer steps per second of a run: what the training loop sustains once warm.

    The Trainer's ``train_steps_per_second`` divides by the whole run, start-up, compilation, evaluation and
    saving included. This one times each step from the end of the previous one (so data loading, the step and
    logging count) on the host clock, which synchronises with nothing: on a GPU the host runs ahead and is held
    back by the device, so over many steps the mean is the device-bound rate. The first ``warmup_steps``
    intervals (allocations, compilation, worker start-up) and every interval holding an evaluation or a save
    are left out. On a GPU the host waits for the device twice, where the counted steps start and where training
    stops, so that a short run's rate is the device's too, not that of the steps the host queued ahead of it.
    """

    def __init__(self, warmup_steps: int = 5, clock: Callable[[], float] = time.perf_counter) -> None:
        self.warmup_steps = warmup_steps
        self.clock = clock
        self.steps = 0
        self.seconds = 0.0
        self._last: float | None = None
        self._intervals_seen = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.steps, self.seconds, self._intervals_seen, self._last = 0, 0.0, 0, None

    def on_step_end(self, args, state, control, **kwargs):
        intervals = self._intervals_seen + (self._last is not None)
        if intervals == self.warmup_steps or control.should_training_stop:  # the ends of the counted steps
            _wait_for_the_device(args.device)
        now = self.clock()
        if self._last is not None:
            self._intervals_seen += 1
            if self._intervals_seen > self.warmup_steps:
                self.steps += 1
                self.seconds += now - self._last
        self._last = now

    def _skip_interval(self, args, state, control, **kwargs):
        self._last = None  # evaluation or saving ran after the last step: the next interval would hold it

    on_evaluate = on_save = _skip_interval

    def steps_per_second(self) -> float | None:
        """The steady rate, or ``None`` when the run was too short to measure one."""
        return self.steps / self.seconds if self.steps and self.seconds > 0 else None


def _wait_for_the_device(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _broadcast_from_rank_zero(value: int, args: TrainingArguments) -> int:
    """Rank 0's ``value`` on every rank (processes time differently; they must stop at the same step)."""
    if args.world_size <= 1 or not torch.distributed.is_initialized():
        return value
    tensor = torch.tensor([value], dtype=torch.long, device=args.device)
    torch.distributed.broadcast(tensor, src=0)
    return int(tensor.item())


def early_stopping_arguments(eval_strategy: str, eval_steps: float | None) -> dict[str, Any]:
    """The ``TrainingArguments`` values early stopping needs, for the code that builds the arguments: the saved model is
    the best one (``load_best_model_at_end``), a checkpoint at every evaluation (at most the best and the latest
    kept), and the callback's count of evaluations without improvement restored with a checkpoint
    (``restore_callback_states_from_checkpoint``). The score it watches (``metric_for_best_model``,
    ``greater_is_better``) is the job's.

    Raises ValueError when nothing is evaluated during training.
    """
    if eval_strategy == "no":
        raise ValueError("--early_stopping_patience needs evaluations during training: set --eval_strategy steps or epoch")
    values = {"load_best_model_at_end": True, "save_strategy": eval_strategy, "save_total_limit": 1,
              "restore_callback_states_from_checkpoint": True}
    if eval_strategy == "steps":
        values["save_steps"] = eval_steps
    return values


def early_stopping_callback(
    training_args: TrainingArguments, patience: int | None, threshold: float
) -> list[EarlyStoppingCallback]:
    """``[EarlyStoppingCallback]`` for ``patience`` evaluations without improvement of
    ``training_args.metric_for_best_model``, or ``[]`` without ``patience``.

    ``training_args`` hold the values of :func:`early_stopping_arguments`. The checkpoints are complete, so
    ``--resume_from_checkpoint`` continues an early-stopping run exactly: optimizer, scheduler and RNG states
    (pickle-free, see :mod:`mlm_suite.training.checkpoint_format`) and the trainer state, with the best score
    so far and the callback's count of evaluations without improvement.

    Raises:
        ValueError: ``patience`` below 1, a negative ``threshold``, or ``training_args`` without those values.
    """
    if patience is None:
        return []
    if patience < 1:
        raise ValueError(f"--early_stopping_patience must be at least 1, got {patience}")
    if threshold < 0:
        raise ValueError(f"--early_stopping_threshold must not be negative, got {threshold}")
    needed = early_stopping_arguments(training_args.eval_strategy, training_args.eval_steps)
    missing = [name for name, value in needed.items() if getattr(training_args, name) != value]
    if missing:
        raise ValueError(f"early stopping needs training arguments built with early_stopping_arguments: {missing} differ")
    return [EarlyStoppingCallback(early_stopping_patience=patience, early_stopping_threshold=threshold)]
