"""Data-parallel jobs under ``accelerate launch`` (2 CPU processes, gloo): pretraining equals one
process with the same global batch, and every process ends the job together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from mlm_suite.jobs.pretrain import main
from tests.helpers import BERT_ARCHITECTURE, job_args, launch_two_processes, make_documents, max_difference, write_text

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pretrain_mlm.py"


def first_loss(output_dir: Path) -> float:
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    return next(entry["loss"] for entry in history if "loss" in entry)


@pytest.mark.multiprocess
@pytest.mark.slow
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
    common += BERT_ARCHITECTURE  # likewise

    single = tmp_path / "single"
    assert main(job_args(single, *common, "--per_device_train_batch_size", "4")) == 0

    parallel = tmp_path / "parallel"
    result = launch_two_processes(EXAMPLE, job_args(parallel, *common, "--per_device_train_batch_size", "2"), 300)
    assert result.returncode == 0, result.stderr[-4000:]

    state = json.loads((parallel / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    # One step is the whole 4-row epoch only if both processes took part (one process alone: half an epoch).
    assert state["epoch"] == 1.0
    assert first_loss(parallel) == pytest.approx(first_loss(single), rel=1e-5)
    assert max_difference(load_file(single / "model.safetensors"), load_file(parallel / "model.safetensors")) < 1e-5


ENDING_JOB = """
import json, sys, time
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate import PartialState

from mlm_suite.jobs.distributed import run_job

state = PartialState(cpu=True)  # as the Trainer sets it up with --use_cpu: a gloo group of the launched processes
out = Path(sys.argv[1])


def main(argv):
    for _ in range(20):  # as evaluation's gather_for_metrics does, up to the end of the job
        gathered = [torch.empty(8) for _ in range(state.num_processes)]
        dist.all_gather(gathered, torch.ones(8))
    if state.is_main_process:
        time.sleep(2)  # what only the main process does at the end of a job: save the model, write the card
        (out / "main_finished").write_text(str(time.time()))
    return state.process_index


index = run_job(main)
(out / f"process_{index}.json").write_text(json.dumps({"left": time.time(), "in_group": dist.is_initialized()}))
"""


@pytest.mark.multiprocess
@pytest.mark.slow
def test_every_process_leaves_the_process_group_after_the_last_one_finished_the_job(tmp_path):
    """``run_job`` holds each process until all of them finished ``main``, then destroys the group,
    and the processes exit cleanly.

    Without ``end_process_group``, about half the runs of this script abort while exiting
    ("terminate called without an active exception", see mlm_suite/jobs/distributed.py), and
    without its barrier the ordering below fails every time.
    """
    script = tmp_path / "ending_job.py"
    script.write_text(ENDING_JOB)
    result = launch_two_processes(script, [str(tmp_path)], 120)
    assert result.returncode == 0, result.stderr[-4000:]
    main_finished = float((tmp_path / "main_finished").read_text())
    for index in (0, 1):
        process = json.loads((tmp_path / f"process_{index}.json").read_text())
        assert not process["in_group"]
        assert process["left"] >= main_finished  # without the barrier, process 1 leaves about 2 s earlier


@pytest.mark.multiprocess
@pytest.mark.slow
def test_time_budget_stops_every_process_at_the_same_step(tmp_path):
    """Under --max_train_minutes each process times its own steps; rank 0's plan is broadcast, so both stop at
    the same step and the job ends (a rank stopping alone would leave the other waiting in DDP forever)."""
    train = write_text(tmp_path / "train.txt", make_documents(40, seed=7))
    validation = write_text(tmp_path / "validation.txt", make_documents(4, seed=8))
    argv = job_args(tmp_path / "budget", "--train_file", str(train), "--validation_file", str(validation))
    argv += ["--train_tokenizer", "false", "--max_train_minutes", "0.05", "--eval_strategy", "no", "--fill_mask_probes", "0"]
    result = launch_two_processes(EXAMPLE, argv, 300)
    assert result.returncode == 0, result.stderr[-4000:]
    state = json.loads((tmp_path / "budget" / "trainer_state.json").read_text())
    plan = next(entry for entry in state["log_history"] if "time_budget_planned_steps" in entry)
    assert state["global_step"] == plan["time_budget_planned_steps"] >= 2


RECIPES = Path(__file__).resolve().parents[2] / "examples" / "accelerate_configs"


@pytest.mark.parametrize(
    "recipe, expected",
    [
        ("cpu_multi_process.yaml", {"num_machines": 1, "num_processes": 2}),
        ("ddp_single_node.yaml", {"distributed_type": "MULTI_GPU", "num_machines": 1}),
        ("ddp_multi_node.yaml", {"distributed_type": "MULTI_GPU", "num_machines": 2, "num_processes": 16}),
        ("fsdp2.yaml", {"distributed_type": "FSDP", "num_machines": 1}),
    ],
)
def test_launch_recipes_are_valid_accelerate_configs_documented_in_the_docs(recipe, expected):
    """Each recipe reads as ``accelerate launch --config_file`` reads it, and docs/data.md shows its command."""
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(RECIPES / recipe))
    for name, value in expected.items():
        assert str(getattr(config, name)).endswith(str(value)), (name, getattr(config, name))
    if recipe == "fsdp2.yaml":
        assert config.fsdp_config["fsdp_version"] == 2
        assert config.fsdp_config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"  # _no_split_modules units
    if config.num_machines > 1:
        assert config.main_process_ip and config.main_process_port
    docs = (RECIPES.parents[1] / "docs" / "data.md").read_text(encoding="utf-8")  # "Several processes, GPUs and machines"
    assert f"--config_file examples/accelerate_configs/{recipe}" in docs
