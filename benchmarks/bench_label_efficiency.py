"""What pretraining buys, shown where it matters: label-efficiency curves on sentiment (issue 25).

    python benchmarks/bench_label_efficiency.py --markdown outputs/label_efficiency/table.md   # = make bench-label-efficiency
    python benchmarks/bench_label_efficiency.py --quick --threads 1   # smoke run, end to end, outputs/label_efficiency_quick
    python benchmarks/bench_label_efficiency.py --main_model outputs/pretrain --starts random main --seeds 0 1 2
    JOBS=6 bash benchmarks/label_efficiency_minilm.sh   # (c), (d) and the continued-pretraining recipe search, on a GPU

Time on 2 CPU cores: 315 fine-tuning runs (5 starts x 7 sizes x (3 rates x 2 sweep seeds + 3 more seeds)), of
which MiniLM's 126 dominate (~0.7 s per step at batch 32: ~80 s for a 100-step run, ~220 s for the 300 steps of
all 3,200 examples, scoring included), the small encoder's 189 take ~6 s each (~40 s on one shared core), and the
three pretraining runs about 55 min: about 5 hours on a quiet machine. Shared with other jobs it is twice as
long or more; then ``--threads 1`` (oversubscribed torch threads slow the small encoder down 5-fold). On one GPU,
``--jobs N`` runs N fine-tunings at a time in worker processes (one H100: MiniLM's 126 runs and (d)'s
pretraining in 5.2 min with ``--jobs 6``; pass ``--finetune_flags "--dataloader_num_workers 0"`` so that the
workers do not start loader processes of their own). ``--quick``: about 10 min on 2 cores shared with two other
jobs (``--threads 1``), 4 of them pretraining.

1. **Data.** The sentiment task (``finetune-cls``'s embedded default: the 4,000 Pang & Lee sentence-polarity
   snippets, negative/positive) split 80/10/10 once, with ``--split_seed`` (42: the job's default split), so
   every start, size and seed is scored on the same validation and test sentences. Per seed,
   :func:`mlm_suite.data.finetuning.subsets.balanced_nested_subsets` draws class-balanced subsets of ``--sizes`` from
   the training split only (nested: for one seed the 32 examples lie inside the 64, ...); ``all`` is the whole
   training split. Each subset is written to a JSON-lines file and fine-tuned with ``--train_file
   --validation_file --test_file`` (the job itself is unchanged).
2. **Starts.** (a) ``random``: the main job's architecture and tokenizer, newly initialised (``--init random``
   on (b)'s folder); (b) ``main``: the main job's output (``--main_model``, or built here with ``mlm-suite
   pretrain``'s defaults, ``--pretrain_minutes`` for a time budget instead of its 12,000 steps); (c) ``minilm``:
   all-MiniLM-L6-v2 converted to mlm_suite (``finetune-cls``'s default model); (d) ``minilm_dapt``: MiniLM
   continued on the embedded Pang & Lee full reviews with the continued-pretraining recipe of docs/pretraining.md
   (``--dapt_flags``); (e) ``main_tapt``: (b) continued ("task-adaptive", Gururangan et al. 2020) on the text of
   the training split's sentences, unlabelled, never a validation or test sentence (``--tapt_flags``).
3. **Leakage check.** No validation or test sentence may occur in any pretraining text the benchmark knows of
   (the reviews that (b) and (d) read, and (e)'s corpus): exact sentence matches in (e)'s corpus, verbatim
   occurrences of sentences of ``MIN_OVERLAP_WORDS`` words or more in the reviews. A hit stops the benchmark.
   (MiniLM's own pretraining data cannot be checked; a ``--main_model`` given is assumed to have read the
   job's embedded reviews, its default.)
4. **Fine-tuning recipe, chosen on validation per start and size.** The sweep: the start family's learning
   rates (``--small_learning_rates`` for (a), (b), (e); ``--minilm_learning_rates`` for (c), (d)) times
   ``--epochs``, each trained on the ``--sweep_seeds``; the recipe with the best mean validation accuracy is
   then run on the other seeds (ties: the first in the grid). Training length: ``max(ceil(epochs x
   steps_per_epoch), --min_steps)`` optimizer steps at batch ``--batch_size`` (tiny subsets still get
   ``--min_steps`` updates; steps_per_epoch = ceil(n / batch)). No evaluation during training; validation and
   test are scored once at the end.
5. **Outputs** (in ``--output_dir``): ``results.json`` (every run, the sweep, the subsets' class counts, the
   leakage check), ``curves.png`` (test accuracy against labelled examples, log x axis, mean ± sd band per
   start), and the markdown tables (printed, and written to ``--markdown``): test accuracy mean ± sd per size
   and start, the paired per-seed test differences against (a) with a 95 % t-interval, and the chosen recipes
   and the whole sweep.

Finished runs are reused (a run whose ``all_results.json`` exists is not trained again), so an interrupted
benchmark continues where it stopped; fine-tuned weights are deleted after scoring (``--keep_models`` keeps them).
Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import re
import shlex
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from mlm_suite.conversion import converted_minilm_dir
from mlm_suite.data.finetuning.subsets import balanced_nested_subsets
from mlm_suite.data.inputs import downloads
from mlm_suite.data.inputs.readers import split_80_10_10
from mlm_suite.data.pretraining.documents import read_documents
from mlm_suite.evaluation.intervals import mean_interval
from mlm_suite.jobs import finetune_cls, pretrain

STARTS = {
    "random": "(a) random init, main architecture",
    "main": "(b) main job's encoder",
    "minilm": "(c) all-MiniLM-L6-v2",
    "minilm_dapt": "(d) MiniLM + DAPT (reviews)",
    "main_tapt": "(e) (b) + TAPT (train sentences)",
}
# Continued pretraining against the checkpoint it continued: (d) − (c) and (e) − (b), paired per seed.
CONTINUED_FROM = {"minilm_dapt": "minilm", "main_tapt": "main"}
FAMILY = {"random": "small", "main": "small", "main_tapt": "small", "minilm": "minilm", "minilm_dapt": "minilm"}
DEFAULT_SIZES = ["32", "64", "128", "256", "512", "1024", "all"]
ALL = "all"
LABEL_NAMES = {-1: "negative", 1: "positive"}
MIN_OVERLAP_WORDS = 8
# The continued-pretraining recipe of docs/pretraining.md ("Continued (domain-adaptive) pretraining"), on the
# embedded reviews (the pretraining job's default data).
DEFAULT_DAPT_FLAGS = ("--max_seq_length 128 --per_device_train_batch_size 16 --learning_rate 1e-4 "
                      "--mlm_probability 0.15 --max_steps 400 --eval_steps 100")
# Task-adaptive pretraining of the main encoder on the ~3,200 training sentences (about 200 rows of 16 per epoch):
# 4,000 steps = 20 epochs (Gururangan et al. train 100), the main recipe's 30 % masks, a learning rate between the
# from-scratch 2e-3 and the continued-pretraining 1e-4. Not tuned.
DEFAULT_TAPT_FLAGS = "--max_steps 4000 --learning_rate 5e-4 --mlm_probability 0.3"
# The fine-tuning sweep. The small encoder's rates bracket bench_pretrain_to_task's 5e-4 (chosen there among 5e-5 ...
# 1e-3); MiniLM's bracket the jobs' default 5e-5.
SMALL_LEARNING_RATES = [2e-4, 5e-4, 1e-3]
MINILM_LEARNING_RATES = [2e-5, 5e-5, 1e-4]
QUICK = dict(
    sizes=["32", "128", ALL], seeds=[0, 1], sweep_seeds=[0], epochs=[0.05], min_steps=5,
    small_learning_rates=[5e-4, 1e-3], minilm_learning_rates=[5e-5], pretrain_minutes=0.25,
    dapt_flags=("--max_seq_length 64 --per_device_train_batch_size 8 --max_steps 4 --eval_steps 4 --max_eval_samples 64 "
                "--fill_mask_probes 0"),
    tapt_flags="--max_steps 20 --learning_rate 5e-4 --mlm_probability 0.3 --fill_mask_probes 0",
    finetune_flags="--max_eval_samples 200 --max_predict_samples 200", output_dir="outputs/label_efficiency_quick",
)


# --------------------------------------------------------------------------------------------
# Statistics (the t-intervals: mlm_suite.evaluation.intervals)
# --------------------------------------------------------------------------------------------
def mean_sd(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text.lower()).strip()


def sentiment_splits(split_seed: int) -> dict[str, list[dict[str, str]]]:
    """The sentiment sentences as ``{split: [{"text", "label"}]}``, split 80/10/10 as ``finetune-cls`` splits them."""
    examples = [{"text": text, "label": LABEL_NAMES[label]} for label, text in downloads.pang_lee_sentences()]
    return dict(zip(("train", "validation", "test"), split_80_10_10(examples, split_seed)))


def parse_sizes(sizes: list[str], pool: int) -> list[int | str]:
    """``--sizes`` as ascending integers (those not below the pool) and ``all`` last."""
    parsed: set[int] = set()
    whole = False
    for size in sizes:
        if size == ALL:
            whole = True
            continue
        try:
            value = int(size)
        except ValueError:
            raise SystemExit(f"--sizes takes positive integers and 'all', got {size!r}") from None
        if value < 1 or value > pool:
            raise SystemExit(f"--sizes {value}: the training split has {pool} examples")
        parsed.add(value)
    return [*sorted(parsed), *([ALL] if whole else [])]


def size_value(size: int | str, pool: int) -> int:
    return pool if size == ALL else int(size)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def write_subsets(data_dir: Path, train: list[dict], sizes: list[int | str], seeds: list[int]) -> dict:
    """One training file per seed and size (``all``: one file), and their indices and class counts."""
    labels = [row["label"] for row in train]
    numbered = [size for size in sizes if size != ALL]
    files: dict[tuple[int, int | str], Path] = {}
    record: dict[str, Any] = {}
    for seed in seeds:
        subsets = balanced_nested_subsets(labels, numbered, seed) if numbered else {}
        if ALL in sizes:
            subsets[ALL] = list(range(len(train)))
        for size, indices in subsets.items():
            path = data_dir / f"train_{ALL}.jsonl" if size == ALL else data_dir / f"seed_{seed}" / f"train_{size}.jsonl"
            files[seed, size] = write_jsonl(path, [train[index] for index in indices])
            counts = {name: sum(labels[index] == name for index in indices) for name in sorted(set(labels))}
            # The indices are positions in the training split; "all" is every one of them.
            record.setdefault(str(seed), {})[str(size)] = {"class_counts": counts,
                                                          **({} if size == ALL else {"indices": indices})}
    return {"files": files, "record": record}


def leakage_check(corpora: dict[str, list[str]], held_out: list[str]) -> dict[str, dict[str, int]]:
    """Validation/test sentences found in each pretraining corpus: exact matches of a whole document (any length)
    and verbatim occurrences inside a document (sentences of ``MIN_OVERLAP_WORDS`` words or more)."""
    long = [normalise(text) for text in held_out if len(text.split()) >= MIN_OVERLAP_WORDS]
    report = {}
    for name, documents in corpora.items():
        normalised = [normalise(text) for text in documents]
        exact = len({normalise(text) for text in held_out} & set(normalised))
        joined = "\n".join(normalised)
        inside = sum(sentence in joined for sentence in long)
        report[name] = {"documents": len(documents), "exact": exact, "verbatim": inside, "checked": len(long)}
    return report


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------
def dapt_train_file(dapt_flags: str) -> str | None:
    """The ``--train_file`` of (d)'s pretraining flags (a JSON-lines file with a ``text`` field), if they name one."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--train_file")
    return parser.parse_known_args(shlex.split(dapt_flags))[0].train_file


def run_once(job: Any, argv: list[str], output_dir: Path, keep_model: bool = True) -> dict:
    """The job's ``all_results.json`` plus ``wall_s``, training first unless a finished run is there."""
    results = output_dir / "all_results.json"
    wall = output_dir / "bench_wall.json"
    if not results.is_file():
        started = time.perf_counter()
        job.main([*argv, "--output_dir", str(output_dir), "--overwrite_output_dir"])  # an unfinished run starts again
        wall.write_text(json.dumps({"wall_s": time.perf_counter() - started}) + "\n")
        if not keep_model:
            for weights in output_dir.glob("*.safetensors"):
                weights.unlink()
    metrics = json.loads(results.read_text())
    metrics["wall_s"] = json.loads(wall.read_text())["wall_s"] if wall.is_file() else math.nan
    return metrics


def train_steps(n: int, epochs: float, batch_size: int, min_steps: int) -> int:
    """Optimizer steps for ``n`` examples: ``epochs`` passes, but at least ``min_steps``."""
    return max(math.ceil(epochs * math.ceil(n / batch_size)), min_steps)


def recipe_name(learning_rate: float, epochs: float) -> str:
    return f"lr{learning_rate:g}_ep{epochs:g}"


def build_starts(args: argparse.Namespace, root: Path, tapt_corpus: Path) -> dict[str, dict[str, Any]]:
    """``{start: {"path", "flags", "how"}}`` for the starts asked for, pretraining what is missing."""
    wanted = set(args.starts)
    starts: dict[str, dict[str, Any]] = {}
    main_dir = None
    if wanted & {"random", "main", "main_tapt"}:
        if args.main_model:
            main_dir = Path(args.main_model)
            if not (main_dir / "config.json").is_file():
                raise SystemExit(f"--main_model {main_dir}: no model folder there (no config.json)")
            how = f"given: `{main_dir}` (assumed to have read the job's embedded reviews)"
        else:
            main_dir = root / "pretrain_main"
            flags = ["--max_train_minutes", f"{args.pretrain_minutes:g}"] if args.pretrain_minutes else []
            results = run_once(pretrain, flags, main_dir)
            budget = f"{args.pretrain_minutes:g}-minute budget" if args.pretrain_minutes else "the job's default steps"
            how = (f"`mlm-suite pretrain` defaults ({budget}: {results['train_steps']} steps), held-out [MASK] "
                   f"accuracy {results['eval_mask_accuracy']:.4f}")
        starts["main"] = {"path": main_dir, "flags": [], "how": how}
        starts["random"] = {"path": main_dir, "flags": ["--init", "random"], "how": "`--init random` on (b)'s folder"}
    if wanted & {"minilm", "minilm_dapt"}:
        minilm = converted_minilm_dir()
        # [CLS] pooling, as the published curves were measured (the jobs' default then; the default is now MiniLM's
        # mean pooling, which (d)'s continued checkpoint carries).
        starts["minilm"] = {"path": minilm, "flags": ["--classifier_pooling", "cls"],
                            "how": "`conversion.converted_minilm_dir()`, `--classifier_pooling cls`"}
    if "minilm_dapt" in wanted:
        folder = root / "pretrain_minilm_dapt"
        results = run_once(pretrain, ["--model_name_or_path", str(downloads.minilm_dir()), *shlex.split(args.dapt_flags)],
                           folder)
        starts["minilm_dapt"] = {"path": folder, "flags": [], "how": (
            f"`mlm-suite pretrain --model_name_or_path MINILM {args.dapt_flags}` on "
            f"{dapt_train_file(args.dapt_flags) or 'the embedded reviews'}: "
            f"{results['train_steps']} steps, held-out [MASK] accuracy {results['eval_mask_accuracy']:.4f}")}
    if "main_tapt" in wanted:
        folder = root / "pretrain_main_tapt"
        flags = ["--model_name_or_path", str(main_dir), "--train_file", str(tapt_corpus), *shlex.split(args.tapt_flags)]
        results = run_once(pretrain, flags, folder)
        starts["main_tapt"] = {"path": folder, "flags": [], "how": (
            f"(b) continued on the training split's sentences (`{args.tapt_flags}`): {results['train_steps']} steps, "
            f"held-out [MASK] accuracy {results['eval_mask_accuracy']:.4f}")}
    return {name: starts[name] for name in args.starts}


def finetune_one(flags: list[str], folder: Path, keep_model: bool) -> dict:
    """One fine-tuning run (:func:`run_once` of ``finetune-cls``); top level, so that worker processes can call it."""
    return run_once(finetune_cls, flags, folder, keep_model=keep_model)


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


class Runner:
    """Runs fine-tuning runs in this process (``--jobs 1``) or in ``--jobs`` worker processes.

    Runs of one batch are independent (each has its own folder, data file and seed), so their results do not depend
    on the number of workers. Workers are spawned, not forked: a CUDA context cannot be inherited.
    """

    def __init__(self, jobs: int, threads: int | None, keep_models: bool) -> None:
        self.keep_models = keep_models
        self.pool = None
        if jobs > 1:
            # Workers import this module by name (its functions are pickled by reference); spawned processes start
            # with this sys.path, so put the benchmark's folder on it when it was imported from elsewhere (tests).
            here = str(Path(__file__).resolve().parent)
            if here not in sys.path:
                sys.path.append(here)
            self.pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=set_threads, initargs=(threads,))

    def map(self, runs: list[tuple[list[str], Path]], done: Any) -> list[dict]:
        """``run_once`` of every ``(flags, folder)``, results in the order given; ``done(i, metrics)`` as each ends."""
        if self.pool is None:
            results = []
            for index, (flags, folder) in enumerate(runs):
                results.append(finetune_one(flags, folder, self.keep_models))
                done(index, results[-1])
            return results
        futures = {self.pool.submit(finetune_one, flags, folder, self.keep_models): index
                   for index, (flags, folder) in enumerate(runs)}
        results: list[dict] = [{}] * len(runs)
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            done(futures[future], results[futures[future]])
        return results

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def finetune_starts(
    args: argparse.Namespace, start_info: dict[str, dict], sizes: list[int | str], files: dict, pool: int,
    evaluation: dict[str, Path], root: Path, log: Any, runner: Runner,
) -> tuple[list[dict], list[dict], list[dict]]:
    """The sweep on ``--sweep_seeds`` and, per start and size, the chosen recipe on the other seeds: (runs, sweep
    rows, the sweep's other runs). All sweep runs go out as one batch, then all chosen-recipe runs, so that workers
    stay busy."""

    def grid(name: str) -> list[tuple[float, float]]:
        rates = args.small_learning_rates if FAMILY[name] == "small" else args.minilm_learning_rates
        return [(rate, epochs) for rate in rates for epochs in args.epochs]

    def plan(name: str, size: int | str, seed: int, rate: float, epochs: float) -> dict:
        n = size_value(size, pool)
        steps = train_steps(n, epochs, args.batch_size, args.min_steps)
        folder = root / "finetune" / name / (f"n{size}" if size != ALL else ALL) / recipe_name(rate, epochs) / f"seed_{seed}"
        flags = ["--model_name_or_path", str(start_info[name]["path"]), *start_info[name]["flags"],
                 "--train_file", str(files[seed, size]), "--validation_file", str(evaluation["validation"]),
                 "--test_file", str(evaluation["test"]), "--learning_rate", f"{rate:g}", "--max_steps", str(steps),
                 "--per_device_train_batch_size", str(args.batch_size), "--seed", str(seed),
                 "--report_to", "none", "--disable_tqdm", "true", "--logging_steps", "50",
                 *shlex.split(args.finetune_flags)]
        return {"start": name, "size": size, "n": n, "seed": seed, "learning_rate": rate, "epochs": epochs,
                "recipe": recipe_name(rate, epochs), "steps": steps, "flags": flags, "folder": folder}

    def run(planned: list[dict]) -> list[dict]:
        def done(index: int, metrics: dict) -> None:
            row = planned[index]
            log(f"{row['start']} n={row['n']} seed={row['seed']} {row['recipe']} ({row['steps']} steps): validation "
                f"{metrics['eval_accuracy']:.4f}, test {metrics['test_accuracy']:.4f} [{metrics['wall_s']:.0f} s]")

        results = runner.map([(row["flags"], row["folder"]) for row in planned], done)
        return [{**{key: value for key, value in row.items() if key not in ("flags", "folder")},
                 "validation_accuracy": metrics["eval_accuracy"], "test_accuracy": metrics["test_accuracy"],
                 "wall_s": metrics["wall_s"], "scored": [metrics.get("eval_n_examples"), metrics.get("test_n_examples")]}
                for row, metrics in zip(planned, results)]

    cells = [(name, size) for name in start_info for size in sizes]
    swept = run([plan(name, size, seed, rate, epochs) for name, size in cells for rate, epochs in grid(name)
                 for seed in args.sweep_seeds])
    tried: dict[tuple, list[dict]] = {}
    for row in swept:
        tried.setdefault((row["start"], row["size"], row["learning_rate"], row["epochs"]), []).append(row)
    chosen, sweep = {}, []
    for name, size in cells:
        scores = {recipe: statistics.fmean(r["validation_accuracy"] for r in tried[name, size, *recipe])
                  for recipe in grid(name)}
        chosen[name, size] = best = max(grid(name), key=lambda recipe: scores[recipe])  # the first of equal scores
        for rate, epochs in grid(name):
            rows = tried[name, size, rate, epochs]
            sweep.append({"start": name, "size": size, "n": size_value(size, pool), "recipe": recipe_name(rate, epochs),
                          "learning_rate": rate, "epochs": epochs, "steps": rows[0]["steps"],
                          "validation": {str(r["seed"]): r["validation_accuracy"] for r in rows},
                          "mean_validation": scores[rate, epochs], "chosen": (rate, epochs) == best})
    rest = run([plan(name, size, seed, *chosen[name, size]) for name, size in cells
                for seed in args.seeds if seed not in args.sweep_seeds])
    by_cell: dict[tuple, list[dict]] = {}
    for row in rest:
        by_cell.setdefault((row["start"], row["size"]), []).append(row)
    runs = []
    for name, size in cells:
        runs += tried[name, size, *chosen[name, size]] + by_cell.get((name, size), [])
    # The sweep's unchosen runs, timed too (for the time estimate).
    unchosen = [{key: row[key] for key in ("start", "size", "seed", "wall_s")} for row in swept
                if (row["learning_rate"], row["epochs"]) != chosen[row["start"], row["size"]]]
    return runs, sweep, unchosen


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------
def summarise(runs: list[dict], starts: list[str], sizes: list[int | str], seeds: list[int]) -> dict:
    """Per start and size: test/validation mean ± sd, and paired test differences against random (``paired``) and,
    for a continued start, against the checkpoint it continued (``continued``)."""
    by = {(r["start"], r["size"], r["seed"]): r for r in runs}
    summary: dict[str, dict[str, Any]] = {}
    paired: dict[str, dict[str, Any]] = {}
    continued: dict[str, dict[str, Any]] = {}
    for start in starts:
        for size in sizes:
            tests = [by[start, size, seed]["test_accuracy"] for seed in seeds]
            validations = [by[start, size, seed]["validation_accuracy"] for seed in seeds]
            test_mean, test_sd = mean_sd(tests)
            validation_mean, validation_sd = mean_sd(validations)
            summary.setdefault(start, {})[str(size)] = {
                "n": by[start, size, seeds[0]]["n"], "test_mean": test_mean, "test_sd": test_sd,
                "validation_mean": validation_mean, "validation_sd": validation_sd,
                "recipe": by[start, size, seeds[0]]["recipe"], "steps": by[start, size, seeds[0]]["steps"]}
            for base, into in (("random", paired), (CONTINUED_FROM.get(start), continued)):
                if start != base and base in starts:
                    differences = [by[start, size, seed]["test_accuracy"] - by[base, size, seed]["test_accuracy"]
                                   for seed in seeds]
                    mean, low, high = mean_interval(differences)
                    into.setdefault(start, {})[str(size)] = {"differences": differences, "mean": mean, "low": low,
                                                             "high": high}
    return {"summary": summary, "paired": paired, "continued": continued}


def points(value: float) -> str:
    return "–" if math.isnan(value) else f"{100 * value:+.1f}"


def markdown(report: dict) -> str:
    starts, sizes, seeds = report["starts"], report["sizes"], report["config"]["seeds"]
    summary, paired = report["summary"], report["paired"]
    pool = report["data"]["train"]
    label = {str(size): (f"all ({pool})" if size == ALL else str(size)) for size in sizes}
    scored = {tuple(run["scored"]) for run in report["runs"]}
    cut = "" if scored == {(report["data"]["validation"], report["data"]["test"])} else (
        f" (scored on the first {' / '.join(f'{v} validation, {t} test' for v, t in sorted(scored, key=str))} "
        f"of them: `{report['config']['finetune_flags']}`)")
    lines = [
        f"Sentiment (Pang & Lee sentence polarity), split 80/10/10 with seed {report['config']['split_seed']}: "
        f"{report['data']['train']} training, {report['data']['validation']} validation, {report['data']['test']} "
        f"test sentences{cut}, the same validation and test sentences for every run. Class-balanced nested subsets "
        f"of the training split per seed; seeds {seeds} (the subset and the fine-tuning seed).",
        "",
        "Leakage check (validation/test sentences in pretraining text): " + "; ".join(
            f"{name}: {item['exact']} exact, {item['verbatim']} of {item['checked']} sentences of "
            f"{MIN_OVERLAP_WORDS}+ words verbatim" for name, item in report["leakage"].items()) + ".",
        "",
        "| start | how it was made |",
        "|---|---|",
        *[f"| {STARTS[name]} | {report['start_info'][name]['how']} |" for name in starts],
        "",
        f"Test accuracy, mean ± sd over {len(seeds)} seeds:",
        "",
        "| labelled examples | " + " | ".join(STARTS[name] for name in starts) + " |",
        "|---|" + "---|" * len(starts),
    ]
    for size in sizes:
        cells = [f"{summary[name][str(size)]['test_mean']:.4f} ± {summary[name][str(size)]['test_sd']:.4f}"
                 for name in starts]
        lines.append(f"| {label[str(size)]} | " + " | ".join(cells) + " |")
    for title, differences, base in (("against (a) random init", paired, lambda name: "random"),
                                     ("of continued pretraining against the checkpoint it continued",
                                      report.get("continued", {}), CONTINUED_FROM.get)):
        others = [name for name in starts if name in differences]
        if not others:
            continue
        lines += ["", f"Paired test-accuracy differences {title}, points: mean [95 % t-interval] over {len(seeds)} "
                  "seeds:", "",
                  "| labelled examples | " + " | ".join(f"{STARTS[name]} − {STARTS[base(name)][:3]}" for name in others)
                  + " |", "|---|" + "---|" * len(others)]
        for size in sizes:
            cells = []
            for name in others:
                item = differences[name][str(size)]
                cells.append(f"{points(item['mean'])} [{points(item['low'])}, {points(item['high'])}]")
            lines.append(f"| {label[str(size)]} | " + " | ".join(cells) + " |")
    lines += ["", f"Chosen recipe per start and size (best mean validation accuracy on seeds "
              f"{report['config']['sweep_seeds']}; steps = max(ceil(epochs × ceil(n / {report['config']['batch_size']})), "
              f"{report['config']['min_steps']})):", "",
              "| labelled examples | " + " | ".join(STARTS[name] for name in starts) + " |",
              "|---|" + "---|" * len(starts)]
    for size in sizes:
        cells = [f"{summary[name][str(size)]['recipe']} ({summary[name][str(size)]['steps']} steps)" for name in starts]
        lines.append(f"| {label[str(size)]} | " + " | ".join(cells) + " |")
    lines += ["", "The sweep (validation accuracy per sweep seed; * chosen):", "",
              "| start | labelled examples | recipe | steps | validation | mean |", "|---|---|---|---|---|---|"]
    for row in report["sweep"]:
        cells = ", ".join(f"{value:.4f}" for value in row["validation"].values())
        lines.append(f"| {STARTS[row['start']]} | {label[str(row['size'])]} | {row['recipe']}{' *' if row['chosen'] else ''} "
                     f"| {row['steps']} | {cells} | {row['mean_validation']:.4f} |")
    walls = [run["wall_s"] for run in report["runs"] + report["sweep_runs"] if not math.isnan(run["wall_s"])]
    if walls:
        lines += ["", f"{len(walls)} fine-tuning runs timed here, {sum(walls) / 60:.1f} min in all "
                  f"(mean {statistics.fmean(walls):.0f} s)."]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> Path:
    """Test accuracy against labelled examples (log x axis), mean line and ± sd band per start."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    sizes = report["sizes"]
    for name in report["starts"]:
        rows = [report["summary"][name][str(size)] for size in sizes]
        xs = [row["n"] for row in rows]
        means = [row["test_mean"] for row in rows]
        sds = [row["test_sd"] for row in rows]
        (line,) = axes.plot(xs, means, marker="o", label=STARTS[name])
        axes.fill_between(xs, [m - s for m, s in zip(means, sds)], [m + s for m, s in zip(means, sds)],
                          color=line.get_color(), alpha=0.15, linewidth=0)
    xs = [report["summary"][report["starts"][0]][str(size)]["n"] for size in sizes]
    axes.set_xscale("log")
    axes.set_xticks(xs, [f"all\n({x})" if size == ALL else str(x) for size, x in zip(sizes, xs)])
    axes.minorticks_off()
    axes.set_xlabel("labelled training examples (class-balanced, log scale)")
    axes.set_ylabel("test accuracy")
    axes.axhline(0.5, color="grey", linewidth=0.8, linestyle=":")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    seeds = len(report["config"]["seeds"])
    axes.set_title(f"Sentiment: test accuracy, mean ± sd over {seeds} seeds", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, format="png")
    return path


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default=None, help="default: outputs/label_efficiency (--quick: ..._quick)")
    parser.add_argument("--starts", nargs="+", choices=list(STARTS), default=list(STARTS))
    parser.add_argument("--sizes", nargs="+", default=None, help=f"integers and 'all' (default {' '.join(DEFAULT_SIZES)})")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 3 4")
    parser.add_argument("--sweep_seeds", type=int, nargs="+", default=None,
                        help="seeds the recipe is chosen on (default: the first two of --seeds)")
    parser.add_argument("--small_learning_rates", type=float, nargs="+", default=None,
                        help=f"sweep for (a), (b), (e) (default {SMALL_LEARNING_RATES})")
    parser.add_argument("--minilm_learning_rates", type=float, nargs="+", default=None,
                        help=f"sweep for (c), (d) (default {MINILM_LEARNING_RATES})")
    parser.add_argument("--epochs", type=float, nargs="+", default=None, help="sweep of epochs (default 3)")
    parser.add_argument("--min_steps", type=int, default=None, help="fewest optimizer steps of a run (default 100)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--split_seed", type=int, default=42, help="the 80/10/10 split (42: finetune-cls's default)")
    parser.add_argument("--finetune_flags", default=None, help="further flags of every fine-tuning run")
    parser.add_argument("--main_model", help="the main job's output; default: pretrain it here")
    parser.add_argument("--pretrain_minutes", type=float, default=None,
                        help="build (b) with this time budget instead of the job's default steps")
    parser.add_argument("--dapt_flags", default=None, help=f"flags of (d)'s pretraining (default {DEFAULT_DAPT_FLAGS!r})")
    parser.add_argument("--tapt_flags", default=None, help=f"flags of (e)'s pretraining (default {DEFAULT_TAPT_FLAGS!r})")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's; 1 on a shared machine)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="fine-tuning runs at a time, each in its own process (default 1: in this one); on a GPU "
                             "several small runs share it")
    parser.add_argument("--keep_models", action="store_true", help="keep the fine-tuned weights")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: " + ", ".join(f"{key} {value}" for key, value in QUICK.items())
                        + " (flags given still win)")
    parser.add_argument("--markdown", help="also write the tables to this file")
    args = parser.parse_args(argv)
    defaults = dict(
        sizes=DEFAULT_SIZES, seeds=[0, 1, 2, 3, 4], epochs=[3.0], min_steps=100,
        small_learning_rates=SMALL_LEARNING_RATES, minilm_learning_rates=MINILM_LEARNING_RATES,
        dapt_flags=DEFAULT_DAPT_FLAGS, tapt_flags=DEFAULT_TAPT_FLAGS, output_dir="outputs/label_efficiency",
        pretrain_minutes=None, finetune_flags="",
    )
    if args.quick:
        defaults |= QUICK
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if args.sweep_seeds is None:
        args.sweep_seeds = args.seeds[:2]
    if not set(args.sweep_seeds) <= set(args.seeds):
        parser.error(f"--sweep_seeds {args.sweep_seeds} must be among --seeds {args.seeds}")
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least 1")
    if len(set(args.seeds)) != len(args.seeds):
        parser.error(f"--seeds has repeats: {args.seeds}")
    args.starts = [name for name in STARTS if name in args.starts]  # (a) ... (e) order
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_threads(args.threads)
    root = Path(args.output_dir)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[label-efficiency {time.perf_counter() - started:7.0f} s] {message}", flush=True)

    splits = sentiment_splits(args.split_seed)
    data_dir = root / "data"
    evaluation = {split: write_jsonl(data_dir / f"{split}.jsonl", splits[split]) for split in ("validation", "test")}
    sizes = parse_sizes(args.sizes, len(splits["train"]))
    subsets = write_subsets(data_dir, splits["train"], sizes, args.seeds)

    # (e)'s corpus: the training sentences' text, no labels; a sentence equal to a held-out one would be dropped.
    held_out = [row["text"] for split in ("validation", "test") for row in splits[split]]
    held_out_set = {normalise(text) for text in held_out}
    tapt_texts = [row["text"] for row in splits["train"] if normalise(row["text"]) not in held_out_set]
    tapt_corpus = write_jsonl(data_dir / "tapt_corpus.jsonl", [{"text": text} for text in tapt_texts])
    corpora = {}
    dapt_file = dapt_train_file(args.dapt_flags) if "minilm_dapt" in args.starts else None
    reviews_read_by = [label for label, read in (("(b)", set(args.starts) & {"random", "main", "main_tapt"}),
                                                 ("(d)", "minilm_dapt" in args.starts and not dapt_file)) if read]
    if reviews_read_by:
        corpora[f"Pang & Lee reviews ({', '.join(reviews_read_by)})"] = [text for _, text in downloads.pang_lee_reviews()]
    if dapt_file:
        corpora[f"{dapt_file} ((d))"] = read_documents(dapt_file)  # as the pretraining job reads its --train_file
    if "main_tapt" in args.starts:
        corpora["training sentences ((e))"] = tapt_texts
    leakage = leakage_check(corpora, held_out)
    for name, item in leakage.items():
        log(f"leakage check, {name}: {item['exact']} exact, {item['verbatim']} of {item['checked']} verbatim")
        if item["exact"] or item["verbatim"]:
            raise SystemExit(f"leakage: validation/test sentences occur in the pretraining text {name}: {item}")

    start_info = build_starts(args, root, tapt_corpus)
    log("starts: " + ", ".join(f"{name} = {info['path']}" for name, info in start_info.items()))
    runner = Runner(args.jobs, args.threads, args.keep_models)
    try:
        runs, sweep, sweep_runs = finetune_starts(args, start_info, sizes, subsets["files"], len(splits["train"]),
                                                  evaluation, root, log, runner)
    finally:
        runner.close()

    report = {
        "config": {key: value for key, value in vars(args).items()},
        "data": {split: len(rows) for split, rows in splits.items()},
        "starts": args.starts, "sizes": sizes,
        "start_info": {name: {"path": str(info["path"]), "flags": info["flags"], "how": info["how"]}
                       for name, info in start_info.items()},
        "leakage": leakage, "subsets": subsets["record"],
        "runs": runs, "sweep": sweep, "sweep_runs": sweep_runs,
        **summarise(runs, args.starts, sizes, args.seeds),
        "wall_s": time.perf_counter() - started,
    }
    (root / "results.json").write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    figure = plot(report, root / "curves.png")
    table = markdown(report) + f"\n\nPlot: `{figure}`. All results: `{root / 'results.json'}`."
    print("\n" + table)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(table + "\n", encoding="utf-8")
    log(f"done in {(time.perf_counter() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
