"""The ``Trainer`` every job trains with, :class:`JobTrainer`: ``transformers.Trainer`` and one mix-in per concern
(docs/models.md, docs/training_semantics.md).

* :mod:`~mlm_suite.training.job_outputs`: results and state written whole, kept predictions, the model card;
* :mod:`~mlm_suite.training.throughput`: FLOPs per token, real tokens per second and the MFU;
* :mod:`~mlm_suite.training.resuming`: resuming only from whole checkpoints that fit the run, writing only whole ones;
* :mod:`~mlm_suite.training.loss_accounting`: what a step's loss is divided by, steps with nothing to predict, the
  non-finite watch, ``train_loss`` across a resume;
* :mod:`~mlm_suite.training.stream_position`: training on a process's own part of a stream and resuming it;
* :mod:`~mlm_suite.training.checkpoint_format`: JSON and safetensors where the stock Trainer writes pickles.

The mix-ins override the Trainer's methods and call on (``super()``), so their order in the bases is the order in
which a method's parts run. Three orders matter: a resumed checkpoint is resolved and checked (resuming) before its
loss total is read (loss accounting); the stream position is saved inside the checkpoint that resuming writes whole;
the stream's resumed RNG states are deferred before the pickle-free ones load. Every value a log entry gets beyond
the stock ones is added by :meth:`JobTrainer.log`, the only ``log`` override (a subclass adds its own through
:meth:`JobTrainer.extra_log_values`), so their order in ``log_history`` is read in one place.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

import transformers
from transformers import TrainingArguments

from mlm_suite.training.worker_batches import OneBufferCollator
from mlm_suite.training.checkpoint_format import PickleFreeCheckpointsMixin
from mlm_suite.training.job_outputs import JobOutputsMixin
from mlm_suite.training.loss_accounting import LossAccountingMixin
from mlm_suite.training.resuming import ResumingMixin
from mlm_suite.training.stream_position import StreamPositionMixin
from mlm_suite.training.throughput import ThroughputMixin

__all__ = ["JobTrainer", "cache_accelerate_package_probe", "refuse_fsdp_on_cpu"]


def refuse_fsdp_on_cpu(args: TrainingArguments) -> None:
    """Raise a ValueError if FSDP is asked for on CPU processes, which accelerate would train with plain DDP.

    accelerate (1.15) switches to FSDP only for GPU-like distributed types, never ``MULTI_CPU``.
    """
    from_flags = getattr(args, "fsdp_plugin_args", None) is not None  # --fsdp / --fsdp_config
    requested = from_flags or os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true"  # an accelerate FSDP config
    if requested and args.device.type == "cpu":
        raise ValueError(
            f"FSDP was asked for, but accelerate runs {args.distributed_state.distributed_type.value} here: it shards "
            "models only across GPUs (or other accelerators), not CPU processes; drop --fsdp / the FSDP config"
        )


def cache_accelerate_package_probe() -> None:
    """Make accelerate ask once, not twice per optimizer step, whether ``lomo_optim`` is installed.

    ``AcceleratedOptimizer.step`` calls ``is_lomo_available()``, an ``importlib`` metadata look-up of about a
    millisecond, twice per step; what is installed does not change while a job runs.
    """
    import accelerate.optimizer

    probe = getattr(accelerate.optimizer, "is_lomo_available", None)
    if probe is not None and not hasattr(probe, "cache_info"):
        accelerate.optimizer.is_lomo_available = functools.cache(probe)


class JobTrainer(
    JobOutputsMixin,
    ThroughputMixin,
    ResumingMixin,
    LossAccountingMixin,
    StreamPositionMixin,
    PickleFreeCheckpointsMixin,
    transformers.Trainer,
):
    """The jobs' ``Trainer``: the stock one with the mix-ins of the module docstring, refusing FSDP on CPU processes.

    Keyword arguments beyond the stock ones: ``keep_predictions``
    (:class:`~mlm_suite.training.job_outputs.JobOutputsMixin`), ``peak_tflops``
    (:class:`~mlm_suite.training.throughput.ThroughputMixin`) and ``eval_data_collator``, which
    collates evaluation and prediction batches instead of ``data_collator`` (which then collates training batches
    only). With loader workers, both are wrapped in :class:`~mlm_suite.training.worker_batches.OneBufferCollator`, so
    that a worker's batch reaches this process in one transfer.
    """

    def __init__(self, *args: Any, eval_data_collator: Any = None, **kwargs: Any) -> None:
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        if training_args is not None:  # before the Trainer creates anything (the output folder included)
            refuse_fsdp_on_cpu(training_args)
        cache_accelerate_package_probe()
        super().__init__(*args, **kwargs)
        if self.args.dataloader_num_workers > 0:  # the workers' batches reach this process as one buffer each
            self.data_collator = OneBufferCollator(self.data_collator)
            if eval_data_collator is not None:
                eval_data_collator = OneBufferCollator(eval_data_collator)
        self.eval_data_collator = eval_data_collator

    # ---- batches -----------------------------------------------------------------------------
    def get_eval_dataloader(self, eval_dataset: Any = None) -> Any:
        with self._evaluation_collator():
            return super().get_eval_dataloader(eval_dataset)

    def get_test_dataloader(self, test_dataset: Any) -> Any:
        with self._evaluation_collator():
            return super().get_test_dataloader(test_dataset)

    @contextlib.contextmanager
    def _evaluation_collator(self) -> Iterator[None]:
        training_collator = self.data_collator
        if self.eval_data_collator is not None:
            self.data_collator = self.eval_data_collator
        try:
            yield
        finally:
            self.data_collator = training_collator

    # ---- logs ----------------------------------------------------------------------------------
    def extra_log_values(self, logs: dict[str, float]) -> dict[str, float]:
        """Values a subclass adds to the log entry ``logs`` (after its stock values), e.g. a training log's masking
        rate; an override extends ``super().extra_log_values(logs)``."""
        return {}

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        logs.update(self.extra_log_values(logs))
        if "train_runtime" in logs:  # the end-of-training metrics, also returned by train()
            self._add_throughput(logs)
        self._account_losses(logs)
        super().log(logs, *args, **kwargs)
