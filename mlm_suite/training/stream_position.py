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
from transformers import TrainerCallback, TrainingArguments

from mlm_suite.data.pretraining.streaming import ProcessStream
from mlm_suite.training.checkpoint_format import per_process, read_json, write_json
from mlm_suite.training.features import LoaderRequest, Progress, TrainerFeature

__all__ = ["DATA_STATE", "StreamPosition", "StreamProgressCallback"]

DATA_STATE = "data_state"  # data_state.json, or data_state_<rank>.json with several processes


class StreamProgressCallback(TrainerCallback):
    """On a stream, the Trainer's epoch is the share of ``max_steps`` done; keep it so when a run resumes.

    A resumed run restores its stream's position instead of skipping batches, and the Trainer then counts
    the steps of its (single, endless) epoch from the resumed step rather than from 0.
    """

    def on_step_end(self, args, state, control, **kwargs):
        state.epoch = state.global_step / state.max_steps


class StreamPosition(TrainerFeature):
    """Trains on a :class:`ProcessStream` and saves and restores its position, a feature of
    :class:`~mlm_suite.training.trainer.JobTrainer`: the training loader reads the stream as this process's own
    (:meth:`train_dataloader`), each checkpoint holds the loader's position (:meth:`checkpoint`), and a resumed run
    restores it and asks for the random number generators at its first step (:meth:`restore`). It is given to a
    Trainer whose ``train_dataset`` is the stream (any other training data goes to the stock loader)."""

    def __init__(self) -> None:
        self.loader: Any = None  # the training loader it built
        self._args: TrainingArguments | None = None

    def attach(self, args: TrainingArguments) -> list:
        if args.accelerator_config.dispatch_batches or not args.ignore_data_skip:
            raise ValueError(
                "a ProcessStream is this process's own part of the data and restores its own position: train on "
                'it with accelerator_config {"dispatch_batches": false} and ignore_data_skip=True'
            )
        self._args = args
        return [StreamProgressCallback()]

    def train_dataloader(self, request: LoaderRequest) -> Any:
        if not isinstance(request.dataset, ProcessStream):
            return None
        args = request.args
        loader = DataLoader(
            request.dataset,
            batch_size=request.batch_size,
            collate_fn=request.collate_fn,
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers,
            prefetch_factor=args.dataloader_prefetch_factor,
        )
        # As one process: accelerate would otherwise split the stream again across the processes. Stateful:
        # torchdata's StatefulDataLoader, whose state after each batch yielded is the stream's position
        # (transformers' AcceleratorConfig has no use_stateful_dataloader, and its Trainer saves no loader state).
        self.loader = prepare_data_loader(
            loader,
            device=args.device,
            num_processes=1,
            process_index=0,
            put_on_device=True,
            dispatch_batches=False,
            use_stateful_dataloader=True,
            non_blocking=args.accelerator_config.non_blocking,
        )
        return self.loader

    def checkpoint(self, folder: str, progress: Progress) -> dict[str, dict[str, Any]]:
        if self.loader is not None:
            os.makedirs(folder, exist_ok=True)
            position = self.loader.state_dict()  # after the last batch trained on
            write_json(os.path.join(folder, per_process(DATA_STATE, self._args) + ".json"), position)
        return {}

    def restore(self, checkpoint: str) -> bool:
        """Called where a resumed run starts its first epoch, just before it creates the data iterator. The stream's
        position is restored now (a stream run never skips batches: ``ignore_data_skip``); the RNGs at the first
        training step, where the uninterrupted run had them: creating the iterator draws from torch's RNG (the
        loader's base seed), which the uninterrupted run did before its first step."""
        if self.loader is None:
            return False
        path = os.path.join(checkpoint, per_process(DATA_STATE, self._args) + ".json")
        if not os.path.isfile(path):
            raise ValueError(f"{checkpoint} has no {os.path.basename(path)}: it was not saved by a run on this stream")
        self.loader.load_state_dict(read_json(path))
        return True
