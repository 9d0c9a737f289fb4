"""Training on a process's own part of a stream (``--streaming``, :class:`~mlm_suite.data.pretraining.streaming.ProcessStream`)
and resuming it where it stopped (docs/data.md).

The stock Trainer resumes mid-epoch by drawing and skipping the batches already trained on, which a stream cannot
afford (it would read and tokenize them again) and accelerate would deal from process 0. Instead each process
trains on its own part through a stateful loader, each checkpoint saves that loader's position
(``data_state.json``, ``data_state_<rank>.json`` with several processes), and a resumed run restores it.
"""

from __future__ import annotations

import os
from typing import Any

from accelerate.data_loader import prepare_data_loader
from torch.utils.data import DataLoader
from transformers import TrainerCallback

from mlm_suite.data.pretraining.streaming import ProcessStream
from mlm_suite.training.checkpoint_format import checkpoint_folder, per_process, read_json, write_json

__all__ = ["DATA_STATE", "StreamPositionMixin", "StreamProgressCallback"]

DATA_STATE = "data_state"  # data_state.json, or data_state_<rank>.json with several processes


class StreamProgressCallback(TrainerCallback):
    """On a stream, the Trainer's epoch is the share of ``max_steps`` done; keep it so when a run resumes.

    A resumed run restores its stream's position instead of skipping batches, and the Trainer then counts
    the steps of its (single, endless) epoch from the resumed step rather than from 0.
    """

    def on_step_end(self, args, state, control, **kwargs):
        state.epoch = state.global_step / state.max_steps


class StreamPositionMixin:
    """A ``transformers.Trainer`` mix-in that trains on a :class:`ProcessStream` (``train_dataset``) and saves and
    restores its position; any other training data goes to the stock loader unchanged.

    It must come before :class:`~mlm_suite.training.checkpoint_format.PickleFreeCheckpointsMixin` in the class's
    bases: it defers the RNG states that mix-in restores.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.train_dataset, ProcessStream):
            if self.args.accelerator_config.dispatch_batches or not self.args.ignore_data_skip:
                raise ValueError(
                    "a ProcessStream is this process's own part of the data and restores its own position: train on "
                    'it with accelerator_config {"dispatch_batches": false} and ignore_data_skip=True'
                )
            self.add_callback(StreamProgressCallback())
        self._stream_rng_checkpoint: str | None = None  # RNG states a resumed stream run restores at its first step

    def get_train_dataloader(self) -> DataLoader:
        if not isinstance(self.train_dataset, ProcessStream):
            return super().get_train_dataloader()
        loader = DataLoader(
            self.train_dataset,
            batch_size=self._train_batch_size,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers,
            prefetch_factor=self.args.dataloader_prefetch_factor,
        )
        # As one process: accelerate would otherwise split the stream again across the processes. Stateful:
        # torchdata's StatefulDataLoader, whose state after each batch yielded is the stream's position
        # (transformers' AcceleratorConfig has no use_stateful_dataloader, and its Trainer saves no loader state).
        return prepare_data_loader(
            loader,
            device=self.args.device,
            num_processes=1,
            process_index=0,
            put_on_device=True,
            dispatch_batches=False,
            use_stateful_dataloader=True,
            non_blocking=self.args.accelerator_config.non_blocking,
        )

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if isinstance(self.train_dataset, ProcessStream):
            folder = checkpoint_folder(self, trial)
            os.makedirs(folder, exist_ok=True)
            position = self.callback_handler.train_dataloader.state_dict()  # after the last batch trained on
            write_json(os.path.join(folder, per_process(DATA_STATE, self.args) + ".json"), position)

    def _load_rng_state(self, checkpoint: str | None) -> None:
        if checkpoint is not None and isinstance(self.train_dataset, ProcessStream):
            # Called where a resumed run starts its first epoch, just before it creates the data iterator. The
            # stream's position is restored now (a stream run never skips batches, see __init__); the RNGs at the
            # first training step, where the uninterrupted run had them: creating the iterator draws from torch's
            # RNG (the loader's base seed), which the uninterrupted run did before its first step.
            self._load_data_state(checkpoint)
            self._stream_rng_checkpoint = checkpoint
            return None
        return super()._load_rng_state(checkpoint)

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        if self._stream_rng_checkpoint is not None:
            super()._load_rng_state(self._stream_rng_checkpoint)
            self._stream_rng_checkpoint = None
        return super().training_step(model, inputs, num_items_in_batch)

    def _load_data_state(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, per_process(DATA_STATE, self.args) + ".json")
        if not os.path.isfile(path):
            raise ValueError(f"{checkpoint} has no {os.path.basename(path)}: it was not saved by a run on this stream")
        self.callback_handler.train_dataloader.load_state_dict(read_json(path))
