"""Jobs under ``accelerate launch`` on 2 CPU processes (gloo): what they compute equals one process, every
process reads its own part of a stream, and every process ends the job together.

The runs that must succeed share one launch (``two_process_jobs.py``, run by
``test_jobs_on_two_processes``), each checked in its own subtest; each refused run has a launch of its own.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from safetensors.torch import load_file

from mlm_suite.data.pretraining.rows import pretraining_rows_function
from mlm_suite.jobs import finetune_ner, finetune_retrieval, pretrain
from tests.helpers import (
    BERT_ARCHITECTURE,
    SENTENCES,
    job_args,
    launch_two_processes,
    make_documents,
    max_difference,
    read_json,
    write_conll,
    write_text,
)

REPO = Path(__file__).resolve().parents[2]
PRETRAIN_SCRIPT = REPO / "examples" / "pretrain_mlm.py"
CPU_RECIPE = REPO / "examples" / "accelerate_configs" / "cpu_multi_process.yaml"
MAX_LENGTH = 32  # the jobs' rows in the streaming runs
ON_TWO_PROCESSES = ["--use_cpu", "true"]


def plan_entry(job: str, argv: list[str], record: Path | None = None) -> dict:
    """A run of ``two_process_jobs.py``'s plan: ``job`` (a module of mlm_suite.jobs) on 2 processes with ``argv``."""
    return {"job": job, "argv": [*argv, *ON_TWO_PROCESSES], "record": None if record is None else str(record)}


def run_plan(tmp_path: Path, runs: dict[str, dict]) -> Path:
    """Launch ``two_process_jobs.py`` once for every run of ``runs`` (name → plan entry); returns the folder of
    the processes' ending records."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(list(runs.values())))
    ended = tmp_path / "ended"
    ended.mkdir()
    result = launch_two_processes(Path(__file__).with_name("two_process_jobs.py"), [str(plan), str(ended)], 600,
                                  CPU_RECIPE)
    assert result.returncode == 0, result.stderr[-4000:]
    return ended


# --- one optimizer step: 2 processes × 2 rows equal 1 process × 4 rows ---
def one_step_run(tmp_path: Path) -> tuple[dict, Path]:
    """The training file holds exactly 4 rows, so both runs see all of them in their single step, whatever order
    the samplers draw. Masks are keyed by (seed, epoch, example index) and, by default
    (``--masking_seed_per_rank false``), not by the process rank, so every row gets the same mask in both runs.
    The Trainer divides each process's summed loss by the masked tokens of all processes and rescales by the
    world size, which DDP's gradient averaging undoes: the first loss agrees to 1e-5 (relative) and the weights
    after one AdamW step (lr 1e-3, epsilon 1e-6) to 1e-5. Returns the 2-process run and the 1-process folder."""
    tmp_path.mkdir()
    train = write_text(tmp_path / "train.txt", make_documents(4, seed=5))
    validation = write_text(tmp_path / "validation.txt", make_documents(4, seed=6))
    common = ["--train_file", str(train), "--validation_file", str(validation), "--max_steps", "1"]
    common += ["--masking_seed_per_rank", "false", "--ddp_find_unused_parameters", "false"]
    common += ["--train_tokenizer", "false", "--adam_epsilon", "1e-6"]  # see test_gradient_accumulation_...
    common += BERT_ARCHITECTURE  # likewise
    single = tmp_path / "single"
    assert pretrain.main(job_args(single, *common, "--per_device_train_batch_size", "4")) == 0
    return plan_entry("pretrain", job_args(tmp_path / "parallel", *common, "--per_device_train_batch_size", "2")), single


def first_loss(output_dir: Path) -> float:
    history = read_json(output_dir / "trainer_state.json")["log_history"]
    return next(entry["loss"] for entry in history if "loss" in entry)


def check_one_step(tmp_path: Path, single: Path) -> None:
    parallel = tmp_path / "parallel"
    state = read_json(parallel / "trainer_state.json")
    assert state["global_step"] == 1
    # One step is the whole 4-row epoch only if both processes took part (one process alone: half an epoch).
    assert state["epoch"] == 1.0
    assert first_loss(parallel) == pytest.approx(first_loss(single), rel=1e-5)
    assert max_difference(load_file(single / "model.safetensors"), load_file(parallel / "model.safetensors")) < 1e-5


# --- several languages: each process draws its share of the mix ---
def languages_run(tmp_path: Path) -> tuple[dict, Path]:
    """A phased mix of two languages (the second joins half-way), read in training order: 2 processes × 2 rows train
    the rows 1 process × 4 rows does, step by step, so the shares counted (every process's rows) and the weights
    agree. Returns the 2-process run and the 1-process folder."""
    tmp_path.mkdir()
    files = [write_text(tmp_path / "en.txt", make_documents(16, seed=11)), write_text(tmp_path / "xx.txt", make_documents(6, seed=12))]
    common = ["--train_file", *map(str, files), "--language_sampling_alpha_schedule", "1.0,0.3@2", "--late_languages", "xx@2"]
    common += ["--max_steps", "4", "--masking_seed_per_rank", "false", "--ddp_find_unused_parameters", "false"]
    common += ["--train_tokenizer", "false", "--adam_epsilon", "1e-6", "--validation_split_percentage", "20", *BERT_ARCHITECTURE]
    single = tmp_path / "single"
    assert pretrain.main(job_args(single, *common, "--per_device_train_batch_size", "4")) == 0
    return plan_entry("pretrain", job_args(tmp_path / "parallel", *common, "--per_device_train_batch_size", "2")), single


def check_languages(tmp_path: Path, single: Path) -> None:
    parallel, expected = read_json(tmp_path / "parallel" / "all_results.json"), read_json(single / "all_results.json")
    shares = {key: value for key, value in expected.items() if key.startswith("train_language_share_")}
    assert shares.keys() == {"train_language_share_en", "train_language_share_xx"} and 0 < shares["train_language_share_xx"] < 0.5
    assert {key: parallel[key] for key in shares} == shares
    assert parallel["eval_xx_mask_accuracy"] == pytest.approx(expected["eval_xx_mask_accuracy"])
    assert max_difference(load_file(single / "model.safetensors"), load_file(tmp_path / "parallel" / "model.safetensors")) < 1e-5


# --- a time budget: each process times its own steps, rank 0's plan is broadcast ---
def time_budget_run(tmp_path: Path) -> dict:
    tmp_path.mkdir()
    train = write_text(tmp_path / "train.txt", make_documents(40, seed=7))
    validation = write_text(tmp_path / "validation.txt", make_documents(4, seed=8))
    argv = job_args(tmp_path / "budget", "--train_file", str(train), "--validation_file", str(validation))
    argv += ["--train_tokenizer", "false", "--max_train_minutes", "0.05", "--eval_strategy", "no"]
    argv += ["--fill_mask_probes", "0"]
    return plan_entry("pretrain", argv)


def check_time_budget(tmp_path: Path) -> None:
    """Both processes stop at the same step and the job ends (a rank stopping alone would leave the other waiting
    in DDP forever)."""
    state = read_json(tmp_path / "budget" / "trainer_state.json")
    plan = next(entry for entry in state["log_history"] if "time_budget_planned_steps" in entry)
    assert state["global_step"] == plan["time_budget_planned_steps"] >= 2


# --- pretrain --streaming: every process reads its own part ---
# The job's masking collator notes, per process, every row it masks with its pass (``epoch``). One pass of each
# process over its part, put together, holds every row of the corpus exactly once: by document when the data is
# one file (fewer shards than processes), by file when there are two. Batches are flattened
# (``--flatten_batches``: one ``(1, tokens)`` row per batch, which accelerate's default rank-0 dispatch of
# iterable datasets would concatenate across processes).
def documents_with_long_ones(count: int, seed: int) -> list[str]:
    documents = make_documents(count, seed=seed)
    return [document * 3 if index % 5 == 0 else document for index, document in enumerate(documents)]


def streaming_run(folder: Path, data_flags: list[str]) -> dict:
    record = folder / "record"
    record.mkdir()
    validation = write_text(folder / "validation.txt", make_documents(4, seed=99))
    argv = job_args(folder / "out", "--streaming", *data_flags, "--validation_file", str(validation))
    argv += ["--train_tokenizer", "false", "--max_steps", "8", "--flatten_batches", "--eval_strategy", "no"]
    argv += ["--max_eval_samples", "4", "--fill_mask_probes", "0"]
    return plan_entry("pretrain", argv, record)


def recorded_rows(folder: Path) -> dict[int, list[tuple[int, tuple[int, ...]]]]:
    assert read_json(folder / "out" / "trainer_state.json")["global_step"] == 8
    # The job turned accelerate's rank-0 dispatch of iterable datasets off (its default is on).
    assert read_json(folder / "out" / "training_args.json")["accelerator_config"]["dispatch_batches"] is False
    rows = {}
    for rank in (0, 1):
        lines = (folder / "record" / f"rank{rank}.jsonl").read_text().splitlines()
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


def split_by_document_run(folder: Path, tokenizer) -> tuple[dict, list[tuple[int, ...]]]:
    """36 rows: a pass is 4-5 batches of 4."""
    folder.mkdir()
    documents = documents_with_long_ones(30, seed=41)
    train = write_text(folder / "train.txt", documents)
    expected = [tuple(ids) for ids in pretraining_rows_function(tokenizer, MAX_LENGTH)({"text": documents})["input_ids"]]
    return streaming_run(folder, ["--train_file", str(train)]), expected


def check_split_by_document(folder: Path, expected: list[tuple[int, ...]]) -> None:
    assert_one_pass_per_process_covers_every_row_once(recorded_rows(folder), expected)


def split_by_file_run(folder: Path, tokenizer) -> tuple[dict, list[set]]:
    dataset = folder / "dataset"
    dataset.mkdir(parents=True)
    parts = [documents_with_long_ones(14, seed=51), documents_with_long_ones(18, seed=52)]
    for index, documents in enumerate(parts):
        (dataset / f"train-{index}.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in documents))
    rows_of = pretraining_rows_function(tokenizer, MAX_LENGTH)
    per_file = [{tuple(ids) for ids in rows_of({"text": documents})["input_ids"]} for documents in parts]
    return streaming_run(folder, ["--dataset_name", str(dataset)]), per_file


def check_split_by_file(folder: Path, per_file: list[set]) -> None:
    first_passes = assert_one_pass_per_process_covers_every_row_once(recorded_rows(folder), [*per_file[0], *per_file[1]])
    assert sorted(first_passes, key=len) == sorted(per_file, key=len)  # each process read one whole file


# --- distributed evaluation: each evaluated item once, the metrics of one process ---
def one_and_two_process_runs(folder: Path, job, common: list[str]) -> dict:
    """``job`` on one process now (``folder/single``); returns its plan entry on 2 processes (``folder/ddp``)."""
    common = [*common, "--report_to", "none", "--disable_tqdm", "true"]
    job.main([*common, "--output_dir", str(folder / "single")])
    return plan_entry(job.__name__.rsplit(".", 1)[-1], [*common, "--output_dir", str(folder / "ddp")])


def one_and_two_process_results(folder: Path) -> tuple[dict, dict]:
    return read_json(folder / "single" / "all_results.json"), read_json(folder / "ddp" / "all_results.json")


def ner_evaluation_run(tmp_path: Path, tiny_model: Path) -> dict:
    """7 eval sentences (odd, uneven across 2 processes). Learning rate 0: one real DDP step that leaves the
    weights as they were, so both runs evaluate the same model and must agree exactly."""
    tmp_path.mkdir()
    train = write_conll(tmp_path / "train.conll", SENTENCES * 2)
    dev = write_conll(tmp_path / "dev.conll", SENTENCES)
    common = ["--model_name_or_path", str(tiny_model), "--train_file", str(train), "--validation_file", str(dev),
              "--max_steps", "1", "--learning_rate", "0", "--per_device_eval_batch_size", "2"]
    return one_and_two_process_runs(tmp_path, finetune_ner, common)


def check_ner_evaluation(tmp_path: Path) -> None:
    single, ddp = one_and_two_process_results(tmp_path)
    assert ddp["eval_n_sentences"] == 7
    assert ddp["eval_gold_entities"] == sum(tag.startswith("B-") for _, tags in SENTENCES for tag in tags)
    for key in ("eval_f1", "eval_precision", "eval_recall", "eval_accuracy", "eval_n_sentences", "eval_gold_entities"):
        assert ddp[key] == single[key], key


def retrieval_evaluation_run(tmp_path: Path, tiny_model: Path, retrieval_files: dict[str, Path]) -> dict:
    """59 texts to embed (an odd number). Training takes DDP's path through gradient caching (no_sync until the
    last mini-batch) with activation checkpointing, under which DDP does not look for unused parameters (the
    frozen pooler); learning rate 0 keeps the weights, so both runs score the same model."""
    tmp_path.mkdir()
    common = ["--model_name_or_path", str(tiny_model), "--train_file", str(retrieval_files["train"]),
              "--corpus_file", str(retrieval_files["corpus"]), "--queries_file", str(retrieval_files["queries"]),
              "--max_eval_samples", "29", "--max_steps", "2", "--learning_rate", "0", "--per_device_train_batch_size", "6",
              "--mini_batch_size", "5", "--activation_checkpointing", "true", "--per_device_eval_batch_size", "8"]
    return one_and_two_process_runs(tmp_path, finetune_retrieval, common)


def check_retrieval_evaluation(tmp_path: Path) -> None:
    single, ddp = one_and_two_process_results(tmp_path)
    assert ddp["eval_n_queries"] == 29
    for key in ("eval_recall@1", "eval_recall@10", "eval_mrr@10", "eval_ndcg@10"):
        assert ddp[key] == pytest.approx(single[key], abs=1e-6), key


def check_every_process_left_after_the_last_one_finished(ended: Path) -> None:
    """``run_job`` holds each process until all of them finished ``main``, then destroys the group, and the
    processes exit cleanly (the launch's exit status). Without ``end_process_group``, about half the runs abort
    while exiting ("terminate called without an active exception", see mlm_suite/jobs/common/running.py), and
    without its barrier process 1 leaves about 2 s before the main process finished."""
    main_finished = float((ended / "main_finished").read_text())
    for index in (0, 1):
        process = read_json(ended / f"process_{index}.json")
        assert not process["in_group"]
        assert process["left"] >= main_finished


@pytest.mark.multiprocess
@pytest.mark.slow
def test_jobs_on_two_processes(tmp_path, tokenizer, tiny_model, retrieval_files, subtests):
    """Every job run that must succeed on 2 processes, launched once; each behaviour is a subtest."""
    one_step, single = one_step_run(tmp_path / "one_step")
    languages, single_languages = languages_run(tmp_path / "languages")
    by_document, document_rows = split_by_document_run(tmp_path / "by_document", tokenizer)
    by_file, file_rows = split_by_file_run(tmp_path / "by_file", tokenizer)
    runs = {
        "one step": one_step,
        "languages": languages,
        "time budget": time_budget_run(tmp_path / "budget"),
        "split by document": by_document,
        "split by file": by_file,
        "NER evaluation": ner_evaluation_run(tmp_path / "ner", tiny_model),
        "retrieval evaluation": retrieval_evaluation_run(tmp_path / "retrieval", tiny_model, retrieval_files),
    }
    ended = run_plan(tmp_path, runs)
    checks = {
        "two processes match one process with the same global batch": lambda: check_one_step(tmp_path / "one_step", single),
        "two processes draw the languages one process draws": lambda: check_languages(tmp_path / "languages", single_languages),
        "a time budget stops every process at the same step": lambda: check_time_budget(tmp_path / "budget"),
        "two processes split one file by document": lambda: check_split_by_document(tmp_path / "by_document", document_rows),
        "two processes split two files by file": lambda: check_split_by_file(tmp_path / "by_file", file_rows),
        "NER evaluation scores each sentence once": lambda: check_ner_evaluation(tmp_path / "ner"),
        "retrieval evaluation embeds each text once, in order": lambda: check_retrieval_evaluation(tmp_path / "retrieval"),
        "every process leaves the group after the last one finished": lambda: check_every_process_left_after_the_last_one_finished(ended),
    }
    for behaviour, check in checks.items():
        with subtests.test(behaviour):
            check()


@pytest.mark.multiprocess
@pytest.mark.slow
def test_a_shard_count_that_does_not_divide_is_refused_before_anything_is_written(tmp_path, warm_python):
    folder = tmp_path / "dataset"
    folder.mkdir()
    for index in range(3):
        (folder / f"train-{index}.jsonl").write_text(json.dumps({"text": make_documents(1, seed=index)[0]}) + "\n")
    output_dir = tmp_path / "out"
    argv = job_args(output_dir, "--streaming", "--dataset_name", str(folder), "--train_tokenizer", "false", "--max_steps", "2")
    result = warm_python.launch(PRETRAIN_SCRIPT, argv, 300)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert errors and all(
        line == "pretrain_mlm.py: error: 3 shards (files) cannot be split evenly across 2 processes: give a multiple of 2 "
        "files, or fewer files than processes (every process then keeps 1 document in 2)"
        for line in errors
    ), result.stderr[-3000:]
    assert not output_dir.exists()


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
