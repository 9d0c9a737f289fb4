"""The protocol between the jobs' Trainer and the features it runs (docs/trainer.md).

A feature is a plain object, one concern each (the losses a run reports, a stream's position, the tokens per
second, ...). :class:`~mlm_suite.training.trainer.JobTrainer`, the one ``transformers.Trainer`` subclass, calls the
features a job hands it, in the job's order, at the points below; each point is a method that does nothing here, so
a feature defines only those it acts at. A feature is given what it needs as arguments (:class:`Run`,
:class:`Progress`, :class:`LoaderRequest`, a :class:`StepContext`), never the Trainer: it is tested without one.

The points, in the order a run meets them:

* :meth:`TrainerFeature.attach`: the Trainer is built: check its arguments, return the callbacks the feature needs;
* :meth:`~TrainerFeature.start`: a ``train()`` call begins, maybe from a checkpoint;
* :meth:`~TrainerFeature.train_dataloader`: the training loader, when the feature deals the batches itself;
* :meth:`~TrainerFeature.restore`: a resumed run's first epoch begins (the checkpoint's own state);
* :meth:`~TrainerFeature.batches`: an optimizer step's micro-batches were fetched;
* :meth:`~TrainerFeature.loss_inputs`: a training micro-batch goes to the model's loss;
* :meth:`~TrainerFeature.training_step`: a micro-batch's forward and backward, when the feature does them itself;
* :meth:`~TrainerFeature.after_backward`: a micro-batch's backward is done, before clipping and the optimizer step;
* :meth:`~TrainerFeature.synchronised`: the host waits for the device anyway (a log, evaluation or save is due);
* :meth:`~TrainerFeature.log_values`: a log entry is written;
* :meth:`~TrainerFeature.checkpoint`: a checkpoint is written;
* :meth:`~TrainerFeature.evaluating`, :meth:`~TrainerFeature.prediction_step`, :meth:`~TrainerFeature.after_evaluation`:
  an evaluation or prediction;
* :meth:`~TrainerFeature.end`: the ``train()`` call returns.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from transformers import TrainerCallback, TrainingArguments

__all__ = ["LoaderRequest", "Progress", "Run", "StepContext", "TrainerFeature"]


@dataclass(frozen=True)
class Run:
    """What a ``train()`` call starts from."""

    args: TrainingArguments
    model: torch.nn.Module  # unwrapped
    checkpoint: str | None = None  # the checkpoint it resumes, or None
    state: Mapping[str, Any] = field(default_factory=dict)  # that checkpoint's trainer_state.json ({} without one)
    gather: Callable[[torch.Tensor], torch.Tensor] = lambda tensor: tensor  # every process's values (accelerate's gather)

    @property
    def first_step(self) -> int:
        """The optimizer step the call starts after: the checkpoint's, else 0."""
        return int(self.state.get("global_step", 0))


@dataclass(frozen=True)
class Progress:
    """Where training stands, read off the Trainer's own counters."""

    step: int  # optimizer steps done (``state.global_step``)
    loss_sum: float = 0.0  # the step losses summed over the steps logged so far
    log_window: int = 0  # the optimizer steps a training log entry covers
    running_loss: Callable[[], float] = lambda: 0.0  # the step losses since the last log (reading it waits for the device)


@dataclass(frozen=True)
class LoaderRequest:
    """What a training loader is built from: the Trainer's dataset, its micro-batch size per device, collator and
    arguments, the run's planned steps (known once training starts), and the Trainer's way of dropping the columns of
    a ``datasets.Dataset`` the model does not take."""

    dataset: Any
    batch_size: int
    collate_fn: Callable
    args: TrainingArguments
    max_steps: Callable[[], int]
    model_columns: Callable[[Any], Any] = lambda dataset: dataset


class StepContext(Protocol):
    """What a feature doing a step itself uses of the Trainer (:meth:`TrainerFeature.training_step`)."""

    args: TrainingArguments
    accelerator: Any
    current_gradient_accumulation_steps: int

    def prepare_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]: ...

    def compute_loss_context_manager(self) -> contextlib.AbstractContextManager: ...


class TrainerFeature:
    """One concern of a job's training, run by :class:`~mlm_suite.training.trainer.JobTrainer` at the points of the
    module docstring; every method does nothing here."""

    def attach(self, args: TrainingArguments) -> list[TrainerCallback]:
        """The Trainer is built with ``args``: refuse what the feature cannot work with (ValueError), and return the
        callbacks it needs."""
        return []

    def start(self, run: Run) -> None:
        """A ``train()`` call begins: reset what one call counts; a resumed one reads the checkpoint's state."""

    def train_dataloader(self, request: LoaderRequest) -> Any:
        """The training loader, when the feature deals the batches; None leaves it to the next feature or the Trainer."""
        return None

    def restore(self, checkpoint: str) -> bool:
        """A resumed run's first epoch begins: restore what the feature saved in ``checkpoint``. True: the random
        number generators are restored at the first training step instead of now."""
        return False

    def batches(self, batches: list[dict[str, Any]], num_items: Any) -> Any:
        """An optimizer step's micro-batches, and what the loss is divided by (the Trainer's ``num_items_in_batch``);
        returns that divisor, changed or not (the next feature gets what this one returns)."""
        return num_items

    def loss_inputs(self, inputs: dict[str, Any], num_items: Any) -> dict[str, Any]:
        """A training micro-batch on its way to the model's loss: returns its inputs, extended or not."""
        return inputs

    def training_step(self, step: StepContext, model: torch.nn.Module, inputs: dict[str, Any],
                      num_items: Any) -> torch.Tensor | None:
        """A micro-batch's forward and backward done by the feature (returns the loss, detached), or None: the
        Trainer's own step."""
        return None

    def after_backward(self, model: torch.nn.Module, step: int, loss: torch.Tensor) -> None:
        """A micro-batch of optimizer step ``step`` (0-based: ``state.global_step`` before it) was back-propagated,
        with ``loss``; the gradients may still change before clipping and the optimizer step."""

    def synchronised(self) -> None:
        """The host waits for the device here anyway (a log, an evaluation or a save is due, or training ended):
        read what was kept on the device."""

    def log_values(self, logs: dict[str, Any], progress: Progress) -> dict[str, Any]:
        """Values to set in the log entry ``logs`` (which holds the earlier features' already). The end-of-training
        entry holds ``train_runtime``."""
        return {}

    def checkpoint(self, folder: str, progress: Progress) -> dict[str, dict[str, Any]]:
        """A checkpoint is written into ``folder``: the feature may write files of its own there (making it); returns
        entries for ``trainer_state.json``'s ``stateful_callbacks`` (name → ``{"args": {}, "attributes": {...}}``)."""
        return {}

    @contextlib.contextmanager
    def evaluating(self, dataset: Any) -> Iterator[Any]:
        """Around an evaluation or prediction of ``dataset``: yields the dataset the Trainer reads."""
        yield dataset

    def prediction_step(self, step: StepContext, model: torch.nn.Module,
                        inputs: dict[str, Any]) -> tuple[Any, Any, Any] | None:
        """An evaluation batch the feature predicts itself, ``(loss, predictions, label_ids)``, or None."""
        return None

    def after_evaluation(self, prefix: str, predictions: Any, label_ids: Any) -> None:
        """An evaluation or prediction (metric key ``prefix``) scored these predictions and labels (every process's)."""

    def end(self) -> None:
        """The ``train()`` call returns."""
