"""The modern pretraining controls (issue 27) at a fixed training budget: today's recipe against each control alone
and against the best combination, on held-out [MASK] accuracy.

    python benchmarks/bench_pretrain_controls.py --markdown outputs/pretrain_controls/table.md   # ~45 min on 2 quiet CPU cores (OMP_NUM_THREADS=1)
    python benchmarks/bench_pretrain_controls.py --minutes 1 --seeds 0 --controls mask_linear wsd   # a quick look
    python benchmarks/bench_pretrain_controls.py --minutes 2 -- --config_preset mini    # job flags after --, every run

Every run is ``mlm-suite pretrain`` in this process with the job's default recipe on the embedded default corpus
(the Pang & Lee reviews), ``--max_train_minutes`` (training time only; the learning-rate schedule ends there) and
one ``--seed`` per repetition (initial weights and training masks; the held-out split is fixed). All runs share one
WordPiece vocabulary, trained once like the job trains it, so they are scored on the same held-out rows with the
same fixed evaluation masks: 15 %, 80/10/10, seeded (``--eval_mlm_probability``), whatever the training masks.

Controls (``--controls``; ``CONTROLS`` has their flags):

* ``mask_linear``: masking rate 30 % → 15 % linearly over the run (MosaicBERT's linear schedule);
* ``mask_inverse``: 30 %, then 15 % from 60 % of the steps, 5 % from 90 % (mmBERT's inverse masking phases);
* ``mask_only``: 30 % masks, every selected token replaced by ``[MASK]`` (EuroBERT's 100/0/0 split);
* ``wsd``: warmup-stable-decay learning rate, 1-sqrt decay over the last 20 % of the budget (ModernBERT);
* ``batch_warmup``: rows per step growing from 4 to 16 over the first ``--warmup_tokens`` tokens;
* ``context_extension``: the first 80 % of the budget at 64-token rows, the last 20 % continuing that model at
  128-token rows with RoPE base 40,000 (``--rope_theta``; a fresh optimizer, the from-scratch learning rate and
  masks given explicitly); scored on the same 64-token held-out rows as every other run.

After the single controls, ``best combination`` runs the controls whose mean beats today's recipe together (the
better of the two mask schedules if both do; context extension, a change of row length, is not combined). The
table gives the mean ± sample sd over the seeds, the difference to today's recipe and the per-seed accuracies.
Finished runs are reused (a folder with ``all_results.json``), so an interrupted benchmark continues where it
stopped. The budget is CPU time of the benchmark's process by default (``--clock cpu``: the job's
``--max_train_minutes`` callback reads ``time.process_time``), so runs on a shared machine get the same compute
whatever else runs beside them; ``--clock wall`` is the job's own wall-clock budget, for a quiet machine.
Run with ``OMP_NUM_THREADS=1`` on a shared machine (torch's threads then do not fight the other jobs).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from transformers import AutoTokenizer, TrainingArguments

from mlm_suite import MlmSuiteForMaskedLM
from mlm_suite.data.inputs.readers import first_n
from mlm_suite.jobs import pretrain
from mlm_suite.evaluation.intervals import mean_interval
from mlm_suite.evaluation.masked_lm import make_mlm_compute_metrics, preprocess_logits_for_mlm_metrics
from mlm_suite.data.pretraining.vocabulary import train_wordpiece_tokenizer
from mlm_suite.training.pretraining import evaluation_collator
from mlm_suite.training.trainer import JobTrainer

TODAY = "today's recipe"
COMBINED = "best combination"
EXTENSION = "context_extension"
EXTENSION_SHARE = 0.2  # of the budget, at the longer rows
EXTENDED_ROWS, EXTENDED_THETA = 128, 40000.0
CONTROLS: dict[str, list[str]] = {
    "mask_linear": ["--mlm_probability", "0.3", "--mlm_probability_schedule", "linear", "--mlm_probability_end", "0.15"],
    "mask_inverse": ["--mlm_probability_schedule", "0.3,0.15@0.6,0.05@0.9"],
    "mask_only": ["--mask_replace_prob", "1.0", "--random_replace_prob", "0"],
    "wsd": ["--lr_scheduler_type", "warmup_stable_decay", "--lr_decay_steps", "0.2", "--lr_decay_type", "1-sqrt"],
    "batch_warmup": ["--batch_size_warmup_tokens", "{warmup_tokens}", "--batch_size_warmup_min_rows", "4"],
    EXTENSION: [],  # two stages, see run_extension
}
MASK_SCHEDULES = ("mask_linear", "mask_inverse")  # alternatives: the combination takes the better one


def shared_tokenizer(folder: Path, job_args: list[str]) -> Path:
    """The vocabulary the job would train on the training documents, trained once for every run."""
    if not (folder / "tokenizer.json").is_file():
        plan = pretrain.plan_run(["--output_dir", str(folder), *job_args])
        texts = pretrain.open_corpus(plan).tokenizer_texts()
        vocabulary = plan.args.vocab_size or pretrain.DEFAULT_TRAINED_VOCAB_SIZE
        train_wordpiece_tokenizer(texts, vocab_size=vocabulary).save_pretrained(folder)
    return folder


def without_vocabulary_flags(job_args: list[str]) -> list[str]:
    """``job_args`` less --vocab_size/--train_tokenizer (and their values): the shared tokenizer replaces them."""
    kept, skip = [], False
    for arg in job_args:
        if skip:
            skip = False
        elif arg.split("=")[0] in ("--vocab_size", "--train_tokenizer"):
            skip = "=" not in arg
        else:
            kept.append(arg)
    return kept


def run_job(output_dir: Path, argv: list[str], clock: str = "wall") -> dict:
    """The job's ``all_results.json``, training first unless a finished run is there."""
    results = output_dir / "all_results.json"
    if not results.is_file():
        argv = ["--output_dir", str(output_dir), "--overwrite_output_dir", "true", *argv]
        pretrain.main(argv, clock=time.process_time if clock == "cpu" else time.perf_counter)
    return json.loads(results.read_text())


def evaluate_at_job_rows(folder: Path, job_args: list[str]) -> dict:
    """``folder``'s model scored as the job scores its own (same held-out rows of the job's ``--max_seq_length``,
    same fixed masks, same baseline token) without training: for a run whose last stage used longer rows."""
    saved = folder / "eval_job_rows.json"
    if saved.is_file():
        return json.loads(saved.read_text())
    plan = pretrain.plan_run(["--output_dir", str(folder / "eval"), *job_args])
    args, job_training_args = plan.args, plan.training_args
    corpus = pretrain.open_corpus(plan)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    baseline_token_id = corpus.baseline_token_id(tokenizer, corpus.train_rows(tokenizer, 0))
    eval_features = first_n(corpus.eval_rows(tokenizer), args.max_eval_samples)
    training_args = TrainingArguments(
        output_dir=str(folder / "eval"), per_device_eval_batch_size=64, report_to="none", disable_tqdm=True,
        remove_unused_columns=False, include_for_metrics=["inputs"],
        dataloader_pin_memory=job_training_args.dataloader_pin_memory,  # the job's for this device: none on CPU
    )  # fmt: skip
    trainer = JobTrainer(
        model=MlmSuiteForMaskedLM.from_pretrained(folder),
        args=training_args,
        eval_data_collator=evaluation_collator(tokenizer, args.eval_mlm_probability, args.masking),
        eval_dataset=eval_features,
        processing_class=tokenizer,
        compute_metrics=make_mlm_compute_metrics(tokenizer.mask_token_id, baseline_token_id),
        preprocess_logits_for_metrics=preprocess_logits_for_mlm_metrics,
    )
    metrics = trainer.evaluate()
    saved.write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def run_extension(folder: Path, minutes: float, common: list[str], job_args: list[str], clock: str) -> dict:
    """Context extension in the budget: 64-token rows, then the same model at longer rows with a larger RoPE base."""
    first = folder / "stage1"
    run_job(first, [*common, "--max_train_minutes", f"{minutes * (1 - EXTENSION_SHARE):g}"], clock)
    second = folder / "stage2"
    # The from-scratch recipe, given: a checkpoint would otherwise get the continued-pretraining defaults.
    recipe = ["--learning_rate", f"{pretrain.PretrainTrainingArguments.learning_rate:g}", "--mlm_probability", "0.3"]
    run_job(second, [*common, "--model_name_or_path", str(first), "--max_train_minutes", f"{minutes * EXTENSION_SHARE:g}",
                     "--max_seq_length", str(EXTENDED_ROWS), "--rope_theta", f"{EXTENDED_THETA:g}", *recipe], clock)  # fmt: skip
    results = json.loads((second / "all_results.json").read_text())
    scored = evaluate_at_job_rows(second, without_vocabulary_flags(job_args))
    steps = sum(json.loads((stage / "trainer_state.json").read_text())["global_step"] for stage in (first, second))
    return {**results, **scored, "train_steps": steps}


def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def table(runs: dict[str, list[dict]], flags: dict[str, str], command: str, minutes: float, clock: str) -> str:
    """Mean ± sd per recipe, and its paired difference to today's recipe (same seed: same initial weights and
    training masks) with a 95 % t-interval over the seeds."""
    today = [result["eval_mask_accuracy"] for result in runs[TODAY]]
    lines = [
        f"| {minutes:g} min of training ({clock}) | flags | [MASK] acc. (15 % eval masks) "
        "| Δ vs today [95 % interval] | per seed | steps |",
        "|---|---|---:|---:|---|---:|",
    ]
    for name, results in runs.items():
        accuracy = [result["eval_mask_accuracy"] for result in results]
        mean, sd = mean_sd(accuracy)
        delta = ""
        if name != TODAY:
            difference, low, high = mean_interval([ours - theirs for ours, theirs in zip(accuracy, today)])
            delta = f"{difference:+.4f}" + ("" if math.isnan(low) else f" [{low:+.4f}, {high:+.4f}]")
        steps = round(statistics.fmean(result.get("train_steps", 0) for result in results))
        per_seed = ", ".join(f"{value:.4f}" for value in accuracy)
        lines.append(f"| {name} | `{flags.get(name, '') or '(defaults)'}` | {mean:.4f} ± {sd:.4f} | {delta} | {per_seed} | {steps:,} |")
    baseline = statistics.fmean(result["eval_mask_baseline_accuracy"] for result in runs[TODAY])
    lines.append(f"\nMost-frequent-token baseline at [MASK]: {baseline:.4f}. Printed by `{command}`.")
    return "\n".join(lines)


def winners(runs: dict[str, list[dict]]) -> list[str]:
    """Controls whose mean beats today's recipe, one mask schedule at most, no context extension."""
    today = statistics.fmean(result["eval_mask_accuracy"] for result in runs[TODAY])
    means = {name: statistics.fmean(r["eval_mask_accuracy"] for r in results) for name, results in runs.items()}
    better = [name for name in CONTROLS if name in means and name != EXTENSION and means[name] > today]
    schedules = [name for name in better if name in MASK_SCHEDULES]
    if len(schedules) > 1:
        better.remove(min(schedules, key=means.get))
    return better


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=1.5, help="training budget of every run in minutes (default 1.5)")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                        help="budget in CPU time of this process (default; fair on a shared machine) or wall-clock time")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--controls", nargs="+", choices=list(CONTROLS), default=list(CONTROLS))
    parser.add_argument("--warmup_tokens", type=int, default=500_000, help="batch_warmup: tokens (default 500,000)")
    parser.add_argument("--no_combination", action="store_true", help="skip the best-combination runs")
    parser.add_argument("--output_dir", default="outputs/pretrain_controls", help="runs and results go here")
    parser.add_argument("--markdown", help="also write the table to this file")
    options, job_args = parser.parse_known_args(argv)
    job_args = job_args[1:] if job_args[:1] == ["--"] else job_args
    if not options.minutes > 0:
        parser.error(f"--minutes must be positive, got {options.minutes}")
    command = "python benchmarks/bench_pretrain_controls.py " + " ".join(sys.argv[1:] if argv is None else argv)
    output_dir = Path(options.output_dir)
    started = time.time()

    tokenizer = shared_tokenizer(output_dir / "tokenizer", job_args)
    common = ["--tokenizer_name", str(tokenizer), "--disable_tqdm", "true", "--eval_strategy", "no"]
    common += without_vocabulary_flags(job_args)
    flags = {TODAY: ""}
    flags.update({name: " ".join(CONTROLS[name]).format(warmup_tokens=options.warmup_tokens) for name in options.controls})
    flags[EXTENSION] = f"stage 2: --max_seq_length {EXTENDED_ROWS} --rope_theta {EXTENDED_THETA:g}" if EXTENSION in flags else ""
    flags = {name: value for name, value in flags.items() if name == TODAY or name in options.controls}

    def run(name: str, control_flags: list[str], seed: int) -> dict:
        folder = output_dir / name.replace(" ", "_").replace("'", "") / f"seed{seed}"
        seeded = [*common, "--seed", str(seed)]
        if name == EXTENSION:
            return run_extension(folder, options.minutes, seeded, job_args, options.clock)
        return run_job(folder, [*seeded, "--max_train_minutes", f"{options.minutes:g}", *control_flags], options.clock)

    runs: dict[str, list[dict]] = {}
    for name in flags:
        control = [] if name in (TODAY, EXTENSION) else flags[name].split()
        runs[name] = [run(name, control, seed) for seed in options.seeds]
    chosen = [] if options.no_combination else winners(runs)
    if len(chosen) > 1:
        flags[COMBINED] = " ".join(flags[name] for name in chosen)
        runs[COMBINED] = [run(COMBINED, flags[COMBINED].split(), seed) for seed in options.seeds]

    clock = "CPU time" if options.clock == "cpu" else "wall clock"
    markdown = table(runs, flags, command.strip(), options.minutes, clock)
    print("\n" + markdown)
    print(f"\n{len(options.seeds)} seeds, {sum(map(len, runs.values()))} runs; {(time.time() - started) / 60:.1f} min")
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "results.json").write_text(json.dumps({"flags": flags, "runs": runs}, indent=2, default=float) + "\n")
    if options.markdown:
        Path(options.markdown).write_text(markdown + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
