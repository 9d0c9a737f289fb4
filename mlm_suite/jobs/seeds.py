"""Run a fine-tuning job once per seed and report the spread of its scores.

One fine-tuning run on a test split of a few hundred examples measures accuracy to a point or two
(one standard error), and the seed moves it by as much (Dodge et al., 2020). With the embedded
defaults the seed also draws the 80/10/10 split, so the mean over seeds estimates how well the
recipe does on the data, not on one lucky or unlucky split::

    mlm-suite seeds finetune-cls --seeds 0 1 42 --output_dir outputs/sentiment_seeds
    mlm-suite seeds finetune-ner --seeds 1 2 3 --output_dir outputs/ner_seeds -- --compare_hf false

Flags after ``--`` go to the job. Each run writes ``<output_dir>/seed_<seed>``; the table of
validation and test scores per seed (and the HF baseline's, when the job trains one), their mean
and sample standard deviation, is printed and written to ``<output_dir>/seed_summary.json``, drawn in
``<output_dir>/seed_scores.png`` and shown with the picture in ``<output_dir>/README.md``. See docs/finetuning.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from mlm_suite.cards import seed_summary_card
from mlm_suite.jobs.common.commands import SUBCOMMANDS
from mlm_suite.errors import UsageError
from mlm_suite.jobs.common.running import command_prog, running_as
from mlm_suite.jobs.common.output_folder import claim_output_folder
from mlm_suite.evaluation.plots import figures_section, plot_seed_scores
from mlm_suite.training.trainer import JobTrainer

# job (an mlm-suite subcommand) → the score its results are summarised by
JOB_METRICS = {"finetune-ner": "f1", "finetune-cls": "accuracy", "finetune-pair": "accuracy", "finetune-retrieval": "mrr@10"}


def summarize(per_seed: dict[int, dict[str, float]], keys: Sequence[str]) -> dict[str, dict[str, float]]:
    """Mean, sample standard deviation, min and max of each key over the seeds that report it."""
    summary = {}
    for key in keys:
        values = [results[key] for results in per_seed.values() if key in results]
        if values:
            summary[key] = {
                "mean": statistics.fmean(values),
                "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                "min": min(values),
                "max": max(values),
                "n": len(values),
            }
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    prog = command_prog() or "mlm-suite seeds"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("job", choices=sorted(JOB_METRICS), help="the fine-tuning job to repeat")
    parser.add_argument("--seeds", type=int, nargs="+", required=True, help="one run per seed")
    parser.add_argument("--output_dir", required=True, help="runs go to <output_dir>/seed_<seed>")
    parser.add_argument("--metric", help="score to summarise (default: f1 for NER, accuracy otherwise)")
    parser.add_argument("--overwrite_output_dir", action="store_true",
                        help="delete an earlier seeds run's folder and start anew (every seed's run included)")
    parser.epilog = "Flags after -- go to the job."
    argv = list(argv) if argv is not None else sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args, job_args = parser.parse_args(argv[:split]), argv[split + 1:]
    for reserved in ("--seed", "--output_dir"):
        if any(arg == reserved or arg.startswith(reserved + "=") for arg in job_args):
            raise UsageError(f"{reserved} is set per run by mlm-suite seeds; leave it out of the job's flags")
    if any(arg.split("=")[0] == "--overwrite_output_dir" for arg in job_args):
        raise UsageError("--overwrite_output_dir empties the whole sweep: give it to mlm-suite seeds, before --")
    if len(set(args.seeds)) != len(args.seeds):
        raise UsageError(f"--seeds has repeats: {args.seeds}")
    claim_output_folder(args.output_dir, overwrite=args.overwrite_output_dir)  # each run's folder inside it too

    metric = args.metric or JOB_METRICS[args.job]
    job_main = importlib.import_module(SUBCOMMANDS[args.job][0]).main
    output_dir = Path(args.output_dir)
    per_seed: dict[int, dict[str, float]] = {}
    for seed in args.seeds:
        run_dir = output_dir / f"seed_{seed}"
        with running_as(f"{prog} {args.job}"):  # the job's usage and errors name the command typed
            job_main([*job_args, "--seed", str(seed), "--output_dir", str(run_dir)])
        per_seed[seed] = json.loads((run_dir / "all_results.json").read_text())

    # hf_*: the HF baseline that finetune-ner trains in the same run (--compare_hf).
    candidates = [f"{model}{split}_{metric}" for model in ("", "hf_") for split in ("eval", "test")]
    keys = [key for key in candidates if any(key in results for results in per_seed.values())]
    if not keys:
        raise ValueError(f"the runs report no eval_{metric} or test_{metric}; pick another --metric")
    summary = summarize(per_seed, keys)
    (output_dir / "seed_summary.json").write_text(json.dumps(
        {"job": args.job, "job_args": job_args, "metric": metric, "summary": summary,
         "per_seed": {str(seed): {key: results[key] for key in keys if key in results}
                      for seed, results in per_seed.items()}}, indent=2) + "\n")
    print(f"{'seed':>6}" + "".join(f"{key:>16}" for key in keys))
    for seed, results in per_seed.items():
        print(f"{seed:>6}" + "".join(f"{results[key]:>16.4f}" if key in results else f"{'-':>16}" for key in keys))
    print(f"{'mean':>6}" + "".join(f"{summary[key]['mean']:>9.4f} ± {summary[key]['std']:.4f}" for key in keys))
    command = f"{prog} " + shlex.join([*argv[:split], *(["--", *job_args] if job_args else [])])
    write_summary_card(output_dir, args.job, command, metric, per_seed, summary, keys)
    return 0


def series_name(key: str) -> str:
    """``eval_f1`` → ``validation``, ``hf_test_f1`` → ``HF BERT, test``."""
    split = "validation" if key.removeprefix("hf_").startswith("eval_") else "test"
    return f"HF BERT, {split}" if key.startswith("hf_") else split


def write_summary_card(
    output_dir: Path, job: str, command: str, metric: str, per_seed: dict[int, dict[str, float]],
    summary: dict[str, dict[str, float]], keys: Sequence[str],
) -> Path:
    """``seed_scores.png`` (each seed's score, mean ± sd) and ``README.md`` showing it with the table of scores."""
    names = {key: series_name(key) for key in keys}
    caption = f"{job}: {metric} per seed, mean ± sample sd over {len(per_seed)} seeds"
    plot_seed_scores(per_seed, summary, names, output_dir / "seed_scores.png", caption, metric)
    card = seed_summary_card(job=job, command=command, metric=metric, per_seed=per_seed, summary=summary, series=names,
                             figures=figures_section([(caption, "seed_scores.png")]))
    return JobTrainer.write_card(output_dir, card)


if __name__ == "__main__":
    from mlm_suite.jobs.common.running import run_job

    raise SystemExit(run_job(main))
