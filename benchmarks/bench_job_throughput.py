"""Does the data path keep up with the model? Collator rows/s, and each job's step rate against a bare loop.

    python benchmarks/bench_job_throughput.py                         # CPU: the jobs as their defaults run them
    python benchmarks/bench_job_throughput.py --device cuda           # GPU: the GPU shapes below, bf16
    python benchmarks/bench_job_throughput.py --quick                 # smoke run (tests), a minute on 2 cores
    python benchmarks/bench_job_throughput.py --overhead              # CPU: each job's host overhead per step

**Collators.** Rows per second of each job's collator in one process (one torch thread), at the batch shapes
the jobs use: the pretraining masking collator (30 % seeded token masks, padded and flattened) on rows of the
embedded reviews, and the fine-tuning padding collators on the embedded sentiment sentences and WNUT tweets
(mlm_suite's, which the jobs use, and transformers' that they replace, for comparison).
A GPU consumes BERT-base MLM rows of 128 tokens at about 5,000 rows/s (677 k tokens/s on an H200), so a
collator that makes fewer per process starves it unless workers collate in parallel.

**Jobs against a bare loop.** Each job runs in this process, as its command line would run it, for ``--steps``
optimizer steps, with no evaluation or checkpoint; its steady step rate is the one the job itself reports
(``train_steady_steps_per_second``, :class:`mlm_suite.training.controls.StepRateCallback`: warm-up steps excluded).
Then a bare loop trains the job's own model on batches that the job's own data loader made *before* the timing
(already on the device), with the same optimizer (``Trainer.get_optimizer_cls_and_kwargs``), the same
autocast, gradient clipping and learning-rate schedule: the speed of the model step alone. The ratio
job / bare loop is what the Trainer, the data loading and the callbacks cost; the target is at least 0.85.

**Host overhead per step** (``--overhead``). The same comparison with a near-zero-compute model (one layer,
hidden 32, four rows of at most 32 tokens), so that the difference *job ms/step − bare loop ms/step* is what the
job's host code costs per step: the Trainer's loop, the data loader and collator, the callbacks. Both are timed on
the process's CPU clock (``time.process_time``, one torch thread), so that other processes on shared cores do not
count, and in alternation within one run (:class:`InterleavedBareLoop`: 10 job steps, 10 bare-loop steps on a copy
of the job's model, and so on), so that a drift of the machine's speed falls on both alike. Each job runs with its
batches collated in the training process (the CPU default) and in one loader worker (as on a GPU, where the
training process only receives them); the main thread's CPU time fetching each batch is reported beside. After each
job run, the stock ``transformers.Trainer`` is measured alike on one batch made beforehand: its own loop's host
work, which no job can go below (the floor). The target: a job whose batches come from a loader worker at most
0.5 ms per step above that floor, the median over ``--repeats`` of the differences between a job run and the floor
run that follows it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch.utils.data import DataLoader
from transformers import (
    AutoTokenizer,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining.chunking import tokenize_for_mlm
from mlm_suite.data.pretraining.masking import DataCollatorForMaskedLM
from mlm_suite.data.padding import DataCollatorForPadding, DataCollatorForTokenLabels
from mlm_suite.jobs import finetune_cls, finetune_ner, finetune_pair, finetune_retrieval, pretrain
from mlm_suite.data.pretraining.vocabulary import train_wordpiece_tokenizer
from mlm_suite.training.worker_batches import OneBufferCollator
from mlm_suite.training.throughput import Throughput
from mlm_suite.training.trainer import JobTrainer
from mlm_suite.training.controls import rows_per_step

TARGET_RATIO = 0.85
TARGET_ABOVE_FLOOR_MS = 0.5  # --overhead: a job's host overhead per step over the stock Trainer's own
OVERHEAD_CHUNK = 10  # --overhead: job steps, then as many bare-loop steps, in alternation
# --overhead --clock: the process's CPU time (every thread of the training process: the default), or the main
# thread's alone (without the thread that sends a loader worker its next batch's indices)
CLOCKS = {"process": time.process_time, "thread": time.thread_time}

# (job, module, flags) per device; every run adds --output_dir, --max_steps and no evaluation or saving.
# CPU: the jobs' defaults. GPU: the shapes a GPU user runs (the mini preset at 128 x 128 for pretraining).
JOBS = {
    "cpu": [
        ("pretrain", pretrain, ["--fill_mask_probes", "0"]),
        ("finetune-cls", finetune_cls, ["--max_predict_samples", "64"]),
        ("finetune-ner", finetune_ner, ["--max_predict_samples", "64", "--compare_hf", "false"]),
    ],
    "cuda": [
        ("pretrain", pretrain, ["--fill_mask_probes", "0", "--config_preset", "mini", "--per_device_train_batch_size", "128",
                                "--max_seq_length", "128", "--bf16", "true"]),
        ("finetune-cls", finetune_cls, ["--max_predict_samples", "64", "--per_device_train_batch_size", "128",
                                                   "--bf16", "true"]),
        ("finetune-ner", finetune_ner, ["--max_predict_samples", "64", "--compare_hf", "false", "--per_device_train_batch_size", "128",
                                        "--bf16", "true"]),
    ],
}  # fmt: skip
# --overhead: near-zero compute, so the job's host work per step is what the step costs. The tiny model of the
# fine-tuning jobs is made once (overhead_model); pretraining builds its own from these overrides, on a few hundred
# of the embedded reviews (overhead_corpus: the setup of the full default takes a minute).
TINY_OVERRIDES = "num_hidden_layers=1,hidden_size=32,num_attention_heads=2,intermediate_size=64"
TINY_ROWS = ["--per_device_train_batch_size", "4", "--max_seq_length", "32"]
OVERHEAD_JOBS = [
    ("pretrain (padded)", pretrain, ["--fill_mask_probes", "0", "--config_overrides", TINY_OVERRIDES]),
    ("pretrain (flattened)", pretrain, ["--fill_mask_probes", "0", "--config_overrides", TINY_OVERRIDES,
                                        "--flatten_batches", "true"]),
    ("finetune-cls", finetune_cls, ["--max_predict_samples", "16"]),
    ("finetune-pair", finetune_pair, ["--max_predict_samples", "16"]),
    ("finetune-ner", finetune_ner, ["--max_predict_samples", "16", "--compare_hf", "false"]),
    ("finetune-retrieval", finetune_retrieval, []),
]  # fmt: skip
# --overhead: where the batches are collated. On CPU the jobs collate in the training process; on a GPU in loader
# workers, whose batches the training process then receives (the host work that GPU steps wait behind).
LOADERS = {"in the process (CPU default)": ["--dataloader_num_workers", "0"],
           "in a loader worker (as on a GPU)": ["--dataloader_num_workers", "1"]}  # fmt: skip
TRAINER_FLOOR_LOADER = "none: one batch made before"
QUIET = ["--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true",
         "--logging_steps", "50", "--max_eval_samples", "64"]  # the final evaluation is not timed: keep it short


# ------------------------------------------------------------------------------------------------
# Collators
# ------------------------------------------------------------------------------------------------
def rows_per_second(collate: Callable[[list], object], rows: list[dict], batch_size: int, repeats: int) -> float:
    """Median rows/s of ``collate`` over ``repeats`` batches of ``batch_size`` rows (one warm-up call first)."""
    batches = [[rows[(start + i) % len(rows)] for i in range(batch_size)] for start in range(0, batch_size * repeats, batch_size)]
    collate(batches[0])
    seconds = []
    for batch in batches:
        started = time.perf_counter()
        collate(batch)
        seconds.append(time.perf_counter() - started)
    return batch_size / statistics.median(seconds)


def collator_rows(quick: bool, finetune_model: str | None) -> list[tuple[str, str, float]]:
    """``(collator, batch shape, rows/s)`` for each job's collator at its batch shapes (fine-tuning collators with
    ``finetune_model``'s tokenizer, else MiniLM's, the fine-tuning jobs' default)."""
    repeats = 3 if quick else 20
    reviews = [text for _, text in downloads.pang_lee_reviews()][: 40 if quick else 300]
    wordpiece = train_wordpiece_tokenizer(reviews, vocab_size=2048)
    results = []
    for length, batch_size in ((64, 16), (128, 128)):
        rows = tokenize_for_mlm({"text": reviews}, wordpiece, length)
        rows = [{**{key: rows[key][i] for key in rows}, "example_index": i} for i in range(len(rows["input_ids"]))]
        for flatten in (False, True):
            collator = DataCollatorForMaskedLM(
                wordpiece, mlm_probability=0.3, seed=0, process_rank=0, flatten=flatten,
                pad_to_multiple_of=8 if flatten else None,
            )  # fmt: skip
            name = f"pretrain masking ({'flattened' if flatten else 'padded'})"
            results.append((name, f"{batch_size} x ≤{length}", rows_per_second(collator, rows, batch_size, repeats)))

    tokenizer = AutoTokenizer.from_pretrained(finetune_model or downloads.minilm_dir())
    sentences = [text for _, text in downloads.pang_lee_sentences()][:2000]
    tweets = [words for words, _ in downloads.read_wnut16()][:1000]
    sentence_rows = [dict(tokenizer(text, truncation=True, max_length=128), label=0) for text in sentences]
    encoded = tokenizer(tweets, is_split_into_words=True, truncation=True, max_length=128)
    tweet_rows = [{"input_ids": ids, "attention_mask": [1] * len(ids), "labels": [0] * len(ids)} for ids in encoded["input_ids"]]
    collators = {
        "finetune-cls padding": (sentence_rows, "sentences", DataCollatorForPadding(tokenizer)),
        "finetune-ner padding": (tweet_rows, "tweets", DataCollatorForTokenLabels(tokenizer)),
        "(transformers' DataCollatorWithPadding)": (sentence_rows, "sentences", DataCollatorWithPadding(tokenizer)),
        "(transformers' DataCollatorForTokenClassification)": (tweet_rows, "tweets", DataCollatorForTokenClassification(tokenizer)),
    }  # fmt: skip
    for name, (rows, kind, collator) in collators.items():
        for batch_size in (32, 128):
            results.append((name, f"{batch_size} {kind}", rows_per_second(collator, rows, batch_size, repeats)))
    return results


# ------------------------------------------------------------------------------------------------
# A job against a bare loop over its own pre-collated batches
# ------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def before_each_job_training(prepare: Callable[[JobTrainer], Any]) -> Iterator[list]:
    """Yields a list that receives ``prepare(trainer)`` for each ``JobTrainer`` trained meanwhile, called as its
    ``train()`` starts (to time it, or to keep it for its model and data loader)."""
    prepared: list = []
    original = JobTrainer.train

    def train(self, *args, **kwargs):
        prepared.append(prepare(self))
        return original(self, *args, **kwargs)

    with mock.patch.object(JobTrainer, "train", train):
        yield prepared


def capture_trainer(clock: Callable[[], float] = time.perf_counter):
    """Yields a list that receives the ``JobTrainer`` each job builds (to reuse its model and data loader), whose
    steady step rate is timed on ``clock``."""

    def keep(trainer: JobTrainer) -> JobTrainer:
        trainer.feature(Throughput).step_rate.clock = clock
        return trainer

    return before_each_job_training(keep)


class BareLoop:
    """A plain training loop with a job's model (or ``model``), optimizer (``Trainer.get_optimizer_cls_and_kwargs``),
    autocast, gradient clipping and a linear schedule over ``total_steps``, cycling through ``batches`` (collated and on
    the device beforehand): the speed of the model step alone."""

    def __init__(self, trainer: Trainer, batches: list, total_steps: int, model: torch.nn.Module | None = None) -> None:
        self.args, self.model, self.batches = trainer.args, model if model is not None else trainer.model, batches
        optimizer_cls, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, self.model)
        self.optimizer = optimizer_cls([p for p in self.model.parameters() if p.requires_grad], **optimizer_kwargs)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: max(0.0, 1 - step / total_steps))
        self.autocast = torch.autocast(self.args.device.type, dtype=torch.bfloat16, enabled=self.args.bf16)
        self.steps_taken = 0
        self.model.train()  # once: the Trainer's training_step sets the mode at every step, part of its overhead

    def step(self) -> None:
        batch = self.batches[self.steps_taken % len(self.batches)]
        with self.autocast:
            loss = self.model(**batch).loss
        loss.backward()
        if self.args.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.args.max_grad_norm)
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps_taken += 1

    def synchronise(self) -> None:
        if self.args.device.type == "cuda":
            torch.cuda.synchronize()


def loader_batches(trainer: Trainer, count: int) -> list:
    """``count`` training batches from the job's own data loader (started anew at the end of an epoch), on the
    device, made without changing the RNG state the job trains with."""
    with torch.random.fork_rng(devices=[]):
        loader, batches = iter(trainer.get_train_dataloader()), []
        while len(batches) < count:
            try:
                batches.append(next(loader))
            except StopIteration:
                loader = iter(trainer.get_train_dataloader())
    return batches


def bare_loop_steps_per_second(
    trainer: Trainer, steps: int, warmup: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Optimizer steps/s of a :class:`BareLoop` with the job's model over ``warmup + steps`` of its batches, timed
    after the warm-up steps."""
    loop = BareLoop(trainer, loader_batches(trainer, warmup + steps), warmup + steps)
    for _ in range(warmup):
        loop.step()
    loop.synchronise()
    started = clock()
    for _ in range(steps):
        loop.step()
    loop.synchronise()
    return steps / (clock() - started)


def job_against_bare_loop(
    name: str, module, flags: list[str], steps: int, warmup: int, clock: Callable[[], float] = time.perf_counter
) -> dict:
    """One run of the job and one bare loop over its batches, both timed on ``clock``: their steps/s and ratio."""
    with tempfile.TemporaryDirectory() as output, capture_trainer(clock) as trainers:
        module.main(["--output_dir", output, "--max_steps", str(steps + warmup), *QUIET, *flags])
        trainer = trainers[-1]
        job = trainer.feature(Throughput).step_rate.steps_per_second()
        bare = bare_loop_steps_per_second(trainer, steps, warmup, clock)
    return dict(job=name, device=trainer.args.device.type, rows_per_step=rows_per_step(trainer.args), workers=trainer.args.dataloader_num_workers,
                job_steps=job, bare_steps=bare, ratio=job / bare)  # fmt: skip


# ------------------------------------------------------------------------------------------------
# Host overhead per step: the jobs with a near-zero-compute model
# ------------------------------------------------------------------------------------------------
def overhead_model(folder: Path) -> Path:
    """A random one-layer mlm_suite encoder of hidden size 32 with MiniLM's tokenizer, saved to ``folder``."""
    from mlm_suite import MlmSuiteConfig, MlmSuiteModel

    tokenizer = AutoTokenizer.from_pretrained(downloads.minilm_dir())
    config = MlmSuiteConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=128)  # fmt: skip
    torch.manual_seed(0)
    MlmSuiteModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def overhead_corpus(folder: Path) -> list[str]:
    """Pretraining flags for 300 of the embedded reviews (and 20 held out), written to ``folder``."""
    reviews = [text for _, text in downloads.pang_lee_reviews()][:320]
    (folder / "train.txt").write_text("\n\n".join(reviews[:300]), encoding="utf-8")
    (folder / "validation.txt").write_text("\n\n".join(reviews[300:]), encoding="utf-8")
    return ["--train_file", str(folder / "train.txt"), "--validation_file", str(folder / "validation.txt")]


def overhead_finetuning_data(folder: Path, tokenizer) -> dict[str, list[str]]:
    """Training files for the fine-tuning jobs, written to ``folder``: job name → its data flags.

    Every row fills the 32 tokens of ``TINY_ROWS`` (sentences of 30 words that are one token each, a pair of them
    truncated), so every batch has one shape: the job and its bare loop, which draw their batches in different
    orders, compute the same, and their difference is the job's host work alone (with the embedded data's rows of
    varying lengths, finetune-cls measured 0.70 ms above the floor in one run and 1.62 ms in another). 1,000 rows:
    the timed steps stay within one epoch, as they do on the embedded data, so no loader worker is started anew.
    """
    import csv

    reviews = [text for _, text in downloads.pang_lee_reviews()]
    words = [word for review in reviews[:300] for word in review.split() if len(tokenizer.tokenize(word)) == 1]
    sentences = [words[start:start + 30] for start in range(0, 30 * 1000, 30)]
    texts = [" ".join(sentence) for sentence in sentences]
    with open(folder / "cls.csv", "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("text", "label"), *((text, index % 2) for index, text in enumerate(texts))])
    with open(folder / "pair.csv", "w", newline="", encoding="utf-8") as handle:
        rows = ((first, second, index % 2) for index, (first, second) in enumerate(zip(texts, texts[1:])))
        csv.writer(handle).writerows([("sentence1", "sentence2", "label"), *rows])
    tags = ["O", "B-MISC", "I-MISC", "O"]
    (folder / "ner.conll").write_text("\n\n".join("\n".join(f"{word} {tags[index % 4]}" for index, word in enumerate(words))
                                                for words in sentences) + "\n", encoding="utf-8")  # fmt: skip
    return {"finetune-cls": ["--train_file", str(folder / "cls.csv")],
            "finetune-pair": ["--train_file", str(folder / "pair.csv")],
            "finetune-ner": ["--train_file", str(folder / "ner.conll")]}  # fmt: skip


class InterleavedBareLoop(TrainerCallback):
    """Times a job's steps and a bare loop's in alternation, both on ``clock``: after every ``chunk`` job steps past
    ``warmup``, ``chunk`` steps of ``bare`` (a :class:`BareLoop` on a copy of the job's model), so that both are
    measured within the same fraction of a second and a drift of the machine's speed falls on both alike (on 2
    shared cores the same loop's ms/step drifts by ±30 % over tens of seconds, more than the differences measured).
    A job step is timed from the end of the previous one (fetching its batch, the Trainer's loop and every
    callback); the bare chunks fall between two job steps and are not counted in them. Added last, after every
    other callback. Also times the main thread's CPU spent fetching each batch (``Trainer.get_batch_samples``:
    receiving it, moving it to the device and the loss's counts)."""

    def __init__(self, trainer: Trainer, warmup: int, chunk: int, clock: Callable[[], float]) -> None:
        total = trainer.args.max_steps
        self.bare = BareLoop(trainer, loader_batches(trainer, 64), total, model=copy.deepcopy(trainer.model))
        self.warmup, self.chunk, self.clock = warmup, chunk, clock
        self.job_seconds = self.bare_seconds = self.fetch_seconds = 0.0
        self.job_steps = self.bare_steps = 0
        self._last = 0.0
        fetch = trainer.get_batch_samples

        def timed_fetch(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return fetch(*args, **kwargs)
            finally:
                if trainer.state.global_step >= warmup:  # the batches of the timed steps (train() makes a new state)
                    self.fetch_seconds += time.thread_time() - started

        trainer.get_batch_samples = timed_fetch

    def on_train_begin(self, args, state, control, **kwargs):
        for _ in range(self.chunk):  # the bare loop's own warm-up (its optimizer's state)
            self.bare.step()

    def on_step_end(self, args, state, control, **kwargs):
        now = self.clock()
        if state.global_step > self.warmup:
            self.job_seconds += now - self._last
            self.job_steps += 1
        if state.global_step >= self.warmup and state.global_step % self.chunk == 0:
            self.bare.synchronise()
            started = self.clock()
            for _ in range(self.chunk):
                self.bare.step()
            self.bare.synchronise()
            now = self.clock()
            self.bare_seconds += now - started
            self.bare_steps += self.chunk
        self._last = now

    def timing(self) -> dict[str, float]:
        """Job and bare loop ms/step, their difference, and the job's ms/step fetching batches."""
        job_ms, bare_ms = 1000 * self.job_seconds / self.job_steps, 1000 * self.bare_seconds / self.bare_steps
        return dict(job_ms=job_ms, bare_ms=bare_ms, overhead_ms=job_ms - bare_ms, fetch_ms=1000 * self.fetch_seconds / self.job_steps)


def interleaving_bare_loop(warmup: int, chunk: int, clock: Callable[[], float] = time.process_time):
    """Yields a list that receives, for each ``JobTrainer`` trained meanwhile, its :class:`InterleavedBareLoop`."""

    def add_timer(trainer: JobTrainer) -> InterleavedBareLoop:
        timer = InterleavedBareLoop(trainer, warmup, chunk, clock)
        trainer.add_callback(timer)
        return timer

    return before_each_job_training(add_timer)


def job_overhead(name: str, module, flags: list[str], steps: int, warmup: int, repeats: int,
                 floor_run: Callable[[], dict[str, float]], clock: Callable[[], float] = time.process_time,
                 ) -> tuple[dict, list[dict[str, float]]]:
    """Job ms/step − bare loop ms/step (interleaved, :class:`InterleavedBareLoop`; median over ``repeats`` runs), with
    the batches collated in this process (the CPU default) and in one loader worker (as on a GPU), each run followed
    by one of ``floor_run`` (:func:`trainer_floor_run`): the job's overhead above the floor is the median of the
    paired differences, so that both come from the same minute of a machine whose speed drifts. Returns the job's
    row and the floor's runs."""
    result, floors = dict(job=name, repeats=repeats), []
    for loader, loader_flags in LOADERS.items():
        runs, above_floor = [], []
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as output, interleaving_bare_loop(warmup, OVERHEAD_CHUNK, clock) as timers:
                module.main(["--output_dir", output, "--max_steps", str(steps + warmup), *QUIET, *flags, *loader_flags])
            runs.append(timers[-1].timing())
            floors.append(floor_run())
            above_floor.append(runs[-1]["overhead_ms"] - floors[-1]["overhead_ms"])
        result[loader] = {**median_timing(runs), "above_floor_ms": statistics.median(above_floor),
                          "above_floor_range": (min(above_floor), max(above_floor))}  # fmt: skip
    return result, floors


def median_timing(runs: list[dict[str, float]]) -> dict[str, float]:
    """The median of each of the runs' timings (:meth:`InterleavedBareLoop.timing`)."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


class ZerosBatch:
    """A collator of ``tensors`` zero ``(rows, length)`` int64 tensors, whatever the features."""

    def __init__(self, rows: int, length: int, tensors: int) -> None:
        self.rows, self.length, self.tensors = rows, length, tensors

    def __call__(self, features: list) -> dict[str, torch.Tensor]:
        return {f"tensor_{index}": torch.zeros(self.rows, self.length, dtype=torch.long) for index in range(self.tensors)}


# (rows, length, tensors): the near-zero-compute jobs' batches, fine-tuning and pretraining batches on a GPU
TRANSFER_SHAPES = [(4, 32, 3), (32, 128, 4), (128, 128, 4), (256, 128, 4), (256, 512, 4)]


def worker_transfer_ms(collate: Callable[[list], Any], batches: int) -> float:
    """The training process's CPU ms to receive one batch from a loader worker (median of 5 runs of ``batches``)."""
    loader = DataLoader(range(10**7), batch_size=1, num_workers=1, collate_fn=collate, prefetch_factor=4,
                        persistent_workers=True)  # fmt: skip
    received = iter(loader)
    for _ in range(30):  # the worker started and its queue filled
        next(received)
    runs = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(batches):
            next(received)
        runs.append((time.process_time() - started) / batches * 1000)
    return statistics.median(runs)


def worker_transfers(batches: int, shapes: list[tuple[int, int, int]] = TRANSFER_SHAPES) -> list[dict]:
    """Per batch shape: what receiving a worker's batch costs the training process, tensor by tensor (torch's
    default) and in one transfer (:class:`~mlm_suite.training.worker_batches.OneBufferCollator`)."""
    results = []
    for rows, length, tensors in shapes:
        collate = ZerosBatch(rows, length, tensors)
        results.append(dict(shape=f"{tensors} x ({rows}, {length}) int64", kib=rows * length * tensors * 8 / 1024,
                            tensor_by_tensor=worker_transfer_ms(collate, batches),
                            one_transfer=worker_transfer_ms(OneBufferCollator(collate), batches)))  # fmt: skip
    return results


def trainer_floor_run(model_folder: Path, steps: int, warmup: int, clock: Callable[[], float] = time.process_time) -> dict[str, float]:
    """One run of the same measure for the stock ``transformers.Trainer`` training the fine-tuning jobs' model (a
    sequence classifier) on one batch collated beforehand and handed over as it is: the host work of its loop alone,
    which the jobs' overhead cannot go below."""
    from mlm_suite import MlmSuiteForSequenceClassification

    torch.manual_seed(0)
    batch = {"input_ids": torch.randint(1000, 30000, (4, 32)), "attention_mask": torch.ones(4, 32, dtype=torch.long),
             "labels": torch.randint(0, 2, (4,))}  # fmt: skip
    with tempfile.TemporaryDirectory() as output:
        args = TrainingArguments(output, use_cpu=True, max_steps=steps + warmup, per_device_train_batch_size=1,
                                 report_to="none", save_strategy="no", logging_steps=50, disable_tqdm=True,
                                 dataloader_pin_memory=False, logging_nan_inf_filter=False)  # fmt: skip
        trainer = Trainer(model=MlmSuiteForSequenceClassification.from_pretrained(model_folder), args=args,
                          train_dataset=[batch] * (steps + warmup), data_collator=lambda rows: rows[0])  # fmt: skip
        timer = InterleavedBareLoop(trainer, warmup, OVERHEAD_CHUNK, clock)
        trainer.add_callback(timer)
        trainer.train()
    return timer.timing()


def overheads(jobs: list[str] | None, steps: int, warmup: int, repeats: int, clock: str = "process") -> list[dict]:
    """Each job's host overhead per step on CPU with the near-zero-compute model (:func:`job_overhead`), and last the
    stock Trainer's floor (the median of the runs paired with the jobs')."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the CPU clock then counts one thread's work, as the wall clock would
    results, floors = [], []
    with tempfile.TemporaryDirectory() as folder:
        model = str(overhead_model(Path(folder)))
        corpus = overhead_corpus(Path(folder))
        finetuning_data = overhead_finetuning_data(Path(folder), AutoTokenizer.from_pretrained(model))
        floor_run = functools.partial(trainer_floor_run, Path(model), steps, warmup, CLOCKS[clock])
        for name, module, flags in OVERHEAD_JOBS:
            if jobs and not any(name.startswith(job) for job in jobs):
                continue
            data_flags = corpus if module is pretrain else ["--model_name_or_path", model, *finetuning_data.get(name, [])]
            flags = ["--use_cpu", "true", *TINY_ROWS, *data_flags, *flags, "--max_eval_samples", "16"]
            result, job_floors = job_overhead(name, module, flags, steps, warmup, repeats, floor_run, CLOCKS[clock])
            results.append(result)
            floors += job_floors
        if not floors:
            floors = [floor_run() for _ in range(repeats)]
    torch.set_num_threads(threads)
    return [*results, {"job": "transformers.Trainer (its own loop: the floor)", "repeats": len(floors),
                       TRAINER_FLOOR_LOADER: median_timing(floors)}]  # fmt: skip


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------
def markdown(collators: list[tuple[str, str, float]], jobs: list[dict]) -> str:
    lines = ["| collator (one process, one thread) | batch | rows/s |", "|---|---|---:|"]
    lines += [f"| {name} | {shape} | {rate:,.0f} |" for name, shape, rate in collators]
    lines += ["", "| job | device | rows/step | loader workers | job steps/s (steady) | bare loop steps/s | job / bare | ≥ 0.85 |",
              "|---|---|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    lines += [
        f"| {r['job']} | {r['device']} | {r['rows_per_step']} | {r['workers']} | {r['job_steps']:.2f} | "
        f"{r['bare_steps']:.2f} | {r['ratio']:.2f} | {'yes' if r['ratio'] >= TARGET_RATIO else 'no'} |"
        for r in jobs
    ]
    return "\n".join(lines) + "\n"


def transfer_markdown(results: list[dict]) -> str:
    lines = ["| worker batch | KiB | training process ms/batch, tensor by tensor | in one transfer | ratio |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['shape']} | {r['kib']:,.0f} | {r['tensor_by_tensor']:.2f} | {r['one_transfer']:.2f} | "
              f"{r['tensor_by_tensor'] / r['one_transfer']:.1f}x |" for r in results]  # fmt: skip
    return "\n".join(lines) + "\n"


def overhead_markdown(results: list[dict]) -> str:
    target = f"≤ floor + {TARGET_ABOVE_FLOOR_MS} ms"
    lines = ["| job (1 layer, hidden 32, 4 rows) | batches collated | job ms/step | bare loop ms/step | overhead ms/step | "
             f"fetching a batch ms/step | above the floor ms/step (median, range) | {target} |",
             "|---|---|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in results:
        for loader in [*LOADERS, TRAINER_FLOOR_LOADER]:
            if loader not in r:
                continue
            timing = r[loader]
            above = timing.get("above_floor_ms")
            verdict = "" if above is None else "yes" if above <= TARGET_ABOVE_FLOOR_MS else "no"
            spread = "" if above is None else f"{above:.2f} ({timing['above_floor_range'][0]:.2f} to {timing['above_floor_range'][1]:.2f})"
            lines.append(
                f"| {r['job']} | {loader} | {timing['job_ms']:.2f} | {timing['bare_ms']:.2f} | {timing['overhead_ms']:.2f} | "
                f"{timing['fetch_ms']:.2f} | {spread} | {verdict} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--jobs", nargs="+", choices=[name for name, _, _ in JOBS["cpu"]] + ["finetune-pair", "finetune-retrieval"],
                        help="only these jobs")
    parser.add_argument("--overhead", action="store_true",
                        help="each job's host overhead per step with a near-zero-compute model (CPU)")
    parser.add_argument("--repeats", type=int, default=5, help="--overhead: runs per job, each followed by a floor run")
    parser.add_argument("--clock", choices=tuple(CLOCKS), default="process",
                        help="--overhead: CPU time of the whole training process (default) or of its main thread alone")
    parser.add_argument("--steps", type=int, help="timed steps per job (default: CPU 200, GPU 300)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (allocations, workers, compile)")
    parser.add_argument("--finetune_model", help="--model_name_or_path of the fine-tuning jobs (default: theirs)")
    parser.add_argument("--no_collators", action="store_true", help="skip the collator table")
    parser.add_argument("--quick", action="store_true", help="a smoke run: few steps and batches")
    parser.add_argument("--markdown", help="also write the tables here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    steps = args.steps or (8 if args.quick else 300 if args.device == "cuda" else 200)
    warmup = 2 if args.quick else args.warmup
    if args.overhead:
        transfers = transfer_markdown(worker_transfers(20 if args.quick else 200))
        jobs = overhead_markdown(overheads(args.jobs, steps, warmup, 1 if args.quick else args.repeats, args.clock))
        return report(transfers + "\n" + jobs, args.markdown)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the collators: one loader process's worth of CPU
    collators = [] if args.no_collators else collator_rows(args.quick, args.finetune_model)
    torch.set_num_threads(threads)
    jobs = []
    for name, module, flags in JOBS[args.device]:
        if args.jobs and name not in args.jobs:
            continue
        device_flags = ["--use_cpu", "true"] if args.device == "cpu" else []
        if args.finetune_model and module is not pretrain:
            device_flags += ["--model_name_or_path", args.finetune_model]
        jobs.append(job_against_bare_loop(name, module, [*device_flags, *flags], steps, warmup))
    return report(markdown(collators, jobs), args.markdown)


def report(table: str, markdown_path: str | None) -> int:
    """Print ``table``, and write it to ``markdown_path`` if given."""
    print(table)
    if markdown_path:
        Path(markdown_path).parent.mkdir(parents=True, exist_ok=True)
        Path(markdown_path).write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
