"""Label-efficiency curves (issue 25): the class-balanced nested subset sampler, the benchmark's statistics, and a
smoke run of benchmarks/bench_label_efficiency.py's fine-tuning plumbing on a tiny model (a few steps per run)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from tests.helpers import load_benchmark
from mlm_suite import MlmSuiteConfig, MlmSuiteModel
from mlm_suite.data.inputs import downloads
from mlm_suite.data.finetuning.subsets import balanced_nested_subsets, class_quotas
from mlm_suite.data.inputs.readers import split_80_10_10

SIZES = [32, 64, 128, 256, 512, 1024]


@pytest.fixture(scope="module")
def bench():
    yield load_benchmark("bench_label_efficiency")
    sys.modules.pop("bench_label_efficiency", None)


def sentiment_pool():
    """The sentiment labels, and the train/validation/test index lists of the benchmark's 80/10/10 split."""
    labels = [label for label, _ in downloads.pang_lee_sentences()]
    train, validation, test = split_80_10_10(list(range(len(labels))), 42)
    return labels, train, validation, test


# --------------------------------------------------------------------------------------------
# The sampler
# --------------------------------------------------------------------------------------------
def test_subsets_are_balanced_nested_and_inside_the_training_split():
    labels, train, validation, test = sentiment_pool()
    subsets = balanced_nested_subsets(labels, SIZES, seed=3, pool=train)
    assert sorted(subsets) == SIZES
    for size, indices in subsets.items():
        assert len(indices) == len(set(indices)) == size
        assert Counter(labels[index] for index in indices) == {-1: size // 2, 1: size // 2}
        assert set(indices) <= set(train)
        assert not set(indices) & (set(validation) | set(test))
    for smaller, larger in zip(SIZES, SIZES[1:]):
        assert set(subsets[smaller]) < set(subsets[larger])


def test_subsets_are_deterministic_per_seed_and_differ_across_seeds():
    labels, train, _, _ = sentiment_pool()
    first = balanced_nested_subsets(labels, [32, 256], seed=0, pool=train)
    assert first == balanced_nested_subsets(labels, [256, 32, 32], seed=0, pool=train)
    others = [balanced_nested_subsets(labels, [32, 256], seed=seed, pool=train) for seed in (1, 2, 3, 4)]
    for other in others:
        assert set(other[32]) != set(first[32]) and set(other[256]) != set(first[256])
    assert len({tuple(subsets[32]) for subsets in [first, *others]}) == 5


def test_remainder_is_spread_one_per_class_and_stays_nested():
    labels = ["a"] * 10 + ["b"] * 10 + ["c"] * 10
    subsets = balanced_nested_subsets(labels, list(range(1, 31)), seed=7)
    previous: set[int] = set()
    for size in range(1, 31):
        counts = Counter(labels[index] for index in subsets[size])
        assert sum(counts.values()) == size and max(counts.values()) - min(counts.get(c, 0) for c in "abc") <= 1
        assert previous <= set(subsets[size])
        previous = set(subsets[size])
    assert class_quotas(7, ["x", "y", "z"]) == {"x": 3, "y": 2, "z": 2}
    # which classes get the remainder is drawn per seed
    assert len({tuple(sorted(Counter(labels[i] for i in balanced_nested_subsets(labels, [1], seed)[1])))
                for seed in range(20)}) > 1


def test_subset_errors():
    labels = ["neg"] * 30 + ["pos"] * 5
    with pytest.raises(ValueError, match="larger than the pool of 35"):
        balanced_nested_subsets(labels, [36], seed=0)
    with pytest.raises(ValueError, match="needs 6 examples of class 'pos', but the pool has only 5"):
        balanced_nested_subsets(labels, [12], seed=0)
    assert len(balanced_nested_subsets(labels, [10], seed=0)[10]) == 10
    with pytest.raises(ValueError, match="larger than the pool of 4"):
        balanced_nested_subsets(labels, [8], seed=0, pool=[0, 1, 30, 31])
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="positive integers"):
            balanced_nested_subsets(labels, [bad], seed=0)
    with pytest.raises(ValueError, match="outside the 35 labels"):
        balanced_nested_subsets(labels, [2], seed=0, pool=[0, 35])
    with pytest.raises(ValueError, match="pool is empty"):
        balanced_nested_subsets(labels, [1], seed=0, pool=[])


# --------------------------------------------------------------------------------------------
# The benchmark's helpers
# --------------------------------------------------------------------------------------------
def test_training_steps_and_sizes(bench):
    assert bench.train_steps(32, 3, 32, 100) == 100  # tiny subsets still get the minimum
    assert bench.train_steps(3200, 3, 32, 100) == 300
    assert bench.train_steps(1000, 3, 32, 50) == 96  # ceil(1000 / 32) = 32 steps per epoch
    assert bench.parse_sizes(["all", "64", "32", "64"], 3200) == [32, 64, "all"]
    with pytest.raises(SystemExit, match="3200 examples"):
        bench.parse_sizes(["4000"], 3200)
    with pytest.raises(SystemExit, match="positive integers"):
        bench.parse_sizes(["many"], 3200)


def test_paired_differences_against_random_and_against_the_continued_checkpoint(bench):
    """summarise: each start against (a) per seed, and a continued start ((d), (e)) against the checkpoint it
    continued ((c), (b)); markdown prints both tables."""
    accuracy = {"random": [0.50, 0.52, 0.51], "main": [0.55, 0.56, 0.60], "main_tapt": [0.56, 0.58, 0.60]}
    runs = [{"start": start, "size": 32, "n": 32, "seed": seed, "recipe": "lr0.001_ep3", "steps": 100,
             "test_accuracy": value, "validation_accuracy": value, "scored": [400, 400], "wall_s": 1.0}
            for start, values in accuracy.items() for seed, value in enumerate(values)]
    report = bench.summarise(runs, ["random", "main", "main_tapt"], [32], [0, 1, 2])
    assert report["paired"]["main"]["32"]["differences"] == pytest.approx([0.05, 0.04, 0.09])
    assert report["paired"]["main_tapt"]["32"]["differences"] == pytest.approx([0.06, 0.06, 0.09])
    assert set(report["continued"]) == {"main_tapt"}
    assert report["continued"]["main_tapt"]["32"]["differences"] == pytest.approx([0.01, 0.02, 0.0])
    assert report["continued"]["main_tapt"]["32"]["mean"] == pytest.approx(0.01)
    text = bench.markdown({**report, "starts": ["random", "main", "main_tapt"], "sizes": [32], "runs": runs,
                           "sweep": [], "sweep_runs": [], "leakage": {}, "data": {"train": 3200, "validation": 400,
                                                                                    "test": 400},
                           "start_info": {name: {"how": "-"} for name in accuracy},
                           "config": {"seeds": [0, 1, 2], "split_seed": 42, "sweep_seeds": [0], "batch_size": 32,
                                      "min_steps": 100, "finetune_flags": ""}})
    assert "against the checkpoint it continued" in text and "(e) (b) + TAPT (train sentences) − (b)" in text
    assert "| 32 | +1.0 [" in text


def test_leakage_check_finds_held_out_sentences(bench):
    held_out = ["a b c d e f g h i", "short one"]
    report = bench.leakage_check({"clean": ["nothing here", "shorter one"],
                                  "leaky": ["x  A b c d e f g h I y", "short one"]}, held_out)
    assert report["clean"] == {"documents": 2, "exact": 0, "verbatim": 0, "checked": 1}
    assert report["leaky"]["exact"] == 1 and report["leaky"]["verbatim"] == 1


def test_real_splits_do_not_leak_into_the_reviews_or_the_tapt_corpus(bench):
    splits = bench.sentiment_splits(42)
    assert [len(splits[s]) for s in ("train", "validation", "test")] == [3200, 400, 400]
    held_out = [row["text"] for split in ("validation", "test") for row in splits[split]]
    train = [row["text"] for row in splits["train"]]
    report = bench.leakage_check({"reviews": [text for _, text in downloads.pang_lee_reviews()], "train": train},
                                 held_out)
    assert all(item["exact"] == 0 and item["verbatim"] == 0 for item in report.values()), report


# --------------------------------------------------------------------------------------------
# Smoke run
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A randomly initialised 1-layer mlm_suite encoder with the MiniLM tokenizer saved next to it."""
    folder = tmp_path_factory.mktemp("tiny_model")
    tokenizer = AutoTokenizer.from_pretrained(downloads.minilm_dir())
    config = MlmSuiteConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=48, max_position_embeddings=128)
    torch.manual_seed(0)
    MlmSuiteModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.multiprocess
@pytest.mark.slow  # 12 + 6 runs of 2-4 steps, each scoring 400 sentences: ~45 s on 2 quiet cores
def test_benchmark_end_to_end_on_a_tiny_model(bench, tiny_model, tmp_path, monkeypatch):
    """Two starts (random init and the given 'main' model), two sizes, two seeds, a two-rate sweep on seed 0,
    2-step runs: the sweep picks on validation, the chosen recipe runs on seed 1, the tables, plot and JSON appear,
    and a second invocation reuses every run."""
    out, table = tmp_path / "bench", tmp_path / "table.md"
    argv = ["--main_model", str(tiny_model), "--starts", "random", "main", "--sizes", "8", "16", "--seeds", "0", "1",
            "--sweep_seeds", "0", "--small_learning_rates", "1e-3", "3e-3", "--epochs", "1", "--min_steps", "2",
            "--batch_size", "4", "--finetune_flags", "--per_device_eval_batch_size 200 --max_seq_length 32 --max_eval_samples 200 --max_predict_samples 200",
            "--output_dir", str(out), "--markdown", str(table)]
    assert bench.main(argv) == 0
    report = json.loads((out / "results.json").read_text())
    assert report["sizes"] == [8, 16] and report["starts"] == ["random", "main"]
    assert len(report["runs"]) == 2 * 2 * 2 and len(report["sweep"]) == 2 * 2 * 2
    for seed in ("0", "1"):
        first = json.loads((out / "data" / f"seed_{seed}" / "train_8.jsonl").read_text().splitlines()[0])
        assert set(first) == {"text", "label"}
        assert report["subsets"][seed]["16"]["class_counts"] == {"negative": 8, "positive": 8}
        assert set(report["subsets"][seed]["8"]["indices"]) < set(report["subsets"][seed]["16"]["indices"])
    for start in ("random", "main"):
        for size in (8, 16):
            rows = [row for row in report["sweep"] if row["start"] == start and row["size"] == size]
            chosen = [row for row in rows if row["chosen"]]
            assert len(chosen) == 1 and chosen[0]["mean_validation"] == max(row["mean_validation"] for row in rows)
            runs = [run for run in report["runs"] if run["start"] == start and run["size"] == size]
            assert {run["recipe"] for run in runs} == {chosen[0]["recipe"]} and {run["seed"] for run in runs} == {0, 1}
            assert all(run["steps"] == size // 4 for run in runs)  # one epoch at batch 4 (at least 2 steps)
    assert set(report["paired"]) == {"main"} and set(report["paired"]["main"]) == {"8", "16"}
    assert report["leakage"]["Pang & Lee reviews ((b))"]["verbatim"] == 0
    assert not list((out / "finetune").rglob("*.safetensors"))  # fine-tuned weights deleted
    text = table.read_text()
    assert "Paired test-accuracy differences" in text and "| 16 |" in text and "lr0.001_ep1" in text
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def no_training(argv):
        raise AssertionError(f"trained again: {argv}")

    monkeypatch.setattr(bench.finetune_cls, "main", no_training)
    assert bench.main(argv) == 0  # everything reused
    assert json.loads((out / "results.json").read_text())["runs"] == report["runs"]
    monkeypatch.undo()

    # One start again in two worker processes (as on a GPU): the same runs, sweep and choices.
    parallel = tmp_path / "parallel"
    argv_parallel = [*argv[:argv.index("--output_dir")], "--output_dir", str(parallel), "--starts", "main",
                     "--jobs", "2", "--threads", str(torch.get_num_threads())]
    assert bench.main(argv_parallel) == 0
    again = json.loads((parallel / "results.json").read_text())

    def scores(rows):
        return [{key: row[key] for key in ("size", "seed", "recipe", "validation_accuracy", "test_accuracy")}
                for row in rows if row["start"] == "main"]

    def choices(rows):
        return [(row["size"], row["recipe"], row["validation"], row["chosen"]) for row in rows if row["start"] == "main"]

    assert scores(again["runs"]) == scores(report["runs"]) and len(scores(again["runs"])) == 4
    assert choices(again["sweep"]) == choices(report["sweep"])


def test_dapt_search_picks_the_best_recipe_on_validation_and_pairs_it_with_plain_minilm(tmp_path, capsys):
    """benchmarks/dapt_search_table.py: the recipe with the best mean validation accuracy over the search's sizes
    wins (the curves' own (d) is ``default``), and the table pairs each recipe's test accuracy with plain MiniLM's
    per seed; a size a recipe was not run at shows as –."""
    search_table = load_benchmark("dapt_search_table")
    try:
        def report(validation: dict[str, float], test: dict[str, list[float]], how: str, plain: bool = False) -> dict:
            runs = [{"start": "minilm_dapt", "size": size, "seed": seed, "test_accuracy": value}
                    for size, values in test.items() for seed, value in enumerate(values)]
            summary = {"minilm_dapt": {size: {"validation_mean": value} for size, value in validation.items()}}
            if plain:  # the curves' folder: plain MiniLM at every size
                runs += [{"start": "minilm", "size": size, "seed": seed, "test_accuracy": 0.60}
                         for size in ("32", "64") for seed in range(3)]
                summary["minilm"] = {"32": {"validation_mean": 0.70}, "64": {"validation_mean": 0.72}}
            return {"runs": runs, "summary": summary, "sizes": ["32", "64"], "data": {"train": 3200},
                    "start_info": {"minilm_dapt": {"how": how}}}

        curves, search = tmp_path / "curves", tmp_path / "search"
        recipes = {curves: report({"32": 0.60, "64": 0.62}, {"32": [0.58] * 3, "64": [0.59] * 3}, "default", True),
                   search / "longer": report({"32": 0.66, "64": 0.64}, {"32": [0.61, 0.62, 0.63]}, "longer"),
                   search / "lower_rate": report({"32": 0.70, "64": 0.50}, {"32": [0.50] * 3}, "lower rate")}
        for folder, item in recipes.items():
            folder.mkdir(parents=True)
            (folder / "results.json").write_text(json.dumps(item))
        markdown = tmp_path / "table.md"
        assert search_table.main(["--curves", str(curves), "--search", str(search), "--sizes", "32", "64",
                                  "--markdown", str(markdown)]) == 0
        assert capsys.readouterr().out.strip() == "longer"  # 0.65 against 0.61 (default) and 0.60 (lower_rate)
        text = markdown.read_text()
        assert "| (c) plain MiniLM | `conversion.converted_minilm_dir()` | 0.7100 |" in text
        assert "| longer | longer | 0.6500 |" in text
        assert "| 32 | 0.5800 (-2.0 [-2.0, -2.0]) | 0.6200 (+2.0 [" in text and "| 64 | 0.5900 (-1.0 [" in text
        assert text.splitlines()[-1].endswith("| – | – |")  # neither search recipe was run at 64
    finally:
        sys.modules.pop("dapt_search_table", None)
