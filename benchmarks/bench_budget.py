"""Pretraining quality at a fixed wall-clock budget: mlm_suite's default recipe against HF BERT.

    python benchmarks/bench_budget.py                  # 10 minutes of training each (about 25 min in all)
    python benchmarks/bench_budget.py --minutes 2      # a quicker look
    python benchmarks/bench_budget.py --minutes 2 -- --train_file docs.txt --config_preset mini   # job flags, both runs
    make bench-budget

Both trainings use the embedded default corpus (Pang & Lee reviews), the same held-out documents, the
same tokenizer (the WordPiece vocabulary the mlm_suite run trains and saves), the same training rows
(documents cut into rows of ``--max_seq_length``) and the same batch size, and both are scored on the
same held-out rows with the **same fixed evaluation masks** (15 %, 80/10/10, seeded) and the same
fill-mask probe sentences:

* **mlm_suite**: ``mlm-suite pretrain`` with its default recipe and ``--max_train_minutes``;
* **HF**: ``transformers.BertForMaskedLM`` (``attn_implementation="sdpa"``) of the same width, depth and
  heads, ``DataCollatorForLanguageModeling`` (15 %, 80/10/10) and the ``Trainer`` as run_mlm uses it
  (AdamW, linear schedule). Its peak learning rate, warmup, weight decay and Adam betas are the mlm_suite
  job's (run_mlm's default 5e-5 is meant for fine-tuning, not training from scratch), and the same
  ``TimeBudgetCallback`` ends its schedule at the budget.

The budget counts training time only (evaluation excluded). Run on a quiet machine: the two trainings
run one after the other, so load from other processes changes what each gets done in its minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, DataCollatorForLanguageModeling, TrainingArguments

from mlm_suite.jobs import pretrain
from mlm_suite.evaluation.masked_lm import (
    fill_mask_probe,
    make_mlm_compute_metrics,
    preprocess_logits_for_mlm_metrics,
    probe_sentences,
)
from mlm_suite.training.controls import UNBOUNDED_STEPS, TimeBudgetCallback
from mlm_suite.training.pretraining import evaluation_collator
from mlm_suite.training.trainer import JobTrainer, standard_features

HF_INPUTS = ("input_ids", "attention_mask", "special_tokens_mask")


def run_mlm_suite(output_dir: Path, minutes: float, job_args: list[str]) -> dict:
    argv = ["--output_dir", str(output_dir), "--overwrite_output_dir", "--max_train_minutes", str(minutes),
            "--disable_tqdm", "true"]
    argv += ["--eval_strategy", "no", *job_args]
    pretrain.main(argv)
    return {
        "results": json.loads((output_dir / "all_results.json").read_text()),
        "probe": json.loads((output_dir / "fill_mask_probe.json").read_text()),
        "steps": json.loads((output_dir / "trainer_state.json").read_text())["global_step"],
    }


def run_hf(output_dir: Path, tokenizer_dir: Path, minutes: float, job_args: list[str]) -> dict:
    """HF BERT on the rows, masks and probes the mlm_suite job used (rebuilt from the same arguments)."""
    plan = pretrain.plan_run(["--output_dir", str(output_dir), *job_args])
    args, job_training_args = plan.args, plan.training_args
    corpus = pretrain.open_corpus(plan)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    train_features = corpus.train_rows(tokenizer, job_training_args.seed)
    eval_features = corpus.eval_rows(tokenizer)
    baseline_token_id = corpus.baseline_token_id(tokenizer, train_features)
    probes = probe_sentences(corpus.validation["text"], tokenizer, args.fill_mask_probes)

    ours, _ = pretrain.build_config(plan, tokenizer)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=ours.hidden_size,
        num_hidden_layers=ours.num_hidden_layers,
        num_attention_heads=ours.num_attention_heads,
        intermediate_size=ours.intermediate_size,
        pad_token_id=tokenizer.pad_token_id,
        attn_implementation="sdpa",
    )
    torch.manual_seed(job_training_args.seed)
    model = BertForMaskedLM(config)
    hf_collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    training_args = TrainingArguments(
        output_dir=str(output_dir),
        max_steps=UNBOUNDED_STEPS,
        per_device_train_batch_size=job_training_args.per_device_train_batch_size,
        per_device_eval_batch_size=job_training_args.per_device_eval_batch_size,
        learning_rate=job_training_args.learning_rate,
        warmup_steps=job_training_args.warmup_steps,
        weight_decay=job_training_args.weight_decay,
        adam_beta2=job_training_args.adam_beta2,
        lr_scheduler_type="linear",
        logging_steps=50,
        eval_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=job_training_args.seed,
        # The job's loading for this device (no pinned memory on CPU: torch warns when there is no accelerator).
        dataloader_pin_memory=job_training_args.dataloader_pin_memory,
        # The evaluation collator keys its fixed masks by example_index, so no column may be dropped.
        remove_unused_columns=False,
        include_for_metrics=["inputs"],
    )
    trainer = JobTrainer(
        model=model,
        args=training_args,
        data_collator=lambda features: hf_collator([{key: row[key] for key in HF_INPUTS} for row in features]),
        eval_data_collator=evaluation_collator(tokenizer, args.eval_mlm_probability, args.masking),
        train_dataset=train_features,
        eval_dataset=eval_features,
        processing_class=tokenizer,
        compute_metrics=make_mlm_compute_metrics(tokenizer.mask_token_id, baseline_token_id),
        preprocess_logits_for_metrics=preprocess_logits_for_mlm_metrics,
        callbacks=[TimeBudgetCallback(60.0 * minutes)],
        features=standard_features(mfu=True),  # the pretraining job's reports
    )
    train_metrics = trainer.train().metrics
    results = {**train_metrics, **trainer.evaluate()}
    results["perplexity"] = math.exp(min(results["eval_mlm_loss"], 700.0))
    # Both runs draw batches of this many rows from these rows: tokens seen = steps × real tokens per batch.
    tokens_per_batch = training_args.per_device_train_batch_size * sum(map(len, train_features["input_ids"])) / len(train_features)
    return {
        "results": results,
        "probe": fill_mask_probe(trainer.model, tokenizer, probes),
        "steps": trainer.state.global_step,
        "tokens_per_batch": tokens_per_batch,
    }


def table(runs: dict[str, dict], minutes: float) -> str:
    rows = [
        f"| {minutes:g} min of training | " + " | ".join(runs) + " |",
        "|---|" + "---:|" * len(runs),
    ]

    def row(name: str, values: list[str]) -> None:
        rows.append(f"| {name} | " + " | ".join(values) + " |")

    row("optimizer steps", [f"{run['steps']:,}" for run in runs.values()])
    tokens_per_batch = runs["HF BertForMaskedLM (sdpa)"]["tokens_per_batch"]
    row("real tokens seen", [f"{run['steps'] * tokens_per_batch / 1e6:.2f} M" for run in runs.values()])
    row("held-out MLM loss (15 % masking)", [f"{run['results']['eval_mlm_loss']:.3f}" for run in runs.values()])
    row("**accuracy at `[MASK]`**", [f"{run['results']['eval_mask_accuracy']:.4f}" for run in runs.values()])
    row("top-5 accuracy at `[MASK]`", [f"{run['results']['eval_mask_top5_accuracy']:.4f}" for run in runs.values()])
    row("most-frequent baseline at `[MASK]`", [f"{run['results']['eval_mask_baseline_accuracy']:.4f}" for run in runs.values()])
    first = next(iter(runs.values()))["probe"]
    for index, item in enumerate(first):
        row(
            f"probe {index + 1}: {item['sentence']} (*{item['answer']}*)".replace("|", "\\|"),
            [run["probe"][index]["predictions"][0] for run in runs.values()],
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget of each run (default 10)")
    parser.add_argument("--output_dir", default="outputs/bench_budget", help="runs and results go here")
    parser.add_argument("--markdown", help="also write the table to this file")
    options, job_args = parser.parse_known_args(argv)
    job_args = job_args[1:] if job_args[:1] == ["--"] else job_args
    if not options.minutes > 0:
        parser.error(f"--minutes must be positive, got {options.minutes}")
    output_dir = Path(options.output_dir)

    runs = {"mlm_suite (job default)": run_mlm_suite(output_dir / "mlm_suite", options.minutes, job_args)}
    runs["HF BertForMaskedLM (sdpa)"] = run_hf(output_dir / "hf_bert", output_dir / "mlm_suite", options.minutes, job_args)
    markdown = table(runs, options.minutes)
    print("\n" + markdown)
    (output_dir / "results.json").write_text(json.dumps(runs, indent=2, default=float) + "\n")
    if options.markdown:
        Path(options.markdown).write_text(markdown + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
