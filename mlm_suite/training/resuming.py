"""Resuming a run only from a whole checkpoint that fits it (docs/training_semantics.md).

The stock ``Trainer`` resumes from whatever a folder holds: without the optimizer state it starts a fresh one,
silently; a truncated file surfaces as a traceback deep in a loader; another model's weights load partly. Here a
checkpoint is checked before the Trainer creates anything (:func:`check_resumable_checkpoint`,
:func:`check_resumed_run`), and :class:`ResumingMixin` keeps the checkpoints it writes whole: a save cut short by a
write failure is removed, so that the next run resumes from the last whole one, and each checkpoint records the
data flags of its run, which a resumed run compares with its own.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from transformers import TrainingArguments
from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME
from transformers.trainer_utils import get_last_checkpoint

from mlm_suite.errors import UsageError, WriteError, writing
from mlm_suite.training.checkpoint_format import (
    MODEL_TENSORS,
    MODEL_TENSORS_INDEX,
    OPTIMIZER_JSON,
    OPTIMIZER_TENSORS,
    SCHEDULER_JSON,
    TRAINER_STATE_JSON,
    checkpoint_folder,
    read_json,
)

__all__ = ["DATA_FLAGS_STATE", "ResumingMixin", "check_resumable_checkpoint", "check_resumed_run", "missing_weights"]

#: The values of the flags that decided what a checkpoint's run trained on (an entry of trainer_state.json's
#: ``stateful_callbacks``, from the job's ``args.data_flags``: :data:`mlm_suite.jobs.arguments.DATA_FLAGS`), so that
#: a run resumed with other values says so.
DATA_FLAGS_STATE = "DataFlags"


def _readable(path: Path) -> None:
    """Raise UsageError unless ``path`` (a JSON or safetensors file of a checkpoint) parses."""
    try:
        if path.suffix == ".json":
            read_json(path)
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
        files = sorted({folder / name for name in read_json(index)["weight_map"].values()})
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
    saved_config = read_json(config_file) if config_file.is_file() else {}
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
    state = read_json(Path(checkpoint) / TRAINER_STATE_JSON)
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


class ResumingMixin:
    """A ``transformers.Trainer`` mix-in that resumes only from checkpoints that pass the checks above (at
    construction, before the Trainer creates its output folder, and at ``train``), and writes only whole ones."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        model = kwargs.get("model", args[0] if args else None)
        self._checked_checkpoint: str | None = None
        if training_args is not None:  # before the Trainer creates anything (the output folder included)
            self._check_checkpoint(training_args.resume_from_checkpoint, model, training_args)
        super().__init__(*args, **kwargs)

    def _check_checkpoint(self, checkpoint: Any, model: Any, args: TrainingArguments) -> None:
        if isinstance(checkpoint, (str, os.PathLike)) and os.path.isdir(checkpoint) and model is not None:
            if str(checkpoint) != self._checked_checkpoint:
                check_resumable_checkpoint(checkpoint, model)
                check_resumed_run(checkpoint, args)
                self._checked_checkpoint = str(checkpoint)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """The stock ``train``, which refuses a checkpoint the model cannot resume from or that is past ``max_steps``
        (and names the data flags given other values than the checkpoint's run)."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
        self._check_checkpoint(resume_from_checkpoint, self.model, self.args)
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        data_flags = dict(getattr(self.args, "data_flags", {}))  # a job's (mlm_suite.jobs.arguments.data_flag_values)
        self.state.stateful_callbacks[DATA_FLAGS_STATE] = {"args": {}, "attributes": data_flags}
        folder = checkpoint_folder(self, trial)
        try:
            with writing(folder):
                super()._save_checkpoint(model, trial)
        except WriteError:
            # A checkpoint cut short goes (the checks above would refuse it), so that the next run resumes from
            # the last whole one; the earlier checkpoints are intact (the rotation runs after a save only). The
            # process that writes the checkpoint's model removes it.
            if self.args.should_save:
                shutil.rmtree(folder, ignore_errors=True)
            raise

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        # The stock check knows a tied weight only through _keys_to_ignore_on_save: it would report the MLM decoder,
        # saved once under the word embeddings' name, as missing from every checkpoint. Untied ones are reported.
        state = self.model.state_dict()
        loaded = [key for key in state if key not in load_result.missing_keys]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing_weights(state, loaded)))
