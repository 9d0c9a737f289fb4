"""Resuming a run only from a whole checkpoint that fits it (docs/training_semantics.md).

The stock ``Trainer`` resumes from whatever a folder holds: without the optimizer state it starts a fresh one,
silently; a truncated file surfaces as a traceback deep in a loader; another model's weights load partly. Here a
checkpoint is checked before the Trainer creates anything (:func:`check_resumable_checkpoint`,
:func:`check_resumed_run`); :class:`~mlm_suite.training.trainer.JobTrainer` calls the checks, keeps the checkpoints it
writes whole (a save cut short by a write failure is removed, so that the next run resumes from the last whole one)
and records in each the data flags of its run (:data:`DATA_FLAGS_STATE`), which a resumed run compares with its own.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from transformers import TrainingArguments
from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME

from mlm_suite.errors import UsageError
from mlm_suite.training.checkpoint_format import (
    MODEL_TENSORS,
    MODEL_TENSORS_INDEX,
    OPTIMIZER_JSON,
    OPTIMIZER_TENSORS,
    SCHEDULER_JSON,
    TRAINER_STATE_JSON,
    read_json,
)

__all__ = [
    "CONTENTS", "DATA_FLAGS_STATE", "check_past_the_end", "check_resumable_checkpoint", "check_resumed_run",
    "checkpoint_state",
    "data_contents", "data_differences", "finished_run", "missing_weights", "recorded_data",
]  # fmt: skip

#: The values of the flags that decided what a checkpoint's run trained on (an entry of trainer_state.json's
#: ``stateful_callbacks``, from the job's ``args.data_flags``: :data:`mlm_suite.jobs.common.arguments.DATA_FLAGS`), so that
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


def checkpoint_state(checkpoint: str | os.PathLike) -> dict[str, Any]:
    """A checkpoint's ``trainer_state.json``.

    Raises:
        UsageError: the folder has none (not a checkpoint, or a save cut short) or it does not parse.
    """
    path = Path(checkpoint) / TRAINER_STATE_JSON
    if not path.is_file():
        raise UsageError(
            f"checkpoint {checkpoint} has no {TRAINER_STATE_JSON}: it is not a checkpoint-* folder written by a "
            "training run, or its save was cut short"
        )
    _readable(path)
    return read_json(path)


def check_resumable_checkpoint(checkpoint: str | os.PathLike, model: torch.nn.Module) -> None:
    """Raise UsageError (one line naming the checkpoint and what is wrong) unless ``model`` can resume from ``checkpoint``.

    Every JSON and safetensors file of the folder must parse (a truncated or corrupt file is named), the optimizer
    and schedule states must be there (the stock loader would resume without them, silently), and the saved
    weights must be ``model``'s: the same architecture, the same weight names and shapes (another hidden size or
    vocabulary size is named by its configuration field). Checkpoints without ``model.safetensors`` (DeepSpeed,
    sharded FSDP, pickles) are left to the stock loader.
    """
    folder = Path(checkpoint)
    checkpoint_state(folder)
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
    labels = _labels(saved_config), _labels(getattr(getattr(model, "config", None), "to_dict", dict)())
    if labels[0] != labels[1] and all(labels):
        raise UsageError(
            f"checkpoint {folder} was trained on the labels {list(labels[0].values())}, but this run's are "
            f"{list(labels[1].values())}: resume a checkpoint of these labels, or start anew with --overwrite_output_dir"
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


def _labels(config: Mapping[str, Any]) -> dict[str, str]:
    """A classifier's labels by id (``id2label``), {} for a model whose labels are transformers' placeholders."""
    labels = {str(key): str(value) for key, value in (config.get("id2label") or {}).items()}
    return {} if all(value == f"LABEL_{key}" for key, value in labels.items()) else labels


def _shown(value: Any) -> str:
    """A flag's value as a command line writes it."""
    if value is None:
        return "unset"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


# ---- what a run trained on -----------------------------------------------------------------------
#: The key, among a checkpoint's recorded data flags, of the digests of the local files and folders they name.
CONTENTS = "contents"
_DIGESTS: dict[tuple, str] = {}  # a file's (path, size, modification time) → digest, computed once per process


def _digest(path: Path) -> str:
    """A file's SHA-256 (read once per process and version of the file); a folder's, of its files' names and sizes
    (a prepared folder's shards are gigabytes: their sizes tell another preparation apart)."""
    hasher = hashlib.sha256()
    if path.is_dir():
        for file in sorted(item for item in path.rglob("*") if item.is_file()):
            hasher.update(f"{file.relative_to(path)}\0{file.stat().st_size}\n".encode())
        return hasher.hexdigest()[:16]
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                hasher.update(block)
        _DIGESTS[key] = hasher.hexdigest()[:16]
    return _DIGESTS[key]


def data_contents(data_flags: Mapping[str, Any]) -> dict[str, str]:
    """The digest of what each data flag names on this machine (flag → digest of its files or folders, in order), for
    the flags that name local files or folders: a run on the same path with other contents is told apart."""
    contents = {}
    for name, value in data_flags.items():
        paths = [Path(item) for item in (value if isinstance(value, list) else [value])
                 if isinstance(item, str) and item and os.path.exists(item)]
        if paths:
            contents[name] = " ".join(_digest(path) for path in paths)
    return contents


def recorded_data(data_flags: Mapping[str, Any]) -> dict[str, Any]:
    """What a checkpoint records of its run's data (:data:`DATA_FLAGS_STATE`): the data flags' values and the digests of
    the files they name (:data:`CONTENTS`)."""
    return {**data_flags, CONTENTS: data_contents(data_flags)} if data_flags else {}


def data_differences(state: Mapping[str, Any], data_flags: Mapping[str, Any]) -> list[str]:
    """The data flags whose values (or whose files' contents) differ between the run that saved a checkpoint
    (``state``, its trainer_state.json) and ``data_flags``, each as ``--flag value (its run: value)``; [] when the
    checkpoint records none."""
    saved = state.get("stateful_callbacks", {}).get(DATA_FLAGS_STATE, {}).get("attributes", {})
    changed = [f"--{name} {_shown(value)} (its run: {_shown(saved[name])})"
               for name, value in data_flags.items() if name in saved and name != CONTENTS and saved[name] != value]
    if CONTENTS in saved:
        now = data_contents(data_flags)
        changed += [f"--{name} {_shown(data_flags[name])} (its contents changed since that run)"
                    for name, digest in saved[CONTENTS].items()
                    if name in now and now[name] != digest and saved.get(name) == data_flags.get(name)]
    return changed


def finished_run(state: Mapping[str, Any], args: TrainingArguments) -> bool:
    """Whether a checkpoint (``state``, its trainer_state.json) ends the run ``args`` asks for: it is at ``--max_steps``,
    or, when the epochs decide, at the last step of its own run of as many epochs."""
    step = int(state.get("global_step", 0))
    if args.max_steps > 0:
        return step == args.max_steps
    return step > 0 and step == state.get("max_steps") and state.get("num_train_epochs") == args.num_train_epochs


def check_past_the_end(checkpoint: str | os.PathLike, args: TrainingArguments) -> None:
    """Raise UsageError when ``checkpoint`` is past the run's ``--max_steps`` (the stock loop would still train and save
    a step)."""
    step = int(checkpoint_state(checkpoint).get("global_step", 0))
    if 0 < args.max_steps < step:
        raise UsageError(
            f"checkpoint {checkpoint} is at step {step}, already past --max_steps {args.max_steps}: give --max_steps "
            f"above {step} to train on from it, or resume from an earlier checkpoint"
        )


def check_resumed_run(checkpoint: str | os.PathLike, args: TrainingArguments, rerun_of: str | None = None) -> None:
    """What continuing ``checkpoint`` with ``args`` may do, before anything is written (docs/command_line.md):

    * past ``--max_steps``: refused (:func:`check_past_the_end`);
    * trained on other data than ``args.data_flags`` (values, or the files' contents: :func:`data_differences`):
      refused when the checkpoint ends the run (nothing would be trained on these data, and its results would be
      reported as theirs) or when it was found in the output folder (``rerun_of``: the flag and folder, a rerun that
      would relabel the earlier run); a checkpoint named by ``--resume_from_checkpoint`` continues with the data
      given now, saying so in one line;
    * at the end of the run on the same data: nothing is trained, and a line says so (the job evaluates and saves the
      checkpoint's model, as the run that saved it did).

    Raises:
        UsageError: naming the checkpoint, the flags and how to go on.
    """
    check_past_the_end(checkpoint, args)
    state = checkpoint_state(checkpoint)
    step = int(state.get("global_step", 0))
    finished = finished_run(state, args)
    changed = data_differences(state, getattr(args, "data_flags", {}))
    where = f"--max_steps {args.max_steps}" if args.max_steps > 0 else f"its last step, {step}"
    if changed and rerun_of is not None:
        kind = f"a finished run ({checkpoint} at {where})" if finished else f"a stopped run ({checkpoint}, step {step})"
        raise UsageError(
            f"{rerun_of} holds {kind} trained on other data: {', '.join(changed)}; pass --overwrite_output_dir to "
            f"train anew on these data, or choose another {rerun_of.split()[0]}"
        )
    if changed and finished:
        raise UsageError(
            f"--resume_from_checkpoint {checkpoint} is at {where}, the end of a run on other data: {', '.join(changed)}; "
            f"nothing would be trained on these: give a larger --max_steps to train on them from it"
        )
    if args.process_index != 0:
        return
    if changed:
        print(f"warning: resuming {checkpoint}, saved by a run with other data flags: {', '.join(changed)}; training "
              "continues with the values given now", file=sys.stderr)
    elif finished:
        print(f"nothing to train: {checkpoint} is at {where}, the end of this run; its model is evaluated and saved "
              "as this run's (pass --overwrite_output_dir to train anew)", file=sys.stderr)
