"""benchmarks/bench_pretrain_base.py --quick: the job's runs against their bare loops and an HF Trainer job, and what
the job reports against what the benchmark measures itself. No timing asserts."""

from __future__ import annotations

import re
import sys

import pytest
from transformers import BertConfig, BertForMaskedLM

from mlm_suite import MlmSuiteConfig, MlmSuiteForMaskedLM
from mlm_suite.training.throughput import Throughput
from tests.helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    yield load_benchmark("bench_pretrain_base")
    sys.modules.pop("bench_pretrain_base", None)
    sys.modules.pop("bench_job_throughput", None)


def test_non_embedding_parameters_count_a_tied_decoder_once_as_transformers_does(bench):
    for model in (MlmSuiteForMaskedLM(MlmSuiteConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32)),
                  BertForMaskedLM(BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=32))):  # fmt: skip
        assert bench.non_embedding_parameters(model) == model.num_parameters(exclude_embeddings=True)


def test_reported_against_measured_cells(bench):
    run = dict(reported_tokens=990.0, measured_tokens=1000.0, reported_mfu=0.4, measured_mfu=0.41)
    assert bench.reported_against_measured(run) == "0.990 | 40.0% / 41.0%"
    run = dict(reported_tokens=None, measured_tokens=1000.0, reported_mfu="unknown", measured_mfu=None)
    assert bench.reported_against_measured(run) == "- | unknown / -"


@pytest.mark.slow  # about 20 s on 2 cores
@pytest.mark.compile  # the graphs run, on torch.compile's eager backend
def test_quick_run_reports_each_run_and_the_job_s_own_figures_beside_the_measured(bench, tmp_path):
    markdown = tmp_path / "base.md"
    assert bench.main(["--quick", "--runs", "default", "graphs", "--markdown", str(markdown)]) == 0
    rows = [line for line in markdown.read_text(encoding="utf-8").splitlines() if line.startswith("| 8 |")]
    assert [row.split(" | ")[1] for row in rows] == [
        "default flags", next(row.split(" | ")[1] for row in rows if "reduce-overhead" in row),
        "HF BertForMaskedLM Trainer (15 % masks)",
    ]
    for row in rows[:2]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        ratio, mfu = cells[7], cells[8]
        assert float(ratio) > 0  # the job's train_tokens_per_second over the benchmark's own measurement
        assert mfu == "unknown / -"  # no dense bf16 peak for a CPU
        assert re.fullmatch(r"\d+\.\d\d", cells[5])  # job / bare


@pytest.mark.parametrize("flags", [[], ["--max_tokens_per_batch", "96"]], ids=["padded", "token-budget"])
def test_the_job_counts_the_real_tokens_the_benchmark_counts_in_the_same_batches(bench, tmp_path, flags):
    """The job's train_tokens_per_second rests on its count of real tokens (a padded batch's attention mask); the
    benchmark counts the same batches its own way (their non-pad ids) and gets the same number."""
    from mlm_suite.jobs import pretrain

    (tmp_path / "train.txt").write_text("\n\n".join(f"document {i} " + "word " * (3 + i % 20) for i in range(60)))
    args = ["--output_dir", str(tmp_path / "out"), "--train_file", str(tmp_path / "train.txt"), "--use_cpu", "true",
            "--max_steps", "6", "--per_device_train_batch_size", "4", "--max_seq_length", "32", "--vocab_size", "80",
            "--config_overrides", "num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64",
            "--fill_mask_probes", "0", "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", *flags]  # fmt: skip
    with bench.capture_trainer() as trainers, bench.steady_clocks(warmup=0) as clocks:
        assert pretrain.main(args) == 0
    counted = [int(tokens) for tokens in clocks[-1].tokens]
    assert len(counted) == 6 and len(set(counted)) > 1  # one per step, rows of several lengths
    assert sum(counted) == trainers[-1].feature(Throughput).real_tokens_counted()
