"""The card of ``mlm-suite seeds``: the scores of one job over several seeds, their mean and spread.

See docs/jobs.md#mlm-suite-seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mlm_suite.cards.card import SeedSummaryCard


def seed_summary_card(
    *,
    job: str,
    command: str,
    metric: str,
    per_seed: Mapping[int, Mapping[str, float]],
    summary: Mapping[str, Mapping[str, float]],
    series: Mapping[str, str],
    figures: str,
) -> SeedSummaryCard:
    """The summary of the runs of ``job`` (started by ``command``): ``metric`` per seed and its mean ± sample sd
    (``summary``) for each result key of ``series`` (key → the series' name, e.g. ``eval_f1`` → ``validation``)."""
    keys: Sequence[str] = list(series)
    lines = ["| seed | " + " | ".join(f"{series[key]} {metric}" for key in keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for seed, results in per_seed.items():
        lines.append(f"| {seed} | " + " | ".join(f"{results[key]:.4f}" if key in results else "-" for key in keys) + " |")
    lines.append("| mean ± sd | " + " | ".join(f"{summary[key]['mean']:.4f} ± {summary[key]['std']:.4f}" for key in keys) + " |")
    return SeedSummaryCard(title=f"{job}: {metric} over {len(per_seed)} seeds", command=command,
                           scores_table="\n".join(lines), figures=figures)
