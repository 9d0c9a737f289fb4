"""Where a job's training starts: ``--resume_from_checkpoint``, ``--overwrite_output_dir`` and the checkpoints
already in ``--output_dir``, detected as transformers' ``run_*.py`` scripts detect them (docs/command_line.md).

Every job that trains calls :func:`resume_checkpoint` once, before it claims its output folder (so that a refused
continuation leaves the folder as it was); a second training run of a job in a folder of its own (``hf_baseline/``,
``intermediate/``) uses :func:`stage_checkpoint`. What a checkpoint may continue (the data it was trained on, the end
of its run) is checked there (:func:`~mlm_suite.training.resuming.check_resumed_run`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from transformers import TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from mlm_suite.errors import UsageError
from mlm_suite.jobs.common.arguments import LAST_CHECKPOINT
from mlm_suite.training.checkpoint_format import TRAINER_STATE_JSON
from mlm_suite.training.resuming import check_resumed_run



def last_checkpoint(folder: str | os.PathLike | None) -> str | None:
    """The ``checkpoint-<step>`` folder of ``folder`` with the highest step, or None (also for no ``folder``)."""
    if folder is None or not os.path.isdir(folder):
        return None
    return get_last_checkpoint(str(folder))


def resume_checkpoint(
    args: TrainingArguments, stage_folders: Sequence[str] = (), trains: bool = True
) -> str | None:
    """The checkpoint a job's training continues from, or None for a run from scratch (see the module).

    ``trains``: whether the job trains at all (the fine-tuning jobs' ``--do_train``; pretraining always trains,
    whatever ``--do_train`` says); None, and nothing checked, when it does not.
    ``stage_folders``: the folders of the job's other training runs (:func:`stage_checkpoint`); with
    ``--resume_from_checkpoint true`` a checkpoint there is enough when ``--output_dir`` has none yet (the job
    was stopped in an earlier stage), and None is returned for the main run.

    Raises:
        UsageError: ``--resume_from_checkpoint`` names no folder, or ``true`` finds no checkpoint; the last
            checkpoint found has no ``trainer_state.json`` (it was cut short while being saved).
    """
    if not trains:
        return None
    requested = (args.resume_from_checkpoint or "").strip()
    if requested.lower() in LAST_CHECKPOINT:
        found = _complete(last_checkpoint(args.output_dir))
        if found is None and not any(last_checkpoint(folder) for folder in stage_folders):
            raise UsageError(
                f"--resume_from_checkpoint {requested}: --output_dir {args.output_dir} holds no checkpoint-* folder "
                "to resume from"
            )
        return _continued(args, found, "the last checkpoint", rerun_of=f"--output_dir {args.output_dir}")
    if requested:
        if not os.path.isdir(requested):
            raise UsageError(f"--resume_from_checkpoint {requested}: no such checkpoint folder")
        inside = Path(requested).resolve().is_relative_to(Path(args.output_dir).resolve())
        return _continued(args, requested, "", rerun_of=f"--output_dir {args.output_dir}" if inside else None)
    if getattr(args, "overwrite_output_dir", False):
        return None
    found = _complete(last_checkpoint(args.output_dir))
    return _continued(args, found, "a checkpoint was found in --output_dir; pass --overwrite_output_dir to train from "
                      "scratch", rerun_of=f"--output_dir {args.output_dir}")


def stage_checkpoint(stage_args: TrainingArguments) -> str | None:
    """The last checkpoint in the own folder (``stage_args.output_dir``) of a job's second training run, or None.

    None with ``--overwrite_output_dir``. Raises UsageError for a checkpoint without ``trainer_state.json``.
    """
    if getattr(stage_args, "overwrite_output_dir", False):
        return None
    found = _complete(last_checkpoint(stage_args.output_dir))
    return _continued(stage_args, found, f"the last checkpoint in {stage_args.output_dir}", rerun_of=None)


def _complete(checkpoint: str | None) -> str | None:
    # trainer_state.json is written last into a checkpoint folder: its absence means a save cut short.
    if checkpoint is not None and not os.path.isfile(os.path.join(checkpoint, TRAINER_STATE_JSON)):
        raise UsageError(
            f"{checkpoint} has no {TRAINER_STATE_JSON} (it was cut short while being saved): delete it to resume from "
            "the checkpoint before it, or pass --overwrite_output_dir to train from scratch"
        )
    return checkpoint


def _continued(args: TrainingArguments, checkpoint: str | None, why: str, rerun_of: str | None) -> str | None:
    """``checkpoint``, once what it may continue is checked (:func:`~mlm_suite.training.resuming.check_resumed_run`:
    ``rerun_of``, the output folder it was found in, refuses other data) and announced (``why``: how it was found)."""
    if checkpoint is None:
        return None
    if why and args.process_index == 0:
        print(f"resuming training from {checkpoint} ({why})", file=sys.stderr)
    check_resumed_run(checkpoint, args, rerun_of=rerun_of)
    return checkpoint


__all__ = [
    "LAST_CHECKPOINT",
    "last_checkpoint",
    "resume_checkpoint",
    "stage_checkpoint",
]
