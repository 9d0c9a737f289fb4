"""The continued-pretraining recipe search of benchmarks/label_efficiency_minilm.sh: choose on validation, tabulate.

    python benchmarks/dapt_search_table.py --markdown outputs/label_efficiency_dapt/table.md

Reads the label-efficiency curves (``--curves``: the benchmark's folder with (c) MiniLM and (d) MiniLM + DAPT with
the default recipe) and one benchmark folder per recipe under ``--search`` (``--starts minilm_dapt`` at the search's
sizes). Prints the name of the recipe with the best mean validation accuracy over ``--sizes`` (``default`` for the
curves' own (d)) on stdout, and the table (per recipe: how it was made, mean validation accuracy, test accuracy and
the paired per-seed difference against plain MiniLM per size) on stderr and in ``--markdown``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from mlm_suite.evaluation.intervals import mean_interval


def recipe_results(curves: Path, search: Path) -> dict[str, dict]:
    """``{recipe: results.json}``: ``default`` (the curves' (d)) first, then the search's folders by name."""
    results = {"default": json.loads((curves / "results.json").read_text())}
    for folder in sorted(search.iterdir()):
        if (folder / "results.json").is_file():
            results[folder.name] = json.loads((folder / "results.json").read_text())
    return results


def validation_score(report: dict, sizes: list[str]) -> float:
    summary = report["summary"]["minilm_dapt"]
    return statistics.fmean(summary[size]["validation_mean"] for size in sizes)


def table(results: dict[str, dict], plain: dict, sizes: list[str]) -> str:
    """Per recipe: mean validation accuracy over ``sizes``, then per size the test accuracy and the paired test
    difference against plain MiniLM ((c), same seeds and subsets)."""
    baseline = {(str(run["size"]), run["seed"]): run for run in plain["runs"] if run["start"] == "minilm"}
    every_size = [str(size) for size in plain["sizes"]]
    lines = [f"Continued-pretraining recipes for MiniLM, chosen on the mean validation accuracy at {', '.join(sizes)} "
             "labels (plain MiniLM (c) for reference):", "",
             "| recipe | how it was made | mean validation |", "|---|---|---|"]
    plain_score = statistics.fmean(plain["summary"]["minilm"][size]["validation_mean"] for size in sizes)
    lines.append(f"| (c) plain MiniLM | `conversion.converted_minilm_dir()` | {plain_score:.4f} |")
    for name, report in sorted(results.items(), key=lambda item: -validation_score(item[1], sizes)):
        how = report["start_info"]["minilm_dapt"]["how"]
        lines.append(f"| {name} | {how} | {validation_score(report, sizes):.4f} |")
    lines += ["", "Test accuracy, mean over the seeds, and the paired difference against (c) in points "
              "(mean [95 % t-interval]):", "",
              "| labelled examples | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    for size in every_size:
        cells = []
        for report in results.values():
            runs = [run for run in report["runs"] if str(run["size"]) == size and run["start"] == "minilm_dapt"]
            if not runs:
                cells.append("–")
                continue
            differences = [run["test_accuracy"] - baseline[size, run["seed"]]["test_accuracy"] for run in runs]
            mean, low, high = mean_interval(differences)
            test = statistics.fmean(run["test_accuracy"] for run in runs)
            cells.append(f"{test:.4f} ({100 * mean:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}])")
        label = f"all ({plain['data']['train']})" if size == "all" else size
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--curves", type=Path, default=Path("outputs/label_efficiency"))
    parser.add_argument("--search", type=Path, default=Path("outputs/label_efficiency_dapt"))
    parser.add_argument("--sizes", nargs="+", default=["32", "64", "128", "256"], help="the sizes a recipe is chosen on")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    results = recipe_results(args.curves, args.search)
    text = table(results, results["default"], args.sizes)
    print(text, file=sys.stderr)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text + "\n", encoding="utf-8")
    print(max(results, key=lambda name: validation_score(results[name], args.sizes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
