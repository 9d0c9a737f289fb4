"""The ``Trainer`` subclasses behind mlm_suite's jobs (docs/models.md, docs/training_semantics.md).

:class:`PickleFreeTrainer` writes folders and checkpoints that load without unpickling anything
(``training_args.json``, ``optimizer.safetensors`` + ``optimizer.json``, ``scheduler.json``, ``scaler.json``,
``rng_state.safetensors``; gathered FSDP2 states likewise) and resumes from them exactly; it also trains on a
process's own part of a stream (``--streaming``) and saves its position. :class:`JobTrainer` adds the job's model
card (:mod:`mlm_suite.cards`), written and pushed only by :meth:`JobTrainer.publish`, and counts next-sentence
labels per optimizer step so that MLM + NSP's loss is exactly one large batch's.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import math
import os
import random
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import transformers
from accelerate.data_loader import prepare_data_loader
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch.utils.data import DataLoader
from transformers import EvalPrediction, TrainerCallback, TrainingArguments
from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, EvalLoopOutput, get_last_checkpoint
from transformers.training_args import ParallelMode
from transformers.utils import (
    is_sagemaker_mp_enabled,
    is_torch_hpu_available,
    is_torch_mlu_available,
    is_torch_musa_available,
    is_torch_npu_available,
    is_torch_xla_available,
)

from mlm_suite.data.pretraining.streaming import ProcessStream
from mlm_suite.training.worker_batches import OneBufferCollator
from mlm_suite.cards import JobCard, TrainedModelCard, markdown_table, render_card
from mlm_suite.errors import UsageError, WriteError, writing
from mlm_suite.model_files import staged_model_folder
from mlm_suite.training.controls import StepRateCallback, rows_per_step
from mlm_suite.training.throughput import UNKNOWN, model_flops_utilisation, peak_tflops, real_tokens

TRAINING_ARGS_JSON = "training_args.json"
OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_JSON = "optimizer.json"
SCHEDULER_JSON = "scheduler.json"
SCALER_JSON = "scaler.json"
DATA_STATE = "data_state"  # data_state.json, or data_state_<rank>.json with several processes
_STOCK_TRAINING_ARGS = "training_args.bin"  # transformers.trainer.TRAINING_ARGS_NAME
TRAINER_STATE_JSON = "trainer_state.json"
MODEL_TENSORS = "model.safetensors"
MODEL_TENSORS_INDEX = "model.safetensors.index.json"
#: The running loss total a checkpoint carries (an entry of trainer_state.json's ``stateful_callbacks``), so that a
#: resumed run reports the uninterrupted run's ``train_loss``.
TRAIN_LOSS_STATE = "TrainLoss"
#: The values of the flags that decided what a checkpoint's run trained on (another entry of ``stateful_callbacks``,
#: from the job's ``args.data_flags``: :data:`mlm_suite.jobs.arguments.DATA_FLAGS`), so that a run resumed with other
#: values says so.
DATA_FLAGS_STATE = "DataFlags"

_Scalar = (bool, int, float, str, type(None))


@contextlib.contextmanager
def training_arguments_as_json() -> Iterator[None]:
    """While active, the Trainer's ``torch.save(args, ".../training_args.bin")`` writes ``training_args.json``.

    Every other ``torch.save`` call passes through unchanged.
    """
    original = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(obj, TrainingArguments) and isinstance(f, (str, os.PathLike)) and (
            os.path.basename(f) == _STOCK_TRAINING_ARGS
        ):
            Path(f).with_name(TRAINING_ARGS_JSON).write_text(obj.to_json_string(), encoding="utf-8")
            return None
        return original(obj, f, *args, **kwargs)

    torch.save = save
    try:
        yield
    finally:
        torch.save = original


@contextlib.contextmanager
def _written_whole(name: str | os.PathLike, *files: str | os.PathLike) -> Iterator[None]:
    """:func:`~mlm_suite.errors.writing` ``name``; when a write fails, ``files`` (what the block writes) are removed:
    results or a card cut short would pass for a finished run's."""
    try:
        with writing(name):
            yield
    except WriteError:
        for file in files:
            Path(file).unlink(missing_ok=True)
        raise


def _write_json(path: str | os.PathLike, value: Any) -> None:
    Path(path).write_text(json.dumps(value, indent=1) + "\n", encoding="utf-8")


def _read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _is_json(value: Any) -> bool:
    """Plain JSON data (dicts with string keys, lists, tuples, numbers, strings, None)."""
    if isinstance(value, _Scalar):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_json(item) for key, item in value.items())
    return False


def split_optimizer_state(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    """An optimizer ``state_dict`` as (tensors for safetensors, the rest as JSON data); None if it holds other objects."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entries in state_dict["state"].items():
        # Parameter numbers, or parameter names (the full state of an FSDP2 optimizer: fsdp2_optimizer_state).
        if not isinstance(index, (int, str)) or not isinstance(entries, dict):
            return None
        for name, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state/{index}/{name}"] = value.detach().cpu().contiguous()
            elif isinstance(value, _Scalar):
                scalars.setdefault(str(index), {})[name] = value
            else:
                return None
    groups = state_dict["param_groups"]
    if not _is_json(groups):
        return None
    return tensors, {"param_groups": groups, "scalar_state": scalars}


def join_optimizer_state(tensors: dict[str, torch.Tensor], data: dict[str, Any], current_groups: list[dict]) -> dict:
    """The inverse of :func:`split_optimizer_state`; tuples (Adam's ``betas``) come back as tuples."""
    state: dict[int | str, dict[str, Any]] = {}

    def parameter(index: str) -> int | str:
        return int(index) if index.isdigit() else index

    for key, value in tensors.items():
        _, index, name = key.split("/", 2)
        state.setdefault(parameter(index), {})[name] = value
    for index, entries in data["scalar_state"].items():
        state.setdefault(parameter(index), {}).update(entries)
    groups = []
    for saved, current in zip(data["param_groups"], current_groups):
        groups.append({key: tuple(value) if isinstance(current.get(key), tuple) else value for key, value in saved.items()})
    groups += data["param_groups"][len(groups) :]
    return {"state": state, "param_groups": groups}


def fsdp2_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict] | None:
    """The full (unsharded) state of an FSDP2 model's optimizer, keyed by parameter name, as (tensors, JSON data).

    A collective: every process calls it; process 0 gets the state (gathered to CPU), the others None.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    state = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return split_optimizer_state(state) if state else None


def load_fsdp2_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], data: dict[str, Any]
) -> None:
    """Shard a state saved by :func:`fsdp2_optimizer_state` into an FSDP2 model's optimizer (every process calls it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    state = join_optimizer_state(tensors, data, optimizer.state_dict()["param_groups"])
    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def load_fsdp2_model_state(model: torch.nn.Module, folder: str | os.PathLike) -> None:
    """Shard the weights ``save_pretrained`` wrote to ``folder`` (safetensors, one file or an index) into an FSDP2 model.

    Tied weights are saved once; the other name shares the parameter, so it is not missing.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    files = sorted(set(_read_json(index)["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    weights: dict[str, torch.Tensor] = {}
    for name in files:
        weights.update(load_file(folder / name))
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, strict=False))


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


def _readable(path: Path) -> None:
    """Raise UsageError unless ``path`` (a JSON or safetensors file of a checkpoint) parses."""
    try:
        if path.suffix == ".json":
            _read_json(path)
        else:
            with safe_open(str(path), framework="pt"):
                pass
    except (OSError, ValueError, SafetensorError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(
            f"{path} is damaged ({reason}): resume from another checkpoint, or start anew with --overwrite_output_dir"
        ) from error


def _tensor_shapes(folder: Path) -> dict[str, tuple[int, ...]] | None:
    """The name and shape of every weight ``save_pretrained`` wrote to ``folder`` (None: not in safetensors)."""
    index = folder / MODEL_TENSORS_INDEX
    if index.is_file():
        files = sorted({folder / name for name in _read_json(index)["weight_map"].values()})
    elif (folder / MODEL_TENSORS).is_file():
        files = [folder / MODEL_TENSORS]
    else:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        if not path.is_file():
            raise UsageError(f"{path} is missing: {index.name} names it; resume from another checkpoint")
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    return shapes


def _size_differences(model: torch.nn.Module, saved: dict[str, Any]) -> list[str]:
    """The integer configuration fields (``vocab_size``, ``hidden_size``, ...) in which ``saved`` differs from the model's."""
    config = getattr(model, "config", None)
    current = config.to_dict() if config is not None else {}
    return [
        f"{name} {current[name]} here, {value} in the checkpoint"
        for name, value in sorted(saved.items())
        if isinstance(value, int) and not isinstance(value, bool) and isinstance(current.get(name), int)
        and not isinstance(current[name], bool) and current[name] != value and "token_id" not in name
    ]


def missing_weights(state: dict[str, torch.Tensor], loaded: Iterable[str]) -> list[str]:
    """The weights of ``state`` (a model's ``state_dict``) that the ``loaded`` names leave out, but for those tied to a
    loaded one: a tied weight (the MLM decoder shares the word embeddings) is saved once, under one of its names."""
    loaded = set(loaded)
    loaded_storage = {state[key].data_ptr() for key in loaded if key in state}
    return [key for key in state if key not in loaded and state[key].data_ptr() not in loaded_storage]


def check_resumable_checkpoint(checkpoint: str | os.PathLike, model: torch.nn.Module) -> None:
    """Raise UsageError (one line naming the checkpoint and what is wrong) unless ``model`` can resume from ``checkpoint``.

    Every JSON and safetensors file of the folder must parse (a truncated or corrupt file is named), the optimizer
    and schedule states must be there (the stock loader would resume without them, silently), and the saved
    weights must be ``model``'s: the same architecture, the same weight names and shapes (another hidden size or
    vocabulary size is named by its configuration field). Checkpoints without ``model.safetensors`` (DeepSpeed,
    sharded FSDP, pickles) are left to the stock loader.
    """
    folder = Path(checkpoint)
    if not (folder / TRAINER_STATE_JSON).is_file():
        raise UsageError(
            f"checkpoint {folder} has no {TRAINER_STATE_JSON}: it is not a checkpoint-* folder written by a training "
            "run, or its save was cut short"
        )
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix in (".json", ".safetensors"):
            _readable(path)
    shapes = _tensor_shapes(folder)
    if shapes is None:
        return
    missing_state = [name for name in (OPTIMIZER_TENSORS, OPTIMIZER_JSON, SCHEDULER_JSON) if not (folder / name).is_file()]
    stock_state = all((folder / name).is_file() for name in (OPTIMIZER_NAME, SCHEDULER_NAME))
    if missing_state and not stock_state:
        # The stock loader would skip a missing state and resume with a fresh optimizer and schedule, silently.
        raise UsageError(
            f"checkpoint {folder} has no {missing_state[0]}: the optimizer and learning-rate schedule cannot be "
            "restored, and the resumed run would differ from an uninterrupted one. Resume from a complete "
            "checkpoint, or start anew with --overwrite_output_dir"
        )
    model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper
    config_file = folder / "config.json"
    saved_config = _read_json(config_file) if config_file.is_file() else {}
    architectures = saved_config.get("architectures") or []
    name = type(model).__name__
    if architectures and name not in architectures:
        raise UsageError(
            f"checkpoint {folder} holds a {architectures[0]}, but this run trains a {name}: resume from a checkpoint "
            "of the same job and model"
        )
    current = model.state_dict()
    mismatched = [key for key, shape in shapes.items() if key in current and tuple(current[key].shape) != shape]
    unexpected = [key for key in shapes if key not in current]
    missing = missing_weights(current, shapes)
    if mismatched:
        key = mismatched[0]
        differences = _size_differences(model, saved_config)
        what = "; ".join(differences) if differences else (
            f"{key} is {list(shapes[key])} in the checkpoint, {list(current[key].shape)} here"
        )
        raise UsageError(f"checkpoint {folder} does not fit this run's model: {what}")
    if missing or unexpected:
        detail = f"it lacks {', '.join(missing[:3])}" if missing else f"it has {', '.join(unexpected[:3])}, which this model has not"
        raise UsageError(f"checkpoint {folder} does not hold this run's {name}: {detail}")


def _shown(value: Any) -> str:
    """A flag's value as a command line writes it."""
    if value is None:
        return "unset"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def check_resumed_run(checkpoint: str | os.PathLike, args: TrainingArguments) -> None:
    """Refuse ``checkpoint`` when it is past the run's last step, and print one line naming the data flags that
    ``args`` (``args.data_flags``) give other values than the run that saved it (a checkpoint that records none, or a
    run that has none, says nothing).

    Raises:
        UsageError: the checkpoint's step is past ``--max_steps`` (the stock loop would still train and save a step).
    """
    state = _read_json(Path(checkpoint) / TRAINER_STATE_JSON)
    step = int(state.get("global_step", 0))
    if 0 < args.max_steps < step:
        raise UsageError(
            f"checkpoint {checkpoint} is at step {step}, already past --max_steps {args.max_steps}: give --max_steps "
            f"above {step} to train on from it, or resume from an earlier checkpoint"
        )
    saved = state.get("stateful_callbacks", {}).get(DATA_FLAGS_STATE, {}).get("attributes", {})
    current = getattr(args, "data_flags", {})
    changed = [f"--{name} {_shown(value)} (its run: {_shown(saved[name])})"
               for name, value in current.items() if name in saved and saved[name] != value]
    if changed and args.process_index == 0:
        print(f"warning: resuming {checkpoint}, saved by a run with other data flags: {', '.join(changed)}; training "
              "continues with the values given now", file=sys.stderr)


class StreamProgressCallback(TrainerCallback):
    """On a stream, the Trainer's epoch is the share of ``max_steps`` done; keep it so when a run resumes.

    A resumed run restores its stream's position instead of skipping batches, and the Trainer then counts
    the steps of its (single, endless) epoch from the resumed step rather than from 0.
    """

    def on_step_end(self, args, state, control, **kwargs):
        state.epoch = state.global_step / state.max_steps


class PickleFreeTrainer(transformers.Trainer):
    """``transformers.Trainer`` writing JSON and safetensors where the stock one writes pickles (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        model = kwargs.get("model", args[0] if args else None)
        # Checked before the Trainer creates anything (the output folder included).
        self._checked_checkpoint: str | None = None
        if training_args is not None:
            refuse_fsdp_on_cpu(training_args)
            self._check_checkpoint(training_args.resume_from_checkpoint, model, training_args)
        cache_accelerate_package_probe()
        super().__init__(*args, **kwargs)
        # This train() call's step losses, on the device until a check reads them (None: not training).
        self._step_losses: torch.Tensor | None = None
        self._losses_checked = 0  # the steps whose losses a check has read
        self._nonfinite_loss: tuple[int, float] | None = None  # the first non-finite loss's step and value
        self._empty_steps: int | torch.Tensor = 0  # optimizer steps of this train() call with nothing to predict
        self._empty_steps_logged = 0
        self._log_window = 0  # optimizer steps since the previous logged loss
        self._resumed_loss = (0.0, 0)  # the resumed checkpoint's loss total and the steps it sums over
        self._non_embedding_parameters: int | None = None
        if isinstance(self.train_dataset, ProcessStream):
            if self.args.accelerator_config.dispatch_batches or not self.args.ignore_data_skip:
                raise ValueError(
                    "a ProcessStream is this process's own part of the data and restores its own position: train on "
                    'it with accelerator_config {"dispatch_batches": false} and ignore_data_skip=True'
                )
            self.add_callback(StreamProgressCallback())
        self._stream_rng_checkpoint: str | None = None  # RNG states a resumed stream run restores at its first step

    def flops_per_token(self) -> int:
        """Training FLOPs per token: 6 × the non-embedding parameters (forward and backward), 0 for a model that
        cannot count them. The Trainer's FLOP count and the model FLOPs utilisation both use it.

        Counted once: the stock Trainer walks every module and parameter of the model at every step to count them,
        which costs milliseconds of host time per step; the count does not change during training.
        """
        if not hasattr(self.model, "num_parameters"):
            return 0
        if self._non_embedding_parameters is None:
            self._non_embedding_parameters = self.model.num_parameters(exclude_embeddings=True)
        return 6 * self._non_embedding_parameters

    def floating_point_ops(self, inputs: dict[str, Any]) -> int:
        """The stock count (:meth:`flops_per_token` × the main input's tokens, padding included)."""
        main_input = getattr(self.model, "main_input_name", "input_ids")
        if main_input not in inputs:
            return 0
        return inputs[main_input].numel() * self.flops_per_token()

    # ---- resuming, and what a run reports ---------------------------------------------------
    def _check_checkpoint(self, checkpoint: Any, model: Any, args: TrainingArguments) -> None:
        if isinstance(checkpoint, (str, os.PathLike)) and os.path.isdir(checkpoint) and model is not None:
            if str(checkpoint) != self._checked_checkpoint:
                check_resumable_checkpoint(checkpoint, model)
                check_resumed_run(checkpoint, args)
                self._checked_checkpoint = str(checkpoint)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """The stock ``train``, which refuses a checkpoint the model cannot resume from or that is past ``max_steps``
        (and names the data flags given other values than the checkpoint's run), stops with a UsageError when
        the loss becomes non-finite (before anything is saved from then on), and reports a ``train_loss`` that
        leaves out steps with nothing to predict and, when resumed, also covers the checkpoint's steps."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
        self._check_checkpoint(resume_from_checkpoint, self.model, self.args)
        self._step_losses = torch.zeros(1024, device=self.args.device)
        self._losses_checked, self._nonfinite_loss = 0, None
        self._empty_steps, self._empty_steps_logged = 0, 0
        self._resumed_loss = (0.0, 0)
        self._first_step, self._running_loss = 0, None  # the Trainer's own names for these vary across versions
        if resume_from_checkpoint:
            state = _read_json(os.path.join(resume_from_checkpoint, TRAINER_STATE_JSON))
            self._first_step = int(state.get("global_step", 0))
            record = state.get("stateful_callbacks", {}).get(TRAIN_LOSS_STATE, {}).get("attributes", {})
            self._resumed_loss = (float(record.get("loss_sum", 0.0)), int(record.get("counted_steps", 0)))
        output = super().train(resume_from_checkpoint, *args, **kwargs)
        self._refuse_nonfinite_loss()
        return output._replace(training_loss=output.metrics.get("train_loss", output.training_loss))

    def _watch_loss(self, loss: torch.Tensor) -> None:
        """Add the loss to its step's total on the device (one kernel, no synchronisation), which a check reads where
        the host waits anyway: a step's total is non-finite when one of its micro-batches' losses is."""
        if self._step_losses is None:
            return
        index = self.state.global_step - self._first_step
        if index >= len(self._step_losses):
            self._step_losses = torch.cat([self._step_losses, torch.zeros_like(self._step_losses)])
        self._step_losses[index].add_(loss.detach())  # in place: `+=` on an item would copy it back too

    def _refuse_nonfinite_loss(self) -> None:
        """Raise UsageError if this process's training loss was non-finite (with several processes, the launcher then
        stops the others: no collective here, whose work could outlive the run)."""
        if self._step_losses is None:
            return
        if self._nonfinite_loss is None:
            done = self.state.global_step - self._first_step
            unread = self._step_losses[self._losses_checked : done].tolist()
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

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list, Any]:
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        learnable = self._learnable_items(batch_samples, num_items_in_batch)
        if learnable is not None:
            # A step whose batches select no token to predict (short rows, a low masking rate): its loss and
            # gradient are 0, and the logged losses and train_loss leave it out. Counted on the device.
            self._empty_steps = self._empty_steps + (learnable == 0)
        return batch_samples, num_items_in_batch

    def _learnable_items(self, batch_samples: list, num_items_in_batch: Any) -> Any:
        """What one optimizer step's batches give the loss to learn from (None: not counted)."""
        return num_items_in_batch

    def _maybe_log_save_evaluate(self, *args: Any, **kwargs: Any) -> None:
        self._running_loss = args[0] if args else kwargs["tr_loss"]  # the steps' loss sum since the last log
        if self.control.should_log or self.control.should_save or self.control.should_evaluate:
            self._refuse_nonfinite_loss()  # the host waits for the device here anyway
        self._log_window = self.state.global_step - self._globalstep_last_logged
        return super()._maybe_log_save_evaluate(*args, **kwargs)

    def _loss_total(self) -> tuple[float, int]:
        """The sum of the step losses trained so far (the resumed checkpoint's included) and the steps it covers."""
        loss_sum, counted = self._resumed_loss
        unlogged = float(self._running_loss.item()) if self._running_loss is not None else 0.0
        steps = self.state.global_step - self._first_step - int(self._empty_steps)
        return loss_sum + self._total_loss_scalar + unlogged, counted + steps

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        if "train_runtime" in logs:  # the end-of-training metrics: _total_loss_scalar holds every step now
            self._refuse_nonfinite_loss()
            loss_sum, counted = self._resumed_loss
            steps = self.state.global_step - self._first_step - int(self._empty_steps)
            logs["train_loss"] = (loss_sum + self._total_loss_scalar) / max(counted + steps, 0.001)
        elif "loss" in logs:
            empty = int(self._empty_steps) - self._empty_steps_logged
            self._empty_steps_logged += empty
            if empty:
                counted = self._log_window - empty
                if counted > 0:
                    logs["loss"] = logs["loss"] * self._log_window / counted
                else:
                    del logs["loss"]  # nothing was predicted since the last log
        super().log(logs, *args, **kwargs)

    # ---- data ----------------------------------------------------------------------------------
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

    def _process_file(self, stem: str) -> str:
        return stem if self.args.world_size <= 1 else f"{stem}_{self.args.process_index}"

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        self._refuse_nonfinite_loss()
        loss_sum, counted = self._loss_total()
        self.state.stateful_callbacks[TRAIN_LOSS_STATE] = {
            "args": {}, "attributes": {"loss_sum": loss_sum, "counted_steps": counted}
        }
        data_flags = dict(getattr(self.args, "data_flags", {}))  # a job's (mlm_suite.jobs.arguments.data_flag_values)
        self.state.stateful_callbacks[DATA_FLAGS_STATE] = {"args": {}, "attributes": data_flags}
        folder = os.path.join(self._get_output_dir(trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        try:
            with writing(folder):
                super()._save_checkpoint(model, trial)
                if isinstance(self.train_dataset, ProcessStream):
                    os.makedirs(folder, exist_ok=True)
                    position = self.callback_handler.train_dataloader.state_dict()  # after the last batch trained on
                    _write_json(os.path.join(folder, self._process_file(DATA_STATE) + ".json"), position)
        except WriteError:
            # A checkpoint cut short goes (the resume logic would refuse it), so that the next run resumes from
            # the last whole one; the earlier checkpoints are intact (the rotation runs after a save only). The
            # process that writes the checkpoint's model removes it.
            if self.args.should_save:
                shutil.rmtree(folder, ignore_errors=True)
            raise

    def _load_data_state(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, self._process_file(DATA_STATE) + ".json")
        if not os.path.isfile(path):
            raise ValueError(f"{checkpoint} has no {os.path.basename(path)}: it was not saved by a run on this stream")
        self.callback_handler.train_dataloader.load_state_dict(_read_json(path))

    # ---- model folders, training arguments, results --------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """The stock save, staged (:func:`~mlm_suite.model_files.staged_model_folder`): a checkpoint's or the final
        model's folder never holds a ``config.json`` without its weights, and a write failure names the folder."""
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        with training_arguments_as_json():
            if not self.args.should_save:  # a process that only joins the gathers of a model sharded at load time
                return super()._save(output_dir, state_dict=state_dict)
            with staged_model_folder(output_dir) as staging:
                super()._save(str(staging), state_dict=state_dict)

    def save_metrics(self, split: str, metrics: dict[str, Any], combined: bool = True) -> None:
        files = [os.path.join(self.args.output_dir, name) for name in (f"{split}_results.json", "all_results.json")]
        with _written_whole(self.args.output_dir, *files):
            super().save_metrics(split, metrics, combined=combined)

    def save_state(self) -> None:
        path = os.path.join(self.args.output_dir, TRAINER_STATE_JSON)
        with _written_whole(path, path):
            super().save_state()

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        with training_arguments_as_json():
            super()._push_from_checkpoint(checkpoint_folder)

    # ---- checkpoint states -------------------------------------------------------------------
    def _fsdp2_full_state(self) -> bool:
        """FSDP2 saving full state dicts: checkpoints hold the gathered weights and optimizer state, pickle-free."""
        plugin = getattr(self.accelerator.state, "fsdp_plugin", None) if self.is_fsdp_enabled else None
        return plugin is not None and plugin.fsdp_version == 2 and "FULL_STATE_DICT" in str(plugin.state_dict_type)

    def _plain_checkpoints(self) -> bool:
        """Single-device or DDP training, whose states are plain tensors and numbers."""
        return not (
            self.is_deepspeed_enabled or self.is_fsdp_enabled or is_torch_xla_available() or is_sagemaker_mp_enabled()
        )

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        if self._fsdp2_full_state():
            # The weights are already in model.safetensors (save_model gathers them); the stock FSDP path would
            # pickle them again (pytorch_model_fsdp.bin) along with the optimizer (optimizer.bin).
            optimizer = fsdp2_optimizer_state(self.model_wrapped, self.optimizer)
            if self.args.should_save:
                tensors, data = optimizer
                save_file(tensors, os.path.join(output_dir, OPTIMIZER_TENSORS), metadata={"format": "pt"})
                _write_json(os.path.join(output_dir, OPTIMIZER_JSON), data)
                _write_json(os.path.join(output_dir, SCHEDULER_JSON), self.lr_scheduler.state_dict())
            return None
        if not self._plain_checkpoints():
            return super()._save_optimizer_and_scheduler(output_dir)
        if not self.args.should_save:
            return None
        optimizer = split_optimizer_state(self.optimizer.state_dict())
        scheduler = self.lr_scheduler.state_dict()
        if optimizer is None or not _is_json(scheduler):
            return super()._save_optimizer_and_scheduler(output_dir)
        tensors, data = optimizer
        try:
            save_file(tensors, os.path.join(output_dir, OPTIMIZER_TENSORS), metadata={"format": "pt"})
        except RuntimeError:  # safetensors refuses tensors sharing memory (an optimizer keeping flat buffers)
            tensors = {key: value.clone() for key, value in tensors.items()}
            save_file(tensors, os.path.join(output_dir, OPTIMIZER_TENSORS), metadata={"format": "pt"})
        _write_json(os.path.join(output_dir, OPTIMIZER_JSON), data)
        _write_json(os.path.join(output_dir, SCHEDULER_JSON), scheduler)
        return None

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        names = (OPTIMIZER_TENSORS, OPTIMIZER_JSON, SCHEDULER_JSON)
        if checkpoint is None:
            return super()._load_optimizer_and_scheduler(checkpoint)
        if not all(os.path.isfile(os.path.join(checkpoint, name)) for name in names):
            # A stock or DeepSpeed/FSDP1 checkpoint (an incomplete one of ours: check_resumable_checkpoint)
            return super()._load_optimizer_and_scheduler(checkpoint)
        tensors = load_file(os.path.join(checkpoint, OPTIMIZER_TENSORS), device="cpu")
        data = _read_json(os.path.join(checkpoint, OPTIMIZER_JSON))
        if self._fsdp2_full_state():
            load_fsdp2_optimizer_state(self.model_wrapped, self.optimizer, tensors, data)
        else:
            self.optimizer.load_state_dict(join_optimizer_state(tensors, data, self.optimizer.state_dict()["param_groups"]))
        self.lr_scheduler.load_state_dict(_read_json(os.path.join(checkpoint, SCHEDULER_JSON)))
        return None

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        if self._fsdp2_full_state() and model is not None and not glob.glob(os.path.join(resume_from_checkpoint, "pytorch_model_fsdp*")):
            return load_fsdp2_model_state(model, resume_from_checkpoint)
        return super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        # The stock check knows a tied weight only through _keys_to_ignore_on_save: it would report the MLM decoder,
        # saved once under the word embeddings' name, as missing from every checkpoint. Untied ones are reported.
        state = self.model.state_dict()
        loaded = [key for key in state if key not in load_result.missing_keys]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing_weights(state, loaded)))

    def _load_best_model(self) -> None:
        if self._fsdp2_full_state():
            return load_fsdp2_model_state(self.model_wrapped, self.state.best_model_checkpoint)
        return super()._load_best_model()

    def _save_scaler(self, output_dir: str) -> None:
        scaler = getattr(self.accelerator, "scaler", None)
        if scaler is None or is_torch_xla_available() or not _is_json(scaler.state_dict()):
            return super()._save_scaler(output_dir)
        if self.args.should_save:
            _write_json(os.path.join(output_dir, SCALER_JSON), scaler.state_dict())
        return None

    def _load_scaler(self, checkpoint: str | None) -> None:
        scaler = getattr(self.accelerator, "scaler", None)
        if checkpoint is None or scaler is None or not os.path.isfile(os.path.join(checkpoint, SCALER_JSON)):
            return super()._load_scaler(checkpoint)
        scaler.load_state_dict(_read_json(os.path.join(checkpoint, SCALER_JSON)))
        return None

    @staticmethod
    def _plain_rng() -> bool:
        other_devices = (is_torch_npu_available, is_torch_hpu_available, is_torch_mlu_available, is_torch_musa_available)
        return not is_torch_xla_available() and not any(available() for available in other_devices)

    def _save_rng_state(self, output_dir: str) -> None:
        if not self._plain_rng():
            return super()._save_rng_state(output_dir)
        version, internal, gauss = random.getstate()
        name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
        data = {
            "python": [version, list(internal), gauss],
            "numpy": [name, keys.tolist(), int(position), int(has_gauss), float(cached_gaussian)],
        }
        tensors = {"cpu": torch.random.get_rng_state()}
        if torch.cuda.is_available():
            if self.args.parallel_mode == ParallelMode.DISTRIBUTED:
                states = torch.cuda.random.get_rng_state_all()
                tensors.update({f"cuda/{index}": state for index, state in enumerate(states)})
                data["cuda_devices"] = len(states)
            else:
                tensors["cuda"] = torch.cuda.random.get_rng_state()
        os.makedirs(output_dir, exist_ok=True)  # a process may get here before process 0 saved the model
        stem = os.path.join(output_dir, self._process_file("rng_state"))
        save_file({key: value.contiguous() for key, value in tensors.items()}, stem + ".safetensors")
        _write_json(stem + ".json", data)
        return None

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        if self._stream_rng_checkpoint is not None:
            self._restore_rng_state(self._stream_rng_checkpoint)
            self._stream_rng_checkpoint = None
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._watch_loss(loss)
        return loss

    def _load_rng_state(self, checkpoint: str | None) -> None:
        if checkpoint is not None and isinstance(self.train_dataset, ProcessStream):
            # Called where a resumed run starts its first epoch, just before it creates the data iterator. The
            # stream's position is restored now (a stream run never skips batches, see __init__); the RNGs at the
            # first training step, where the uninterrupted run had them: creating the iterator draws from torch's
            # RNG (the loader's base seed), which the uninterrupted run did before its first step.
            self._load_data_state(checkpoint)
            self._stream_rng_checkpoint = checkpoint
            return None
        return self._restore_rng_state(checkpoint)

    def _restore_rng_state(self, checkpoint: str | None) -> None:
        stem = os.path.join(checkpoint, self._process_file("rng_state")) if checkpoint is not None else None
        if stem is None or not (os.path.isfile(stem + ".json") and os.path.isfile(stem + ".safetensors")):
            return super()._load_rng_state(checkpoint)
        data = _read_json(stem + ".json")
        tensors = load_file(stem + ".safetensors")
        version, internal, gauss = data["python"]
        random.setstate((version, tuple(internal), gauss))
        name, keys, position, has_gauss, cached_gaussian = data["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
        torch.random.set_rng_state(tensors["cpu"])
        if torch.cuda.is_available():
            if "cuda_devices" in data:
                torch.cuda.random.set_rng_state_all([tensors[f"cuda/{i}"] for i in range(data["cuda_devices"])])
            elif "cuda" in tensors:
                torch.cuda.random.set_rng_state(tensors["cuda"])
        return None


class JobTrainer(PickleFreeTrainer):
    """The only writer of a job's model card ``README.md``: the job hands its card object to :meth:`publish`.

    The card's usage snippet loads :meth:`card_model_id` (the Hub repository when pushing, else
    ``--hub_model_id``, else the output folder); ``push_to_hub(license=..., tags=..., ...)`` updates its front
    matter. With ``keep_predictions=True`` it keeps what each evaluation scored (:attr:`kept_predictions`), for
    the job's plots. An ``eval_data_collator`` collates evaluation and prediction batches instead of
    ``data_collator`` (which then collates training batches only). With loader workers, both are wrapped in
    :class:`~mlm_suite.training.worker_batches.OneBufferCollator`, so that a worker's batch reaches this process in one
    transfer.

    What the run delivers goes into its end-of-training metrics and its card (:mod:`mlm_suite.training.throughput`):
    ``train_tokens_per_second``, the real (non-pad) tokens of the steady steps, and, for a Trainer whose
    :attr:`reports_mfu` is set, ``train_mfu`` against ``peak_tflops`` (default: the device's listed peak).
    """

    #: Whether the end-of-training metrics include the model FLOPs utilisation (``train_mfu``).
    reports_mfu: ClassVar[bool] = False

    def __init__(
        self,
        *args: Any,
        keep_predictions: bool = False,
        eval_data_collator: Any = None,
        peak_tflops: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if self.args.dataloader_num_workers > 0:  # the workers' batches reach this process as one buffer each
            self.data_collator = OneBufferCollator(self.data_collator)
            if eval_data_collator is not None:
                eval_data_collator = OneBufferCollator(eval_data_collator)
        self.eval_data_collator = eval_data_collator
        self.step_rate = StepRateCallback()
        self.add_callback(self.step_rate)
        self.peak_tflops = peak_tflops
        self._real_tokens: torch.Tensor | int = 0  # this train() call's, summed on the device: read once, at the end
        self._steps_fetched = 0
        #: The card's throughput rows (name -> value), from the end-of-training metrics.
        self.throughput: dict[str, str] = {}
        #: The card :meth:`create_model_card` writes, handed over by :meth:`publish`.
        self.model_card: JobCard | None = None
        #: With ``keep_predictions``: the predictions and labels of the latest evaluation per metric key prefix
        #: (``"eval"``, ``"test"``, ...), as ``compute_metrics`` saw them (gathered from every process), so a job
        #: can plot what it scored without predicting again.
        self.kept_predictions: dict[str, EvalPrediction] | None = {} if keep_predictions else None

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

    def train(self, *args: Any, **kwargs: Any) -> Any:
        self._real_tokens, self._steps_fetched = 0, 0
        return super().train(*args, **kwargs)

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list, Any]:
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        pad_token_id = getattr(self.model.config, "pad_token_id", None)
        for batch in batch_samples:
            self._real_tokens = self._real_tokens + real_tokens(batch, pad_token_id)
        self._steps_fetched += 1
        return batch_samples, num_items_in_batch

    # ---- loss normalisation ------------------------------------------------------------------
    def _learnable_items(self, batch_samples: list, num_items_in_batch: Any) -> Any:
        """The masked tokens, and the next-sentence labels, which it counts here for :meth:`compute_loss`."""
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

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        if "train_runtime" in logs:  # the end-of-training metrics, also returned by train()
            rows = rows_per_step(self.args)
            if self.args.max_steps > 0:
                # The Trainer counts max_steps × rows per step as the samples, also when a time budget ended the
                # run long before (and then reports billions per second); its step rate is counted right.
                logs["train_samples_per_second"] = round(logs["train_steps_per_second"] * rows, 3)
            steady = self.step_rate.steps_per_second()
            if steady is not None:
                logs["train_steady_steps_per_second"] = round(steady, 3)
                logs["train_steady_samples_per_second"] = round(steady * rows, 3)
                logs.update(self._throughput(steady))
        super().log(logs, *args, **kwargs)

    def _throughput(self, steady_steps_per_second: float) -> dict[str, float | str]:
        """``train_tokens_per_second`` (and ``train_mfu``) at the steady step rate, and the card's rows for them."""
        if not self._steps_fetched:
            return {}
        # Every process counts its own batches; the processes' batches are alike, so the run's is world_size times.
        tokens_per_step = float(self._real_tokens) * self.args.world_size / self._steps_fetched
        tokens_per_second = round(steady_steps_per_second * tokens_per_step, 1)
        metrics: dict[str, float | str] = {"train_tokens_per_second": tokens_per_second}
        self.throughput = {"real (non-pad) tokens per second, steady steps": f"{tokens_per_second:,.0f}"}
        if self.reports_mfu:
            peak, source = peak_tflops(self.args.device, self.peak_tflops)
            mfu = model_flops_utilisation(tokens_per_second, self.flops_per_token(), peak, self.args.world_size)
            metrics["train_mfu"] = mfu if mfu == UNKNOWN else round(mfu, 4)
            self.throughput["model FLOPs utilisation"] = (
                f"unknown (no dense bf16 peak known for {source}; give --peak_tflops)" if mfu == UNKNOWN
                else f"{mfu:.1%} of {peak:g} TFLOP/s per device ({source}), 6 × non-embedding parameters per token"
            )
        return metrics

    def evaluation_loop(
        self,
        dataloader: Any,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> EvalLoopOutput:
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        if self.kept_predictions is not None:
            self.kept_predictions[metric_key_prefix] = EvalPrediction(output.predictions, output.label_ids)
        return output

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        # The stock save_model also pushes (with a card generated by the Trainer) when --push_to_hub is
        # set; the jobs push once, from publish(), when the folder is complete.
        super().save_model(output_dir, _internal_call=True)

    def card_model_id(self) -> str:
        """What the card's snippet passes to ``from_pretrained``: the repository ``push_to_hub`` uploads to
        (``<user>/<name>``, known once the Trainer created it), else ``--hub_model_id`` as given, else the output
        folder as given on the command line."""
        return getattr(self, "hub_model_id", None) or self.args.hub_model_id or str(self.args.output_dir)

    def create_model_card(self, model_name: str | None = None, **kwargs: Any) -> None:
        """Write the card :meth:`publish` was given; ``kwargs`` are the stock method's (``license``, ``tags``,
        ``language``, ``finetuned_from``, ``tasks``, ``dataset_tags``, ``dataset``, ``dataset_args``, as
        ``push_to_hub(**kwargs)`` passes them on) and update its metadata (:func:`mlm_suite.cards.update_card_data`)."""
        if not self.is_world_process_zero():
            return
        if self.model_card is None:
            raise ValueError("JobTrainer has no model card to write: hand the job's card to publish()")
        self.write_card(self.args.output_dir, self.model_card, model_name=model_name, model_id=self.card_model_id(),
                        **kwargs)

    @staticmethod
    def write_card(
        output_dir: str | os.PathLike, card: JobCard, *, model_name: str | None = None, model_id: str | None = None,
        **metadata_updates: Any,
    ) -> Path:
        """Write ``card`` as ``<output_dir>/README.md``, named ``model_name`` (default: the folder's name), its snippet
        loading ``model_id`` (default: ``output_dir``). Static, for a folder no Trainer wrote (``mlm-suite seeds``)."""
        text = render_card(card, model_name=model_name or Path(output_dir).name, model_id=model_id or str(output_dir),
                           **metadata_updates)
        path = Path(output_dir) / "README.md"
        with _written_whole(path, path):
            path.write_text(text, encoding="utf-8")
        return path

    def publish(self, card: JobCard) -> None:
        """Write ``card`` as the model card; with ``--push_to_hub``, then upload the output folder (every process
        calls this, last: ``push_to_hub`` saves the model again on all of them and uploads what the folder holds)."""
        if isinstance(card, TrainedModelCard) and self.throughput:
            card = card.with_throughput(markdown_table(self.throughput, ("throughput", "value")))
        self.model_card = card
        if self.args.push_to_hub:
            self.push_to_hub()  # saves the model again, writes the card (create_model_card), uploads the folder
        else:
            self.create_model_card()


__all__ = [
    "DATA_FLAGS_STATE",
    "DATA_STATE",
    "JobTrainer",
    "OPTIMIZER_JSON",
    "OPTIMIZER_TENSORS",
    "PickleFreeTrainer",
    "SCALER_JSON",
    "SCHEDULER_JSON",
    "StreamProgressCallback",
    "TRAINER_STATE_JSON",
    "TRAINING_ARGS_JSON",
    "TRAIN_LOSS_STATE",
    "cache_accelerate_package_probe",
    "check_resumable_checkpoint",
    "check_resumed_run",
    "fsdp2_optimizer_state",
    "join_optimizer_state",
    "load_fsdp2_model_state",
    "load_fsdp2_optimizer_state",
    "missing_weights",
    "refuse_fsdp_on_cpu",
    "split_optimizer_state",
    "training_arguments_as_json",
]
