"""BERT-base pretraining as a GPU user runs it: the job's tokens/s against the bare model step and against a
run_mlm-style Hugging Face ``BertForMaskedLM`` Trainer job on the same rows.

    python benchmarks/bench_pretrain_base.py --markdown outputs/pretrain_base.md   # GPU: about 4 minutes on an H100
    python benchmarks/bench_pretrain_base.py --quick                               # CPU smoke run: tiny models, a few steps

Rows of about 16..128 tokens (pieces of the embedded reviews cut at random lengths, bert-base-uncased vocabulary),
bf16 on a GPU, at each ``--batch_sizes`` rows per step, ``mlm-suite pretrain --config_preset base`` runs the
``--runs`` ways: its default flags (``default``), ``--torch_compile`` (``compile``), ``--torch_compile
--max_tokens_per_batch N`` with N the mean tokens of such a batch (``budget``, docs/pretraining.md#token-budget-batches)
and the same with CUDA graphs, ``--torch_compile_mode reduce-overhead`` (``graphs``). Each job's steady step rate is
compared with a bare loop over batches its own loader made beforehand (benchmarks/bench_job_throughput.py; a compiled
job's bare loop steps the same compiled model), and its real (non-padding) tokens/s with those of transformers'
``Trainer`` training ``BertForMaskedLM`` (BERT-base) with ``DataCollatorForLanguageModeling`` (15 % masks) on the same
rows and batch size.

What the job reports is checked against what this script measures itself: the ``train_tokens_per_second`` and
``train_mfu`` of the job's ``all_results.json`` against the real tokens of the batches the job trained on after the
warm-up (counted here) per second of those steps on this script's own clock (the device synchronised at both ends),
and the MFU that makes with 6 × the model's non-embedding parameters (counted here) per token.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer, BertConfig, BertForMaskedLM, DataCollatorForLanguageModeling, Trainer, TrainerCallback,
    TrainingArguments,
)  # fmt: skip

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_job_throughput import QUIET, bare_loop_steps_per_second, before_each_job_training, capture_trainer  # noqa: E402

from mlm_suite.data.inputs import downloads  # noqa: E402
from mlm_suite.jobs import pretrain  # noqa: E402
from mlm_suite.training.throughput import Throughput, peak_tflops  # noqa: E402
from mlm_suite.training.trainer import JobTrainer  # noqa: E402

SHORTEST, LONGEST = 16, 128
TINY_BERT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
TINY_OVERRIDES = "num_hidden_layers=2,hidden_size=64,num_attention_heads=2,intermediate_size=128"


def variable_rows(tokenizer, count: int, seed: int = 0) -> list[str]:
    """``count`` documents of SHORTEST..LONGEST tokens with [CLS] and [SEP]: pieces of the embedded reviews."""
    rng = random.Random(seed)
    texts = [text for _, text in downloads.pang_lee_reviews()]
    ids = [token for row in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] for token in row]
    documents, start = [], 0
    for _ in range(count):
        length = rng.randint(SHORTEST - 2, LONGEST - 2)
        if start + length > len(ids):
            start = 0
        documents.append(tokenizer.decode(ids[start : start + length]))
        start += length
    return documents


def batch_real_tokens(batch: dict, pad_token_id: int) -> torch.Tensor:
    """The non-padding tokens of a training batch (padded rows, flattened or token-budget batches), on its device."""
    return (batch["input_ids"] != pad_token_id).sum()


def real_tokens_per_batch(trainer: Trainer, batches: int = 8) -> float:
    """Mean non-padding tokens of the job's training batches (padded rows, flattened or token-budget batches)."""
    pad = trainer.processing_class.pad_token_id
    loader, counted = iter(trainer.get_train_dataloader()), []
    for _ in range(batches):
        counted.append(int(batch_real_tokens(next(loader), pad)))
    return sum(counted) / len(counted)


def non_embedding_parameters(model: torch.nn.Module) -> int:
    """The parameters of ``model`` outside its ``nn.Embedding`` tables, each counted once (a tied decoder weight is
    an embedding table)."""
    embeddings = {id(p) for module in model.modules() if isinstance(module, torch.nn.Embedding) for p in module.parameters()}
    unique = {id(p): p for p in model.parameters()}
    return sum(p.numel() for key, p in unique.items() if key not in embeddings)


def steady_clocks(warmup: int):
    """Yields a list that receives a :class:`SteadyClock` for each ``JobTrainer`` trained meanwhile, which also counts
    the real tokens of the batches of the steps it times (:func:`batch_real_tokens`), summed on the device and read at
    the end."""

    def add_clock(trainer: JobTrainer) -> SteadyClock:
        clock = SteadyClock(warmup)
        trainer.add_callback(clock)
        fetch, pad = trainer.get_batch_samples, trainer.processing_class.pad_token_id

        def counted_fetch(*fetch_args, **fetch_kwargs):
            batches, items = fetch(*fetch_args, **fetch_kwargs)
            if trainer.state.global_step >= warmup:  # the batches of the steps the clock times
                clock.tokens += [batch_real_tokens(batch, pad) for batch in batches]
            return batches, items

        trainer.get_batch_samples = counted_fetch
        return clock

    return before_each_job_training(add_clock)


def job_tokens_per_second(flags: list[str], steps: int, warmup: int) -> dict:
    """The job's tokens/s against its bare loop's, and what the job reports against this script's own measurement."""
    with tempfile.TemporaryDirectory() as output, capture_trainer() as trainers, steady_clocks(warmup) as clocks:
        pretrain.main(["--output_dir", output, "--max_steps", str(steps + warmup), *QUIET, *flags])
        reported = json.loads((Path(output) / "all_results.json").read_text(encoding="utf-8"))
        trainer = trainers[-1]
        job = trainer.feature(Throughput).step_rate.steps_per_second()
        parameters = non_embedding_parameters(trainer.model)
        if trainer.args.torch_compile:
            # The bare loop steps the model the job compiled (its graphs are built), not the eager one.
            trainer.model = trainer.model_wrapped
        bare = bare_loop_steps_per_second(trainer, steps, warmup)
        tokens = real_tokens_per_batch(trainer)
    measured = float(torch.stack(clocks[-1].tokens).sum()) / clocks[-1].seconds
    peak, _ = peak_tflops(trainer.args.device)
    return dict(job_tokens=job * tokens, bare_tokens=bare * tokens, ratio=job / bare, tokens_per_step=tokens,
                measured_tokens=measured, reported_tokens=reported.get("train_tokens_per_second"),
                measured_mfu=None if peak is None else measured * 6 * parameters / (peak * 1e12),
                reported_mfu=reported.get("train_mfu"))  # fmt: skip


def reported_against_measured(run: dict) -> str:
    """``reported / measured`` tokens/s and MFU as table cells (``-`` where the job reports none)."""
    tokens = run["reported_tokens"]
    mfu, measured_mfu = run["reported_mfu"], run["measured_mfu"]
    tokens_cell = "-" if not isinstance(tokens, (int, float)) else f"{tokens / run['measured_tokens']:.3f}"
    if isinstance(mfu, (int, float)) and measured_mfu:
        mfu_cell = f"{mfu:.1%} / {measured_mfu:.1%}"
    else:
        mfu_cell = f"{mfu} / -" if mfu is not None else "-"
    return f"{tokens_cell} | {mfu_cell}"


class SteadyClock(TrainerCallback):
    """Seconds from the end of step ``warmup`` to the end of the last step, the device synchronised at both ends
    (and nowhere else)."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.started, self.seconds = warmup, 0.0, 0.0
        self.tokens: list[torch.Tensor] = []  # the timed steps' real tokens, when counted (steady_clocks)

    def _now(self) -> float:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup:
            self.started = self._now()
        elif state.global_step > self.warmup and (control.should_training_stop or state.global_step >= state.max_steps):
            self.seconds = self._now() - self.started


def hf_trainer_tokens_per_second(tokenizer, documents: list[str], batch: int, steps: int, warmup: int, quick: bool) -> float:
    """Real tokens/s of a run_mlm-style ``Trainer`` job: BERT-base ``BertForMaskedLM``, 15 % masks, padded batches."""
    from datasets import Dataset

    rows = Dataset.from_dict({"input_ids": tokenizer(documents, truncation=True, max_length=LONGEST)["input_ids"]})
    config = BertConfig(vocab_size=len(tokenizer), **(TINY_BERT if quick else {}))
    cuda = torch.cuda.is_available()
    clock = SteadyClock(warmup)
    with tempfile.TemporaryDirectory() as output:
        args = TrainingArguments(
            output_dir=output, per_device_train_batch_size=batch, max_steps=steps + warmup, bf16=cuda, report_to="none",
            save_strategy="no", logging_steps=50, disable_tqdm=True, use_cpu=not cuda, dataloader_num_workers=4 if cuda else 0,
            dataloader_pin_memory=cuda,
        )  # fmt: skip
        collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
        Trainer(model=BertForMaskedLM(config), args=args, train_dataset=rows, data_collator=collator, callbacks=[clock]).train()
    mean_length = sum(len(ids) for ids in rows["input_ids"]) / len(rows)
    return steps * batch * mean_length / clock.seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--runs", nargs="+", choices=("default", "compile", "budget", "graphs"),
                        default=["default", "compile", "budget"], help="the ways the job runs (see above)")
    parser.add_argument("--steps", type=int, help="timed steps per run (default 30; --quick 4)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (allocations, workers, compile; default 10, --quick 4)")
    parser.add_argument("--tokenizer", help="the bert-base-uncased vocabulary's folder (default: MiniLM's, from the cache)")
    parser.add_argument("--quick", action="store_true", help="a smoke run on CPU: tiny models, batch 8, a few steps")
    parser.add_argument("--markdown", help="also write the table here")
    args = parser.parse_args(argv)
    quick = args.quick
    batch_sizes = [8] if quick else args.batch_sizes
    steps = args.steps or (4 if quick else 30)
    warmup = args.warmup if args.warmup is not None else 4 if quick else 10

    tokenizer_folder = args.tokenizer or str(downloads.minilm_dir())  # bert-base-uncased's vocabulary
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    documents = variable_rows(tokenizer, 600 if quick else 20000)
    mean_length = sum(min(LONGEST, len(ids)) for ids in tokenizer(documents)["input_ids"]) / len(documents)
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "rows.txt"
        corpus.write_text("\n\n".join(documents) + "\n", encoding="utf-8")
        model_flags = ["--config_overrides", TINY_OVERRIDES] if quick else ["--config_preset", "base"]
        device_flags = ["--use_cpu", "true"] if quick else ["--bf16", "true"]
        common = ["--train_file", str(corpus), "--validation_split_percentage", "1", "--tokenizer_name", tokenizer_folder,
                  "--max_seq_length", str(LONGEST), "--fill_mask_probes", "0", *model_flags, *device_flags]  # fmt: skip
        compile_flags = ["--torch_compile", *(["--torch_compile_backend", "eager"] if quick else [])]
        lines = [
            f"rows of {SHORTEST}..{LONGEST} tokens (mean {mean_length:.0f}); {steps} timed steps after {warmup}; "
            f"{'tiny models on CPU (smoke run)' if quick else 'BERT-base, bf16'}",
            "",
            "| rows/step | run | real tokens/step | job tokens/s | bare step tokens/s | job / bare | job / HF Trainer | "
            "reported / measured tokens/s | MFU reported / measured |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for batch in batch_sizes:
            hf = hf_trainer_tokens_per_second(tokenizer, documents, batch, steps, warmup, quick)
            budget = ["--max_tokens_per_batch", str(round(batch * mean_length))]
            runs = {
                "default": ("default flags", []),
                "compile": ("--torch_compile", compile_flags),
                "budget": (f"--torch_compile --max_tokens_per_batch {budget[1]}", [*compile_flags, *budget]),
                "graphs": (f"--torch_compile --torch_compile_mode reduce-overhead --max_tokens_per_batch {budget[1]}",
                           [*compile_flags, "--torch_compile_mode", "reduce-overhead", *budget]),
            }  # fmt: skip
            for key in args.runs:
                name, flags = runs[key]
                r = job_tokens_per_second([*common, "--per_device_train_batch_size", str(batch), *flags], steps, warmup)
                lines.append(
                    f"| {batch} | {name} | {r['tokens_per_step']:,.0f} | {r['job_tokens']:,.0f} | {r['bare_tokens']:,.0f} | "
                    f"{r['ratio']:.2f} | {r['job_tokens'] / hf:.2f} | {reported_against_measured(r)} |"
                )
            lines.append(f"| {batch} | HF BertForMaskedLM Trainer (15 % masks) | {batch * mean_length:,.0f} | {hf:,.0f} | | | 1.00 | | |")
    table = "\n".join(lines) + "\n"
    print(table)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
