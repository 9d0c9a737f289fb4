"""What the jobs' checkpoints and model folders hold: JSON and safetensors where the stock ``Trainer`` writes pickles.

Loading a pickle runs whatever code it names, so a checkpoint from elsewhere could not be resumed safely; these
files hold only tensors and plain data. :class:`CheckpointFormat` writes ``training_args.json`` (for
``training_args.bin``, :func:`training_arguments_as_json`), ``optimizer.safetensors`` + ``optimizer.json``, ``scheduler.json``, ``scaler.json`` and
``rng_state.safetensors`` + ``rng_state.json`` (gathered FSDP2 states likewise), and resumes from them exactly; a
state the files cannot hold (DeepSpeed, sharded FSDP, XLA, an optimizer keeping other objects) is left to the stock
code. Which checkpoints are resumed at all is :mod:`mlm_suite.training.resuming`'s; the Trainer calls
:class:`CheckpointFormat` where it would save or load one of those states (docs/trainer.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import TrainingArguments
from transformers.training_args import ParallelMode
from transformers.utils import (
    is_torch_hpu_available,
    is_torch_mlu_available,
    is_torch_musa_available,
    is_torch_npu_available,
    is_torch_xla_available,
)

from mlm_suite.model_files import save_tensors

__all__ = [
    "MODEL_TENSORS",
    "MODEL_TENSORS_INDEX",
    "OPTIMIZER_JSON",
    "OPTIMIZER_TENSORS",
    "CheckpointFormat",
    "SCALER_JSON",
    "SCHEDULER_JSON",
    "TRAINER_STATE_JSON",
    "TRAINING_ARGS_JSON",
    "fsdp2_optimizer_state",
    "join_optimizer_state",
    "load_fsdp2_model_state",
    "load_fsdp2_optimizer_state",
    "per_process",
    "read_json",
    "split_optimizer_state",
    "training_arguments_as_json",
    "write_json",
]

TRAINING_ARGS_JSON = "training_args.json"
OPTIMIZER_TENSORS = "optimizer.safetensors"
OPTIMIZER_JSON = "optimizer.json"
SCHEDULER_JSON = "scheduler.json"
SCALER_JSON = "scaler.json"
_STOCK_TRAINING_ARGS = "training_args.bin"  # transformers.trainer.TRAINING_ARGS_NAME
TRAINER_STATE_JSON = "trainer_state.json"
MODEL_TENSORS = "model.safetensors"
MODEL_TENSORS_INDEX = "model.safetensors.index.json"

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


def write_json(path: str | os.PathLike, value: Any) -> None:
    Path(path).write_text(json.dumps(value, indent=1) + "\n", encoding="utf-8")


def read_json(path: str | os.PathLike) -> Any:
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


def per_process(stem: str, args: TrainingArguments) -> str:
    """The name of a file each process writes for itself: ``stem`` alone, ``stem_<rank>`` with several processes."""
    return stem if args.world_size <= 1 else f"{stem}_{args.process_index}"


# ---- optimizer states ------------------------------------------------------------------------
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
    index = folder / MODEL_TENSORS_INDEX
    files = sorted(set(read_json(index)["weight_map"].values())) if index.is_file() else [MODEL_TENSORS]
    weights: dict[str, torch.Tensor] = {}
    for name in files:
        weights.update(load_file(folder / name))
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, strict=False))


class CheckpointFormat:
    """The files of the module docstring instead of pickles: what :class:`~mlm_suite.training.trainer.JobTrainer`
    saves and loads a checkpoint's optimizer, schedule, scaler and random number generators with, and its weights
    under FSDP2. Each method gets the objects it saves or loads and returns whether it did (False: the Trainer's own
    code handles a state these files cannot hold).

    ``plain``: single-device or DDP training, whose states are plain tensors and numbers (not DeepSpeed, FSDP, XLA or
    SageMaker MP); ``fsdp2_model``: the wrapped model when FSDP2 saves full state dicts (its gathered states are
    written pickle-free too), else None. The Trainer reads both off its accelerator (:meth:`JobTrainer.parallelism`).
    """

    # ---- optimizer and learning-rate schedule ---------------------------------------------------
    def save_optimizer(self, folder: str, optimizer: Any, scheduler: Any, *, plain: bool, should_save: bool,
                       fsdp2_model: torch.nn.Module | None = None) -> bool:
        if fsdp2_model is not None:
            # The weights are already in model.safetensors (save_model gathers them); the stock FSDP path would
            # pickle them again (pytorch_model_fsdp.bin) along with the optimizer (optimizer.bin).
            state = fsdp2_optimizer_state(fsdp2_model, optimizer)
            if should_save:
                tensors, data = state
                save_tensors(tensors, os.path.join(folder, OPTIMIZER_TENSORS), metadata={"format": "pt"})
                write_json(os.path.join(folder, OPTIMIZER_JSON), data)
                write_json(os.path.join(folder, SCHEDULER_JSON), scheduler.state_dict())
            return True
        if not plain:
            return False
        if not should_save:
            return True
        state = split_optimizer_state(optimizer.state_dict())
        schedule = scheduler.state_dict()
        if state is None or not _is_json(schedule):
            return False
        tensors, data = state
        try:
            save_tensors(tensors, os.path.join(folder, OPTIMIZER_TENSORS), metadata={"format": "pt"})
        except RuntimeError:  # safetensors refuses tensors sharing memory (an optimizer keeping flat buffers)
            tensors = {key: value.clone() for key, value in tensors.items()}
            save_tensors(tensors, os.path.join(folder, OPTIMIZER_TENSORS), metadata={"format": "pt"})
        write_json(os.path.join(folder, OPTIMIZER_JSON), data)
        write_json(os.path.join(folder, SCHEDULER_JSON), schedule)
        return True

    def load_optimizer(self, checkpoint: str | None, optimizer: Any, scheduler: Any, *,
                       fsdp2_model: torch.nn.Module | None = None) -> bool:
        names = (OPTIMIZER_TENSORS, OPTIMIZER_JSON, SCHEDULER_JSON)
        if checkpoint is None or not all(os.path.isfile(os.path.join(checkpoint, name)) for name in names):
            # A stock or DeepSpeed/FSDP1 checkpoint (an incomplete one of ours: check_resumable_checkpoint)
            return False
        tensors = load_file(os.path.join(checkpoint, OPTIMIZER_TENSORS), device="cpu")
        data = read_json(os.path.join(checkpoint, OPTIMIZER_JSON))
        if fsdp2_model is not None:
            load_fsdp2_optimizer_state(fsdp2_model, optimizer, tensors, data)
        else:
            optimizer.load_state_dict(join_optimizer_state(tensors, data, optimizer.state_dict()["param_groups"]))
        scheduler.load_state_dict(read_json(os.path.join(checkpoint, SCHEDULER_JSON)))
        return True

    # ---- weights under FSDP2 ---------------------------------------------------------------------
    def load_model(self, folder: str, fsdp2_model: torch.nn.Module) -> bool:
        """The weights of ``folder`` sharded into a model FSDP2 wraps (the stock loader would look for FSDP's pickles)."""
        load_fsdp2_model_state(fsdp2_model, folder)
        return True

    # ---- gradient scaler -------------------------------------------------------------------------
    def save_scaler(self, folder: str, scaler: Any, *, should_save: bool) -> bool:
        if scaler is None or is_torch_xla_available() or not _is_json(scaler.state_dict()):
            return False
        if should_save:
            write_json(os.path.join(folder, SCALER_JSON), scaler.state_dict())
        return True

    def load_scaler(self, checkpoint: str | None, scaler: Any) -> bool:
        if checkpoint is None or scaler is None or not os.path.isfile(os.path.join(checkpoint, SCALER_JSON)):
            return False
        scaler.load_state_dict(read_json(os.path.join(checkpoint, SCALER_JSON)))
        return True

    # ---- random number generators ----------------------------------------------------------------
    @staticmethod
    def _plain_rng() -> bool:
        other_devices = (is_torch_npu_available, is_torch_hpu_available, is_torch_mlu_available, is_torch_musa_available)
        return not is_torch_xla_available() and not any(available() for available in other_devices)

    def save_rng(self, folder: str, args: TrainingArguments) -> bool:
        if not self._plain_rng():
            return False
        version, internal, gauss = random.getstate()
        name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
        data = {
            "python": [version, list(internal), gauss],
            "numpy": [name, keys.tolist(), int(position), int(has_gauss), float(cached_gaussian)],
        }
        tensors = {"cpu": torch.random.get_rng_state()}
        if torch.cuda.is_available():
            if args.parallel_mode == ParallelMode.DISTRIBUTED:
                states = torch.cuda.random.get_rng_state_all()
                tensors.update({f"cuda/{index}": state for index, state in enumerate(states)})
                data["cuda_devices"] = len(states)
            else:
                tensors["cuda"] = torch.cuda.random.get_rng_state()
        os.makedirs(folder, exist_ok=True)  # a process may get here before process 0 saved the model
        stem = os.path.join(folder, per_process("rng_state", args))
        save_tensors({key: value.contiguous() for key, value in tensors.items()}, stem + ".safetensors")
        write_json(stem + ".json", data)
        return True

    def load_rng(self, checkpoint: str | None, args: TrainingArguments) -> bool:
        stem = os.path.join(checkpoint, per_process("rng_state", args)) if checkpoint is not None else None
        if stem is None or not (os.path.isfile(stem + ".json") and os.path.isfile(stem + ".safetensors")):
            return False
        data = read_json(stem + ".json")
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
        return True
