"""The losses a run reports, kept honest (docs/training_semantics.md, "Steps with nothing to predict, non-finite
losses, resumed runs").

* **What a step's loss is divided by**: the masked tokens (the stock count) and, for MLM + NSP, the next-sentence
  labels of the optimizer step's micro-batches, so that MLM + NSP's loss is exactly one large batch's.
* **Steps with nothing to predict** (short rows, a low masking rate): their loss is 0, and the logged losses and
  ``train_loss`` leave them out rather than averaging zeros in.
* **A non-finite loss** stops the run with a UsageError before anything is saved from that step on. Each step's loss
  is kept on the device (:class:`~mlm_suite.training.device_tallies.StepValues`) and read only where the host waits
  anyway (logging, evaluation, saving, the end).
* **A resumed run's** ``train_loss`` covers the checkpoint's steps too: each checkpoint carries the running total.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from mlm_suite.errors import UsageError
from mlm_suite.training.checkpoint_format import TRAINER_STATE_JSON, read_json
from mlm_suite.training.device_tallies import DeviceSum, StepValues

__all__ = ["LossAccountingMixin", "TRAIN_LOSS_STATE"]

#: The running loss total a checkpoint carries (an entry of trainer_state.json's ``stateful_callbacks``), so that a
#: resumed run reports the uninterrupted run's ``train_loss``.
TRAIN_LOSS_STATE = "TrainLoss"


class LossAccountingMixin:
    """A ``transformers.Trainer`` mix-in doing the loss accounting of the module docstring. Its logged values are
    corrected by :meth:`_account_losses`, which the Trainer's ``log`` calls
    (:meth:`mlm_suite.training.trainer.JobTrainer.log`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # This train() call's step losses, on the device until a check reads them (None: not training).
        self._step_losses: StepValues | None = None
        self._losses_checked = 0  # the steps whose losses a check has read
        self._nonfinite_loss: tuple[int, float] | None = None  # the first non-finite loss's step and value
        self._empty_steps = DeviceSum(zeros=True)  # optimizer steps of this train() call with nothing to predict
        self._empty_steps_logged = 0
        self._log_window = 0  # optimizer steps since the previous logged loss
        self._resumed_loss = (0.0, 0)  # the resumed checkpoint's loss total and the steps it sums over

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """The stock ``train``, which stops with a UsageError when the loss becomes non-finite (before anything is
        saved from then on), and reports a ``train_loss`` that leaves out steps with nothing to predict and, when
        resumed, also covers the checkpoint's steps."""
        self._step_losses = StepValues(self.args.device)
        self._losses_checked, self._nonfinite_loss = 0, None
        self._empty_steps, self._empty_steps_logged = DeviceSum(zeros=True), 0
        self._resumed_loss = (0.0, 0)
        self._first_step, self._running_loss = 0, None  # the Trainer's own names for these vary across versions
        if resume_from_checkpoint:
            state = read_json(os.path.join(resume_from_checkpoint, TRAINER_STATE_JSON))
            self._first_step = int(state.get("global_step", 0))
            record = state.get("stateful_callbacks", {}).get(TRAIN_LOSS_STATE, {}).get("attributes", {})
            self._resumed_loss = (float(record.get("loss_sum", 0.0)), int(record.get("counted_steps", 0)))
        output = super().train(resume_from_checkpoint, *args, **kwargs)
        self._refuse_nonfinite_loss()
        return output._replace(training_loss=output.metrics.get("train_loss", output.training_loss))

    # ---- what a step's loss is divided by ------------------------------------------------------
    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list, Any]:
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        learnable = self._learnable_items(batch_samples, num_items_in_batch)
        if learnable is not None:
            # A step whose batches select no token to predict (short rows, a low masking rate): its loss and
            # gradient are 0, and the logged losses and train_loss leave it out. Counted on the device.
            self._empty_steps.add(learnable)
        return batch_samples, num_items_in_batch

    def _learnable_items(self, batch_samples: list, num_items_in_batch: Any) -> Any:
        """What one optimizer step's batches give the loss to learn from (None: not counted): the masked tokens, and
        the next-sentence labels, which it counts here for :meth:`compute_loss`."""
        self._num_sentence_pairs_in_batch = None
        if batch_samples and "next_sentence_label" in batch_samples[0]:
            count = sum(batch["next_sentence_label"].ne(-100).sum() for batch in batch_samples)
            count = count.to(self.args.device)
            if self.args.average_tokens_across_devices and self.args.world_size > 1:
                count = self.accelerator.gather(count).sum()  # the Trainer sums num_items_in_batch alike
            self._num_sentence_pairs_in_batch = count
            return count if num_items_in_batch is None else count + num_items_in_batch
        return num_items_in_batch

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None) -> Any:
        count = getattr(self, "_num_sentence_pairs_in_batch", None)
        if model.training and num_items_in_batch is not None and count is not None and "next_sentence_label" in inputs:
            inputs = {**inputs, "num_sentence_pairs_in_batch": count}
        return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

    # ---- the non-finite watch ------------------------------------------------------------------
    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._watch_loss(loss)
        return loss

    def _watch_loss(self, loss: torch.Tensor) -> None:
        """Keep the loss as its step's on the device (no kernel, no synchronisation), for a check where the host waits
        anyway: a step's total is non-finite when one of its micro-batches' losses is."""
        if self._step_losses is not None:
            self._step_losses.add(self.state.global_step - self._first_step, loss.detach())

    def _refuse_nonfinite_loss(self) -> None:
        """Raise UsageError if this process's training loss was non-finite (with several processes, the launcher then
        stops the others: no collective here, whose work could outlive the run)."""
        if self._step_losses is None:
            return
        if self._nonfinite_loss is None:
            done = self.state.global_step - self._first_step
            unread = self._step_losses.read(self._losses_checked, done)
            first = next((index for index, loss in enumerate(unread) if not math.isfinite(loss)), None)
            if first is not None:
                self._nonfinite_loss = (self._first_step + self._losses_checked + first + 1, unread[first])
            self._losses_checked = done
        if self._nonfinite_loss is not None:
            step, loss = self._nonfinite_loss
            raise UsageError(
                f"training stopped at step {int(step)}: the loss became {loss} (not finite), so the weights are no "
                "longer usable and none were saved from that step on (earlier checkpoints are intact): lower "
                "--learning_rate, or check the training data for extreme values"
            )

    def _maybe_log_save_evaluate(self, *args: Any, **kwargs: Any) -> None:
        self._running_loss = args[0] if args else kwargs["tr_loss"]  # the steps' loss sum since the last log
        if self.control.should_log or self.control.should_save or self.control.should_evaluate:
            self._refuse_nonfinite_loss()  # the host waits for the device here anyway
        self._log_window = self.state.global_step - self._globalstep_last_logged
        return super()._maybe_log_save_evaluate(*args, **kwargs)

    # ---- what is logged and saved --------------------------------------------------------------
    def _loss_total(self) -> tuple[float, int]:
        """The sum of the step losses trained so far (the resumed checkpoint's included) and the steps it covers."""
        loss_sum, counted = self._resumed_loss
        unlogged = float(self._running_loss.item()) if self._running_loss is not None else 0.0
        steps = self.state.global_step - self._first_step - int(self._empty_steps.value())
        return loss_sum + self._total_loss_scalar + unlogged, counted + steps

    def _account_losses(self, logs: dict[str, float]) -> None:
        """Correct a log entry's losses: the end-of-training ``train_loss`` (every step's, the resumed checkpoint's
        included, steps with nothing to predict left out), and a logged ``loss`` for the steps with nothing to predict
        since the previous log (removed when no step since predicted anything)."""
        if "train_runtime" in logs:  # the end-of-training metrics: _total_loss_scalar holds every step now
            self._refuse_nonfinite_loss()
            loss_sum, counted = self._resumed_loss
            steps = self.state.global_step - self._first_step - int(self._empty_steps.value())
            logs["train_loss"] = (loss_sum + self._total_loss_scalar) / max(counted + steps, 0.001)
        elif "loss" in logs:
            empty = int(self._empty_steps.value()) - self._empty_steps_logged
            self._empty_steps_logged += empty
            if empty:
                counted = self._log_window - empty
                if counted > 0:
                    logs["loss"] = logs["loss"] * self._log_window / counted
                else:
                    del logs["loss"]  # nothing was predicted since the last log

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        self._refuse_nonfinite_loss()
        loss_sum, counted = self._loss_total()
        self.state.stateful_callbacks[TRAIN_LOSS_STATE] = {
            "args": {}, "attributes": {"loss_sum": loss_sum, "counted_steps": counted}
        }
        super()._save_checkpoint(model, trial)
