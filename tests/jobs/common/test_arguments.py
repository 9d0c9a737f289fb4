"""Defaults that the jobs choose by device (what a GPU run gets without any flag, and what a CPU run keeps), by
mode (pretraining from scratch or continuing a checkpoint), and the values the fine-tuning jobs set as their arguments
are built (early stopping's, those their Trainer must see) rather than on the parsed arguments later."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from mlm_suite.jobs.common.arguments import feed_the_device, gpu_loader_workers
from mlm_suite.jobs.pretrain import parse_arguments, plan_run
from tests.helpers import (
    assert_valid_model_card,
    load_benchmark,
    make_documents,
    make_tiny_config,
    write_text,
)


def training_args(device: str, given: frozenset[str] = frozenset()) -> SimpleNamespace:
    return SimpleNamespace(
        device=torch.device(device), dataloader_num_workers=0, logging_nan_inf_filter=True, dataloader_pin_memory=True,
        accelerator_config=SimpleNamespace(non_blocking=False), flags_given=given,
    )  # fmt: skip


def test_a_gpu_run_collates_in_workers_and_never_waits_for_the_loss(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    args = training_args("cuda")
    feed_the_device(args)
    assert args.dataloader_num_workers == gpu_loader_workers() == 4
    assert args.logging_nan_inf_filter is False and args.accelerator_config.non_blocking is True
    assert args.dataloader_pin_memory is True
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # 8 processes share the node's 16 cores
    assert gpu_loader_workers() == 1


def test_flags_given_win_and_a_cpu_run_keeps_the_trainer_loader_defaults():
    args = training_args("cuda", frozenset({"dataloader_num_workers", "logging_nan_inf_filter", "accelerator_config"}))
    feed_the_device(args)
    assert args.dataloader_num_workers == 0 and args.logging_nan_inf_filter is True
    assert args.accelerator_config.non_blocking is False
    args = training_args("cpu")
    feed_the_device(args)
    assert args.dataloader_num_workers == 0 and args.logging_nan_inf_filter is False  # off on every device
    assert args.accelerator_config.non_blocking is False
    assert args.dataloader_pin_memory is False  # pinned memory serves an accelerator; torch warns without one
    args = training_args("cpu", frozenset({"dataloader_pin_memory"}))
    feed_the_device(args)
    assert args.dataloader_pin_memory is True


def test_pretraining_flattens_batches_on_a_gpu_only_unless_told():
    plan = plan_run(["--output_dir", "unused", "--use_cpu", "true"])
    assert plan.args.flatten_batches is False  # on CPU flattening buys nothing (docs/performance.md)
    plan = plan_run(["--output_dir", "unused", "--use_cpu", "true", "--flatten_batches"])
    assert plan.args.flatten_batches is True


# ------------------------------------------------------------------------------------------------
# Pretraining defaults by mode: continuing a checkpoint (--model_name_or_path) or training from scratch
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, tokenizer):
    """A randomly initialised tiny ``MlmSuiteForMaskedLM`` on the MiniLM vocabulary, with its tokenizer."""
    from mlm_suite import MlmSuiteForMaskedLM

    folder = tmp_path_factory.mktemp("tiny_checkpoint")
    torch.manual_seed(0)
    MlmSuiteForMaskedLM(make_tiny_config(vocab_size=len(tokenizer), max_position_embeddings=64)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def continuing(tiny_checkpoint) -> list[str]:
    """The flags of a run that continues a checkpoint (the plan loads its configuration)."""
    return ["--output_dir", "unused", "--use_cpu", "true", "--model_name_or_path", str(tiny_checkpoint)]


def test_the_parser_tells_which_flags_were_given_however_spelt(tmp_path):
    _, training_args = parse_arguments(["--output_dir", "unused", "--use_cpu=true", "--learning_r", "1e-3", "--mlm_prob", "0.2"])
    assert training_args.flags_given == {"output_dir", "use_cpu", "learning_rate", "mlm_probability"}
    flags = tmp_path / "flags.json"
    flags.write_text('{"output_dir": "unused", "use_cpu": true, "max_steps": 7}')
    _, training_args = parse_arguments([str(flags)])
    assert training_args.flags_given == {"output_dir", "use_cpu", "max_steps"} and training_args.max_steps == 7


def test_the_parser_records_the_data_flags_with_their_files_resolved(tmp_path, monkeypatch):
    corpus = write_text(tmp_path / "corpus.txt", make_documents(3))
    monkeypatch.chdir(tmp_path)
    _, training_args = parse_arguments(["--output_dir", "unused", "--use_cpu", "true", "--train_file", "corpus.txt",
                                        "--seed", "7", "--masking", "span"])
    flags = training_args.data_flags
    assert flags["train_file"] == str(corpus.resolve())  # however spelt, the same file
    assert (flags["seed"], flags["masking"], flags["max_seq_length"], flags["dataset_name"]) == (7, "span", 64, None)
    assert "learning_rate" not in flags and "output_dir" not in flags  # what the run trains on, not how


def test_continuing_a_checkpoint_gets_the_continued_pretraining_defaults(continuing):
    from mlm_suite.jobs.common.pretraining_arguments import CONTINUED_DEFAULTS, PretrainTrainingArguments as Defaults

    plan = plan_run(continuing)
    args, training_args = plan.args, plan.training_args
    assert training_args.learning_rate == CONTINUED_DEFAULTS["learning_rate"] == 3e-4
    assert args.mlm_probability == CONTINUED_DEFAULTS["mlm_probability"] == 0.15
    assert training_args.max_steps == CONTINUED_DEFAULTS["max_steps"] < Defaults.max_steps
    assert set(plan.value_sources.values()) == {"continued-pretraining default"}
    # The rest of the job's defaults are the same in both modes.
    assert training_args.warmup_steps == Defaults.warmup_steps and args.eval_mlm_probability == 0.15
    assert training_args.weight_decay == Defaults.weight_decay
    assert training_args.per_device_train_batch_size == Defaults.per_device_train_batch_size


def test_training_from_scratch_keeps_the_from_scratch_defaults():
    from mlm_suite.jobs.common.pretraining_arguments import PretrainingArguments, PretrainTrainingArguments as Defaults

    plan = plan_run(["--output_dir", "unused", "--use_cpu", "true"])
    args, training_args = plan.args, plan.training_args
    assert training_args.learning_rate == Defaults.learning_rate == 2e-3
    assert training_args.max_steps == Defaults.max_steps
    assert args.mlm_probability == PretrainingArguments.mlm_probability == 0.3
    assert set(plan.value_sources.values()) == {"from-scratch default"}


@pytest.mark.parametrize(
    "flags",
    [
        ["--learning_rate", "2e-3", "--mlm_probability", "0.3", "--max_steps", "12000"],
        ["--learning_rate=2e-3", "--mlm_probability=0.3", "--max_steps=12000"],
        ["--learning_r", "2e-3", "--mlm_prob", "0.3", "--max_st", "12000"],  # prefixes argparse accepts
    ],
)
def test_flags_given_win_over_the_continued_pretraining_defaults(flags, continuing):
    plan = plan_run([*continuing, *flags])
    args, training_args = plan.args, plan.training_args
    assert (training_args.learning_rate, args.mlm_probability, training_args.max_steps) == (2e-3, 0.3, 12000)
    assert set(plan.value_sources.values()) == {"given"}
    # A value given equal to the mode's default is still reported as given.
    plan = plan_run([*continuing, "--learning_rate", "3e-4"])
    assert plan.value_sources["learning_rate"] == "given"
    assert plan.value_sources["mlm_probability"] == "continued-pretraining default"


def test_a_time_budget_lifts_the_continued_step_default_but_not_a_given_one(continuing):
    from mlm_suite.training.controls import UNBOUNDED_STEPS

    training_args = plan_run([*continuing, "--max_train_minutes", "5"]).training_args
    assert training_args.max_steps == UNBOUNDED_STEPS and training_args.learning_rate == 3e-4
    assert plan_run([*continuing, "--max_train_minutes", "5", "--max_steps", "300"]).training_args.max_steps == 300


def test_the_plan_resolves_copies_and_leaves_the_parsed_flags_as_given(continuing):
    from mlm_suite.jobs.common.pretraining_arguments import CONTINUED_DEFAULTS
    from mlm_suite.jobs.common.pretraining_plan import PretrainingPlan

    args, training_args = parse_arguments([*continuing, "--mlm_probability_schedule", "0.3,0.1@0.5"])
    parsed = (dataclasses.asdict(args), training_args.to_dict())
    plan = PretrainingPlan.resolve(args, training_args, CONTINUED_DEFAULTS)
    assert (dataclasses.asdict(args), training_args.to_dict()) == parsed
    assert (plan.args.mlm_probability, plan.training_args.learning_rate, plan.training_args.max_steps) == (0.3, 3e-4, 1000)
    assert plan.value_sources["mlm_probability"] == "first phase of --mlm_probability_schedule"
    assert plan.training_args.flags_given == training_args.flags_given
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.args = args


def test_the_printed_configuration_says_which_defaults_applied(continuing, tiny_checkpoint):
    shown = plan_run([*continuing, "--max_steps", "200", "--config_preset", "base"]).describe()
    assert f"continuing {tiny_checkpoint}" in shown
    assert "learning_rate 0.0003 (continued-pretraining default)" in shown
    assert "mlm_probability 0.15 (continued-pretraining default)" in shown
    assert "max_steps 200 (given)" in shown
    assert "ignored: --config_preset" in shown  # a checkpoint brings its own architecture
    shown = plan_run(["--output_dir", "unused", "--use_cpu", "true"]).describe()
    assert "from scratch" in shown and "learning_rate 0.002 (from-scratch default)" in shown
    assert "mlm_probability 0.3 (from-scratch default)" in shown and "max_steps 12000 (from-scratch default)" in shown


def test_a_continued_run_prints_its_defaults_and_the_card_records_them(tiny_checkpoint, tmp_path, capfd):
    import shutil

    from mlm_suite.jobs.pretrain import main

    corpus = write_text(tmp_path / "train.txt", make_documents(20, seed=3))
    base = shutil.copytree(tiny_checkpoint, tmp_path / "base")
    (base / "README.md").write_text("---\nlicense: mit\n---\n# base\n", encoding="utf-8")  # the base's card: its licence
    output_dir = tmp_path / "out"
    argv = [
        "--output_dir", str(output_dir), "--model_name_or_path", str(base), "--train_file", str(corpus),
        "--max_steps", "2", "--max_seq_length", "32", "--per_device_train_batch_size", "4",
        "--validation_split_percentage", "20", "--fill_mask_probes", "1", "--eval_strategy", "no",
        "--report_to", "none", "--disable_tqdm", "true", "--dataloader_pin_memory", "false", "--use_cpu", "true",
    ]  # fmt: skip
    assert main(argv) == 0
    printed = capfd.readouterr().err
    assert "learning_rate 0.0003 (continued-pretraining default)" in printed
    assert "mlm_probability 0.15 (continued-pretraining default)" in printed and "max_steps 2 (given)" in printed
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert "0.0003 (continued-pretraining default)" in card
    assert "15% of the tokens in training (continued-pretraining default)" in card
    assert "(--max_steps 2 (given))" in card
    metadata = assert_valid_model_card(card)
    assert metadata["license"] == "mit" and "base_model" not in metadata  # the base's licence; a local folder is no Hub id


@pytest.mark.slow  # over 10 s on 2 cores
def test_the_continued_defaults_benchmark_scores_every_run_on_the_same_masks(tiny_checkpoint, tmp_path):
    """benchmarks/bench_continued_defaults.py on a tiny checkpoint and corpus, two steps per run."""
    import json
    import sys


    corpus = write_text(tmp_path / "train.txt", make_documents(20, seed=3))
    bench = load_benchmark("bench_continued_defaults")
    argv = [
        "--checkpoint", str(tiny_checkpoint), "--steps", "2", "--batch", "4", "--learning_rates", "1e-4",
        "--mlm_probabilities", "0.15", "--max_eval_samples", "8", "--output_dir", str(tmp_path / "bench"),
        "--markdown", str(tmp_path / "table.md"),
        "--", "--train_file", str(corpus), "--max_seq_length", "32", "--validation_split_percentage", "20",
        "--fill_mask_probes", "1", "--use_cpu", "true", "--report_to", "none", "--dataloader_pin_memory", "false",
    ]  # fmt: skip
    try:
        assert bench.main(argv) == 0
    finally:
        sys.modules.pop("bench_continued_defaults", None)
    rows = json.loads((tmp_path / "bench" / "results.json").read_text())["rows"]
    assert [row["run"] for row in rows] == [
        "plain checkpoint (no continued pretraining)", "lr 0.002, masks 30% (from-scratch defaults)", "lr 0.0001, masks 15%"
    ]  # fmt: skip
    assert len({row["mask_tokens"] for row in rows}) == 1 and len({row["baseline"] for row in rows}) == 1
    assert rows[0]["embedding_shift"] == 0.0 < rows[2]["embedding_shift"] < rows[1]["embedding_shift"]
    assert "| lr 0.0001, masks 15% |" in (tmp_path / "table.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--max_steps", "0"], r"--max_steps must be positive \(or -1: --num_train_epochs decides\), got 0"),
        (["--max_steps", "-5"], "--max_steps must be positive"),
        (["--save_steps", "-1"], "--save_steps must be positive, got -1"),
        (["--eval_steps", "0"], "--eval_steps must be positive, got 0"),
        (["--logging_steps", "-2"], "--logging_steps must be positive, got -2"),
    ],
)
def test_step_counts_that_cannot_train_are_refused_while_parsing(tmp_path, flags, message):
    from mlm_suite.errors import UsageError

    with pytest.raises(UsageError, match=message):
        parse_arguments(["--output_dir", str(tmp_path / "out"), "--use_cpu", "true", *flags])
    assert not (tmp_path / "out").exists()


def test_finetuning_flattens_training_batches_on_a_gpu_only_unless_told(monkeypatch):
    from mlm_suite.jobs.finetune_cls import ClassificationTrainingArguments

    assert ClassificationTrainingArguments(output_dir="unused").flatten_batches is False  # CPU
    assert ClassificationTrainingArguments(output_dir="unused", flatten_batches=True).flatten_batches is True
    monkeypatch.setattr(ClassificationTrainingArguments, "device", property(lambda self: torch.device("cuda")))
    assert ClassificationTrainingArguments(output_dir="unused").flatten_batches is True
    assert ClassificationTrainingArguments(output_dir="unused", flatten_batches=False).flatten_batches is False


def test_only_mlm_suite_heads_without_a_crf_train_on_flattened_batches():
    from mlm_suite.jobs.common.finetune_training import trains_flattened

    def model(model_type: str = "mlm_suite", **config) -> SimpleNamespace:
        return SimpleNamespace(config=SimpleNamespace(model_type=model_type, **config))

    flatten, pad = SimpleNamespace(flatten_batches=True), SimpleNamespace(flatten_batches=False)
    assert trains_flattened(model(), flatten) and trains_flattened(model(use_crf=False), flatten)
    assert not trains_flattened(model(), pad)
    assert not trains_flattened(model(use_crf=True), flatten)  # the CRF scores whole padded sequences
    assert not trains_flattened(model("bert"), flatten)  # HF BERT reads padded batches only


def test_early_stopping_is_set_where_the_finetuning_arguments_are_built():
    """``--early_stopping_patience`` brings an evaluation every epoch (unless ``--eval_strategy`` says otherwise) and
    the checkpoints and best model early stopping needs; the score it watches goes into a derived copy."""
    from mlm_suite.jobs.common.arguments import derived_training_arguments
    from mlm_suite.jobs.finetune_cls import ClassificationTrainingArguments
    from mlm_suite.jobs.common.finetune_training import early_stopping

    plain = ClassificationTrainingArguments(output_dir="unused")
    assert plain.eval_strategy == "no" and not plain.load_best_model_at_end and early_stopping(plain, "f1") == (plain, [])
    patient = ClassificationTrainingArguments(output_dir="unused", early_stopping_patience=2)
    assert patient.eval_strategy == "epoch" == patient.save_strategy
    assert patient.load_best_model_at_end and patient.save_total_limit == 1
    assert patient.restore_callback_states_from_checkpoint
    steps = ClassificationTrainingArguments(output_dir="unused", early_stopping_patience=2, eval_strategy="steps",
                                            eval_steps=3)
    assert (steps.save_strategy, steps.save_steps) == ("steps", 3)
    patient.flags_given, patient.data_flags = frozenset({"early_stopping_patience"}), {"seed": 42}
    trainer_args, callbacks = early_stopping(patient, "accuracy")
    assert (trainer_args.metric_for_best_model, trainer_args.greater_is_better) == ("accuracy", True)
    assert [type(callback).__name__ for callback in callbacks] == ["EarlyStoppingCallback"]
    assert patient.metric_for_best_model is None  # the parsed arguments stay as parsed
    assert (trainer_args.flags_given, trainer_args.data_flags) == (patient.flags_given, patient.data_flags)
    stage = derived_training_arguments(patient, output_dir="elsewhere")
    assert stage.output_dir == "elsewhere" and stage.data_flags == {"seed": 42} and patient.output_dir == "unused"


def test_the_values_a_finetuning_trainer_must_see_are_set_as_the_arguments_are_built():
    from mlm_suite.jobs.finetune_cls import ClassificationTrainingArguments
    from mlm_suite.jobs.finetune_ner import NerTrainingArguments
    from mlm_suite.jobs.finetune_retrieval import RetrievalTrainingArguments

    # Labels under their column name: the pair head's forward takes **kwargs, where the Trainer finds no label column.
    assert ClassificationTrainingArguments(output_dir="unused").label_names == ["labels"]
    assert ClassificationTrainingArguments(output_dir="unused", label_names=["y"]).label_names == ["y"]
    assert NerTrainingArguments(output_dir="unused").label_names is None
    retrieval = RetrievalTrainingArguments(output_dir="unused")
    assert retrieval.label_names == ["labels"] and retrieval.remove_unused_columns is False
    best = RetrievalTrainingArguments(output_dir="unused", load_best_model_at_end=True, eval_strategy="epoch",
                                      save_strategy="epoch")
    assert (best.metric_for_best_model, best.greater_is_better) == ("mrr@10", True)  # not the loss it has not
