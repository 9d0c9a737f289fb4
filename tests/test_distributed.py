"""Data-parallel pretraining (``accelerate launch``, 2 CPU processes, gloo) equals one process with the same global batch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from mlm_suite.jobs.pretrain import main
from test_pretrain import job_args, make_documents, max_difference, write_text

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pretrain_mlm.py"


def free_port() -> int:
    """A free TCP port for the process group, so parallel test sessions do not collide."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def first_loss(output_dir: Path) -> float:
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return next(entry["loss"] for entry in history if "loss" in entry)


def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path):
    """One optimizer step: 2 processes × 2 rows equal 1 process × 4 rows.

    The training file holds exactly 4 rows, so both runs see all of them in their single step,
    whatever order the samplers draw. Masks are keyed by (seed, epoch, example index) and, by
    default (``--masking_seed_per_rank false``), not by the process rank, so every row gets the same
    mask in both runs. The Trainer divides each process's summed loss by the masked tokens of all
    processes and rescales by the world size, which DDP's gradient averaging undoes: the first
    loss agrees to 1e-5 (relative) and the weights after one AdamW step (lr 1e-3, epsilon 1e-6) to 1e-5.
    """
    train = write_text(tmp_path / "train.txt", make_documents(4, seed=5))
    validation = write_text(tmp_path / "validation.txt", make_documents(4, seed=6))
    common = ["--train_file", str(train), "--validation_file", str(validation), "--max_steps", "1"]
    common += ["--masking_seed_per_rank", "false", "--ddp_find_unused_parameters", "false"]
    common += ["--train_tokenizer", "false", "--adam_epsilon", "1e-6"]  # see test_gradient_accumulation_...

    single = tmp_path / "single"
    assert main(job_args(single, *common, "--per_device_train_batch_size", "4")) == 0

    parallel = tmp_path / "parallel"
    # `accelerate launch --cpu` starts a single process unless an MPI hostfile is given; --multi_gpu
    # selects its torch.distributed launcher, and --use_cpu makes the job run DDP over gloo on CPU.
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    launch += ["--main_process_port", str(free_port())]
    argv = job_args(parallel, *common, "--per_device_train_batch_size", "2", "--use_cpu", "true")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([*launch, str(EXAMPLE), *argv], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]

    state = json.loads((parallel / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    # One step is the whole 4-row epoch only if both processes took part (one process alone: half an epoch).
    assert state["epoch"] == 1.0
    assert first_loss(parallel) == pytest.approx(first_loss(single), rel=1e-5)
    assert max_difference(load_file(single / "model.safetensors"), load_file(parallel / "model.safetensors")) < 1e-5
