"""Which pooling should the fine-tuning jobs' default model use? [CLS] against mean, chosen on validation.

    python benchmarks/bench_default_pooling.py                       # 20 runs of the jobs' defaults (~70 CPU-min)
    python benchmarks/bench_default_pooling.py --table               # the table of the runs made so far

The default model (all-MiniLM-L6-v2 converted) was trained for mean pooling, which the conversion carries to the
classification heads (the choice this benchmark made: mean). Each of ``finetune-cls`` (sentiment) and
``finetune-pair`` (sentence pairs) runs with its defaults and ``--classifier_pooling cls`` or ``mean``, over
seeds 1..5, each in ``ROOT/<job>-<pooling>/seed_<n>``; a run whose ``all_results.json`` exists is not run again,
so the measurement can be resumed. The choice is the pooling with the higher validation accuracy averaged over
the two jobs' seed means; test accuracy is reported beside it, not used.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
from pathlib import Path

JOBS = ("finetune-cls", "finetune-pair")
POOLINGS = ("cls", "mean")


def run_folder(root: Path, job: str, pooling: str, seed: int) -> Path:
    return root / f"{job}-{pooling}" / f"seed_{seed}"


def run_all(root: Path, seeds: list[int], mlm_suite: str) -> None:
    for seed in seeds:
        for job in JOBS:
            for pooling in POOLINGS:
                folder = run_folder(root, job, pooling, seed)
                if (folder / "all_results.json").exists():
                    continue
                shutil.rmtree(folder, ignore_errors=True)  # an interrupted run starts again
                command = [mlm_suite, job, "--classifier_pooling", pooling, "--seed", str(seed), "--output_dir", str(folder)]
                print("+", " ".join(command), flush=True)
                subprocess.run(command, check=True)


def mean_sd(values: list[float]) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {spread:.4f}"


def table(root: Path, seeds: list[int]) -> str:
    rows = ["| job | pooling | seeds | validation accuracy | test accuracy |", "|---|---|---|---|---|"]
    validation_means: dict[str, list[float]] = {pooling: [] for pooling in POOLINGS}
    for job in JOBS:
        for pooling in POOLINGS:
            results = [
                json.loads((run_folder(root, job, pooling, seed) / "all_results.json").read_text())
                for seed in seeds
                if (run_folder(root, job, pooling, seed) / "all_results.json").exists()
            ]
            if not results:
                continue
            validation = [result["eval_accuracy"] for result in results]
            test = [result["test_accuracy"] for result in results]
            validation_means[pooling].append(statistics.mean(validation))
            rows.append(f"| {job} | {pooling} | {len(results)} | {mean_sd(validation)} | {mean_sd(test)} |")
    rows += ["", "| job | split | mean − cls (paired by seed) | per seed |", "|---|---|---|---|", *paired_rows(root, seeds)]
    complete = {pooling: means for pooling, means in validation_means.items() if len(means) == len(JOBS)}
    if len(complete) == len(POOLINGS):
        scores = {pooling: statistics.mean(means) for pooling, means in complete.items()}
        best = max(scores, key=scores.get)
        summary = ", ".join(f"{pooling} {score:.4f}" for pooling, score in scores.items())
        rows.append(f"\nMean validation accuracy over the two jobs: {summary}; chosen: **{best}**.")
    return "\n".join(rows)


def paired_rows(root: Path, seeds: list[int]) -> list[str]:
    """Per job, mean − cls accuracy seed by seed (the seed fixes the split and the training order of both runs)."""
    rows = []
    for job in JOBS:
        pairs = [[json.loads((run_folder(root, job, pooling, seed) / "all_results.json").read_text()) for pooling in POOLINGS]
                 for seed in seeds if all((run_folder(root, job, pooling, seed) / "all_results.json").exists() for pooling in POOLINGS)]
        for split, key in (("validation", "eval_accuracy"), ("test", "test_accuracy")):
            differences = [mean[key] - cls[key] for cls, mean in pairs]
            if differences:
                per_seed = ", ".join(f"{difference:+.4f}" for difference in differences)
                rows.append(f"| {job} | {split} | {mean_sd(differences)} | {per_seed} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("outputs/default_pooling"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--mlm_suite", default="mlm-suite", help="the command that runs the jobs")
    parser.add_argument("--table", action="store_true", help="only print the table of the runs made so far")
    args = parser.parse_args()
    if not args.table:
        run_all(args.root, args.seeds, args.mlm_suite)
    print(table(args.root, args.seeds))


if __name__ == "__main__":
    main()
