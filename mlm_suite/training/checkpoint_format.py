"""What the jobs' checkpoints and model folders hold: JSON and safetensors where the stock ``Trainer`` writes pickles.

Loading a pickle runs whatever code it names, so a checkpoint from elsewhere could not be resumed safely; these
files hold only tensors and plain data. :class:`PickleFreeCheckpointsMixin` writes ``training_args.json`` (for
``training_args.bin``), ``optimizer.safetensors`` + ``optimizer.json``, ``scheduler.json``, ``scaler.json`` and
``rng_state.safetensors`` + ``rng_state.json`` (gathered FSDP2 states likewise), and resumes from them exactly; a
state the files cannot hold (DeepSpeed, sharded FSDP, XLA, an optimizer keeping other objects) is left to the stock
code. Which checkpoints are resumed at all is :mod:`mlm_suite.training.resuming`'s.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from safetensors.torch import load_file
from transformers import TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.training_args import ParallelMode
from transformers.utils import (
    is_sagemaker_mp_enabled,
    is_torch_hpu_available,
    is_torch_mlu_available,
    is_torch_musa_available,
    is_torch_npu_available,
    is_torch_xla_available,
)

from mlm_suite.model_files import save_tensors, staged_model_folder

__all__ = [
    "MODEL_TENSORS",
    "MODEL_TENSORS_INDEX",
    "OPTIMIZER_JSON",
    "OPTIMIZER_TENSORS",
    "PickleFreeCheckpointsMixin",
    "SCALER_JSON",
    "SCHEDULER_JSON",
    "TRAINER_STATE_JSON",
    "TRAINING_ARGS_JSON",
    "checkpoint_folder",
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


def checkpoint_folder(trainer: transformers.Trainer, trial: Any) -> str:
    """The folder the Trainer saves the checkpoint of its current step to (``<output_dir>/checkpoint-<step>``)."""
    return os.path.join(trainer._get_output_dir(trial), f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")


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


class PickleFreeCheckpointsMixin:
    """A ``transformers.Trainer`` mix-in writing and reading the files of the module docstring instead of pickles."""

    # ---- model folders -----------------------------------------------------------------------
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """The stock save, staged (:func:`~mlm_suite.model_files.staged_model_folder`): a checkpoint's or the final
        model's folder never holds a ``config.json`` without its weights, and a write failure names the folder."""
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        with training_arguments_as_json():
            if not self.args.should_save:  # a process that only joins the gathers of a model sharded at load time
                return super()._save(output_dir, state_dict=state_dict)
            with staged_model_folder(output_dir) as staging:
                super()._save(str(staging), state_dict=state_dict)

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        with training_arguments_as_json():
            super()._push_from_checkpoint(checkpoint_folder)

    # ---- optimizer and learning-rate schedule ---------------------------------------------------
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
                save_tensors(tensors, os.path.join(output_dir, OPTIMIZER_TENSORS), metadata={"format": "pt"})
                write_json(os.path.join(output_dir, OPTIMIZER_JSON), data)
                write_json(os.path.join(output_dir, SCHEDULER_JSON), self.lr_scheduler.state_dict())
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
            save_tensors(tensors, os.path.join(output_dir, OPTIMIZER_TENSORS), metadata={"format": "pt"})
        except RuntimeError:  # safetensors refuses tensors sharing memory (an optimizer keeping flat buffers)
            tensors = {key: value.clone() for key, value in tensors.items()}
            save_tensors(tensors, os.path.join(output_dir, OPTIMIZER_TENSORS), metadata={"format": "pt"})
        write_json(os.path.join(output_dir, OPTIMIZER_JSON), data)
        write_json(os.path.join(output_dir, SCHEDULER_JSON), scheduler)
        return None

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        names = (OPTIMIZER_TENSORS, OPTIMIZER_JSON, SCHEDULER_JSON)
        if checkpoint is None:
            return super()._load_optimizer_and_scheduler(checkpoint)
        if not all(os.path.isfile(os.path.join(checkpoint, name)) for name in names):
            # A stock or DeepSpeed/FSDP1 checkpoint (an incomplete one of ours: check_resumable_checkpoint)
            return super()._load_optimizer_and_scheduler(checkpoint)
        tensors = load_file(os.path.join(checkpoint, OPTIMIZER_TENSORS), device="cpu")
        data = read_json(os.path.join(checkpoint, OPTIMIZER_JSON))
        if self._fsdp2_full_state():
            load_fsdp2_optimizer_state(self.model_wrapped, self.optimizer, tensors, data)
        else:
            self.optimizer.load_state_dict(join_optimizer_state(tensors, data, self.optimizer.state_dict()["param_groups"]))
        self.lr_scheduler.load_state_dict(read_json(os.path.join(checkpoint, SCHEDULER_JSON)))
        return None

    # ---- weights -------------------------------------------------------------------------------
    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        if self._fsdp2_full_state() and model is not None and not glob.glob(os.path.join(resume_from_checkpoint, "pytorch_model_fsdp*")):
            return load_fsdp2_model_state(model, resume_from_checkpoint)
        return super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _load_best_model(self) -> None:
        if self._fsdp2_full_state():
            return load_fsdp2_model_state(self.model_wrapped, self.state.best_model_checkpoint)
        return super()._load_best_model()

    # ---- gradient scaler -------------------------------------------------------------------------
    def _save_scaler(self, output_dir: str) -> None:
        scaler = getattr(self.accelerator, "scaler", None)
        if scaler is None or is_torch_xla_available() or not _is_json(scaler.state_dict()):
            return super()._save_scaler(output_dir)
        if self.args.should_save:
            write_json(os.path.join(output_dir, SCALER_JSON), scaler.state_dict())
        return None

    def _load_scaler(self, checkpoint: str | None) -> None:
        scaler = getattr(self.accelerator, "scaler", None)
        if checkpoint is None or scaler is None or not os.path.isfile(os.path.join(checkpoint, SCALER_JSON)):
            return super()._load_scaler(checkpoint)
        scaler.load_state_dict(read_json(os.path.join(checkpoint, SCALER_JSON)))
        return None

    # ---- random number generators ----------------------------------------------------------------
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
        stem = os.path.join(output_dir, per_process("rng_state", self.args))
        save_tensors({key: value.contiguous() for key, value in tensors.items()}, stem + ".safetensors")
        write_json(stem + ".json", data)
        return None

    def _load_rng_state(self, checkpoint: str | None) -> None:
        stem = os.path.join(checkpoint, per_process("rng_state", self.args)) if checkpoint is not None else None
        if stem is None or not (os.path.isfile(stem + ".json") and os.path.isfile(stem + ".safetensors")):
            return super()._load_rng_state(checkpoint)
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
        return None
