"""End-to-end tests of the pretraining job (``mlm_suite.jobs.pretrain``) on tiny models and corpora.

Every run uses a 2-layer, hidden-64 model with dropout off, a few optimizer steps and short rows,
so the whole file runs in well under two minutes on two CPU cores.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from mlm_suite import MlmSuiteForMaskedLM, MlmSuiteForPreTraining
from mlm_suite.cards.rendering import table_cell
from mlm_suite.jobs.pretrain import main
from mlm_suite.jobs.common.output_folder import output_folders_released
from mlm_suite.model import AUTO_CLASSES
from tests.helpers import (
    BERT_ARCHITECTURE,
    assert_linked_png,
    assert_valid_model_card,
    job_args,
    make_documents,
    max_difference,
    read_json,
    repetitive_documents,
    results_of,
    train_byte_level_bpe,
    train_sentencepiece_unigram,
    weights,
    write_text,
)


def assert_complete_checkpoint(output_dir: Path, architecture: str) -> dict:
    """The folder holds weights, config with a full auto_map, code, tokenizer, card, results and plot."""
    for name in (
        "model.safetensors",
        "configuration_mlm_suite.py",
        "modeling_mlm_suite.py",
        "tokenizer.json",
        "tokenizer_config.json",
        "train_results.json",
        "eval_results.json",
        "trainer_state.json",
    ):
        assert (output_dir / name).is_file(), name
    config = read_json(output_dir / "config.json")
    assert config["architectures"] == [architecture]
    assert set(config["auto_map"]) == {"AutoConfig", *AUTO_CLASSES}
    assert "[MASK] accuracy" in assert_linked_png(output_dir, "training_curves.png")

    results = read_json(output_dir / "all_results.json")
    scores = ("eval_mlm_loss", "perplexity", "eval_mask_accuracy", "eval_mask_top5_accuracy", "eval_mask_baseline_accuracy")
    for key in ("eval_loss", "train_loss", *scores):
        assert math.isfinite(results[key]), key
    assert results["perplexity"] == pytest.approx(math.exp(results["eval_mlm_loss"]))
    assert 0.0 <= results["eval_mask_accuracy"] <= results["eval_mask_top5_accuracy"] <= 1.0
    assert 0.0 <= results["eval_mask_baseline_accuracy"] <= 1.0
    counts = [results[f"eval_{kind}_tokens"] for kind in ("mask", "random", "kept")]
    assert sum(counts) == results["eval_selected_tokens"] and counts[0] > counts[1] + counts[2]

    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert re.search(r"\$\w", card) is None, "unfilled model-card placeholder"
    for key in ("eval_mask_accuracy", "eval_mask_baseline_accuracy", "eval_kept_accuracy"):
        assert f"{results[key]:.4f}" in card, key
    assert "| num_hidden_layers | 2 |" in card
    metadata = assert_valid_model_card(card)  # from scratch on local files: the project's licence, no Hub data
    assert (metadata["pipeline_tag"], metadata["license"]) == ("fill-mask", "apache-2.0")
    assert "base_model" not in metadata and "datasets" not in metadata
    scores = results_of(metadata)
    assert scores[("validation", "accuracy at [MASK] positions")] == results["eval_mask_accuracy"]
    assert scores[("validation", "perplexity")] == results["perplexity"]

    probe = read_json(output_dir / "fill_mask_probe.json")
    assert probe and all(len(item["predictions"]) == 5 and "[MASK]" in item["sentence"] for item in probe)
    answer, predictions = table_cell(probe[0]["answer"]), table_cell(", ".join(probe[0]["predictions"]))
    assert "Fill-mask probe" in card and f"| {answer} | {predictions} |" in card

    history = read_json(output_dir / "trainer_state.json")["log_history"]
    assert any("loss" in entry for entry in history) and any("eval_loss" in entry for entry in history)
    return results


@pytest.fixture(scope="module")
def packed_run(tmp_path_factory, corpus) -> Path:
    """A packed MLM run with the MiniLM tokenizer and a held-out percentage split."""
    output_dir = tmp_path_factory.mktemp("runs") / "mlm_packed"
    extra = ["--train_file", str(corpus["train"]), "--validation_split_percentage", "20", "--packing", "--max_steps", "4"]
    extra += ["--train_tokenizer", "false"]
    assert main(job_args(output_dir, *extra)) == 0
    return output_dir


@pytest.mark.slow
def test_mlm_with_packing_writes_a_complete_checkpoint(packed_run):
    results = assert_complete_checkpoint(packed_run, "MlmSuiteForMaskedLM")
    assert "eval_nsp_accuracy" not in results
    assert read_json(packed_run / "config.json")["classifier_pooling"] == "mean"  # MLM alone never trains [CLS]
    assert read_json(packed_run / "trainer_state.json")["global_step"] == 4


@pytest.mark.multiprocess
@pytest.mark.slow
def test_checkpoint_loads_as_remote_code_without_mlm_suite(packed_run, tmp_path):
    """The folder loads with trust_remote_code where mlm_suite cannot be imported, and gives the same logits."""
    script = (
        "import sys; sys.modules['mlm_suite'] = None\n"
        "import torch\n"
        "from transformers import AutoModelForMaskedLM, AutoTokenizer\n"
        "folder, out = sys.argv[1], sys.argv[2]\n"
        "model = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()\n"
        "assert type(model).__module__.startswith('transformers_modules'), type(model).__module__\n"
        "batch = AutoTokenizer.from_pretrained(folder)(['the film was [MASK] good .'], return_tensors='pt')\n"
        "with torch.inference_mode():\n"
        "    torch.save(model(**batch).logits, out)\n"
    )
    out = tmp_path / "logits.pt"
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-c", script, str(packed_run), str(out)], check=True, env=env, cwd=tmp_path)

    model = MlmSuiteForMaskedLM.from_pretrained(packed_run).eval()
    batch = AutoTokenizer.from_pretrained(packed_run)(["the film was [MASK] good ."], return_tensors="pt")
    with torch.inference_mode():
        expected = model(**batch).logits
    torch.testing.assert_close(torch.load(out), expected)


def test_mlm_nsp_with_whole_word_masking(tmp_path):
    """JSON-lines data, a trained WordPiece vocabulary, NSP pairs and whole-word masks; a one-sentence document
    (no true pair) is left out with a warning."""
    train = tmp_path / "train.jsonl"
    documents = ["A document of one sentence only.", *make_documents(24, sentences=4)]
    train.write_text("".join(json.dumps({"text": text}) + "\n" for text in documents))
    output_dir = tmp_path / "nsp"
    extra = ["--train_file", str(train), "--validation_split_percentage", "25", "--objective", "mlm_nsp"]
    extra += ["--masking", "whole_word", "--vocab_size", "120", "--max_steps", "4"]
    with pytest.warns(UserWarning, match="skipped 1 of .* documents with fewer than 2 sentences"):
        assert main(job_args(output_dir, *extra)) == 0

    results = assert_complete_checkpoint(output_dir, "MlmSuiteForPreTraining")
    assert 0.0 <= results["eval_nsp_accuracy"] <= 1.0
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert "next-sentence accuracy" in card
    assert results_of(assert_valid_model_card(card))[("validation", "next-sentence accuracy")] == results["eval_nsp_accuracy"]
    assert len(AutoTokenizer.from_pretrained(output_dir)) == 120
    assert isinstance(MlmSuiteForPreTraining.from_pretrained(output_dir), MlmSuiteForPreTraining)
    assert read_json(output_dir / "config.json")["classifier_pooling"] == "cls"  # NSP trains [CLS] and the pooler


@pytest.mark.parametrize(
    ("train", "rows", "architecture"),
    [
        (train_byte_level_bpe, ["--objective", "mlm_nsp", "--masking", "whole_word"], "MlmSuiteForPreTraining"),
        (train_sentencepiece_unigram, ["--packing", "--masking", "span"], "MlmSuiteForMaskedLM"),
    ],
    ids=["bpe-nsp-whole-word", "sentencepiece-packing-span"],
)
def test_word_masking_of_pairs_and_packed_rows_with_a_non_wordpiece_tokenizer(tmp_path, train, rows, architecture):
    """NSP pairs and packed rows carry the tokenizer's word ids, so word masking needs no WordPiece vocabulary."""
    documents = make_documents(24, sentences=4)
    tokenizer_dir = tmp_path / "tokenizer"
    train(documents).save_pretrained(tokenizer_dir)
    extra = ["--train_file", str(write_text(tmp_path / "train.txt", documents)), "--validation_split_percentage", "25"]
    extra += ["--tokenizer_name", str(tokenizer_dir), "--max_steps", "3", "--fill_mask_probes", "0", *rows]
    output_dir = tmp_path / "run"
    assert main(job_args(output_dir, *extra)) == 0
    assert read_json(output_dir / "config.json")["architectures"] == [architecture]
    assert read_json(output_dir / "trainer_state.json")["global_step"] == 3
    results = read_json(output_dir / "all_results.json")
    assert math.isfinite(results["eval_mlm_loss"]) and results["eval_mask_tokens"] > 0


@pytest.fixture(scope="module")
def tokenizer_without_mask(tmp_path_factory, minilm_dir) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    tokenizer.mask_token = None
    folder = tmp_path_factory.mktemp("tokenizer_without_mask")
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "case, extra, message",
    [
        ("empty", ["--train_file", "{empty}"], "holds no text"),
        ("missing", ["--train_file", "{missing}"], "no such file"),
        ("nsp_short", ["--train_file", "{one_sentence}", "--objective", "mlm_nsp"], "at least 2 documents of >= 2 sentences"),
        ("nsp_packing", ["--train_file", "{train}", "--objective", "mlm_nsp", "--packing"], "cannot be combined"),
        (
            "positions",
            ["--train_file", "{train}", "--max_seq_length", "128", "--position_embedding_type", "absolute"],
            "max_position_embeddings",
        ),
        ("eval_rate", ["--train_file", "{train}", "--eval_mlm_probability", "1.5"], "eval_mlm_probability"),
        ("budget", ["--train_file", "{train}", "--max_train_minutes", "0"], "max_train_minutes"),
        ("patience", ["--train_file", "{train}", "--early_stopping_patience", "0"], "at least 1"),
        (
            "tokenizer_length",
            ["--train_file", "{train}", "--max_seq_length", "600", "--config_overrides", "max_position_embeddings=1024"],
            "model_max_length",
        ),
        ("no_mask", ["--train_file", "{train}", "--tokenizer_name", "{no_mask}"], "no mask token"),
        ("vocab", ["--train_file", "{train}", "--train_tokenizer", "false", "--vocab_size", "100"], "contradicts"),
        ("overrides", ["--train_file", "{train}", "--config_overrides", "hidden_size=65"], "divisible"),
    ],
)
def test_bad_input_fails_before_writing_anything(tmp_path, corpus, tokenizer_without_mask, case, extra, message):
    paths = {
        "empty": write_text(tmp_path / "empty.txt", ["  \n"]),
        "missing": tmp_path / "missing.txt",
        "one_sentence": write_text(tmp_path / "short.txt", ["One sentence only.", "Another one.", *make_documents(1)]),
        "train": corpus["train"],
        "no_mask": tokenizer_without_mask,
    }
    output_dir = tmp_path / "out"
    argv = job_args(output_dir, "--max_steps", "1") + [value.format(**paths) for value in extra]
    with pytest.raises(ValueError, match=message), output_folders_released():  # released as run_job releases it
        main(argv)
    assert not output_dir.exists()


@pytest.mark.slow
def test_gradient_accumulation_matches_one_large_batch(tmp_path, corpus):
    """8 rows × 1 micro-batch and 2 rows × 4 micro-batches make the same optimizer step.

    The loss is a sum over masked tokens divided by the Trainer's ``num_items_in_batch`` (all
    micro-batches), and masks are seeded per example, so both runs compute the same gradient up to
    float32 summation order: weights agree to 1e-5 after one AdamW step of lr 1e-3. AdamW's epsilon
    is raised to 1e-6 because its first step, lr * g / (|g| + eps), turns summation noise in
    gradients near 1e-8 into differences of a few percent of lr.
    """
    common = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"])]
    common += ["--max_steps", "1", "--max_eval_samples", "4", "--train_tokenizer", "false", "--adam_epsilon", "1e-6"]
    common += BERT_ARCHITECTURE
    runs = {}
    for batch, accumulation in ((8, 1), (2, 4)):
        output_dir = tmp_path / f"batch{batch}x{accumulation}"
        argv = job_args(output_dir, *common) + [
            "--per_device_train_batch_size", str(batch), "--gradient_accumulation_steps", str(accumulation)
        ]  # fmt: skip
        assert main(argv) == 0
        runs[batch] = output_dir
    first_logs = [read_json(runs[batch] / "trainer_state.json")["log_history"][0] for batch in (8, 2)]
    assert first_logs[0]["learning_rate"] > 0 and first_logs[0]["grad_norm"] > 0
    assert first_logs[1]["loss"] == pytest.approx(first_logs[0]["loss"], rel=1e-5)
    assert first_logs[1]["grad_norm"] == pytest.approx(first_logs[0]["grad_norm"], rel=1e-4)
    assert max_difference(weights(runs[8]), weights(runs[2])) < 1e-5


@pytest.mark.slow
def test_resume_from_checkpoint_matches_an_uninterrupted_run(tmp_path, corpus):
    """Resuming at step 2 of 4 (the run crosses an epoch boundary at step 3) ends where the uninterrupted run ends.

    Masks are a function of (seed, epoch, example index) and the checkpoint restores optimizer,
    scheduler, sampler and RNG states, so the weights agree to 1e-6.
    """
    documents = make_documents(12, seed=3)  # 12 rows of 4: an epoch is 3 steps
    train = write_text(tmp_path / "train.txt", documents)
    common = ["--train_file", str(train), "--validation_file", str(corpus["validation"]), "--max_steps", "4"]
    common += ["--max_eval_samples", "4", "--eval_strategy", "no", "--train_tokenizer", "false"]
    full = tmp_path / "full"
    assert main(job_args(full, *common, "--save_strategy", "steps", "--save_steps", "2")) == 0
    resumed = tmp_path / "resumed"
    assert main(job_args(resumed, *common, "--resume_from_checkpoint", str(full / "checkpoint-2"))) == 0

    assert read_json(resumed / "trainer_state.json")["global_step"] == 4
    assert max_difference(weights(full), weights(resumed)) < 1e-6
    # The resumed run really started at the checkpoint: its steps 3 and 4 repeat the full run's losses.
    losses = [
        {entry["step"]: entry["loss"] for entry in read_json(run / "trainer_state.json")["log_history"] if "loss" in entry}
        for run in (full, resumed)
    ]
    assert [losses[1][step] for step in (3, 4)] == pytest.approx([losses[0][step] for step in (3, 4)], rel=1e-5)


def test_steps_with_nothing_to_predict_are_left_out_of_the_losses(tmp_path, corpus):
    """At a 1 % masking rate some batches select no token: such a step has a zero gradient, logs no loss (no NaN,
    no 0), and train_loss is the mean of the other steps' losses."""
    output_dir = tmp_path / "rare_masks"
    extra = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"]), "--max_steps", "8"]
    extra += ["--mlm_probability", "0.01", "--eval_strategy", "no", "--vocab_size", "200", "--fill_mask_probes", "0"]
    assert main(job_args(output_dir, *extra)) == 0
    history = [entry for entry in read_json(output_dir / "trainer_state.json")["log_history"] if "grad_norm" in entry]
    assert [entry["step"] for entry in history] == list(range(1, 9))
    empty = [entry for entry in history if entry["grad_norm"] == 0.0]
    losses = [entry["loss"] for entry in history if entry["grad_norm"] > 0.0]
    assert empty and losses and all("loss" not in entry for entry in empty)
    assert all(math.isfinite(loss) and loss > 1.0 for loss in losses)
    assert read_json(output_dir / "train_results.json")["train_loss"] == pytest.approx(sum(losses) / len(losses))
    assert all(tensor.isfinite().all() for tensor in weights(output_dir).values())


@pytest.mark.multiprocess
def test_loader_workers_and_flattened_batches_train_exactly_like_the_default(tmp_path, corpus):
    """Collating in 2 worker processes, or flattening the batches, changes nothing in what is trained: masks are
    a function of (seed, epoch, example index), not of the process that draws them. On CPU both are off by default."""
    common = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"]), "--max_steps", "4"]
    common += ["--max_eval_samples", "4", "--eval_strategy", "no", "--train_tokenizer", "false", "--fill_mask_probes", "0"]
    common += BERT_ARCHITECTURE  # see BERT_ARCHITECTURE: post-norm keeps summation-order noise out of AdamW's first step
    runs = {}
    for name, extra in {"default": [], "workers": ["--dataloader_num_workers", "2"], "flat": ["--flatten_batches"]}.items():
        runs[name] = tmp_path / name
        assert main(job_args(runs[name], *common, *extra)) == 0
    arguments = read_json(runs["default"] / "training_args.json")
    assert arguments["dataloader_num_workers"] == 0 and arguments["logging_nan_inf_filter"] is False  # CPU defaults
    assert max_difference(weights(runs["default"]), weights(runs["workers"])) == 0.0
    assert max_difference(weights(runs["default"]), weights(runs["flat"])) < 1e-5


@pytest.mark.slow
def test_evaluation_masking_rate_does_not_follow_the_training_rate(tmp_path, corpus):
    """Eval masks depend on --eval_mlm_probability only: training at 15 % or 40 % scores the same positions."""
    common = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"])]
    common += ["--max_steps", "1", "--train_tokenizer", "false", "--fill_mask_probes", "0"]
    counts = {}
    for name, rates in {"train15": ("0.15", "0.15"), "train40": ("0.4", "0.15"), "eval30": ("0.4", "0.3")}.items():
        output_dir = tmp_path / name
        assert main(job_args(output_dir, *common, "--mlm_probability", rates[0], "--eval_mlm_probability", rates[1])) == 0
        results = read_json(output_dir / "all_results.json")
        counts[name] = [results[f"eval_{kind}_tokens"] for kind in ("mask", "random", "kept")]
    assert counts["train15"] == counts["train40"]
    assert sum(counts["eval30"]) == pytest.approx(2 * sum(counts["train15"]), rel=0.1)


def test_early_stopping_keeps_the_best_model(tmp_path, corpus):
    """With learning rate 0 the [MASK] accuracy never improves after the first evaluation: patience 1 stops at
    the second evaluation (step 4 of 20)."""
    common = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"])]
    common += ["--max_steps", "20", "--learning_rate", "0", "--train_tokenizer", "false", "--fill_mask_probes", "0"]
    output_dir = tmp_path / "early"
    assert main(job_args(output_dir, *common, "--early_stopping_patience", "1")) == 0
    state = read_json(output_dir / "trainer_state.json")
    assert state["global_step"] == 4
    assert state["best_metric"] == read_json(output_dir / "all_results.json")["eval_mask_accuracy"]


def test_time_budget_replaces_the_step_count(tmp_path, corpus):
    """--max_train_minutes lifts the job's default --max_steps and ends the run at its plan (the schedule
    itself is tested with a fake clock in tests/training/test_controls.py)."""
    common = ["--train_file", str(corpus["train"]), "--validation_file", str(corpus["validation"])]
    common += ["--train_tokenizer", "false", "--fill_mask_probes", "0", "--eval_strategy", "no"]
    output_dir = tmp_path / "budget"
    assert main(job_args(output_dir, *common, "--max_train_minutes", "0.05")) == 0  # 3 s
    state = read_json(output_dir / "trainer_state.json")
    plan = next(entry for entry in state["log_history"] if "time_budget_planned_steps" in entry)
    assert plan["time_budget_seconds"] == 3.0
    assert state["global_step"] == state["max_steps"] == plan["step"] == plan["time_budget_planned_steps"]
    # Stopped by the budget: either the time is up, or less than one step's time was left.
    assert plan["time_budget_training_seconds"] >= 3.0 * (1 - 1 / plan["step"]) - 0.5
    results = read_json(output_dir / "all_results.json")
    assert results["train_samples_per_second"] == pytest.approx(plan["step"] * 4 / results["train_runtime"], rel=1e-3)
    # The Trainer's own end-of-training line says the same (it used to count all of the unbounded --max_steps).
    logged = next(entry for entry in state["log_history"] if "train_runtime" in entry)
    assert logged["train_samples_per_second"] == results["train_samples_per_second"]


@pytest.mark.slow
def test_pretraining_learns_to_use_context(tmp_path):
    """A few hundred steps on a tiny, highly repetitive corpus: [MASK] accuracy far above the baseline,
    and the probe's answers depend on the sentence. Guards against shipping a job that learns nothing."""
    train = write_text(tmp_path / "train.txt", repetitive_documents(200, seed=0))
    validation = write_text(tmp_path / "validation.txt", repetitive_documents(20, seed=1))
    output_dir = tmp_path / "learns"
    argv = job_args(output_dir, "--train_file", str(train), "--validation_file", str(validation), "--vocab_size", "120")
    argv += ["--max_steps", "300", "--eval_strategy", "no", "--learning_rate", "3e-3", "--per_device_train_batch_size", "16"]
    assert main(argv) == 0
    results = read_json(output_dir / "all_results.json")
    assert results["eval_mask_accuracy"] > results["eval_mask_baseline_accuracy"] + 0.3
    assert results["fill_mask_probe_distinct_top1"] >= 3


@pytest.mark.compile
@pytest.mark.slow  # over 10 s on 2 cores
def test_pretrain_job_on_flattened_compiled_batches_takes_the_padded_runs_steps(tmp_path):
    corpus = write_text(tmp_path / "train.txt", make_documents(30, seed=1))
    common = ["--train_file", str(corpus), "--validation_split_percentage", "20", "--packing", "--max_steps", "3"]
    common += ["--train_tokenizer", "false", "--max_eval_samples", "4", *BERT_ARCHITECTURE]
    runs = {
        "padded": [],
        "flattened": ["--flatten_batches"],
        "compiled": ["--flatten_batches", "--torch_compile", "--torch_compile_backend", "aot_eager"],
    }
    for name, flags in runs.items():
        assert main(job_args(tmp_path / name, *common, *flags)) == 0
    losses = {name: [e["loss"] for e in read_json(tmp_path / name / "trainer_state.json")["log_history"] if "loss" in e]
              for name in runs}
    assert len(losses["padded"]) == 3
    for name in ("flattened", "compiled"):
        assert losses[name] == pytest.approx(losses["padded"], rel=1e-5), name
        assert max_difference(weights(tmp_path / name), weights(tmp_path / "padded")) < 1e-5, name
