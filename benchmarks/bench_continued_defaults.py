"""Continued-pretraining defaults, chosen on held-out text: learning rate x training mask rate on MiniLM.

    python benchmarks/bench_continued_defaults.py                    # 10 runs of 150 steps, ~30 min on 2 quiet cores
    python benchmarks/bench_continued_defaults.py --steps 450 --learning_rates 1e-4 3e-4 --no_baselines   # longer runs
    python benchmarks/bench_continued_defaults.py --steps 20 --max_eval_samples 64 --learning_rates 3e-4  # smoke run
    python benchmarks/bench_continued_defaults.py --markdown table.md -- --max_seq_length 128   # job flags, every run

Every run is ``mlm-suite pretrain --model_name_or_path <all-MiniLM-L6-v2>`` (docs/pretraining.md's continued-pretraining
example) on the embedded Pang & Lee full reviews, in this process, one run after the other: ``--steps`` optimizer
steps of ``--batch`` rows, seed 42, the job's defaults for everything not listed here. All runs are scored on the
same held-out rows (the first ``--max_eval_samples`` rows of the 75 held-out reviews) with the same fixed
evaluation masks (``--eval_mlm_probability 0.15``, seeded), whatever their training mask rate, so their ``[MASK]``
accuracies compare. Runs:

* **plain MiniLM**: one step at learning rate 0 (the checkpoint's weights, unchanged). all-MiniLM-L6-v2 ships
  without an MLM head, so its head (transform and decoder bias; the decoder is the tied word embeddings) is
  BERT-initialised: this is the starting point, not a usable MLM;
* **reference**: the from-scratch defaults (learning rate 2e-3, 30 % masks) that continued pretraining got
  before it had defaults of its own;
* **the grid**: ``--learning_rates`` x ``--mlm_probabilities`` (``--no_baselines``: the grid only).

Columns: held-out accuracy at ``[MASK]`` positions (the headline), its ratio to the most-frequent-token baseline,
top-5 accuracy, MLM loss, how far the word embeddings moved (``‖E_after − E_before‖ / ‖E_before‖``), the number of
distinct top-1 answers among the fill-mask probes (1: the same token everywhere), and the run's wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import re
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from mlm_suite.data.inputs import downloads
from mlm_suite.jobs import pretrain

REFERENCE = (2e-3, 0.3)  # the from-scratch PretrainTrainingArguments / PretrainingArguments values
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def word_embeddings(path: Path) -> torch.Tensor:
    """The word-embedding matrix of a checkpoint folder (mlm_suite or Hugging Face BERT names)."""
    weights = load_file(path / "model.safetensors")
    return next(value for name, value in weights.items() if name.endswith(WORD_EMBEDDINGS)).float()


def run(name: str, output_dir: Path, flags: list[str], before: torch.Tensor, quiet: bool) -> dict:
    started = time.time()
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext():
        pretrain.main(["--output_dir", str(output_dir), "--overwrite_output_dir", *flags])
    seconds = time.time() - started
    results = json.loads((output_dir / "all_results.json").read_text())
    after = word_embeddings(output_dir)
    row = {
        "run": name,
        "mask_accuracy": results["eval_mask_accuracy"],
        "baseline": results["eval_mask_baseline_accuracy"],
        "top5": results["eval_mask_top5_accuracy"],
        "mlm_loss": results["eval_mlm_loss"],
        "embedding_shift": (torch.linalg.norm(after - before) / torch.linalg.norm(before)).item(),
        "probe_distinct_top1": results["fill_mask_probe_distinct_top1"],
        "probe_top1_correct": results["fill_mask_probe_top1_correct"],
        "mask_tokens": results["eval_mask_tokens"],
        "steps": results.get("train_steps"),
        "seconds": seconds,
    }
    print(f"{name}: [MASK] accuracy {row['mask_accuracy']:.4f} in {seconds:.0f} s", file=sys.stderr, flush=True)
    return row


def markdown(rows: list[dict], command: str, total: float) -> str:
    lines = [
        "| run | [MASK] acc. | × baseline | top-5 | MLM loss | word-emb. shift | distinct probe top-1 | s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    best = max(row["mask_accuracy"] for row in rows)
    for row in rows:
        accuracy = f"{row['mask_accuracy']:.4f}"
        lines.append(
            f"| {row['run']} | {f'**{accuracy}**' if row['mask_accuracy'] == best else accuracy} | "
            f"{row['mask_accuracy'] / row['baseline'] if row['baseline'] else math.nan:.2f} | {row['top5']:.4f} | "
            f"{row['mlm_loss']:.3f} | "
            f"{row['embedding_shift']:.1%} | {row['probe_distinct_top1']} | {row['seconds']:.0f} |"
        )
    baseline = rows[0]["baseline"]
    lines.append(
        f"\nMost-frequent-token baseline at [MASK]: {baseline:.4f} ({rows[0]['mask_tokens']} [MASK] positions). "
        f"`{command}`: {total / 60:.1f} min in all."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job_flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=None, help="the checkpoint to continue (default: all-MiniLM-L6-v2)")
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps per run")
    parser.add_argument("--batch", type=int, default=16, help="rows per step")
    parser.add_argument("--learning_rates", type=float, nargs="+", default=[3e-5, 1e-4, 3e-4, 1e-3])
    parser.add_argument("--mlm_probabilities", type=float, nargs="+", default=[0.15, 0.3])
    parser.add_argument(
        "--max_eval_samples", type=int, default=512, help="score on the first N held-out rows (0: all, ~3x the time)"
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--output_dir", default="outputs/bench_continued_defaults")
    parser.add_argument("--markdown", default=None, help="also write the table to this file")
    parser.add_argument("--verbose", action="store_true", help="show the job's own output")
    parser.add_argument("--no_baselines", action="store_true", help="the grid only: no plain or reference run")
    options = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)

    started = time.time()
    checkpoint = Path(options.checkpoint) if options.checkpoint else downloads.minilm_dir()
    before = word_embeddings(checkpoint)
    common = [
        "--model_name_or_path", str(checkpoint),
        "--per_device_train_batch_size", str(options.batch),
        "--eval_mlm_probability", "0.15",
        "--eval_strategy", "no",  # one evaluation, of the final model
        "--seed", str(options.seed),
        "--disable_tqdm", "true",
        "--logging_steps", str(max(1, options.steps // 5)),
        *(["--max_eval_samples", str(options.max_eval_samples)] if options.max_eval_samples else []),
    ]  # fmt: skip
    plain = "plain MiniLM" if options.checkpoint is None else "plain checkpoint"
    runs = []
    if not options.no_baselines:
        runs.append((f"{plain} (no continued pretraining)", ["--max_steps", "1", "--learning_rate", "0"]))
        runs.append(
            (
                f"lr {REFERENCE[0]:g}, masks {REFERENCE[1]:.0%} (from-scratch defaults)",
                ["--max_steps", str(options.steps), "--learning_rate", str(REFERENCE[0]),
                 "--mlm_probability", str(REFERENCE[1])],
            )  # fmt: skip
        )
    for learning_rate in options.learning_rates:
        for probability in options.mlm_probabilities:
            runs.append(
                (
                    f"lr {learning_rate:g}, masks {probability:.0%}",
                    ["--max_steps", str(options.steps), "--learning_rate", str(learning_rate),
                     "--mlm_probability", str(probability)],
                )  # fmt: skip
            )
    rows = []
    for index, (name, flags) in enumerate(runs):
        output_dir = Path(options.output_dir) / f"{index}-{re.sub(r'[^a-z0-9.%]+', '-', name.lower()).strip('-')}"
        rows.append(run(name, output_dir, [*common, *flags, *job_flags], before, not options.verbose))
    total = time.time() - started
    command = "python benchmarks/bench_continued_defaults.py " + " ".join(argv)
    table = markdown(rows, command.strip(), total)
    print(table)
    Path(options.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(options.output_dir) / "results.json").write_text(json.dumps({"rows": rows, "seconds": total}, indent=2) + "\n")
    if options.markdown:
        Path(options.markdown).write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
