"""Corpora larger than memory: the memory bound of ``pretrain --streaming`` and the throughput of ``prepare-data``.

    python benchmarks/bench_data.py streaming --size_gb 2          # time to step 1 and peak RSS on a 2 GiB corpus
    python benchmarks/bench_data.py prepare --size_mb 200 --num_proc 1 2   # prepare-data tokens/s

Both generate their corpus first, in a temporary folder (``--workdir``, default the system's) that is deleted
afterwards (``--keep`` keeps it): documents of 4-30 sentences drawn at random (seed 0) from the sentences of
the embedded Pang & Lee movie reviews, separated by blank lines (the pretraining job's text format).

``streaming`` runs ``python -m mlm_suite.jobs.pretrain --streaming`` on it under ``/usr/bin/time -v`` (the tiny
preset on the MiniLM vocabulary, rows of 128 tokens, batch 16, ``--max_steps`` 20) and reports the seconds from
launch to the end of optimizer step 1 (the first training log line, read as the job prints it) and the peak
resident set size ("Maximum resident set size"). Targets: step 1 within 60 s, peak RSS under 3 GB.

``prepare`` runs ``mlm-suite prepare-data`` on it once per ``--num_proc`` and reports the tokens written per second
of the whole command (reading, tokenising, writing the Arrow shards), as ``prepare-data`` prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlm_suite.data.inputs import downloads
from mlm_suite.data.pretraining.nsp import split_sentences

STEP_1_TARGET_S = 60.0
RSS_TARGET_GB = 3.0


def write_corpus(path: Path, size_bytes: int, seed: int = 0) -> int:
    """Write documents of random Pang & Lee sentences to ``path`` until it holds ``size_bytes``; return the documents."""
    sentences = [sentence for _, review in downloads.pang_lee_reviews() for sentence in split_sentences(review)]
    rng = random.Random(seed)
    written = documents = 0
    with path.open("w", encoding="utf-8") as out:
        while written < size_bytes:
            block = "\n\n".join(" ".join(rng.choices(sentences, k=rng.randint(4, 30))) for _ in range(1000)) + "\n\n"
            written += out.write(block)
            documents += 1000
    return documents


def timed_run(command: list[str], first_line: re.Pattern) -> dict[str, float]:
    """Run ``command`` under ``/usr/bin/time -v``: seconds to the first stdout line matching ``first_line``,
    wall seconds and peak RSS (GB); raises if the command fails."""
    started = time.monotonic()
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}  # lines arrive when printed, not when a buffer fills
    process = subprocess.Popen(
        ["/usr/bin/time", "-v", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    )
    first = None
    output = []
    for line in process.stdout:
        output.append(line)
        if first is None and first_line.search(line):
            first = time.monotonic() - started
    stderr = process.stderr.read()
    if process.wait() != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{''.join(output)[-3000:]}\n{stderr[-3000:]}")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr).group(1))
    return {"first_line_s": first, "wall_s": time.monotonic() - started, "peak_rss_gb": rss_kb * 1024 / 1e9, "stdout": "".join(output)}


def streaming(args: argparse.Namespace, workdir: Path) -> str:
    corpus = workdir / "corpus.txt"
    started = time.monotonic()
    documents = write_corpus(corpus, int(args.size_gb * 2**30))
    print(f"generated {corpus.stat().st_size / 1e9:.2f} GB ({documents:,} documents) in {time.monotonic() - started:.0f} s", flush=True)
    command = [
        sys.executable, "-m", "mlm_suite.jobs.pretrain", "--streaming", "--train_file", str(corpus),
        "--train_tokenizer", "false", "--max_steps", str(args.max_steps), "--max_seq_length", "128",
        "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "8", "--logging_steps", "1",
        "--eval_strategy", "no", "--max_eval_samples", "64",
        "--fill_mask_probes", "0", "--save_strategy", "no", "--disable_tqdm", "true", "--report_to", "none",
        "--dataloader_pin_memory", "false", "--output_dir", str(workdir / "run"),
    ]  # fmt: skip
    result = timed_run(command, re.compile(r"'loss'"))
    steps = json.loads((workdir / "run" / "trainer_state.json").read_text())["global_step"]
    rows = [
        ("corpus", f"{corpus.stat().st_size / 1e9:.2f} GB of text, {documents:,} documents, one file"),
        ("time to step 1 (launch to the end of optimizer step 1)", f"{result['first_line_s']:.1f} s (target < {STEP_1_TARGET_S:.0f} s)"),
        ("peak RSS (/usr/bin/time -v)", f"{result['peak_rss_gb']:.2f} GB (target < {RSS_TARGET_GB:.0f} GB)"),
        (f"whole run ({steps} steps, final evaluation, saving)", f"{result['wall_s']:.1f} s"),
    ]
    return "| pretrain --streaming | value |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows)


def prepare(args: argparse.Namespace, workdir: Path) -> str:
    corpus = workdir / "corpus.txt"
    documents = write_corpus(corpus, int(args.size_mb * 2**20))
    print(f"generated {corpus.stat().st_size / 1e6:.0f} MB ({documents:,} documents)", flush=True)
    rows = []
    for num_proc in args.num_proc:
        output = workdir / f"prepared-{num_proc}"
        command = [
            sys.executable, "-m", "mlm_suite.cli", "prepare-data", "--train_file", str(corpus),
            "--tokenizer_name", str(downloads.minilm_dir()), "--output_dir", str(output), "--max_seq_length", "128",
            "--preprocessing_num_workers", str(num_proc), *(["--packing"] if args.packing else []),
        ]  # fmt: skip
        result = timed_run(command, re.compile(r"tokens/s"))
        metadata = json.loads((output / "mlm_suite_data.json").read_text())
        rows.append(
            f"| {num_proc} | {metadata['train_documents']:,} | {metadata['train_rows']:,} | {metadata['train_tokens']:,} "
            f"| {metadata['seconds']:.1f} | **{metadata['tokens_per_second']:,}** | {result['peak_rss_gb']:.2f} |"
        )
        shutil.rmtree(output)
    header = "| num_proc | documents | rows | tokens | seconds | tokens/s | peak RSS (GB) |\n|---:|---:|---:|---:|---:|---:|---:|\n"
    return header + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=None, help="where the corpus is generated (default: the system's temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the generated corpus and outputs")
    commands = parser.add_subparsers(dest="benchmark", required=True)
    stream = commands.add_parser("streaming", help="time to step 1 and peak RSS of pretrain --streaming")
    stream.add_argument("--size_gb", type=float, default=2.0, help="corpus size in GiB")
    stream.add_argument("--max_steps", type=int, default=20)
    prep = commands.add_parser("prepare", help="prepare-data throughput")
    prep.add_argument("--size_mb", type=float, default=200.0, help="corpus size in MiB")
    prep.add_argument("--num_proc", type=int, nargs="+", default=[2])
    prep.add_argument("--packing", action="store_true")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="mlm_suite_bench_data-", dir=args.workdir))
    try:
        table = streaming(args, workdir) if args.benchmark == "streaming" else prepare(args, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
