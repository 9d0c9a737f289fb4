"""The losses a run reports, kept honest (docs/training_semantics.md, "Steps with nothing to predict, non-finite
losses, resumed runs"): three features of :class:`~mlm_suite.training.trainer.JobTrainer` (docs/trainer.md).

* :class:`NspCounting`: for MLM + NSP, what the next-sentence loss is divided by, the next-sentence labels of the
  optimizer step's micro-batches (of every process), so that MLM + NSP's loss is exactly one large batch's. The
  masked tokens are the Trainer's own count; the model divides each loss by its count.
* :class:`LossWatch`: a non-finite loss stops the run with a UsageError before anything is saved from that step on.
  Each step's loss is kept on the device (:class:`~mlm_suite.training.device_tallies.StepValues`) and read only where
  the host waits anyway (logging, evaluation, saving, the end).
* :class:`ResumedLoss`: ``train_loss`` and the logged losses leave out the steps with nothing to predict (short rows,
  a low masking rate: their loss is 0), and a resumed run's ``train_loss`` covers the checkpoint's steps too: each
  checkpoint carries the running total.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from mlm_suite.errors import UsageError
from mlm_suite.training.device_tallies import DeviceSum, StepValues
from mlm_suite.training.features import Progress, Run, TrainerFeature

__all__ = ["LossWatch", "NspCounting", "ResumedLoss", "TRAIN_LOSS_STATE"]

#: The running loss total a checkpoint carries (an entry of trainer_state.json's ``stateful_callbacks``), so that a
#: resumed run reports the uninterrupted run's ``train_loss``.
TRAIN_LOSS_STATE = "TrainLoss"


class NspCounting(TrainerFeature):
    """Counts an optimizer step's next-sentence labels (every process's, when the Trainer averages its token count
    across processes) and hands the count to the model's loss (``num_sentence_pairs_in_batch``); a step's learnable
    items are then its masked tokens and these labels."""

    def __init__(self) -> None:
        self._pairs: torch.Tensor | None = None  # the current optimizer step's
        self._gather = None
        self._device: torch.device | None = None
        self._across_processes = False

    def start(self, run: Run) -> None:
        self._gather, self._device = run.gather, run.args.device
        self._across_processes = run.args.average_tokens_across_devices and run.args.world_size > 1

    def batches(self, batches: list[dict[str, Any]], num_items: Any) -> Any:
        self._pairs = None
        if not batches or "next_sentence_label" not in batches[0]:
            return num_items
        count = sum(batch["next_sentence_label"].ne(-100).sum() for batch in batches).to(self._device)
        if self._across_processes:
            count = self._gather(count).sum()  # the Trainer sums num_items_in_batch alike
        self._pairs = count
        return count if num_items is None else count + num_items

    def loss_inputs(self, inputs: dict[str, Any], num_items: Any) -> dict[str, Any]:
        if num_items is not None and self._pairs is not None and "next_sentence_label" in inputs:
            return {**inputs, "num_sentence_pairs_in_batch": self._pairs}
        return inputs


class LossWatch(TrainerFeature):
    """Keeps every step's loss on the device (no kernel, no synchronisation) and stops the run with a UsageError
    once it reads a non-finite one, where the host waits anyway: before a log, an evaluation or a save, and at the end
    of training. A step's total is non-finite when one of its micro-batches' losses is."""

    def __init__(self) -> None:
        self._losses: StepValues | None = None  # this train() call's, None: not training
        self._first_step = 0
        self._checked = 0  # the steps whose losses a check has read
        self._step = 0  # the steps trained so far in this call
        self._nonfinite: tuple[int, float] | None = None  # the first non-finite loss's step and value

    def start(self, run: Run) -> None:
        self._losses = StepValues(run.args.device)
        self._first_step, self._checked, self._step, self._nonfinite = run.first_step, 0, 0, None

    def after_backward(self, model: torch.nn.Module, step: int, loss: torch.Tensor) -> None:
        if self._losses is not None:
            self._losses.add(step - self._first_step, loss.detach())
            self._step = step - self._first_step + 1

    def synchronised(self) -> None:
        """Raise UsageError if this process's training loss was non-finite (with several processes, the launcher then
        stops the others: no collective here, whose work could outlive the run)."""
        if self._losses is None:
            return
        if self._nonfinite is None:
            unread = self._losses.read(self._checked, self._step)
            first = next((index for index, loss in enumerate(unread) if not math.isfinite(loss)), None)
            if first is not None:
                self._nonfinite = (self._first_step + self._checked + first + 1, unread[first])
            self._checked = self._step
        if self._nonfinite is not None:
            step, loss = self._nonfinite
            raise UsageError(
                f"training stopped at step {int(step)}: the loss became {loss} (not finite), so the weights are no "
                "longer usable and none were saved from that step on (earlier checkpoints are intact): lower "
                "--learning_rate, or check the training data for extreme values"
            )

    def end(self) -> None:
        self.synchronised()


class ResumedLoss(TrainerFeature):
    """``train_loss`` and the logged ``loss`` over the steps that predicted something, the resumed checkpoint's
    included: a step whose batches select nothing to predict (loss 0, no gradient) is counted out, and each
    checkpoint records the running total (:data:`TRAIN_LOSS_STATE`). It reads each step's learnable items from the
    features before it (:class:`NspCounting` adds the next-sentence labels to the masked tokens)."""

    def __init__(self) -> None:
        self._empty_steps = DeviceSum(zeros=True)  # this call's optimizer steps with nothing to predict
        self._empty_steps_logged = 0
        self._first_step = 0
        self._resumed = (0.0, 0)  # the resumed checkpoint's loss total and the steps it sums over

    def start(self, run: Run) -> None:
        self._empty_steps, self._empty_steps_logged = DeviceSum(zeros=True), 0
        self._first_step = run.first_step
        record = run.state.get("stateful_callbacks", {}).get(TRAIN_LOSS_STATE, {}).get("attributes", {})
        self._resumed = (float(record.get("loss_sum", 0.0)), int(record.get("counted_steps", 0)))

    def batches(self, batches: list[dict[str, Any]], num_items: Any) -> Any:
        if num_items is not None:
            self._empty_steps.add(num_items)  # counted on the device
        return num_items

    def _counted_steps(self, step: int) -> int:
        return step - self._first_step - int(self._empty_steps.value())

    def log_values(self, logs: dict[str, Any], progress: Progress) -> dict[str, Any]:
        loss_sum, counted = self._resumed
        if "train_runtime" in logs:  # the end-of-training metrics: the Trainer's loss sum holds every step now
            return {"train_loss": (loss_sum + progress.loss_sum) / max(counted + self._counted_steps(progress.step), 0.001)}
        if "loss" not in logs:
            return {}
        empty = int(self._empty_steps.value()) - self._empty_steps_logged
        self._empty_steps_logged += empty
        if not empty:
            return {}
        predicted = progress.log_window - empty
        if predicted > 0:
            return {"loss": logs["loss"] * progress.log_window / predicted}
        del logs["loss"]  # nothing was predicted since the last log
        return {}

    def checkpoint(self, folder: str, progress: Progress) -> dict[str, dict[str, Any]]:
        loss_sum, counted = self._resumed
        total = loss_sum + progress.loss_sum + progress.running_loss()
        return {TRAIN_LOSS_STATE: {"args": {}, "attributes": {"loss_sum": total,
                                                             "counted_steps": counted + self._counted_steps(progress.step)}}}
