"""The jobs' ``Trainer``: :class:`JobTrainer`, the one subclass of ``transformers.Trainer``, and the adapter between
it and the features a job hands it (docs/trainer.md).

Each Trainer hook mlm_suite needs is overridden once, here, and runs the job's features in the job's order through
the protocol of :mod:`mlm_suite.training.features`; every private attribute of the Trainer that mlm_suite reads is
read here, in one place, and ``tests/training/test_trainer.py`` names each one it reads, so that a transformers
release that renames one fails by name. What every job's training has is the adapter's own: the pickle-free
checkpoint format (:class:`~mlm_suite.training.checkpoint_format.CheckpointFormat`), resuming only from a whole
checkpoint that fits the run and writing only whole ones (:mod:`~mlm_suite.training.resuming`), results and a card
written whole (:mod:`~mlm_suite.training.job_outputs`), evaluation batches of their own collator, and refusing FSDP on
CPU processes.

The features a job passes (``features=``; default :func:`standard_features`) are plain objects:

* :mod:`~mlm_suite.training.loss_accounting`: :class:`NspCounting`, :class:`LossWatch`, :class:`ResumedLoss`;
* :mod:`~mlm_suite.training.throughput`: :class:`Throughput`;
* :mod:`~mlm_suite.training.stream_position`: :class:`StreamPosition`;
* :mod:`~mlm_suite.training.schedules`: :class:`ScheduledRows`;
* :mod:`~mlm_suite.training.pretraining`: :class:`HeadWarmup`;
* :mod:`~mlm_suite.training.retrieval`: :class:`GradientCaching`, :class:`EmbeddingPrediction`;
* :mod:`~mlm_suite.training.job_outputs`: :class:`KeptPredictions`.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import shutil
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import transformers
from transformers import TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, TrainOutput, get_last_checkpoint
from transformers.utils import is_sagemaker_mp_enabled, is_torch_xla_available

from mlm_suite.cards import JobCard
from mlm_suite.errors import WriteError, writing
from mlm_suite.model_files import staged_model_folder
from mlm_suite.training.checkpoint_format import TRAINER_STATE_JSON, CheckpointFormat, read_json, training_arguments_as_json
from mlm_suite.training.features import LoaderRequest, Progress, Run, TrainerFeature
from mlm_suite.training.job_outputs import ModelCardCallback, write_card, written_whole
from mlm_suite.training.loss_accounting import LossWatch, NspCounting, ResumedLoss
from mlm_suite.training.resuming import (
    DATA_FLAGS_STATE, check_past_the_end, check_resumable_checkpoint, finished_run, missing_weights, recorded_data,
)  # fmt: skip
from mlm_suite.training.throughput import Throughput, flops_per_token
from mlm_suite.training.worker_batches import OneBufferCollator

__all__ = ["JobTrainer", "cache_accelerate_package_probe", "refuse_fsdp_on_cpu", "standard_features"]

Feature = TypeVar("Feature", bound=TrainerFeature)


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


def standard_features(mfu: bool = False) -> tuple[TrainerFeature, ...]:
    """What every job's training has: the next-sentence labels counted for an MLM + NSP loss, the losses it reports
    kept honest (non-finite ones stop it; ``train_loss`` over a resume, without the steps with nothing to predict),
    and the tokens per second (with ``mfu``, the model FLOPs utilisation)."""
    return NspCounting(), LossWatch(), ResumedLoss(), Throughput(mfu=mfu)


class JobTrainer(transformers.Trainer):
    """The jobs' ``Trainer``: the stock one, with ``features`` (the job's, in order; default :func:`standard_features`)
    run at the hooks below.

    Keyword arguments beyond the stock ones: ``features`` and ``eval_data_collator``, which collates evaluation and
    prediction batches instead of ``data_collator`` (which then collates training batches only). With loader workers,
    both are wrapped in :class:`~mlm_suite.training.worker_batches.OneBufferCollator`, so that a worker's batch reaches
    this process in one transfer.
    """

    def __init__(self, *args: Any, features: Sequence[TrainerFeature] | None = None, eval_data_collator: Any = None,
                 **kwargs: Any) -> None:
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        model = kwargs.get("model", args[0] if args else None)
        self.features: tuple[TrainerFeature, ...] = tuple(standard_features() if features is None else features)
        self.checkpoint_format = CheckpointFormat()
        self.model_card = ModelCardCallback()
        self._checked_checkpoint: str | None = None
        if training_args is not None:  # before the Trainer creates anything (the output folder included)
            refuse_fsdp_on_cpu(training_args)
            self._check_checkpoint(training_args.resume_from_checkpoint, model, training_args)
        cache_accelerate_package_probe()
        super().__init__(*args, **kwargs)
        for callback in [callback for feature in self.features for callback in feature.attach(self.args)]:
            self.add_callback(callback)
        self.add_callback(self.model_card)
        if self.args.dataloader_num_workers > 0:  # the workers' batches reach this process as one buffer each
            self.data_collator = OneBufferCollator(self.data_collator)
            if eval_data_collator is not None:
                eval_data_collator = OneBufferCollator(eval_data_collator)
        self.eval_data_collator = eval_data_collator
        self._parameters_per_token: int | None = None
        self._running_loss: Any = None  # the Trainer's loss sum since the last log (a device tensor)
        self._log_window = 0
        self._deferred_rng: str | None = None

    def feature(self, kind: type[Feature]) -> Feature | None:
        """The job's feature of class ``kind`` (the first), or None."""
        return next((feature for feature in self.features if isinstance(feature, kind)), None)

    # ---- the Trainer's own counters, read here only ------------------------------------------------
    def progress(self) -> Progress:
        """Where training stands: ``state.global_step``, and the loss sums the Trainer keeps in ``_total_loss_scalar``
        (the logged steps') and in the running ``tr_loss`` tensor (since the last log)."""
        running = self._running_loss
        return Progress(
            step=self.state.global_step,
            loss_sum=getattr(self, "_total_loss_scalar", 0.0),
            log_window=self._log_window,
            running_loss=(lambda: float(running.item())) if running is not None else (lambda: 0.0),
        )

    def parallelism(self) -> dict[str, Any]:
        """How the checkpoint states are held: ``plain`` (single device or DDP: plain tensors and numbers) and
        ``fsdp2_model`` (the wrapped model when FSDP2 saves full state dicts, else None), for
        :class:`~mlm_suite.training.checkpoint_format.CheckpointFormat`."""
        plugin = getattr(self.accelerator.state, "fsdp_plugin", None) if self.is_fsdp_enabled else None
        fsdp2 = plugin is not None and plugin.fsdp_version == 2 and "FULL_STATE_DICT" in str(plugin.state_dict_type)
        plain = not (self.is_deepspeed_enabled or self.is_fsdp_enabled or is_torch_xla_available()
                     or is_sagemaker_mp_enabled())
        return {"plain": plain, "fsdp2_model": self.model_wrapped if fsdp2 else None}

    def checkpoint_folder(self, trial: Any) -> str:
        """The folder the Trainer saves the checkpoint of its current step to (``<output_dir>/checkpoint-<step>``)."""
        return os.path.join(self._get_output_dir(trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")

    def prepare_inputs(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """A batch moved to the device as the Trainer moves it (for a feature's own step)."""
        return self._prepare_inputs(inputs)

    # ---- a train() call ----------------------------------------------------------------------------
    def _check_checkpoint(self, checkpoint: Any, model: Any, args: TrainingArguments) -> None:
        """Resume only from a whole checkpoint that fits the run and is not past its end
        (:mod:`mlm_suite.training.resuming`), checked once; what it was trained on, the job checks
        (:func:`~mlm_suite.training.resuming.check_resumed_run`) before it writes anything."""
        if isinstance(checkpoint, (str, os.PathLike)) and os.path.isdir(checkpoint) and model is not None:
            if str(checkpoint) != self._checked_checkpoint:
                check_resumable_checkpoint(checkpoint, model)
                check_past_the_end(checkpoint, args)
                self._checked_checkpoint = str(checkpoint)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """The stock ``train``, from a checkpoint that passes the checks, with the features started first and ended
        last; ``train_loss`` as :class:`~mlm_suite.training.loss_accounting.ResumedLoss` counts it. A checkpoint at the
        run's end trains nothing (:meth:`_finished_run`), where the stock loop would train one step more."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
        self._check_checkpoint(resume_from_checkpoint, self.model, self.args)
        state = read_json(os.path.join(resume_from_checkpoint, TRAINER_STATE_JSON)) if resume_from_checkpoint else {}
        run = Run(self.args, self.model, resume_from_checkpoint or None, state, self.accelerator.gather)
        for feature in self.features:
            feature.start(run)
        self._running_loss, self._deferred_rng = None, None
        if resume_from_checkpoint and finished_run(state, self.args):
            output = self._finished_run(resume_from_checkpoint)
        else:
            output = super().train(resume_from_checkpoint, *args, **kwargs)
        for feature in self.features:
            feature.end()
        return output._replace(training_loss=output.metrics.get("train_loss", output.training_loss))

    def _finished_run(self, checkpoint: str) -> TrainOutput:
        """A run resumed at its last step: the checkpoint's weights and state (the best model's weights when the run
        keeps the best), as the run that saved it ended, and end-of-training metrics of no step trained (its
        ``train_loss`` is the whole run's)."""
        self._load_from_checkpoint(checkpoint)
        self.state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_JSON))
        best = self.state.best_model_checkpoint
        if self.args.load_best_model_at_end and best is not None and os.path.isdir(best):
            self._load_best_model()
        metrics = {"train_runtime": 0.0, "train_samples_per_second": 0.0, "train_steps_per_second": 0.0,
                   "total_flos": self.state.total_flos, "train_loss": 0.0}
        self.log(metrics)  # the features count train_loss (the checkpoint's record of every step) and the rates
        return TrainOutput(self.state.global_step, metrics["train_loss"], metrics)

    # ---- batches -----------------------------------------------------------------------------------
    def get_train_dataloader(self) -> Any:
        request = LoaderRequest(self.train_dataset, self._train_batch_size, self.data_collator, self.args,
                                lambda: self.state.max_steps, self._model_columns)
        for feature in self.features:
            loader = feature.train_dataloader(request)
            if loader is not None:
                return loader
        return super().get_train_dataloader()

    def _model_columns(self, dataset: Any) -> Any:
        if hasattr(dataset, "column_names"):
            return self._remove_unused_columns(dataset, description="training")
        return dataset

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

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list, Any]:
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        learnable = num_items_in_batch  # the step's learnable items, extended by the features that count more
        for feature in self.features:
            learnable = feature.batches(batch_samples, learnable)
        return batch_samples, num_items_in_batch

    # ---- the step ----------------------------------------------------------------------------------
    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        if model.training:
            for feature in self.features:
                inputs = feature.loss_inputs(inputs, num_items_in_batch)
        return super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        if self._deferred_rng is not None:  # a feature restored its data's position at the epoch's start
            self._restore_rng(self._deferred_rng)
            self._deferred_rng = None
        step = self.state.global_step
        for feature in self.features:
            loss = feature.training_step(self, model, inputs, num_items_in_batch)
            if loss is not None:
                break
        else:
            loss = super().training_step(model, inputs, num_items_in_batch)
        for feature in self.features:
            feature.after_backward(self.model, step, loss)
        return loss

    def floating_point_ops(self, inputs: dict[str, Any]) -> int:
        """The stock count (6 × the non-embedding parameters × the main input's tokens, padding included), the
        parameters counted once: the stock Trainer walks every module and parameter at every step to count them,
        milliseconds of host time per step."""
        main_input = getattr(self.model, "main_input_name", "input_ids")
        if main_input not in inputs:
            return 0
        if self._parameters_per_token is None:
            self._parameters_per_token = flops_per_token(self.model)
        return inputs[main_input].numel() * self._parameters_per_token

    # ---- logs --------------------------------------------------------------------------------------
    def _maybe_log_save_evaluate(self, *args: Any, **kwargs: Any) -> None:
        self._running_loss = args[0] if args else kwargs["tr_loss"]  # the steps' loss sum since the last log
        if self.control.should_log or self.control.should_save or self.control.should_evaluate:
            for feature in self.features:  # the host waits for the device here anyway
                feature.synchronised()
        self._log_window = self.state.global_step - self._globalstep_last_logged
        return super()._maybe_log_save_evaluate(*args, **kwargs)

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        if "train_runtime" in logs:  # the end-of-training metrics
            for feature in self.features:
                feature.synchronised()
        progress = self.progress()
        for feature in self.features:
            logs.update(feature.log_values(logs, progress))
        super().log(logs, *args, **kwargs)

    # ---- checkpoints -------------------------------------------------------------------------------
    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """The stock save, whole or not at all: the features' states recorded in ``trainer_state.json`` with the run's
        data flags (``args.data_flags``: :data:`mlm_suite.jobs.common.arguments.DATA_FLAGS`), and a checkpoint cut short by
        a write failure removed, so that the next run resumes from the last whole one (the earlier checkpoints are
        intact: the rotation runs after a save only)."""
        for feature in self.features:
            feature.synchronised()
        folder = self.checkpoint_folder(trial)
        progress = self.progress()
        data = recorded_data(getattr(self.args, "data_flags", {}))
        self.state.stateful_callbacks[DATA_FLAGS_STATE] = {"args": {}, "attributes": data}
        try:
            with writing(folder):
                for feature in self.features:
                    self.state.stateful_callbacks.update(feature.checkpoint(folder, progress))
                super()._save_checkpoint(model, trial)
        except WriteError:
            if self.args.should_save:  # the process that writes the checkpoint's model removes it
                shutil.rmtree(folder, ignore_errors=True)
            raise

    def _load_rng_state(self, checkpoint: str | None) -> None:
        if checkpoint is not None and any([feature.restore(checkpoint) for feature in self.features]):
            self._deferred_rng = checkpoint  # at the first training step
            return None
        return self._restore_rng(checkpoint)

    def _restore_rng(self, checkpoint: str | None) -> None:
        if not self.checkpoint_format.load_rng(checkpoint, self.args):
            super()._load_rng_state(checkpoint)

    def _save_rng_state(self, output_dir: str) -> None:
        if not self.checkpoint_format.save_rng(output_dir, self.args):
            super()._save_rng_state(output_dir)

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        if not self.checkpoint_format.save_optimizer(output_dir, self.optimizer, self.lr_scheduler,
                                                     should_save=self.args.should_save, **self.parallelism()):
            super()._save_optimizer_and_scheduler(output_dir)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        fsdp2_model = self.parallelism()["fsdp2_model"]
        if not self.checkpoint_format.load_optimizer(checkpoint, self.optimizer, self.lr_scheduler,
                                                     fsdp2_model=fsdp2_model):
            super()._load_optimizer_and_scheduler(checkpoint)

    def _save_scaler(self, output_dir: str) -> None:
        scaler = getattr(self.accelerator, "scaler", None)
        if not self.checkpoint_format.save_scaler(output_dir, scaler, should_save=self.args.should_save):
            super()._save_scaler(output_dir)

    def _load_scaler(self, checkpoint: str | None) -> None:
        if not self.checkpoint_format.load_scaler(checkpoint, getattr(self.accelerator, "scaler", None)):
            super()._load_scaler(checkpoint)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        fsdp2 = self.parallelism()["fsdp2_model"] is not None and model is not None
        stock_fsdp = glob.glob(os.path.join(resume_from_checkpoint, "pytorch_model_fsdp*"))  # an FSDP1 checkpoint
        if not (fsdp2 and not stock_fsdp and self.checkpoint_format.load_model(resume_from_checkpoint, model)):
            super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _load_best_model(self) -> None:
        fsdp2_model = self.parallelism()["fsdp2_model"]
        if not (fsdp2_model is not None and self.checkpoint_format.load_model(self.state.best_model_checkpoint, fsdp2_model)):
            super()._load_best_model()

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        # The stock check knows a tied weight only through _keys_to_ignore_on_save: it would report the MLM decoder,
        # saved once under the word embeddings' name, as missing from every checkpoint. Untied ones are reported.
        state = self.model.state_dict()
        loaded = [key for key in state if key not in load_result.missing_keys]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing_weights(state, loaded)))

    # ---- model folders -----------------------------------------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """The stock save, staged (:func:`~mlm_suite.model_files.staged_model_folder`): a checkpoint's or the final
        model's folder never holds a ``config.json`` without its weights, and a write failure names the folder; the
        arguments written as JSON, not pickled."""
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        with training_arguments_as_json():
            if not self.args.should_save:  # a process that only joins the gathers of a model sharded at load time
                return super()._save(output_dir, state_dict=state_dict)
            with staged_model_folder(output_dir) as staging:
                super()._save(str(staging), state_dict=state_dict)

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        with training_arguments_as_json():
            super()._push_from_checkpoint(checkpoint_folder)

    # ---- evaluation and prediction -----------------------------------------------------------------
    def evaluate(self, eval_dataset: Any = None, ignore_keys: list[str] | None = None,
                 metric_key_prefix: str = "eval") -> dict[str, float]:
        with self._evaluating(eval_dataset, self.eval_dataset) as dataset:
            return super().evaluate(dataset, ignore_keys, metric_key_prefix)

    def predict(self, test_dataset: Any, ignore_keys: list[str] | None = None, metric_key_prefix: str = "test") -> Any:
        with self._evaluating(test_dataset, test_dataset) as dataset:
            return super().predict(dataset, ignore_keys, metric_key_prefix)

    @contextlib.contextmanager
    def _evaluating(self, given: Any, default: Any) -> Iterator[Any]:
        """``given`` (the dataset argument, None for the Trainer's own), or the dataset a feature makes of it."""
        with contextlib.ExitStack() as stack:
            dataset = default if given is None else given
            for feature in self.features:
                dataset = stack.enter_context(feature.evaluating(dataset))
            yield given if dataset is (default if given is None else given) else dataset

    def prediction_step(self, model: Any, inputs: dict[str, Any], prediction_loss_only: bool,
                        ignore_keys: list[str] | None = None) -> Any:
        for feature in self.features:
            predicted = feature.prediction_step(self, model, inputs)
            if predicted is not None:
                return predicted
        return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)

    def evaluation_loop(self, dataloader: Any, description: str, prediction_loss_only: bool | None = None,
                        ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval") -> Any:
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        for feature in self.features:
            feature.after_evaluation(metric_key_prefix, output.predictions, output.label_ids)
        return output

    # ---- results, state and the model card ---------------------------------------------------------
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        # The stock save_model also pushes (with a card generated by the Trainer) when --push_to_hub is
        # set; the jobs push once, from publish(), when the folder is complete.
        super().save_model(output_dir, _internal_call=True)

    def save_metrics(self, split: str, metrics: dict[str, Any], combined: bool = True) -> None:
        files = [os.path.join(self.args.output_dir, name) for name in (f"{split}_results.json", "all_results.json")]
        with written_whole(self.args.output_dir, *files):
            super().save_metrics(split, metrics, combined=combined)

    def save_state(self) -> None:
        path = os.path.join(self.args.output_dir, TRAINER_STATE_JSON)
        with written_whole(path, path):
            super().save_state()

    def card_model_id(self) -> str:
        """What the card's snippet passes to ``from_pretrained``: the repository ``push_to_hub`` uploads to
        (``<user>/<name>``, known once the Trainer created it), else ``--hub_model_id`` as given, else the output
        folder as given on the command line."""
        return getattr(self, "hub_model_id", None) or self.args.hub_model_id or str(self.args.output_dir)

    def create_model_card(self, model_name: str | None = None, **kwargs: Any) -> None:
        """Write the card :meth:`publish` handed over; ``kwargs`` are the stock method's (``license``, ``tags``,
        ``language``, ``finetuned_from``, ``tasks``, ``dataset_tags``, ``dataset``, ``dataset_args``, as
        ``push_to_hub(**kwargs)`` passes them on) and update its metadata (:func:`mlm_suite.cards.update_card_data`)."""
        if self.is_world_process_zero():
            self.model_card.write(self.args.output_dir, model_name=model_name, model_id=self.card_model_id(), **kwargs)

    @staticmethod
    def write_card(output_dir: str | os.PathLike, card: JobCard, **kwargs: Any) -> Any:
        """:func:`~mlm_suite.training.job_outputs.write_card`, for a folder no Trainer wrote (``mlm-suite seeds``)."""
        return write_card(output_dir, card, **kwargs)

    def publish(self, card: JobCard) -> None:
        """Write ``card`` as the model card; with ``--push_to_hub``, then upload the output folder (every process
        calls this, last: ``push_to_hub`` saves the model again on all of them and uploads what the folder holds)."""
        self.model_card.hand_over(card)
        if self.args.push_to_hub:
            self.push_to_hub()  # saves the model again, writes the card (create_model_card), uploads the folder
        else:
            self.create_model_card()
