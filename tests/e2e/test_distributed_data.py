"""``pretrain --streaming`` on 2 CPU processes (gloo, ``accelerate launch``): every process reads its own part.

The launched job is the real one; the test only wraps the masking collator to note, per process, every row it
masks with its pass (``epoch``). One pass of each process over its part, put together, holds every row of the
corpus exactly once: by document when the file is one shard (fewer shards than processes), by file when there
are two. Batches are flattened (``--flatten_batches``: one ``(1, tokens)`` row per batch, which accelerate's
default rank-0 dispatch of iterable datasets would concatenate across processes).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from mlm_suite.data.pretraining import pretraining_rows_function
from tests.helpers import job_args, launch_two_processes, make_documents, read_json, write_text

MAX_LENGTH = 32

RECORDING_JOB = """
import json, sys

import torch.distributed as dist

from mlm_suite.data.masking import DataCollatorForMaskedLM
from mlm_suite.data.pretraining import EVAL_SEED, pretraining_rows_function
from mlm_suite.jobs import pretrain
from mlm_suite.jobs.distributed import run_job

record = sys.argv[1]
collate = DataCollatorForMaskedLM.__call__


def noting(self, features):
    if self.seed != EVAL_SEED:  # training batches only
        with open(f"{record}/rank{dist.get_rank()}.jsonl", "a") as out:
            for feature in features:
                out.write(json.dumps([feature["epoch"], feature["input_ids"]]) + "\\n")
    return collate(self, features)


DataCollatorForMaskedLM.__call__ = noting
raise SystemExit(run_job(pretrain.main, sys.argv[2:]))
"""


def documents_with_long_ones(count: int, seed: int) -> list[str]:
    documents = make_documents(count, seed=seed)
    return [document * 3 if index % 5 == 0 else document for index, document in enumerate(documents)]


CPU_RECIPE = Path(__file__).resolve().parents[2] / "examples" / "accelerate_configs" / "cpu_multi_process.yaml"


def run_recorded(
    tmp_path: Path, data_flags: list[str], max_steps: int, config_file: Path | None = None
) -> dict[int, list[tuple[int, tuple[int, ...]]]]:
    script = tmp_path / "recording_job.py"
    script.write_text(RECORDING_JOB)
    record = tmp_path / "record"
    record.mkdir()
    validation = write_text(tmp_path / "validation.txt", make_documents(4, seed=99))
    argv = job_args(tmp_path / "out", "--streaming", *data_flags, "--validation_file", str(validation))
    argv += ["--train_tokenizer", "false", "--max_steps", str(max_steps), "--flatten_batches", "--eval_strategy", "no"]
    argv += ["--max_eval_samples", "4", "--fill_mask_probes", "0"]
    result = launch_two_processes(script, [str(record), *argv], 300, config_file)
    assert result.returncode == 0, result.stderr[-4000:]
    assert read_json(tmp_path / "out" / "trainer_state.json")["global_step"] == max_steps
    # The job turned accelerate's rank-0 dispatch of iterable datasets off (its default is on).
    assert read_json(tmp_path / "out" / "training_args.json")["accelerator_config"]["dispatch_batches"] is False
    rows = {}
    for rank in (0, 1):
        lines = (record / f"rank{rank}.jsonl").read_text().splitlines()
        rows[rank] = [(epoch, tuple(ids)) for epoch, ids in map(json.loads, lines)]
    return rows


def assert_one_pass_per_process_covers_every_row_once(rows, expected: list[tuple[int, ...]]) -> list[set]:
    """Each process's first pass holds no row twice, the two passes share no row, and together they hold all."""
    first_passes = []
    for rank in (0, 1):
        first = [ids for epoch, ids in rows[rank] if epoch == 0]
        assert len(first) == len(set(first)), f"process {rank} repeated a row within its first pass"
        assert any(epoch == 1 for epoch, _ in rows[rank]), f"process {rank} never finished its first pass"
        first_passes.append(set(first))
    assert first_passes[0].isdisjoint(first_passes[1])
    assert Counter([*first_passes[0], *first_passes[1]]) == Counter(expected)
    return first_passes


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_processes_split_one_file_by_document(tmp_path, tokenizer):
    documents = documents_with_long_ones(30, seed=41)
    train = write_text(tmp_path / "train.txt", documents)
    expected = [tuple(ids) for ids in pretraining_rows_function(tokenizer, MAX_LENGTH)({"text": documents})["input_ids"]]
    # 36 rows: a pass is 4-5 batches of 4. Launched with the CPU recipe of docs/data.md.
    rows = run_recorded(tmp_path, ["--train_file", str(train)], max_steps=8, config_file=CPU_RECIPE)
    assert_one_pass_per_process_covers_every_row_once(rows, expected)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_two_processes_split_two_files_by_file(tmp_path, tokenizer):
    folder = tmp_path / "dataset"
    folder.mkdir()
    parts = [documents_with_long_ones(14, seed=51), documents_with_long_ones(18, seed=52)]
    for index, documents in enumerate(parts):
        (folder / f"train-{index}.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in documents))
    rows_of = pretraining_rows_function(tokenizer, MAX_LENGTH)
    per_file = [{tuple(ids) for ids in rows_of({"text": documents})["input_ids"]} for documents in parts]
    rows = run_recorded(tmp_path, ["--dataset_name", str(folder)], max_steps=8)
    first_passes = assert_one_pass_per_process_covers_every_row_once(rows, [*per_file[0], *per_file[1]])
    assert sorted(first_passes, key=len) == sorted(per_file, key=len)  # each process read one whole file


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_shard_count_that_does_not_divide_is_refused_before_anything_is_written(tmp_path):
    folder = tmp_path / "dataset"
    folder.mkdir()
    for index in range(3):
        (folder / f"train-{index}.jsonl").write_text(json.dumps({"text": make_documents(1, seed=index)[0]}) + "\n")
    output_dir = tmp_path / "out"
    argv = job_args(output_dir, "--streaming", "--dataset_name", str(folder), "--train_tokenizer", "false", "--max_steps", "2")
    result = launch_two_processes(Path(__file__).resolve().parents[2] / "examples" / "pretrain_mlm.py", argv, 300)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert errors and all(
        line == "pretrain_mlm.py: error: 3 shards (files) cannot be split evenly across 2 processes: give a multiple of 2 "
        "files, or fewer files than processes (every process then keeps 1 document in 2)"
        for line in errors
    ), result.stderr[-3000:]
    assert not output_dir.exists()
