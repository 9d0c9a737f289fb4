"""benchmarks/bench_default_pooling.py: the choice is made on validation, averaged over the two jobs, and the paired
differences are mean − cls seed by seed."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import load_benchmark


@pytest.fixture(scope="module")
def bench():
    yield load_benchmark("bench_default_pooling")
    sys.modules.pop("bench_default_pooling", None)


def write_run(bench, root, job, pooling, seed, validation, test):
    folder = bench.run_folder(root, job, pooling, seed)
    folder.mkdir(parents=True)
    (folder / "all_results.json").write_text(json.dumps({"eval_accuracy": validation, "test_accuracy": test}))


def test_the_pooling_with_the_higher_validation_mean_over_both_jobs_is_chosen_whatever_the_test_says(bench, tmp_path):
    # cls wins sentiment by 1 point, mean wins pairs by 3: mean is ahead on average. Test accuracy points the other way.
    for seed, offset in ((1, 0.0), (2, 0.02)):
        write_run(bench, tmp_path, "finetune-cls", "cls", seed, 0.81 + offset, 0.90)
        write_run(bench, tmp_path, "finetune-cls", "mean", seed, 0.80 + offset, 0.70)
        write_run(bench, tmp_path, "finetune-pair", "cls", seed, 0.60 + offset, 0.90)
        write_run(bench, tmp_path, "finetune-pair", "mean", seed, 0.63 + offset, 0.50)
    table = bench.table(tmp_path, [1, 2])
    assert "| finetune-cls | cls | 2 | 0.8200 ± 0.0141 | 0.9000 ± 0.0000 |" in table
    assert "| finetune-pair | validation | 0.0300 ± 0.0000 | +0.0300, +0.0300 |" in table
    assert "| finetune-cls | test | -0.2000 ± 0.0000 | -0.2000, -0.2000 |" in table
    assert table.endswith("cls 0.7150, mean 0.7250; chosen: **mean**.")


def test_no_choice_is_printed_before_both_poolings_ran_on_both_jobs(bench, tmp_path):
    write_run(bench, tmp_path, "finetune-cls", "cls", 1, 0.8, 0.8)
    write_run(bench, tmp_path, "finetune-cls", "mean", 1, 0.9, 0.9)
    write_run(bench, tmp_path, "finetune-pair", "mean", 1, 0.6, 0.6)
    table = bench.table(tmp_path, [1, 2])
    assert "chosen" not in table and "| finetune-pair | validation |" not in table
